#!/usr/bin/env bash
# Runs the loom models against the real crate, built with loom's atomics (--cfg mvtensor_loom)
# and crossbeam-epoch's loom build (--cfg crossbeam_loom): the protocol models in loom/tests,
# then the component models beside the code (src/tests/loom_*.rs, the crate's own unit tests
# under those cfgs, whose names all contain `loom_`).
#
#   bin/loom.sh                      # every model, preemption bound 2
#   LOOM_MAX_PREEMPTIONS=3 bin/loom.sh --test version   # one file of loom/tests, deeper
#   bin/loom.sh --lib                # the component models only
#   bin/loom.sh --lib loom_ticket    # the component models whose names match (any of) these
#
# A separate target directory keeps these cfgs from invalidating the normal build.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="${RUSTFLAGS:-} --cfg mvtensor_loom --cfg crossbeam_loom"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
models=(cargo test --release --target-dir target/loom -p mvtensor-loom)
components=(cargo test --release --target-dir target/loom -p mvtensor --lib --)
if [[ "${1:-}" == --lib ]]; then
  shift
  (($# > 0)) || set -- loom_
  exec "${components[@]}" "$@"
fi
if (($# > 0)); then
  exec "${models[@]}" "$@"
fi
"${models[@]}"
exec "${components[@]}" loom_
