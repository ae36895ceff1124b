#!/usr/bin/env bash
# The mutation check of the loom models: weakens, one at a time, each ordering or fence that
# a model must depend on, in a scratch copy of the crate, runs the models that cover it, and
# fails if a weakened copy still passes every one of them (or if a mutation no longer
# applies: the code moved, so the list below needs updating).
#
#   bin/mutants.sh            # every mutation (about 10-15 minutes on 2 cores)
#   bin/mutants.sh 3          # only mutation number 3
#
# Each line of MUTATIONS: file # exact text # replacement # loom test files (space-separated)
# ('#' separates: the code texts contain '|').
# The first occurrence of the text is replaced. docs/verification.md lists the results.
set -euo pipefail
cd "$(dirname "$0")/.."

MUTATIONS=(
  "src/head.rs#.compare_exchange(expected.raw, tagged, Ordering::AcqRel, Ordering::Relaxed)#.compare_exchange(expected.raw, tagged, Ordering::Relaxed, Ordering::Relaxed)#version"
  "src/serve.rs#(*request).outcome.store(self.outcome, Ordering::Release)#(*request).outcome.store(self.outcome, Ordering::Relaxed)#combine section"
  "src/serve.rs#fence(Ordering::SeqCst);#/* fence removed */#combine"
  "src/announce.rs#self.busy.store(false, Ordering::Release);#self.busy.store(false, Ordering::Relaxed);#combine section"
  "src/ticket.rs#self.serving.store(number + 1, Ordering::Release);#self.serving.store(number + 1, Ordering::Relaxed);#section"
  "src/record.rs#clock().fetch_add(1, Ordering::AcqRel)#clock().fetch_add(1, Ordering::Relaxed)#snapshot"
  "src/paged/mod.rs#guard.defer(move || {#(move || {#paged"
  "src/paged/mod.rs#self.head.store(new, Ordering::Release)#self.head.store(new, Ordering::Relaxed)#paged"
  "src/version.rs#            if is_held {#            if false {#version"
)

only="${1:-}"
scratch="$(mktemp -d /tmp/mvtensor-mutants.XXXXXX)"
trap 'rm -rf "$scratch"' EXIT
# A copy of the sources (not the build outputs): the models build against it.
tar --exclude=./target --exclude=./fuzz/target --exclude=./.git -cf - . | tar -xf - -C "$scratch"

survived=0
for i in "${!MUTATIONS[@]}"; do
  n=$((i + 1))
  [[ -n "$only" && "$only" != "$n" ]] && continue
  IFS='#' read -r file text replacement tests <<<"${MUTATIONS[$i]}"
  cp "$file" "$scratch/$file"
  python3 - "$scratch/$file" "$text" "$replacement" <<'EOF'
import sys
path, text, replacement = sys.argv[1:]
source = open(path).read()
if text not in source:
    sys.exit(f"mutation no longer applies: {text!r} not in {path}")
if replacement == "(move || {":  # a deferred call made immediate: close it with a call
    head, tail = source.split(text, 1)
    close = tail.index("});")
    source = head + replacement + tail[:close] + "})();" + tail[close + 3:]
else:
    source = source.replace(text, replacement, 1)
open(path, "w").write(source)
EOF
  args=()
  for t in $tests; do args+=(--test "$t"); done
  echo "== mutation $n: $file: '$text' -> '$replacement' (models: $tests)"
  if (cd "$scratch" && bin/loom.sh "${args[@]}" >"$scratch/log" 2>&1); then
    echo "   SURVIVED: every model passed with it"
    survived=$((survived + 1))
  elif grep -q "could not compile" "$scratch/log"; then
    echo "   DID NOT BUILD: the mutation is malformed"
    survived=$((survived + 1))
  else
    echo "   caught: $(grep -m1 -E "panicked at|deadlock|Causality|causality" "$scratch/log" || echo 'a model failed')"
  fi
  cp "$file" "$scratch/$file"
done
if ((survived > 0)); then
  echo "$survived mutation(s) survived"
  exit 1
fi
echo "every mutation was caught"
