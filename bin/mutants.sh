#!/usr/bin/env bash
# The mutation check of the loom models: weakens, one at a time, each ordering or fence that
# a model must depend on, in a scratch copy of the crate, runs the models that cover it, and
# fails if a weakened copy still passes every one of them (or if a mutation no longer
# applies: the code moved, so the list below needs updating).
#
#   bin/mutants.sh            # every mutation (about 30 minutes on 2 cores)
#   bin/mutants.sh 3          # only mutation number 3
#   bin/mutants.sh 10-20      # mutations 10 to 20
#
# Each line of MUTATIONS: file # exact text # replacement # models (space-separated)
# ('#' separates: the code texts contain '|'). A model is a file of loom/tests (`version`:
# `bin/loom.sh --test version`) or `lib:FILTER`, the component models beside the code whose
# names contain FILTER (`lib:loom_serve`: `bin/loom.sh --lib loom_serve`). In the texts, `\n`
# stands for a line break (the indentation after it is part of the text).
# The first occurrence of the text is replaced. docs/verification.md lists the results.
set -euo pipefail
cd "$(dirname "$0")/.."
# Every model in full: a model stopped at a time cap (CI's LOOM_MAX_DURATION) could pass a
# weakened ordering it never reached.
unset LOOM_MAX_DURATION

