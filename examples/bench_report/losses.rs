//! The "Where we lose" section: the goals missed, every cell mvtensor loses, and why.

use std::fmt::Write as _;

use crate::format::{count, latency, ratio};
use crate::goals::Goal;
use crate::harness::sections::{Body, SectionVariant};
use crate::harness::workloads::Dense;
use crate::harness::{size_label, Variant, SIZES, THREADS};
use crate::report::Report;

impl Report<'_> {
    pub(crate) fn where_we_lose(&self, s: &mut String, goals: &[Goal]) {
        let _ = writeln!(s, "## Where we lose\n");
        let _ = writeln!(s, "### Goals missed\n");
        let missed: Vec<&Goal> = goals.iter().filter(|g| !g.met).collect();
        if missed.is_empty() {
            let _ = writeln!(s, "None in this run.\n");
        }
        for g in missed {
            let _ = writeln!(s, "* **{}** (target {}): {}", g.name, g.target, g.why);
        }
        let _ = writeln!(s);

        let _ = writeln!(s, "### Cost targets missed (issue 8)\n");
        let mut any = false;
        for row in self.r.costs.rows() {
            let missed: Vec<String> = row
                .targets
                .iter()
                .filter(|t| !t.met)
                .map(|t| format!("{} (target {})", ratio(t.ratio), t.text))
                .collect();
            if !missed.is_empty() {
                any = true;
                let _ = writeln!(
                    s,
                    "* **{}**: {}. {}",
                    row.name,
                    missed.join("; "),
                    cost_why(&row.name)
                );
            }
        }
        if !any {
            let _ = writeln!(s, "None in this run.");
        }
        let _ = writeln!(s);

        let _ = writeln!(s, "### Every cell where the best lock beats mvtensor\n");
        let mut lines = Vec::new();
        for w in Dense::ALL {
            for n in SIZES {
                let lost = lost_cells(|t| {
                    let (lock, l) = self.best_lock(w, n, t);
                    (self.dense(w, n, t, Variant::Mvtensor), lock.name(), l)
                });
                if !lost.is_empty() {
                    lines.push(format!(
                        "* {} {}: {}",
                        w.key(),
                        size_label(n),
                        lost.join(", ")
                    ));
                }
            }
        }
        for body in Body::ALL {
            let lost = lost_cells(|t| {
                let (lock, l) = self.best_section_lock(body, t);
                (
                    self.section(body, t, SectionVariant::Mvtensor),
                    lock.name(),
                    l,
                )
            });
            if !lost.is_empty() {
                lines.push(format!(
                    "* critical section, {}: {}",
                    body.key(),
                    lost.join(", ")
                ));
            }
        }
        for ((w, r), cells) in &self.r.latency {
            let mv = cells[0].1.at(0.99);
            for (v, l) in cells.iter().filter(|(v, _)| v.is_lock()) {
                if l.at(0.99) < mv {
                    lines.push(format!(
                        "* read p99, {} + {}: {} {} vs mvtensor {}",
                        count(*w, "writer"),
                        count(*r, "reader"),
                        v.name(),
                        latency(l.at(0.99)),
                        latency(mv)
                    ));
                }
            }
        }
        if lines.is_empty() {
            let _ = writeln!(s, "None in this run.");
        }
        for l in lines {
            let _ = writeln!(s, "{l}");
        }
        let _ = writeln!(s);

        let _ = writeln!(s, "### Why\n");
        let _ = writeln!(s, "{}", WHY.trim());
        let _ = writeln!(s);
    }
}

