#!/usr/bin/env bash
# Instruction counts of the per-operation costs (bench/benches/instructions.rs, callgrind through
# gungraun): about 2 minutes, plus about 5 to install the runner when it is missing. The
# runner must be the version of the gungraun library in Cargo.lock. Needs valgrind.
#
# Not in CI: it prints counts to compare by eye with docs/instructions.md (the baseline,
# counted on this project's machine) and its runner costs CI five minutes to build. Run it before and after a
# change to the write path: an instruction count does not move with the machine's load.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(awk '/^name = "gungraun"$/ { getline; gsub(/"/, "", $3); print $3 }' Cargo.lock)
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
if [[ "$(gungraun-runner --version 2>/dev/null)" != "gungraun-runner $version" ]]; then
    cargo install --locked gungraun-runner --version "$version"
fi
exec cargo bench -p mvtensor-bench --bench instructions "$@"
