#!/usr/bin/env bash
# Runs the loom models in loom/tests against the real crate, built with loom's atomics
# (--cfg mvtensor_loom) and crossbeam-epoch's loom build (--cfg crossbeam_loom).
#
#   bin/loom.sh                      # every model, preemption bound 2
#   LOOM_MAX_PREEMPTIONS=3 bin/loom.sh --test version   # one file, deeper
#
# A separate target directory keeps these cfgs from invalidating the normal build.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="${RUSTFLAGS:-} --cfg mvtensor_loom --cfg crossbeam_loom"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
exec cargo test -p mvtensor-loom --release --target-dir target/loom "$@"