MUTATIONS=(
  "src/head.rs#.compare_exchange(expected.raw, tagged, Ordering::AcqRel, Ordering::Relaxed)#.compare_exchange(expected.raw, tagged, Ordering::Relaxed, Ordering::Relaxed)#version"
  "src/serve.rs#(*request).outcome.store(self.outcome, Ordering::Release)#(*request).outcome.store(self.outcome, Ordering::Relaxed)#combine section lib:loom_serve"
  "src/serve.rs#fence(Ordering::SeqCst);#/* fence removed */#combine lib:loom_serve"
  "src/announce.rs#self.busy.store(false, Ordering::Release);#self.busy.store(false, Ordering::Relaxed);#combine section lib:loom_serve"
  "src/ticket.rs#self.serving.store(number + 1, Ordering::Release);#self.serving.store(number + 1, Ordering::Relaxed);#section lib:loom_ticket"
  "src/record.rs#clock().fetch_add(1, Ordering::AcqRel)#clock().fetch_add(1, Ordering::Relaxed)#snapshot lib:loom_horizon"
  "src/paged/book.rs#if !clock.passed(front.point) {#if false && !clock.passed(front.point) {#paged"
  "src/paged/inner.rs#self.head.swap(new, Ordering::AcqRel);#self.head.swap(new, Ordering::Acquire);#paged"
  "src/holds.rs#        if is_held {#        if false {#version"
  "src/ticket.rs#while self.serving.load(Ordering::Acquire) != number#while self.serving.load(Ordering::Relaxed) != number#lib:loom_ticket"
  "src/pool.rs#match top.compare_exchange_weak(current, first, Ordering::Release, Ordering::Relaxed)#match top.compare_exchange_weak(current, first, Ordering::Relaxed, Ordering::Relaxed)#lib:loom_pool"
  "src/pool.rs#let mut list = self.cache.swap(std::ptr::null_mut(), Ordering::Acquire);#let mut list = self.cache.swap(std::ptr::null_mut(), Ordering::Relaxed);#lib:loom_pool"
  "src/pool.rs#list = self.free.swap(std::ptr::null_mut(), Ordering::Acquire);#list = self.free.swap(std::ptr::null_mut(), Ordering::Relaxed);#lib:loom_pool"
  "src/pool.rs#let displaced = self.cache.swap(rest, Ordering::AcqRel);#let displaced = self.cache.swap(rest, Ordering::Release);#lib:loom_pool"
  "src/announce.rs#                Ordering::Release,\n                Ordering::Relaxed,\n            ) {#                Ordering::Relaxed,\n                Ordering::Relaxed,\n            ) {#lib:loom_serve"
  "src/announce.rs#.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)#.compare_exchange(false, true, Ordering::Relaxed, Ordering::Relaxed)#lib:loom_serve"
  "src/announce.rs#self.pending.swap(ptr::null_mut(), Ordering::Acquire)#self.pending.swap(ptr::null_mut(), Ordering::Relaxed)#lib:loom_serve"
  "src/serve.rs#            fence(Ordering::SeqCst);\n            if requests.looks_empty()#            if requests.looks_empty()#lib:loom_serve"
  "src/record.rs#ts << 1 | COMMITTED,\n                Ordering::AcqRel,#ts << 1 | COMMITTED,\n                Ordering::Acquire,#lib:loom_record"
  "src/record.rs#Ordering::AcqRel,\n                Ordering::Acquire,\n            ) {\n                Ok(_) => return ts,#Ordering::AcqRel,\n                Ordering::Relaxed,\n            ) {\n                Ok(_) => return ts,#lib:loom_record"
  "src/record.rs#let mut word = self.word.load(Ordering::Acquire);#let mut word = self.word.load(Ordering::Relaxed);#lib:loom_record"
  "src/record.rs#(see \`timestamp\`).\n        let mut word = self.word.load(Ordering::Acquire);#(see \`timestamp\`).\n        let mut word = self.word.load(Ordering::Relaxed);#lib:loom_record"
  "src/record.rs#(at + 1) << 1,\n                Ordering::AcqRel,#(at + 1) << 1,\n                Ordering::Acquire,#lib:loom_record"
  "src/record.rs#let word = self.word.load(Ordering::Acquire);#let word = self.word.load(Ordering::Relaxed);#lib:loom_record"
  "src/record.rs#let ts = clock().load(Ordering::Acquire);\n            debug_assert!#let ts = clock().load(Ordering::Relaxed);\n            debug_assert!#lib:loom_horizon"
  "src/record.rs#let ts = clock().load(Ordering::Acquire);\n        Self {#let ts = clock().load(Ordering::Relaxed);\n        Self {#lib:loom_horizon"
  "src/horizon.rs#Some(i) => h.slots[i].store(FREE, Ordering::Release),#Some(i) => h.slots[i].store(FREE, Ordering::Relaxed),#lib:loom_horizon"
  "src/horizon.rs#h.in_progress.fetch_sub(1, Ordering::Release);#h.in_progress.fetch_sub(1, Ordering::Relaxed);#lib:loom_horizon"
  "src/horizon.rs#if h.in_progress.load(Ordering::Acquire) == 0#if h.in_progress.load(Ordering::Relaxed) == 0#lib:loom_horizon"
  "src/horizon.rs#match slot.load(Ordering::Acquire)#match slot.load(Ordering::Relaxed)#lib:loom_horizon"
  "src/horizon.rs#STARTING => return Oldest::Unknown,#STARTING => {}#lib:loom_horizon"
  "src/grace.rs#self.done.load(Ordering::Acquire) >= point#self.done.load(Ordering::Acquire) >= point.saturating_sub(1)#version"
  "src/help.rs#while self.0.inside.load(Ordering::Acquire) != 0 {#while false && self.0.inside.load(Ordering::Acquire) != 0 {#lib:loom_help"
  "src/help.rs#while self.0.inside.load(Ordering::Acquire) != 0 {#while self.0.inside.load(Ordering::Relaxed) != 0 {#lib:loom_help"
  "src/help.rs#self.0.inside.fetch_sub(1, Ordering::Release);#self.0.inside.fetch_sub(1, Ordering::Relaxed);#lib:loom_help"
  "src/help.rs#        fence(Ordering::SeqCst);\n        // Acquire: pairs with the publishing#        // Acquire: pairs with the publishing#lib:loom_help"
  "src/help.rs#        fence(Ordering::SeqCst);\n        let mut backoff#        let mut backoff#lib:loom_help"
  "src/help.rs#.store(erased.cast::<Job<'static>>().cast_mut(), Ordering::Release);#.store(erased.cast::<Job<'static>>().cast_mut(), Ordering::Relaxed);#lib:loom_help"
  "src/help.rs#let job = self.job.load(Ordering::Acquire);#let job = self.job.load(Ordering::Relaxed);#lib:loom_help"
  "src/paged/book.rs#self.tables[at].point = book.clock.seal_point();#self.tables[at].point = (book.clock.seal_point() - 1).max(1);#paged"
  "src/engine/domain.rs#                Ordering::Release,\n                Ordering::Relaxed,\n            ) {\n                Ok(_) => return node,#                Ordering::Relaxed,\n                Ordering::Relaxed,\n            ) {\n                Ok(_) => return node,#lib:loom_engine"
  "src/engine/domain.rs#let mut node = self.nodes.load(Ordering::Acquire).cast_const();#let mut node = self.nodes.load(Ordering::Relaxed).cast_const();#lib:loom_engine"
  "src/engine/slots.rs#    slot.store(candidate, Ordering::Release);\n    fence(Ordering::SeqCst);#    slot.store(candidate, Ordering::Release);#lib:loom_engine"
  "src/engine/slots.rs#pub(crate) fn after_unlink() {\n    fence(Ordering::SeqCst);#pub(crate) fn after_unlink() {#lib:loom_engine"
  "src/engine/slots.rs#        self.slot.store(ptr::null_mut(), Ordering::Release);#        self.slot.store(ptr::null_mut(), Ordering::Relaxed);#lib:loom_engine"
  "src/engine/slots.rs#    slot.store(candidate, Ordering::Release);#    slot.store(candidate, Ordering::Relaxed);#lib:loom_engine"
  "src/engine/slots.rs#let protected = slot.load(Ordering::Acquire).cast_const();#let protected = slot.load(Ordering::Relaxed).cast_const();#lib:loom_engine"
  "src/engine/word.rs#self.word.load(Ordering::Acquire) & ADDRESS == candidate#self.word.load(Ordering::Relaxed) & ADDRESS == candidate#lib:loom_engine"
  "src/engine/word.rs#.fetch_add(ONE, Ordering::Acquire)#.fetch_add(ONE, Ordering::Relaxed)#lib:loom_engine"
  "src/engine/word.rs#                Ordering::Release,\n                Ordering::Relaxed,\n            ) {#                Ordering::Relaxed,\n                Ordering::Relaxed,\n            ) {#lib:loom_engine"
  "src/engine/word.rs#if others != 0 {#if false {#lib:loom_engine"
  "src/engine/word.rs#.compare_exchange(seen, seen & !COUNTS, Ordering::Release, Ordering::Relaxed)#.compare_exchange(seen, seen & !COUNTS, Ordering::Relaxed, Ordering::Relaxed)#lib:loom_engine"
  "src/engine/word.rs#    count.fetch_add(moved, Ordering::Relaxed);\n    // Release: a writer whose compare-and-swap reads this word (or a later one) sees the\n    // counts in the object. Relaxed on failure: nothing read is used.\n    if word\n        .compare_exchange(seen, seen & !COUNTS, Ordering::Release, Ordering::Relaxed)\n        .is_err()\n    {#    if word\n        .compare_exchange(seen, seen & !COUNTS, Ordering::Release, Ordering::Relaxed)\n        .is_ok()\n    {\n        count.fetch_add(moved, Ordering::Relaxed);\n    } else if false {#lib:loom_engine"
  "src/engine/word.rs#            unsafe { object::count(this.object) }.fetch_add(1, Ordering::Relaxed);\n            drop(slot);#            drop(slot);\n            unsafe { object::count(this.object) }.fetch_add(1, Ordering::Relaxed);#lib:loom_engine"
  "src/engine/object.rs#    unsafe { count(object) }.fetch_sub(1, Ordering::Release);#    unsafe { count(object) }.fetch_sub(1, Ordering::Relaxed);#lib:loom_engine"
  "src/engine/object.rs#let before = unsafe { count(self.object) }.fetch_sub(1, Ordering::Release);#let before = unsafe { count(self.object) }.fetch_sub(1, Ordering::Relaxed);#lib:loom_engine"
  "src/engine/retire.rs#        !slots::holds(&self.domain, object.as_ptr().cast_const())\n            // SAFETY: an unlinked object of ours stays alive until we give it back. Acquire:\n            // pairs with the Release of every counted reference's drop.\n            && unsafe { object::count(object) }.load(Ordering::Acquire) == 0#        unsafe { object::count(object) }.load(Ordering::Acquire) == 0\n            && !slots::holds(&self.domain, object.as_ptr().cast_const())#lib:loom_engine"
  "src/engine/retire.rs#            && unsafe { object::count(object) }.load(Ordering::Acquire) == 0#            && unsafe { object::count(object) }.load(Ordering::Relaxed) == 0#lib:loom_engine"
  "src/engine/retire.rs#                    && unsafe { object::count(object) }.load(Ordering::Acquire) == 0#                    && unsafe { object::count(object) }.load(Ordering::Relaxed) == 0#lib:loom_engine"
  "src/engine/retire.rs#                Ordering::Release,\n                Ordering::Relaxed,\n            ) {\n                Ok(_) => return true,#                Ordering::Relaxed,\n                Ordering::Relaxed,\n            ) {\n                Ok(_) => return true,#lib:loom_engine"
  "src/engine/retire.rs#let word = self.word.swap(0, Ordering::Acquire);#let word = self.word.swap(0, Ordering::Relaxed);#lib:loom_engine"
  "src/engine/retire.rs#if self.free.is_empty() || newcomers || (retired > 0 && self.due()) {#if false {#lib:loom_engine"
  "src/engine/link.rs#let candidate = link.load(Ordering::Acquire) & ADDRESS;#let candidate = link.load(Ordering::Relaxed) & ADDRESS;#lib:loom_engine_f"
  "src/engine/link.rs#let old = link.swap(0, Ordering::Release);#let old = link.swap(0, Ordering::Relaxed);#lib:loom_engine_f"
  "src/engine/link.rs#    slots::after_unlink();\n    // SAFETY: unlinked by our swap#    // SAFETY: unlinked by our swap#lib:loom_engine_f"
  "src/engine/link.rs#    if counts(old) != 0 {#    if false {#lib:loom_engine_g"
  "src/engine/link.rs#        link.fetch_sub(ONE, Ordering::Relaxed);#        /* count kept */#lib:loom_engine_g"
  "src/store/snapshot.rs#tickets.push(state.queue().enter());#tickets.push(state.queue().enter());\n                tickets.clear();#snapshot"
)

