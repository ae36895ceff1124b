//! The contention job (`mvtensor_bench::contention`, as `--bin contention` runs it by
//! default) in the report: its rounds, and its goal, measured with no more threads than
//! cores; where the largest default job ([`JOB`]) is more threads than cores, it runs too,
//! reported beside the goal and labelled as no goal.

use crate::format::rate;
use crate::goals::Goal;
use crate::report::Report;
use mvtensor_bench::contention::{self, Job, JOB};
use mvtensor_bench::{initial, median, size_label, Subject};

/// What one job measured, per alternated round.
pub(crate) struct ContentionJob {
    pub(crate) job: Job,
    /// (mvtensor's, the mutex's) updates/s.
    pub(crate) updates: Vec<(f64, f64)>,
    /// (mvtensor's, the mutex's) reads/s.
    pub(crate) reads: Vec<(f64, f64)>,
    /// mvtensor's deltas per combined pass, last round.
    pub(crate) batch: Option<f64>,
}

impl ContentionJob {
    /// The threads of the job, writers and readers together.
    fn threads(&self) -> usize {
        self.job.writers + self.job.readers
    }

    /// The median of the rounds' updates/s ratios (mvtensor ÷ the mutex), the lowest and the
    /// highest, and the median round's two rates.
    fn updates_ratio(&self) -> (f64, f64, f64, (f64, f64)) {
        let updates = ratios(&self.updates);
        let ratio = median(updates.clone());
        let (low, high) = updates
            .iter()
            .fold((f64::MAX, 0.0f64), |(l, h), &x| (l.min(x), h.max(x)));
        // The round whose ratio is the median: its two rates go with the ratio printed.
        let round = updates.iter().position(|&x| x == ratio).expect("a round");
        (ratio, low, high, self.updates[round])
    }

    /// The median of the rounds' reads/s ratios.
    fn reads_ratio(&self) -> f64 {
        median(ratios(&self.reads))
    }
}

/// `n` and `noun`, in the plural unless `n` is 1.
fn count(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

fn ratios(pairs: &[(f64, f64)]) -> Vec<f64> {
    pairs.iter().map(|(a, b)| a / b).collect()
}

/// Runs `job` `rounds` times on each variant (its checks must pass).
pub(crate) fn measure_contention(job: Job, rounds: usize) -> ContentionJob {
    let (pairs, variable) = contention::rounds(&initial(contention::ELEMENTS), job, rounds);
    for (mv, mutex) in &pairs {
        assert!(
            mv.check.is_ok() && mutex.check.is_ok(),
            "the contention job's check failed: {:?} {:?}",
            mv.check,
            mutex.check
        );
    }
    let both =
        |f: fn(&contention::Outcome) -> f64| pairs.iter().map(|(a, b)| (f(a), f(b))).collect();
    ContentionJob {
        job,
        updates: both(|o| o.updates_per_s),
        reads: both(|o| o.reads_per_s),
        batch: variable.mean_batch(),
    }
}

/// The largest default job, where it is more threads than `cores` (the goal's job is then a
/// smaller one); `None` where the goal runs it already.
pub(crate) fn oversubscribed(cores: usize) -> Option<Job> {
    (JOB.writers + JOB.readers > cores).then_some(JOB)
}

impl Report<'_> {
    /// At 64K with no more threads than cores, mvtensor's updates/s at least 0.9x the mutex's.
    pub(crate) fn goal_contention(&self) -> Goal {
        let job = &self.r.contention;
        let (ratio, low, high, (mv, mutex)) = job.updates_ratio();
        let reads = job.reads_ratio();
        let threads = job.threads();
        let cores = self.env.cores;
        let beside = self
            .r
            .contention_oversubscribed
            .as_ref()
            .map_or(String::new(), |o| {
                format!(
                    "; not a goal, {} and {} on {cores} cores (oversubscribed): updates/s \
                     {:.2}x, reads/s {:.2}x",
                    count(o.job.writers, "writer"),
                    count(o.job.readers, "reader"),
                    o.updates_ratio().0,
                    o.reads_ratio()
                )
            });
        Goal {
            name: format!(
                "The contention job ({} f32, {}, {})",
                size_label(contention::ELEMENTS),
                count(job.job.writers, "writer"),
                count(job.job.readers, "reader")
            ),
            target: "mvtensor's updates/s ≥ 0.9x the mutex's".into(),
            measured: format!(
                "{ratio:.2}x (median of {} alternated rounds, {low:.2}-{high:.2}x; that round {} vs \
                 {} updates/s); reads/s {reads:.2}x the mutex's{beside}",
                job.updates.len(),
                rate(mv),
                rate(mutex),
            ),
            met: ratio >= 0.9,
            why: format!(
                "{ratio:.2}x instead of 0.9x. {}mvtensor's readers never wait and keep their \
                 share of the cores ({reads:.2}x the mutex's reads), where the mutex's sleep; \
                 the goal counts writers, whose loss is write-heavy 64K's ({} deltas a pass; \
                 `--readers 0` runs them alone). {}",
                if threads > cores {
                    format!("{threads} threads share {cores} cores: ")
                } else {
                    String::new()
                },
                job.batch.map_or("-".into(), |b| format!("{b:.2}")),
                if threads > cores {
                    "A core per thread closes most of it (docs/benchmarks-16-cores)."
                } else {
                    "What is left is the write path's fixed cost (the cost targets)."
                },
            ),
        }
    }
}
