//! Workload 10 in the report: sparse updates of an embedding table, its table and its goal
//! (issue 11).

use std::fmt::Write;

use crate::format::{latency, rate};
use crate::goals::Goal;
use crate::harness::embedding::{EmbeddingVariant, Indices, K, ROWS, WIDTH};
use crate::harness::THREADS;
use crate::report::Report;

impl Report<'_> {
    fn sparse(&self, i: Indices, t: usize, v: EmbeddingVariant) -> (f64, f64) {
        self.r.embedding[&(i, t, v)]
    }

    /// The fastest lock of one cell.
    fn best_sparse_lock(&self, i: Indices, t: usize) -> (EmbeddingVariant, f64) {
        EmbeddingVariant::ALL
            .into_iter()
            .filter(|v| v.is_lock())
            .map(|v| (v, self.sparse(i, t, v).0))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .expect("there are locks")
    }

    /// CPU ns per update and per gather.
    fn sparse_cost(&self, i: Indices, v: EmbeddingVariant) -> (u64, u64) {
        let (u, g) = self.r.embedding_costs[&(i, v)];
        (u.as_nanos() as u64, g.as_nanos() as u64)
    }

    pub(crate) fn embedding_section(&self, s: &mut String) {
        let _ = writeln!(s, "## 10. Sparse updates of an embedding table\n");
        let _ = writeln!(
            s,
            "A table of {ROWS} x {WIDTH} f32 ({} MiB); an update adds ones to {K} rows drawn \
             Zipf-distributed (exponent 1, as word frequencies are) or uniformly. mvtensor: a \
             `PagedVariable` (default pages: one row, one level of 64-pointer nodes), `scatter_add`; \
             and the same table with a step counter in a `CriticalSection`, an execution adding \
             the rows and one to the counter (`tx.scatter_add`, `tx.assign_add`), as a step \
             that must change both together does (the locks change the table only). The locks update the \
             rows in place (on slices, the add in AVX2 where the processor has it); arc-swap copies the whole table per update; *racy* is Hogwild \
             without any synchronisation (relaxed loads and stores of each element, the \
             `hogwild` crate's behaviour without its undefined behaviour): the speed limit, \
             and it loses updates (last column). Every other variant's final sum is checked \
             exactly.\n",
            (ROWS * WIDTH * 4) >> 20
        );
        let _ = writeln!(
            s,
            "CPU time on one thread (median of {} rounds, each after 40 passes over the \
             index stream): an update, and a read of {K} rows (mvtensor: `read().gather(..)`; \
             a lock: lock, and copy each row from the table's slice).\n",
            self.plan.rounds
        );
        let _ = writeln!(
            s,
            "| indices | variant | CPU per update | CPU per 32-row read |"
        );
        let _ = writeln!(s, "| --- | --- | --- | --- |");
        for i in Indices::ALL {
            for v in EmbeddingVariant::ALL {
                let (u, g) = self.sparse_cost(i, v);
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} |",
                    i.name(),
                    v.name(),
                    latency(u),
                    latency(g)
                );
            }
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "Updates/s of all threads together (median of {} runs of {} ms); in brackets each \
             variant ÷ mvtensor. Last columns: mvtensor ÷ the best lock, and the racy \
             variant's lost element updates.\n",
            self.plan.rounds,
            self.plan.embedding.as_millis()
        );
        let mut head = String::from("| indices | threads |");
        let mut rule = String::from("| --- | --- |");
        for v in EmbeddingVariant::ALL {
            let _ = write!(head, " {} |", v.name());
            rule.push_str(" --- |");
        }
        let _ = writeln!(
            s,
            "{head} mvtensor ÷ best lock | racy: lost |\n{rule} --- | --- |"
        );
        for i in Indices::ALL {
            for t in THREADS {
                let mv = self.sparse(i, t, EmbeddingVariant::Paged).0;
                let mut row = format!("| {} | {t} |", i.name());
                for v in EmbeddingVariant::ALL {
                    let x = self.sparse(i, t, v).0;
                    if v == EmbeddingVariant::Paged {
                        let _ = write!(row, " {} |", rate(x));
                    } else {
                        let _ = write!(row, " {} ({:.2}x) |", rate(x), x / mv);
                    }
                }
                let (lock, best) = self.best_sparse_lock(i, t);
                let lost = self.sparse(i, t, EmbeddingVariant::Racy).1;
                let _ = writeln!(
                    s,
                    "{row} {:.2}x ({}) | {:.2}% |",
                    mv / best,
                    lock.name(),
                    100.0 * lost
                );
            }
        }
        let _ = writeln!(s);
    }

    /// Issue 11's three targets, over both index distributions.
    pub(crate) fn goal_embedding(&self) -> Goal {
        // Each against the best lock at it: the cheapest update, and the cheapest read,
        // which may be another lock's (the read was that of the lock with the cheapest
        // update, not the best read: a review of the benchmarks).
        let lock_cost = |i| {
            let costs = EmbeddingVariant::ALL
                .into_iter()
                .filter(|v| v.is_lock())
                .map(|v| self.sparse_cost(i, v));
            let update = costs.clone().map(|c| c.0).min().expect("locks");
            (update, costs.map(|c| c.1).min().expect("locks"))
        };
        let mut measured = Vec::new();
        let mut met = true;
        let mut worst_threads = (f64::INFINITY, 0, Indices::Zipf);
        for i in Indices::ALL {
            let (mv_u, mv_g) = self.sparse_cost(i, EmbeddingVariant::Paged);
            let (lock_u, lock_g) = lock_cost(i);
            let (update, read) = (mv_u as f64 / lock_u as f64, mv_g as f64 / lock_g as f64);
            let threads: Vec<f64> = THREADS[1..]
                .iter()
                .map(|&t| {
                    let r = self.sparse(i, t, EmbeddingVariant::Paged).0
                        / self.best_sparse_lock(i, t).1;
                    if r < worst_threads.0 {
                        worst_threads = (r, t, i);
                    }
                    r
                })
                .collect();
            met &= update <= 3.0 && read <= 1.5 && threads.iter().all(|&r| r >= 0.5);
            measured.push(format!(
                "{}: update {update:.2}x the lock's CPU, 32-row read {read:.2}x, 2/4/8 threads \
                 {}",
                i.name(),
                threads
                    .iter()
                    .map(|r| format!("{r:.2}"))
                    .collect::<Vec<_>>()
                    .join("/")
                    + "x the best lock"
            ));
        }
        let (mv_u, mv_g) = self.sparse_cost(Indices::Uniform, EmbeddingVariant::Paged);
        let (lock_u, lock_g) = lock_cost(Indices::Uniform);
        let section_extra = |i| {
            let plain = self.sparse_cost(i, EmbeddingVariant::Paged).0;
            self.sparse_cost(i, EmbeddingVariant::PagedSection)
                .0
                .saturating_sub(plain)
        };
        Goal {
            name: "Sparse embedding updates (issue 11)".into(),
            target: "one thread ≤ 3x the mutex's CPU per update; 2-8 threads ≥ 0.5x the best \
                     lock's updates/s; a 32-row read ≤ 1.5x the best lock's"
                .into(),
            measured: measured.join("; "),
            met,
            why: format!(
                "A paged update copies what it touches: {K} pages of one row (256 bytes), at \
                 most {K} nodes of 64 page pointers (512 bytes each) and the tree's root \
                 (1,563 pointers, 12 KiB): about 36 KiB read and written \
                 where a lock adds {K} rows in place (8 KiB), {} against {} of CPU with uniform \
                 indices. The rows are random in a 25 MiB table, so the pages are cache misses \
                 for every variant, and a copy-on-write update also waits for each page's \
                 path through the tree before it can fetch the page: profiled, about two \
                 thirds of an update is waiting for memory (the prefetches of paths and \
                 pages, then the copies). The tree's shape hardly matters there: one \
                 level of 64-pointer nodes (28 KiB of pointers a write), two levels of 16 or \
                 32 (11-17 KiB) and three of 8 or 16 all measured within 10% of one another \
                 on one thread; on a table that fits in the cache (2,000 rows) an update costs \
                 ~1.2-1.4 us against ~0.4 us for a lock's 32 row adds in place, the fixed cost \
                 of a version per write (combining, the book, the retirement) and a node copy \
                 per row (~12k instructions a write, a lock's ~4.6k). A page of one row is copied \
                 fused with its add (one sweep instead of a copy and an add: 15% less CPU \
                 per Zipf update, ~5% uniform), and replaced tables wait for a tick of the \
                 book's own grace clock instead of a deferred release and a flushed bag per \
                 write (~8% less on the table in cache). The CPU table is each variant's \
                 steady state (after 40 passes over the index stream: a mutex's update still \
                 cost ~1.6x its steady cost in the second pass, and ~1.3x up to the 30th, \
                 mvtensor's is level from the second; earlier reports warmed one \
                 pass and flattered mvtensor by that much): the Zipf rows a lock adds \
                 to are mostly cached, and its adds run on slices in AVX2, ~10 ns a row \
                 (ndarray's `row += &delta`, in SSE2 behind its shape checks, took 2-3x as \
                 long). With more threads (the worst cell: {:.2}x, {} threads, {}): on {} cores \
                 no variant runs much more than one update at a time; mvtensor's pass runs \
                 on one core while its waiters spin, and with 8 threads the holder shares \
                 its core with yielding waiters, where a mutex's waiters sleep and its \
                 holder takes it straight back. Waiters that park or yield first do worse: \
                 measured (Zipf, medians of 5 runs of 200 ms) spinning 433/383/370 k \
                 updates/s at 2/4/8 threads, yielding then parking 270-336/162-164/130-133 k, \
                 parking 195-334/133-202/126-141 k: a wake-up costs more than a ~2 us pass. \
                 Waiters that build part of the pass do worse too (2026-11-28: a pass of 32 \
                 rows or more cut into parts by root entry, each part copying its own nodes \
                 and pages, taken by spinning waiters: uniform 76-79 k against 226-234 k \
                 updates/s at 2 threads, Zipf 102-103 k against 346-355 k, 2.6-3x fewer at 4 \
                 threads too; the holder waited for its helpers, and the parts' nodes, pages \
                 and root lines crossed between the two cores' caches on every pass; not \
                 kept). What would close it: a cheaper version per write, and waiters that \
                 step aside without a wake-up on the holder's path when there are more \
                 writers than cores. In a critical section with a step \
                 counter an update took {} (Zipf) and {} (uniform) of CPU more than a plain \
                 one: the staged copy of its rows, the execution (a ticket on each variable, \
                 the batch flag), the table installed pending and settled after the commit, \
                 and the counter's own version. A {K}-row read took {} (Zipf) and {} (uniform) \
                 against {} and {} for the best lock's. A gather walks its rows through the \
                 tree {K} at a time, one level for all of them, and asks for each row as soon \
                 as it is found, so that their misses overlap (row by row, each row waiting \
                 for its node and then its page, it took 1.4-1.8x as long, measured \
                 2026-11-27); what remains is the walk (a root slot and a node per row \
                 before the page, where a lock indexes one flat array) and a fixed cost per \
                 gather (the snapshot, the index check, the array: ~3,800 instructions a \
                 32-row gather in all, against ~2,500 for a lock's, by callgrind; ~4,500 \
                 before 2026-11-28, when rows were appended one by one and the array \
                 built through ndarray's general shape code), which weigh most with \
                 Zipf rows: a lock's hot rows are the first few hundred rows of its array, \
                 cached and next to one another, where mvtensor's are wherever the pool put \
                 their latest copies (7 cached rows gathered 32 times: ~2.2x the lock's \
                 CPU). Until 2026-11-27 the locks \
                 gathered through ndarray's `select`, which builds a view per row and \
                 concatenates them, at 2-3x the cost, and this target read met (0.61-0.84x); \
                 a review of the benchmarks found it, and that the read was compared with \
                 the lock of the cheapest update rather than the cheapest read.",
                latency(mv_u),
                latency(lock_u),
                worst_threads.0,
                worst_threads.1,
                worst_threads.2.name(),
                self.env.cores,
                latency(section_extra(Indices::Zipf)),
                latency(section_extra(Indices::Uniform)),
                latency(self.sparse_cost(Indices::Zipf, EmbeddingVariant::Paged).1),
                latency(mv_g),
                latency(lock_cost(Indices::Zipf).1),
                latency(lock_g),
            ),
        }
    }
}