/// Why a cost target of issue 8 is missed, by row name.
fn cost_why(row: &str) -> &'static str {
    if row.starts_with("assign_add 1K") {
        "On top of the add, a write pays about six atomic read-modify-writes (the epoch pin, \
         the combiner flag, a pool take, the head CAS, and, per version released, the count's \
         last CAS and the pool push: ~5 ns each here), a clock and horizon read, and its \
         share of one crossbeam `flush` per 16 retired versions (and of a `defer` per grace \
         period: its thread's clock has one tick in flight at a time); and it writes into a version \
         retired about 50 writes earlier (the pool cycles about three batches), in L2 rather \
         than L1. Closing it needs grace periods cheaper than crossbeam's flush (a reuse \
         check per variable, say), which the product's choice of crossbeam-epoch rules out \
         for now, and a pool a writer takes from without a swap."
    } else if row.starts_with("assign_add") {
        "Copy-on-write streams one more tensor than the add in place (the same run's \
         out-of-place add is the floor), and a large write also pays two epoch flushes to get \
         the buffer it replaced back before returning."
    } else if row.starts_with("fetch_update") {
        "The closure returns a new `ArrayD`: an allocation, a free and ndarray's shape \
         machinery per call, then the write path's fixed costs, and a count of the version \
         the closure reads (two atomic read-modify-writes, ~5 ns), so that the closure runs \
         unpinned: a closure may take as long as it likes, and pinned it held back every \
         version any thread retired meanwhile (2026-11-27). The scalar API (`fetch_add`, \
         next row) writes in place into a pooled version instead."
    } else if row.starts_with("fetch_add") {
        "No array per call, but the write path's fixed costs stay (callgrind: ~600 \
         instructions per call against ~11 for the lock, docs/instructions.md): an epoch pin, a pool take (two \
         swaps), the clock and horizon reads, the head CAS, the retirement into this \
         thread's batch, and a share of a crossbeam `flush` per 32 versions (and of a \
         `defer` per grace period). A version per increment is what makes the old value a \
         snapshot and keeps counters in store snapshots and sections; closing the gap needs \
         grace periods cheaper than crossbeam's flush, as for `assign_add 1K`."
    } else if row.starts_with("read()") {
        "A read is an epoch pin (crossbeam: one atomic read-modify-write on this thread's \
         slot, and the thread-local lookups around it), two acquire loads (the head and its \
         record) and a store to one of this thread's hold slots; dropping the snapshot \
         clears the slot (~145 instructions in all, by callgrind: docs/instructions.md). The RwLock's read and \
         unlock are two read-modify-writes on one line. Where those cost ~8 ns each (the \
         Intel Xeon of earlier reports: 16.8 ns for the lock) the read met the target at \
         0.63x; where they cost ~2.5 ns (an AMD EPYC: 5.4 ns for the lock) the pin's one \
         read-modify-write and the instructions around it cost more than the lock's two. \
         Closing it there needs a read without a read-modify-write, which crossbeam-epoch's \
         pin does not offer."
    } else if row.starts_with("2 threads") {
        "The two variables share no line but crossbeam-epoch's global state: each thread's \
         batch flush scans the other's epoch slot and collects from the global queue, and \
         each tick of its grace clock pushes a bag there (crossbeam allocates and frees the \
         queue's nodes on either thread, and a pop leaves a node to destroy, which the next \
         flush pushes). With a deferred call and a flush per batch instead of the clock's \
         one tick per grace period, 2M writes a thread cost 253-281 ns against 147 ns alone \
         (227-240 against 143 with the clock, alternated). When grace periods run long with two \
         threads, pools also run dry now and then and a fresh small version is allocated \
         (~2% of writes). Each thread's retired versions come home through its own thread, \
         so what is left is crossbeam's. Compare with the machine's own two-thread ratio \
         printed under the table."
    } else {
        ""
    }
}

/// The mechanisms behind the losses (the numbers are in the tables above).
const WHY: &str = r#"
* **Every write copies the tensor.** mvtensor never changes a published version, so each
  `assign_add` reads the old tensor and writes a new one (copy-on-write), where a lock adds
  in place. Versions are pooled: a large one goes into the buffer the previous pass read from
  (the version it replaced is back in the pool before the write returns when no reader holds
  it), so a lone writer's working set is two tensors and a delta, but that is still one more
  stream than the add in place, and each write also pays fixed costs (see "Cost per
  operation"): dense updates lose in most cells (listed above), already with one thread.
* **Combining only helps when writers overlap, and overlap is capped by the cores.** k
  concurrent deltas cost one pass instead of k. With 1 thread it is pure overhead (batch
  1.00). With more threads the batch grows (the "mvtensor batch" columns), but a pass over
  k deltas of k threads reads k + 2 tensors, a working set that outgrows the cache at 1M,
  and the writers waiting for it share the same two cores (they park for large tensors,
  yield a few times and then park for mid-sized ones, spin and yield for small ones, where a
  wake-up costs more than the pass). From 1 MiB the waiting writers compute chunks of the
  pass instead of sleeping through it (helping, `docs/design.md` §8): two writers of 1M
  f32 went from ~4,800 to ~8,700 updates/s on an AMD EPYC, level with the mutex, and 4 to 8
  writers gained 25-30%; below 1 MiB a pass is too short for a wake-up to pay. Even with two writers on two cores the hand-off costs:
  the holder reads each waiter's request from the waiter's core and writes its outcome
  back, a few cache-line transfers per write that the lock's holder, re-taking the lock
  while the other thread sleeps, does not pay (1K from 2 threads: ~600 ns of CPU a write
  where one thread alone takes ~150; 1,000 before the flag and the head got lines of
  their own). With more
  threads than cores they rarely overlap at all: the OS runs a writer for a time slice of
  milliseconds, hundreds of passes, while the others wait for a core, not for the flag. The
  README's main job (64K, 4 writers and 2 readers on 2 cores; its goal above, measured in
  this run) shows both: what its writers lose is the readers' share of the two cores, which
  mvtensor's readers keep because they never wait, plus the out-of-place pass.
