//! The memory measurements: workload 6, one child process of this program per variant and
//! size; and the trainer pattern, in this process (it counts one fresh variable's
//! versions, which no other workload touches).

use std::process::{Command, ExitCode};
use std::time::Duration;

use mvtensor::Variable;
use ndarray::{ArrayD, IxDyn};

use crate::format::mib;
use crate::goals::Goal;
use crate::report::Report;
use crate::run::{BIG, MEMORY_THREADS, TRAINER_PATTERN_STEPS};
use mvtensor_bench::workloads::{Memory, MemoryRun};
use mvtensor_bench::{size_label, Variant, SIZES};

/// One variant's memory figures, as its child process reported them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MemorySummary {
    pub(crate) updates_per_s: f64,
    pub(crate) peak_bytes: Option<u64>,
    /// Resident memory over the baseline in steady state (after the first quarter).
    pub(crate) rss_p50: u64,
    pub(crate) rss_max: u64,
    pub(crate) live_p50: Option<usize>,
    pub(crate) live_max: Option<usize>,
    /// Max live versions over the whole run, warm-up included.
    pub(crate) live_max_all: Option<usize>,
}

/// Runs workload 6 for `variant` in a fresh process of this program and parses its line.
pub(crate) fn memory_of(variant: Variant, n: usize, duration: Duration) -> MemorySummary {
    let exe = std::env::current_exe().expect("the path of this program");
    let out = Command::new(exe)
        .args([
            "--memory-child",
            variant.key(),
            &n.to_string(),
            &MEMORY_THREADS.to_string(),
            &duration.as_millis().to_string(),
        ])
        .output()
        .expect("the memory child runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "memory child for {} failed: {}{}",
        variant.name(),
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("MEMORY "))
        .expect("the child prints a MEMORY line");
    let f: Vec<&str> = line.split_whitespace().collect();
    let num = |i: usize| -> Option<u64> { f.get(i).and_then(|s| s.parse().ok()) };
    MemorySummary {
        updates_per_s: f[0].parse().expect("updates/s"),
        peak_bytes: num(1),
        rss_p50: num(2).expect("rss p50"),
        rss_max: num(3).expect("rss max"),
        live_p50: num(4).map(|x| x as usize),
        live_max: num(5).map(|x| x as usize),
        live_max_all: num(6).map(|x| x as usize),
    }
}

/// The child side of [`memory_of`]: `--memory-child KEY N THREADS MILLIS`.
pub(crate) fn memory_child(args: &[String]) -> ExitCode {
    let parse = |i: usize| -> usize { args[i].parse().expect("a number") };
    let variant = Variant::from_key(&args[0]).expect("a variant key");
    let run = MemoryRun {
        n: parse(1),
        threads: parse(2),
        duration: Duration::from_millis(parse(3) as u64),
    };
    let m: Memory = variant.visit(run);
    let steady = |xs: &[u64]| -> (u64, u64) {
        let tail: Vec<u64> = xs[xs.len() / 4..].to_vec();
        let mut sorted = tail.clone();
        sorted.sort_unstable();
        (
            sorted.get(sorted.len() / 2).copied().unwrap_or(0),
            sorted.last().copied().unwrap_or(0),
        )
    };
    let (rss_p50, rss_max) = steady(&m.rss_samples);
    let live: Vec<u64> = m.live_samples.iter().map(|&x| x as u64).collect();
    let opt = |x: Option<u64>| x.map_or("-".to_string(), |x| x.to_string());
    let (live_p50, live_max, live_all) = if live.is_empty() {
        (None, None, None)
    } else {
        let (p50, max) = steady(&live);
        (Some(p50), Some(max), live.iter().max().copied())
    };
    println!(
        "MEMORY {:.1} {} {rss_p50} {rss_max} {} {} {}",
        m.updates_per_s,
        opt(m.peak_bytes),
        opt(live_p50),
        opt(live_max),
        opt(live_all)
    );
    ExitCode::SUCCESS
}

