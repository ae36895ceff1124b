//! Cost per operation: per-thread CPU ns of `assign_add`, `fetch_update` and `read()` beside
//! the same run's floor (the add on plain slices, the best lock updated in place), with the
//! ratios and the cost targets. The rows are the harness's (`src/costs.rs`), shared with the
//! report.
//!
//! `cargo bench -p mvtensor-bench --bench costs` (`-- --quick` for a short run). Plain `harness = false` so
//! that every row runs once per round, interleaved, on the same noisy machine.

use std::time::Instant;

use mvtensor_bench::costs::{measure, CostPlan, Op};

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let plan = if quick {
        CostPlan {
            rounds: 5,
            scale: 0.25,
        }
    } else {
        CostPlan {
            rounds: 15,
            scale: 1.0,
        }
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    println!(
        "cost per operation: per-thread CPU time, median of {} interleaved rounds; {cores} cores, load {}",
        plan.rounds,
        load.join(" ")
    );
    let started = Instant::now();
    let costs = measure(plan);
    println!(
        "{:<46} {:>10}  {:<52} target",
        "operation", "ns/op", "ratio (this ÷ reference)"
    );
    let (mut met, mut missed) = (0, 0);
    for row in costs.rows() {
        let ratios: Vec<String> = row
            .ratios
            .iter()
            .map(|(of, x)| format!("{x:.2}x {of}"))
            .collect();
        let targets: Vec<String> = row
            .targets
            .iter()
            .map(|t| {
                if t.met {
                    met += 1;
                } else {
                    missed += 1;
                }
                format!("{} {}", t.text, if t.met { "MET" } else { "MISSED" })
            })
            .collect();
        println!(
            "{:<46} {:>10.1}  {:<52} {}",
            row.name,
            row.ns,
            ratios.join(", "),
            targets.join("; ")
        );
    }
    let machine = costs.ns(Op::PlMutexTwoThreads) / costs.ns(Op::PlMutex(1 << 10));
    println!(
        "note: two threads on two parking_lot mutexes cost {machine:.2}x one thread here: \
         the same two-thread setting without mvtensor"
    );
    println!(
        "targets: {met} met, {missed} missed ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
}
