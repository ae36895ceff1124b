//! The README's main job (`harness::main_job`, as `examples/contention.rs` runs it by
//! default) in the report: its rounds, and its goal.

use crate::format::rate;
use crate::goals::Goal;
use crate::harness::main_job::{self, JOB};
use crate::harness::{initial, median, size_label, Subject};
use crate::report::Report;

/// What the main job measured, per alternated round.
pub(crate) struct MainJob {
    /// (mvtensor's, the mutex's) updates/s.
    pub(crate) updates: Vec<(f64, f64)>,
    /// (mvtensor's, the mutex's) reads/s.
    pub(crate) reads: Vec<(f64, f64)>,
    /// mvtensor's deltas per combined pass, last round.
    pub(crate) batch: Option<f64>,
}

/// Runs the main job `rounds` times on each variant (its checks must pass).
pub(crate) fn measure_main_job(rounds: usize) -> MainJob {
    let (pairs, variable) = main_job::rounds(&initial(main_job::ELEMENTS), JOB, rounds);
    for (mv, mutex) in &pairs {
        assert!(
            mv.check.is_ok() && mutex.check.is_ok(),
            "the main job's check failed: {:?} {:?}",
            mv.check,
            mutex.check
        );
    }
    let both = |f: fn(&main_job::Outcome) -> f64| pairs.iter().map(|(a, b)| (f(a), f(b))).collect();
    MainJob {
        updates: both(|o| o.updates_per_s),
        reads: both(|o| o.reads_per_s),
        batch: variable.mean_batch(),
    }
}

impl Report<'_> {
    /// At 64K with 4 writers (and 2 readers), mvtensor's updates/s at least 0.9x the mutex's.
    pub(crate) fn goal_main_job(&self) -> Goal {
        let job = &self.r.main_job;
        let ratios = |pairs: &[(f64, f64)]| pairs.iter().map(|(a, b)| a / b).collect::<Vec<_>>();
        let updates = ratios(&job.updates);
        let (ratio, reads) = (median(updates.clone()), median(ratios(&job.reads)));
        let (low, high) = updates
            .iter()
            .fold((f64::MAX, 0.0f64), |(l, h), &x| (l.min(x), h.max(x)));
        // The round whose ratio is the median: its two rates go with the ratio printed.
        let (mv, mutex) = job.updates[updates.iter().position(|&x| x == ratio).expect("a round")];
        let threads = JOB.writers + JOB.readers;
        let cores = self.env.cores;
        Goal {
            name: format!(
                "The README's main job ({} f32, {} writers, {} readers)",
                size_label(main_job::ELEMENTS),
                JOB.writers,
                JOB.readers
            ),
            target: "mvtensor's updates/s ≥ 0.9x the mutex's".into(),
            measured: format!(
                "{ratio:.2}x (median of {} alternated rounds, {low:.2}-{high:.2}x; that round {} vs \
                 {} updates/s); reads/s {reads:.2}x the mutex's",
                updates.len(),
                rate(mv),
                rate(mutex),
            ),
            met: ratio >= 0.9,
            why: format!(
                "{ratio:.2}x instead of 0.9x. {} mvtensor's readers never wait, so they keep their \
                 share of the cores ({reads:.2}x the mutex's reads), where a mutex's readers sleep \
                 while a writer holds it and leave the cores to its writers; the goal counts the \
                 writers alone. The writers' own loss is the write-heavy one at 64K (combining \
                 merged {} deltas per pass in the last round); `--readers 0` compares the writers \
                 alone.",
                if threads > cores {
                    format!("{threads} threads share {cores} cores:")
                } else {
                    String::new()
                },
                job.batch.map_or("-".into(), |b| format!("{b:.2}")),
            ),
        }
    }
}
