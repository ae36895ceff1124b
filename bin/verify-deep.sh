#!/usr/bin/env bash
# The long versions of CI's checks, for a quiet machine and an hour or more:
#   the loom models explored in full at preemption bound 2 (CI caps each at 30 s) and at 3,
#   the mutation check, AddressSanitizer and
#   ThreadSanitizer over every unit and integration test, and each fuzz target for FUZZ_SECONDS
#   (default an hour; CI gives each 30 s).
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
    for target in ops sections checkpoint paged; do
        mkdir -p "fuzz/corpus/$target"
        (cd fuzz && cargo +nightly fuzz run "$target" "corpus/$target" -- \
            -max_total_time="${FUZZ_SECONDS:-3600}") || return 1
    done
}
run bin/loom.sh
run env LOOM_MAX_PREEMPTIONS=3 bin/loom.sh
run bin/mutants.sh
run bin/sanitizers.sh address
run bin/sanitizers.sh thread --lib --tests
run fuzz_long
echo "$passed passed, $failed failed"
((failed == 0))