/// The trainer pattern: `threads` threads each hold `read()` of a 1K weight vector
/// while they compute a gradient from it, then add the gradient, `steps` in all (as
/// `tests/trainer_memory.rs` runs it). Returns the median and the largest count of live
/// versions seen after a step, the warm-up (the first quarter of each thread's steps) left
/// out of both.
pub(crate) fn trainer_pattern_live(threads: usize, steps: usize) -> (usize, usize) {
    let len = 1024;
    let w = Variable::new(ArrayD::<f32>::zeros(IxDyn(&[len])));
    let per_thread = steps / threads;
    let mut seen: Vec<usize> = std::thread::scope(|s| {
        let trainers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut grad = ArrayD::<f32>::zeros(IxDyn(&[len]));
                    let mut seen = Vec::with_capacity(per_thread);
                    for _ in 0..per_thread {
                        let weights = w.read(); // held across the step
                        grad.zip_mut_with(&*weights, |g, &x| *g = 1.0 - 0.0 * x);
                        w.assign_add(&grad)
                            .expect("the gradient has the weights' shape");
                        drop(weights);
                        seen.push(w.stats().live_versions);
                    }
                    seen.split_off(per_thread / 4)
                })
            })
            .collect();
        trainers
            .into_iter()
            .flat_map(|t| t.join().expect("a trainer"))
            .collect()
    });
    assert_eq!(
        w.read()[[0]],
        (per_thread * threads) as f32,
        "every step applied once"
    );
    seen.sort_unstable();
    (seen[seen.len() / 2], *seen.last().expect("steps"))
}

impl Report<'_> {
    /// Memory: at most 3 live versions per variable with no snapshot held, at most
    /// 8 in the trainer pattern, at most 2.5 resident copies in write-heavy 1M.
    pub(crate) fn goal_memory(&self) -> Goal {
        let tensor = (BIG * 4) as f64;
        let big = self.memory(BIG, Variant::Mvtensor).expect("mvtensor at 1M");
        let copies = big.rss_p50 as f64 / tensor;
        let live: Vec<(usize, usize, usize)> = SIZES
            .iter()
            .filter_map(|&n| {
                let m = self.memory(n, Variant::Mvtensor)?;
                Some((n, m.live_p50?, m.live_max?))
            })
            .collect();
        let live_max = live.iter().map(|l| l.2).max().unwrap_or(0);
        let worst_live = live.iter().max_by_key(|l| l.2).copied();
        let lock_copies = Variant::ALL
            .iter()
            .filter(|v| v.is_lock())
            .filter_map(|&v| self.memory(BIG, v))
            .map(|m| m.rss_p50 as f64 / tensor)
            .fold(0.0, f64::max);
        let arc_copies = self
            .memory(BIG, Variant::ArcSwap)
            .map_or(0.0, |m| m.rss_p50 as f64 / tensor);
        let big_live = big.live_p50.unwrap_or(0) as f64;
        let (trainer_p50, trainer_max) = self.r.trainer_live;
        let short: Vec<String> = [
            (live_max > 3).then(|| format!("up to {live_max} live versions, not ≤ 3")),
            (trainer_max > 8)
                .then(|| format!("the trainer pattern up to {trainer_max} live versions, not ≤ 8")),
            (copies > 2.5).then(|| format!("{copies:.1} resident copies at 1M, not ≤ 2.5")),
        ]
        .into_iter()
        .flatten()
        .collect();
        Goal {
            name: format!("Memory (workload 2, {MEMORY_THREADS} threads)"),
            target: format!(
                "with no snapshot held ≤ 3 live versions per variable; the trainer pattern \
                 ({MEMORY_THREADS} threads holding `read()` across a step, {TRAINER_PATTERN_STEPS} \
                 steps, 1K) ≤ 8; resident memory at 1M ≤ 2.5 copies"
            ),
            measured: format!(
                "live versions (median / max): {}; the trainer pattern {trainer_p50} / \
                 {trainer_max}; resident memory at 1M: {:.1} copies (steady median; the \
                 locks: {:.1})",
                live.iter()
                    .map(|(n, p50, max)| format!("{} {p50} / {max}", size_label(*n)))
                    .collect::<Vec<_>>()
                    .join(", "),
                copies,
                lock_copies
            ),
            met: short.is_empty(),
            why: format!(
                "{}. Live versions are the current one, pooled spares and retired ones \
                 awaiting a grace period; small ones retire in batches, about three per writing \
                 thread ({}), as in the trainer pattern. At 1M: {:.1} copies against \
                 {:.1} for the locks and {:.1} for arc-swap, {} live versions and ~{:.1} freed \
                 copies the allocator keeps. The hazard slots of design.md §13 bound them.",
                short.join("; "),
                worst_live.map_or("-".into(), |(n, _, max)| format!(
                    "up to {max} at {}, {} in all",
                    size_label(n),
                    mib((max * n * 4) as u64)
                )),
                copies,
                lock_copies,
                arc_copies,
                big_live,
                (copies - big_live).max(0.0),
            ),
        }
    }
}
