//! The "Where we lose" section: each goal and cost target missed, by how much, why, and what
//! would close it.

use std::fmt::Write as _;

use crate::format::ratio;
use crate::goals::Goal;
use crate::report::Report;
use mvtensor_bench::sections::{Body, SectionVariant};
use mvtensor_bench::workloads::Dense;
use mvtensor_bench::{Variant, SIZES, THREADS};

impl Report<'_> {
    pub(crate) fn where_we_lose(&self, s: &mut String, goals: &[Goal]) {
        let _ = writeln!(s, "## Where we lose\n");
        let _ = writeln!(
            s,
            "⚠ marks the {} cells of workloads 1-3 and 5 where the best lock beats mvtensor. \
             The mechanisms behind each loss are in [design.md](design.md) (§6 reclamation, \
             §8 combining, §13 the hazard-slot engine that replaces the epoch).\n",
            self.lost_cells()
        );
        let _ = writeln!(s, "### Goals missed\n");
        let missed: Vec<&Goal> = goals.iter().filter(|g| !g.met).collect();
        if missed.is_empty() {
            let _ = writeln!(s, "None in this run.\n");
        }
        for g in missed {
            let _ = writeln!(s, "* **{}**: {}", g.name, g.why);
        }
        let _ = writeln!(s);

        let _ = writeln!(s, "### Cost targets missed\n");
        // Rows missed for the same reason share one item: (rows' figures, the reason).
        let mut items: Vec<(Vec<String>, &str)> = Vec::new();
        for row in self.r.costs.rows() {
            let missed: Vec<String> = row
                .targets
                .iter()
                .filter(|t| !t.met)
                .map(|t| format!("{} (target {})", ratio(t.ratio), t.text))
                .collect();
            if missed.is_empty() {
                continue;
            }
            let figures = format!("**{}**: {}", row.name, missed.join("; "));
            let why = cost_why(&row.name);
            match items.last_mut() {
                Some((rows, w)) if *w == why => rows.push(figures),
                _ => items.push((vec![figures], why)),
            }
        }
        if items.is_empty() {
            let _ = writeln!(s, "None in this run.");
        }
        for (rows, why) in items {
            let _ = writeln!(s, "* {}. {why}", rows.join("; "));
        }
        let _ = writeln!(s);
    }

    /// The cells of the dense workloads and the sections where the best lock is faster.
    fn lost_cells(&self) -> usize {
        let dense = Dense::ALL
            .into_iter()
            .flat_map(|w| SIZES.into_iter().map(move |n| (w, n)))
            .flat_map(|(w, n)| THREADS.into_iter().map(move |t| (w, n, t)))
            .filter(|&(w, n, t)| self.dense(w, n, t, Variant::Mvtensor) < self.best_lock(w, n, t).1)
            .count();
        let sections = Body::ALL
            .into_iter()
            .flat_map(|b| THREADS.into_iter().map(move |t| (b, t)))
            .filter(|&(b, t)| {
                self.section(b, t, SectionVariant::Mvtensor) < self.best_section_lock(b, t).1
            })
            .count();
        dense + sections
    }
}

/// Why a cost target is missed and what would close it, by row name.
fn cost_why(row: &str) -> &'static str {
    if row.starts_with("assign_add 1K") {
        "Beside the add, a write pays about six atomic read-modify-writes, a clock and horizon \
         read and a share of crossbeam's batch flush, into a pooled version in L2. Closing it \
         needs cheaper reclamation than crossbeam-epoch's (design.md §13)."
    } else if row.starts_with("assign_add") {
        "Copy-on-write streams one more tensor than the add in place (the out-of-place add is \
         its floor), and a large write pays two epoch flushes to get its old buffer back; \
         only the flushes can go."
    } else if row.starts_with("fetch_update") {
        "The closure returns a new `ArrayD` (an allocation and a free a call), and its input \
         is counted so that it runs unpinned; `fetch_add` is the fast path."
    } else if row.starts_with("fetch_add") {
        "No array, but the write path's fixed costs (docs/instructions.md): a version per \
         increment, which makes the old value a snapshot. Cheaper reclamation (design.md §13) \
         closes part."
    } else if row.starts_with("read()") {
        "An epoch pin (an atomic read-modify-write) and a hold-slot store, against an RwLock's \
         two read-modify-writes on one line; a read without the pin (design.md §13) closes it."
    } else if row.starts_with("2 threads") {
        "The variables share crossbeam-epoch's global state: each flush scans the other's \
         slot and the global queue (the machine's own ratio is under the table). The hazard \
         slots of design.md §13 share no epoch."
    } else {
        ""
    }
}
