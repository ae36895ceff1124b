//! The "Where we lose" section: the goals missed, every cell mvtensor loses, and why.

use std::fmt::Write as _;

use crate::format::{count, latency, ratio};
use crate::goals::Goal;
use crate::report::Report;
use mvtensor_bench::sections::{Body, SectionVariant};
use mvtensor_bench::workloads::Dense;
use mvtensor_bench::{size_label, Variant, SIZES, THREADS};

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

        let _ = writeln!(s, "### Cost targets missed\n");
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

/// Why a cost target is missed, by row name.
fn cost_why(row: &str) -> &'static str {
    if row.starts_with("assign_add 1K") {
        "On top of the add, a write pays about six atomic read-modify-writes (the epoch pin, \
         the combiner flag, a pool take, the head CAS and, per released version, its count \
         and the pool push), a clock and horizon read and a share of crossbeam's batch flush, \
         and it writes into a pooled version that sits in L2 rather than L1. Closing it needs \
         grace periods cheaper than crossbeam-epoch's flush."
    } else if row.starts_with("assign_add") {
        "Copy-on-write streams one more tensor than the add in place (the same run's \
         out-of-place add is the floor), and a large write also pays two epoch flushes to get \
         the buffer it replaced back before returning."
    } else if row.starts_with("fetch_update") {
        "The closure returns a new `ArrayD` (an allocation, a free and ndarray's shape \
         machinery per call), and the version it reads is kept by a count so that the \
         closure runs unpinned, however long it takes. The scalar API (`fetch_add`) writes in \
         place into a pooled version instead."
    } else if row.starts_with("fetch_add") {
        "No array per call, but the write path's fixed costs stay: an epoch pin, a pool take, \
         the clock and horizon reads, the head CAS and the retirement (instruction counts: \
         docs/instructions.md). A version per increment is what makes the old value a \
         snapshot and keeps counters in store snapshots and sections."
    } else if row.starts_with("read()") {
        "A read is an epoch pin (one atomic read-modify-write on this thread's slot), two \
         acquire loads and a store to a hold slot, which the drop clears; an RwLock's read and \
         unlock are two read-modify-writes on one line. Where read-modify-writes are cheap \
         the pin and the instructions around it cost more than the lock's two; closing it \
         needs a read without a read-modify-write, which crossbeam-epoch's pin does not offer."
    } else if row.starts_with("2 threads") {
        "The two variables share no cache line but crossbeam-epoch's global state: each \
         thread's batch flush scans the other's epoch slot and collects from the global \
         queue, and each tick of its grace clock pushes a bag there. Compare with the \
         machine's own two-thread ratio printed under the table."
    } else {
        ""
    }
}

/// The mechanisms behind the losses (the numbers are in the tables above).
const WHY: &str = r#"
* **Every write copies the tensor.** mvtensor never changes a published version, so each
  `assign_add` reads the old tensor and writes a new one, where a lock adds in place.
  Versions are pooled, so a lone writer's working set is two tensors and a delta, but that is
  one more stream than the add in place, plus the fixed costs of "Cost per operation".
* **Combining only helps when writers overlap, and the cores cap the overlap.** k concurrent
  deltas cost one pass instead of k, but with one thread combining is pure overhead, a pass
  over k deltas reads k + 2 tensors, and handing outcomes to waiters costs cache-line
  transfers that a lock's holder, re-taking the lock while the others sleep, does not pay.
  From 1 MiB waiting writers help compute the pass; below that a wake-up costs more than the
  pass. With more threads than cores writers rarely overlap at all: the OS runs one for a
  time slice while the others wait for a core.
* **A tiny execution is mostly machinery.** An execution takes a ticket, pins the epoch,
  fills a pooled working copy, publishes it and retires the old version, where the mutex
  body is one add. An optimizer step pays that per variable, which is why the crate's
  optimizer keeps its state in one variable and `build_packed` puts parameters and state in
  one. Batches remove most hand-offs under contention, but an unfair mutex re-acquires with
  none.
* **A trainer step on two cores moves the tensor between them.** Every thread reads the
  version another core just wrote, so each step carries the tensor across, where a lock held
  for the whole step keeps it in one core's cache. mvtensor's parallel reads pay off when the
  gradient costs more than moving the tensor (workload 9), not when it is one pass like the
  add.
* **Reads that do real work hide the lock.** Readers here sum the whole snapshot. For 64K
  and 1M elements the sum dwarfs the cost of an RwLock's read lock, readers of an RwLock
  also run in parallel, and writes are rare, so the RwLocks keep up. mvtensor's wait-free
  read only pays off where reads are short or writers hold the lock long.
* **A descheduled writer delays reclamation.** A snapshot holds only its own version and a
  large write computes unpinned, but a small write or a combining pass of small deltas pins
  the epoch while it runs; a writer descheduled then holds back every version retired
  meanwhile, so pools and resident memory grow until it runs again. Small versions also come
  back a batch at a time, the price of one crossbeam flush per batch rather than per write.
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
