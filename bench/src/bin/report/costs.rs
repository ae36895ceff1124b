//! The "Cost per operation" section: the CPU-time table (`mvtensor_bench::costs`),
//! mvtensor's operations beside the same run's floor, with ratios and targets.

use std::fmt::Write as _;

use crate::format::{ratio, verdict};
use crate::report::Report;
use mvtensor_bench::costs::Op;

/// Nanoseconds with a readable unit and about three significant digits.
fn ns(x: f64) -> String {
    match x {
        x if x < 100.0 => format!("{x:.1} ns"),
        x if x < 10_000.0 => format!("{x:.0} ns"),
        x if x < 10_000_000.0 => format!("{:.1} µs", x / 1e3),
        x => format!("{:.1} ms", x / 1e6),
    }
}

impl Report<'_> {
    pub(crate) fn cost_section(&self, s: &mut String) {
        let costs = &self.r.costs;
        let _ = writeln!(s, "## Cost per operation\n");
        let _ = writeln!(
            s,
            "What one operation costs, single-threaded unless the row says otherwise: \
             **per-thread CPU time** (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`, so time spent \
             descheduled on this shared machine does not count), the **median of {} \
             interleaved rounds** (every round runs every row once, starting at a different \
             row), so each mvtensor row and its floor come from the same run. The floor: the \
             add on plain slices (in AVX2 where the processor has it, as mvtensor's loops) in place (`a += d`, the arithmetic alone) and out of place \
             into a warm buffer (`out = a + d`, the least a copy-on-write update streams), and \
             `Mutex<ArrayD<f32>>` updated in place with that add (std and parking_lot; the best \
             lock is the faster). Ratios are this row ÷ the reference (above 1.00x: it costs more); the \
             targets are stated as cost ratios. Instruction counts of the same \
             operations, stable on a noisy machine: `bin/instructions.sh`.\n",
            costs.plan.rounds
        );
        let _ = writeln!(s, "| operation | CPU per op | ratio | target | |");
        let _ = writeln!(s, "| --- | --- | --- | --- | --- |");
        for row in costs.rows() {
            let ratios: Vec<String> = row
                .ratios
                .iter()
                .map(|(of, x)| format!("{} {of}", ratio(*x)))
                .collect();
            let targets: Vec<&str> = row.targets.iter().map(|t| t.text.as_str()).collect();
            let mark = if row.targets.is_empty() {
                ""
            } else {
                verdict(row.targets.iter().all(|t| t.met))
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {mark} |",
                row.name.replace('|', "\\|"),
                ns(row.ns),
                ratios.join(", "),
                targets.join("; ")
            );
        }
        let _ = writeln!(s);
        let machine = costs.ns(Op::PlMutexTwoThreads) / costs.ns(Op::PlMutex(1 << 10));
        let _ = writeln!(
            s,
            "Two threads each updating its own parking_lot mutex cost {} one thread's CPU per \
             update here: the same two-thread setting without mvtensor. Each delta is placed \
             clear of 4K aliasing with the tensor it is added to, and the two threads' tensors \
             share no 128-byte block: the L2's spatial prefetcher fetches a line's 128-byte \
             buddy with it, so two 1K tensors allocated back to back would pass a line between \
             the two threads on every update.\n",
            ratio(machine)
        );
    }
}
