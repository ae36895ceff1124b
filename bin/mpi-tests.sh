#!/usr/bin/env bash
# The MPI side of mvtensor (feature `mpi`): lints it, runs tests/mpi.rs (each of its tests
# launches `mpirun` on loopback itself) and the wine trainer under `mpirun -np 2`.
#
#     bin/mpi-tests.sh [--install]
#
# --install: installs Open MPI and libclang (rsmpi's build needs it) with apt-get first, if
# `mpirun` or the MPI headers are missing. MPI_TEST_STEPS sets the bit-identity test's steps
# (default 10,000).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ ${1:-} == --install ]]; then
    if ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq && apt-get install -y -qq openmpi-bin libopenmpi-dev libclang-dev >/dev/null
    fi
fi
# As root (CI, containers) mpirun refuses to start without these; harmless otherwise.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

cargo clippy --features mpi --lib --test mpi --example train_mpi --example mpi_allreduce -- -D warnings
cargo test --features mpi --lib distributed
cargo test --features mpi --test mpi -- --test-threads=1
cargo build --features mpi --example train_mpi
mpirun --oversubscribe -np 2 "${CARGO_TARGET_DIR:-target}/debug/examples/train_mpi" --steps 1000