only="${1:-}"
first="${only%-*}"
last="${only#*-}"
scratch="$(mktemp -d /tmp/mvtensor-mutants.XXXXXX)"
trap 'rm -rf "$scratch"' EXIT
# A copy of the sources (not the build outputs): the models build against it.
tar --exclude=./target --exclude=./fuzz/target --exclude=./.git -cf - . | tar -xf - -C "$scratch"

survived=0
for i in "${!MUTATIONS[@]}"; do
  n=$((i + 1))
  [[ -n "$only" ]] && ((n < first || n > last)) && continue
  IFS='#' read -r file text replacement models <<<"${MUTATIONS[$i]}"
  cp "$file" "$scratch/$file"
  python3 - "$scratch/$file" "$text" "$replacement" <<'EOF'
import sys
path = sys.argv[1]
text, replacement = (a.replace("\\n", "\n") for a in sys.argv[2:])
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
  tests=()
  filters=()
  for m in $models; do
    if [[ "$m" == lib:* ]]; then filters+=("${m#lib:}"); else tests+=(--test "$m"); fi
  done
  echo "== mutation $n: $file: '$text' -> '$replacement' (models: $models)"
  passed=true
  : >"$scratch/log"
  if ((${#tests[@]} > 0)) && ! (cd "$scratch" && bin/loom.sh "${tests[@]}" >>"$scratch/log" 2>&1); then
    passed=false
  fi
  if ((${#filters[@]} > 0)) && ! (cd "$scratch" && bin/loom.sh --lib "${filters[@]}" >>"$scratch/log" 2>&1); then
    passed=false
  fi
  if $passed; then
    echo "   SURVIVED: every model passed with it"
    survived=$((survived + 1))
  elif grep -q "could not compile" "$scratch/log"; then
    echo "   DID NOT BUILD: the mutation is malformed"
    survived=$((survived + 1))
  else
    # The failing model, then what failed it: loom's report (a causality violation, a
    # deadlock) or the assertion's message.
    echo "   caught by $(grep -m1 -oE "^thread '[^']*'" "$scratch/log" | cut -d"'" -f2 || echo 'a model')"
    echo "   $(grep -m1 -A1 -E "^thread '.*panicked at" "$scratch/log" | tail -n1 || true)"
  fi
  cp "$file" "$scratch/$file"
done
if ((survived > 0)); then
  echo "$survived mutation(s) survived"
  exit 1
fi
echo "every mutation was caught"
