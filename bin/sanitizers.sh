#!/usr/bin/env bash
# The tests under a sanitizer, on nightly, with std rebuilt instrumented (-Zbuild-std; needs
# the rust-src component, which miri also needs).
#
#   bin/sanitizers.sh address              # AddressSanitizer + LeakSanitizer: the unit
#                                          # tests and the stress tests
#   bin/sanitizers.sh thread               # ThreadSanitizer: the stress tests
#   bin/sanitizers.sh address --lib --tests # every unit and integration test (verify-deep)
#   bin/sanitizers.sh thread --test suite paged::  # one file of the suite
#
# Each sanitizer builds in its own target directory. Suppressions and why: bin/*.supp.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?"usage: bin/sanitizers.sh address|thread [cargo test arguments]"}
shift
host=$(rustc -vV | awk '/^host:/ { print $2 }')
export RUSTFLAGS="${RUSTFLAGS:-} -Zsanitizer=$kind"
export RUSTDOCFLAGS="${RUSTDOCFLAGS:-} -Zsanitizer=$kind"
export CARGO_TARGET_DIR=target/$kind
# Tests that scale their volume down under a sanitizer look for this (tests/memory.rs).
export MVTENSOR_SANITIZER=$kind
# Line tables, not full debug info: reports keep file and line, and the instrumented std
# and test binaries build and link faster.
export CARGO_PROFILE_DEV_DEBUG=${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}
case $kind in
address)
    # The resident-memory checks of tests/memory.rs count ASan's quarantine of freed
    # blocks unless it is small.
    export ASAN_OPTIONS="detect_leaks=1:quarantine_size_mb=16:halt_on_error=1"
    export LSAN_OPTIONS="suppressions=$PWD/bin/lsan.supp:print_suppressions=0"
    # The unit tests and the stress tests, as ThreadSanitizer's: the rest of tests/alone.rs
    # measures the process (allocations, resident memory, CPU time) and exercises no code
    # path the suite does not (bin/verify-deep.sh runs every test under both sanitizers).
    default=(--lib --test suite)
    ;;
thread)
    export TSAN_OPTIONS="suppressions=$PWD/bin/tsan.supp:halt_on_error=1:second_deadlock_stack=1"
    # The multi-threaded tests that are quick natively (TSan runs them 5-15x slower): the
    # suite (promises, combining, sections, paged, rayon, linearizability, queue and the
    # rest of tests/suite.rs) and three modules of tests/alone.rs.
    default=(--test suite)
    ;;
*)
    echo "unknown sanitizer: $kind (address or thread)" >&2
    exit 2
    ;;
esac
tests=(cargo +nightly test -Zbuild-std --target "$host")
(($# > 0)) && exec "${tests[@]}" "$@"
# The defaults, then the stress modules of tests/alone.rs (snapshots, held_snapshots and
# reader_frees_nothing) in a second run: its filters would apply to every binary of the first.
"${tests[@]}" "${default[@]}"
exec "${tests[@]}" --test alone -- snapshots:: reader_frees_nothing::
