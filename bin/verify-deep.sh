#!/usr/bin/env bash
# The long versions of CI's checks, for a quiet machine and an hour or more:
#   the loom models explored in full at preemption bound 2 (CI caps each at 20 s) and at 3,
#   the mutation check, AddressSanitizer and ThreadSanitizer over every unit and integration
#   test, miri over every integration test (CI: the unit tests and tests/suite.rs), and each
#   fuzz target for FUZZ_SECONDS (default an hour; CI gives each 20 s).
#
#   bin/verify-deep.sh                 # everything
#   FUZZ_SECONDS=600 bin/verify-deep.sh
#
# Prints a final "N passed, N failed" line, as .ci/run does.
set -u
cd "$(dirname "$0")/.."
passed=0
failed=0
run() {
    echo "==> $*"
    if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "<== FAILED: $*"; fi
}
fuzz_long() {
    local target
    for target in $(cd fuzz && cargo +nightly fuzz list); do
        mkdir -p "fuzz/corpus/$target"
        (cd fuzz && cargo +nightly fuzz run "$target" "corpus/$target" -- \
            -max_total_time="${FUZZ_SECONDS:-3600}") || return 1
    done
}
run bin/loom.sh
run env LOOM_MAX_PREEMPTIONS=3 bin/loom.sh
run bin/mutants.sh
# As CI's miri step (.ci/run says why these flags), over the unit tests and every
# integration test file, none skipped.
miri_tests() {
    export MIRIFLAGS="-Zmiri-tree-borrows -Zmiri-permissive-provenance -Zmiri-ignore-leaks"
    export CARGO_TARGET_DIR=target/miri
    cargo +nightly miri test --lib --test suite &&
        # Miri starts no process: tests/alone.rs's tests run in place, one at a time.
        cargo +nightly miri test --test alone -- --test-threads=1
}
run bin/sanitizers.sh address --lib --tests
run bin/sanitizers.sh thread --lib --tests
run miri_tests
run fuzz_long
echo "$passed passed, $failed failed"
((failed == 0))
