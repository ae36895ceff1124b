//! The "Cost per operation" section: the CPU-time table (`mvtensor_bench::costs`),
//! mvtensor's operations beside the same run's floor, with ratios and targets.

use std::fmt::Write as _;

use crate::format::{ratio, verdict};
use crate::report::Report;
use mvtensor_bench::costs::Op;

/// Nanoseconds with a readable unit and about three significant digits.
fn ns(x: f64) -> String {
    match x {
        x if x < 100.0 => format!("{x:.1}ns"),
        x if x < 10_000.0 => format!("{x:.0}ns"),
        x if x < 10_000_000.0 => format!("{:.1}µs", x / 1e3),
        x => format!("{:.1}ms", x / 1e6),
    }
}

impl Report<'_> {
    pub(crate) fn cost_section(&self, s: &mut String) {
        let costs = &self.r.costs;
        let _ = writeln!(s, "## Cost per operation\n");
        let _ = writeln!(
            s,
            "Per-thread CPU time of one operation (descheduled time does not count), one \
             thread unless the row says otherwise, median of {} interleaved rounds. The \
             floor, from the same rounds: the add on slices in place and out of place (what \
             copy-on-write must stream), and a `Mutex<ArrayD<f32>>` updated in place. Ratio: \
             this row ÷ the reference (above 1.00x: it costs more). Instruction counts: \
             `bin/instructions.sh`.\n",
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
            "Two threads on their own parking_lot mutexes cost {} one thread's CPU per \
             update: this machine's own two-thread cost. Buffers are placed clear of 4K \
             aliasing and of each other's 128-byte blocks (`bench/src/placement.rs`).\n",
            ratio(machine)
        );
    }
}
