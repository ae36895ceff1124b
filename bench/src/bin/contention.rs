//! The contention job: several writers hammer one shared f32 tensor with `assign_add` while readers
//! keep reading it, first through mvtensor, then through a `std::sync::Mutex<ArrayD<f32>>`
//! updated in place (the mutex's best case: on slices, the add in AVX2 where the processor
//! has it, as mvtensor's own loops are): the same workload, in the same run.
//!
//! ```text
//! cargo run --release -p mvtensor-bench --bin contention [-- --elements N[,N...] --writers W --readers R --updates U --rounds K]
//! ```
//!
//! Defaults: 65536 elements, 5 rounds, and no more threads than cores (`Job::for_cores`): up
//! to 6 threads, a third of them readers (at least one from 2 cores on), the rest writers
//! sharing 8,000 updates. Each round runs both variants, alternating which goes first; the
//! table shows each variant's median round (by updates/s), and the summary the median of
//! the rounds' ratios with their range, and what each side's writers and readers did
//! together: a reader that never waits reads on while the writers write, which is work done.
//! `--elements 65536,1048576` adds rows for a 4 MiB tensor.
//!
//! Every writer adds a tensor of ones `U` times, so the final value is exactly
//! `initial + W * U` everywhere (f32 is exact below 2^24); it is checked element by element,
//! and the process exits non-zero if any variant lost an update.

use std::num::NonZeroUsize;
use std::process::ExitCode;
use std::thread;

use hdrhistogram::Histogram;

// The workload itself is the harness's `contention`, which the report measures too.
use mvtensor_bench::contention::{self, rounds, Job, Outcome, READ_SLICE};
use mvtensor_bench::INITIAL_MAX;

/// The workload, from the command line.
struct Config {
    elements: Vec<usize>,
    writers: usize,
    readers: usize,
    updates: usize,
    rounds: usize,
}

impl Config {
    const USAGE: &'static str =
        "usage: contention [--elements N[,N...]] [--writers W] [--readers R] [--updates U] [--rounds K]";

    fn from_args(cores: usize) -> Result<Self, String> {
        let job = Job::for_cores(cores);
        let mut cfg = Config {
            elements: vec![contention::ELEMENTS],
            writers: job.writers,
            readers: job.readers,
            updates: job.updates,
            rounds: contention::ROUNDS,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            if flag == "-h" || flag == "--help" {
                println!("{}", Self::USAGE);
                std::process::exit(0);
            }
            let value = args.next().ok_or(format!("{flag} needs a value"))?;
            let number = |s: &str| {
                s.trim()
                    .replace('_', "")
                    .parse::<usize>()
                    .map_err(|e| format!("{flag} {s}: {e}"))
            };
            match flag.as_str() {
                "--elements" => {
                    cfg.elements = value.split(',').map(number).collect::<Result<_, _>>()?
                }
                "--writers" => cfg.writers = number(&value)?,
                "--readers" => cfg.readers = number(&value)?,
                "--updates" => cfg.updates = number(&value)?,
                "--rounds" => cfg.rounds = number(&value)?,
                _ => return Err(format!("unknown argument {flag}\n{}", Self::USAGE)),
            }
        }
        if cfg.rounds == 0 {
            return Err("--rounds must be at least 1".into());
        }
        if cfg.elements.iter().any(|&n| n < READ_SLICE) {
            return Err(format!("--elements must be at least {READ_SLICE}"));
        }
        // The final value must stay exact in f32: initial values are below INITIAL_MAX.
        if cfg.writers == 0 || cfg.updates == 0 || cfg.job().total() + INITIAL_MAX > 1 << 24 {
            return Err("need 1 <= writers * updates <= 2^24 - 1000 (f32 must stay exact)".into());
        }
        Ok(cfg)
    }

    fn job(&self) -> Job {
        Job {
            writers: self.writers,
            readers: self.readers,
            updates: self.updates,
        }
    }
}

/// A latency in nanoseconds, with a readable unit.
fn fmt_latency(ns: u64) -> String {
    match ns {
        0..=9_999 => format!("{ns} ns"),
        10_000..=9_999_999 => format!("{:.1} us", ns as f64 / 1e3),
        _ => format!("{:.1} ms", ns as f64 / 1e6),
    }
}

/// A rate with a readable unit.
fn fmt_rate(per_s: f64) -> String {
    match per_s {
        r if r >= 1e6 => format!("{:.2}M", r / 1e6),
        r if r >= 1e3 => format!("{:.1}k", r / 1e3),
        r => format!("{r:.0}"),
    }
}

/// Percentile of a latency histogram, or `None` if nobody read.
fn quantile(h: &Histogram<u64>, q: f64) -> Option<u64> {
    (!h.is_empty()).then(|| h.value_at_quantile(q))
}