* **A tiny execution is mostly machinery.** An execution writes its working copy in place
  and allocates nothing, but still takes a ticket, pins the epoch, fills a pooled working
  copy, publishes it and retires the old version (about 1,450 instructions by callgrind),
  where the mutex body is one add (issue 9). An optimizer step pays the same per variable:
  a hand-written Adam over 13 variables copies 12 working copies and installs and retires
  13 versions (~19.1k instructions per step against ~4.5k for the same step on plain
  arrays, the mutex's body, both with the Adam loop in AVX2); the crate's optimizer keeps all
  moments and the step count in one variable, computes each working copy from the value it
  replaces (`Txn::rewrite`: no copy first) and pays for 5 versions (~11.4k), 2 with the
  parameters packed in one variable (`optim::Packed`: ~8.3k), or 1 with the state in the
  packed set too (`build_packed`: ~7.1k, of which the Adam pass is ~3.7k).
  Under contention, executions that arrive together run as one batch on the thread that
  holds the section and commit once, which removes the hand-offs of a strict FIFO queue
  (before batches, 8 threads on 2 cores managed ~170 k executions/s, every hand-off waiting
  for the scheduler), but an unfair mutex still lets the running thread re-acquire with no
  hand-off at all.
* **A trainer step on two cores moves the tensor between them.** In the trainer step
  (read, gradient, `assign_add`) every thread reads the version another core just wrote and
  writes one the other core read, so with threads on both cores each step carries the
  tensor across: at 64K, two threads on two cores made ~33 k steps/s, the same two threads
  pinned to one core (`taskset -c 0`) ~57 k, as one thread alone (2026-11-26, 1 s runs,
  alternated). A lock held for the whole step serialises the steps and lets the thread
  that holds it take it back while the others sleep, so the tensor mostly stays in one
  core's cache; mvtensor's parallel reads pay off when the gradient costs more than moving
  the tensor (the wine trainer, workload 9, where the two are level), not here, where the
  gradient is one pass like the add. This machine also has spells of a second or so in
  which mvtensor's 4-thread 64K step runs ~4x slower (~13 k steps/s instead of ~49 k, CPU
  still busy) while a mutex measured in the windows between keeps its ~60 k: 21 of 279
  windows of 200 ms in one two-minute run, and at the same moments in separate processes, so
  it comes from the machine (a virtual one), not from state inside the process; a cell
  measured in such a spell reads ~0.2x.
* **Reads that do real work hide the lock.** Readers here sum the whole snapshot. For 64K
  and 1M elements the sum dwarfs the cost of an RwLock's read lock, readers of an RwLock
  also run in parallel, and writes are rare, so the RwLocks keep up. mvtensor's wait-free
  read only pays off where reads are short or writers hold the lock long.
* **A descheduled writer delays reclamation.** A snapshot holds only its own version (a
  hold slot, not a pin), and a large write keeps its version by a count while it computes
  (pinned only to load and to publish: 1M f32 from 4 threads went from 0.56x to ~0.68x the
  best lock when it stopped pinning across the pass, 2026-11-27); but a small write, or a
  combining pass of small deltas, pins the epoch while it runs, and a writer that the OS
  deschedules then holds back the release of every version retired meanwhile (by any
  thread), so other writers allocate, the pool grows (it is trimmed back afterwards) and
  resident memory with it (writes that are not combined wait at 4 MiB of versions). Small
  versions also come back a batch at a time (~three batches of 64 KiB in flight per
  variable), the price of one crossbeam flush per batch rather than per write.
* **Latency tails are the scheduler's.** With more threads than cores, a reader of any
  variant can lose its core for a time slice mid-read; p99 and p99.9 then measure the
  scheduler, not the data structure.
"#;

/// "N threads: ratio (lock)" for every thread count where the best lock beats mvtensor;
/// `cell(threads)` gives mvtensor's figure, the best lock's name and its figure.
fn lost_cells<'n>(cell: impl Fn(usize) -> (f64, &'n str, f64)) -> Vec<String> {
    THREADS
        .iter()
        .filter_map(|&t| {
            let (mv, lock, l) = cell(t);
            (mv < l).then(|| format!("{}: {} ({lock})", count(t, "thread"), ratio(mv / l)))
        })
        .collect()
}