/// The round with the median updates/s (its latencies and checks with it); a failed check
/// in any round is kept, so that the table shows it.
fn median_round(mut rounds: Vec<Outcome>) -> Outcome {
    let failed = rounds.iter().position(|o| o.check.is_err());
    if let Some(i) = failed {
        return rounds.swap_remove(i);
    }
    rounds.sort_by(|a, b| a.updates_per_s.total_cmp(&b.updates_per_s));
    rounds.swap_remove(rounds.len() / 2)
}

fn print_row(elements: usize, variant: &str, o: &Outcome) {
    let lat = |q| quantile(&o.latency, q).map_or("-".into(), fmt_latency);
    let check = match &o.check {
        Ok(()) => "ok".to_string(),
        Err(e) => format!("FAILED: {e}"),
    };
    println!(
        "{elements:>9}  {variant:<8}  {:>9.0}  {:>9.0}  {:>9}  {:>9}  {:>10}  {check}",
        o.updates_per_s,
        o.reads_per_s,
        lat(0.50),
        lat(0.99),
        lat(0.999),
    );
}

fn main() -> ExitCode {
    let cores = thread::available_parallelism().map_or(1, NonZeroUsize::get);
    let cfg = match Config::from_args(cores) {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "contention: {} writers x {} assign_add of ones, {} readers (read + sum of {READ_SLICE} elements), {cores} cores available",
        cfg.writers, cfg.updates, cfg.readers
    );
    println!();
    println!(
        "{:>9}  {:<8}  {:>9}  {:>9}  {:>9}  {:>9}  {:>10}  final value checked",
        "elements", "variant", "updates/s", "reads/s", "read p50", "read p99", "read p99.9"
    );

    let mut failed = false;
    let mut summaries = Vec::new();
    for &n in &cfg.elements {
        let initial = mvtensor_bench::initial(n);
        let (pairs, variable) = rounds(&initial, cfg.job(), cfg.rounds);
        let (mut ours, mut theirs, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for (a, b) in pairs {
            failed |= a.check.is_err() || b.check.is_err();
            ratios.push(a.updates_per_s / b.updates_per_s);
            ours.push(a);
            theirs.push(b);
        }
        let (ours, theirs) = (median_round(ours), median_round(theirs));
        print_row(n, "mvtensor", &ours);
        print_row(n, "mutex", &theirs);
        summaries.push((n, ours, theirs, ratios, variable.stats()));
    }

    println!();
    for (n, ours, theirs, ratios, stats) in &mut summaries {
        let p99 = |o: &Outcome| quantile(&o.latency, 0.99).map(|ns| ns as f64);
        let p99_ratio = match (p99(ours), p99(theirs)) {
            (Some(a), Some(b)) => format!("{:.3}x", a / b),
            _ => "-".into(),
        };
        let reads_ratio = match (ours.reads_per_s, theirs.reads_per_s) {
            (a, b) if b > 0.0 => format!("{:.2}x", a / b),
            _ => "-".into(),
        };
        ratios.sort_by(f64::total_cmp);
        println!(
            "{n:>9} elements: mvtensor/mutex  updates/s {:.2}x (median of {} rounds, {:.2}-{:.2}x), reads/s {reads_ratio}, read p99 {p99_ratio} (lower is better)",
            ratios[ratios.len() / 2],
            ratios.len(),
            ratios[0],
            ratios[ratios.len() - 1],
        );
        println!(
            "{:>9} work done, writers and readers together: mvtensor {} updates/s and {} reads/s, \
             the mutex {} updates/s and {} reads/s",
            "",
            fmt_rate(ours.updates_per_s),
            fmt_rate(ours.reads_per_s),
            fmt_rate(theirs.updates_per_s),
            fmt_rate(theirs.reads_per_s),
        );
        println!(
            "{:>9} mvtensor stats (last round): commits {}, cas_retries {}, combined_batches {} (deltas {}, max batch {}), live_versions {}",
            "", stats.commits, stats.cas_retries, stats.combined_batches, stats.combined_deltas,
            stats.max_batch, stats.live_versions,
        );
    }

    if cfg.readers > 0 && cfg.writers + cfg.readers > cores {
        // What the ratios above mean on a small machine: the threads share the cores.
        println!(
            "\n{} threads on {cores} cores: mvtensor's readers never wait, so they keep their \
             share of the cores (reads/s above) while the writers run; a mutex's readers sleep \
             whenever a writer holds it, which leaves more of the cores to its writers. \
             `--readers 0` compares the writers alone.",
            cfg.writers + cfg.readers
        );
    }

    if failed {
        eprintln!("\nFAILED: a final value or a read was wrong (see the table)");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
