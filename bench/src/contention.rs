//! The contention benchmark: writers add ones to one shared f32 tensor with `assign_add`
//! while readers keep reading it, through mvtensor and through a `std::sync::Mutex<ArrayD<f32>>`
//! updated in place (the mutex's best case: on slices, the add in AVX2 where the processor
//! has it, as mvtensor's own loops are). `--bin contention` prints it; the report measures it
//! for its goal (64K, no more threads than cores: mvtensor's updates/s at least 0.9x the
//! mutex's). One driver ([`run`]) gives both the same workload, through the harness's
//! [`Subject`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mvtensor::Variable;
use ndarray::ArrayD;

use super::workloads::new_histogram;
use super::Subject;

/// Elements each read sums: the "small amount of work" a reader does on what it read.
pub const READ_SLICE: usize = 64;

/// The benchmark's tensor: 64K elements (256 KiB).
pub const ELEMENTS: usize = 1 << 16;

/// The largest default job: 4 writers of 2,000 updates each, 2 readers. [`Job::for_cores`]
/// fits it to a machine; the report also runs it as it is where that is more threads than
/// cores (an oversubscribed cell: reported, not a goal).
pub const JOB: Job = Job {
    writers: 4,
    readers: 2,
    updates: 2_000,
};

/// Rounds of each variant by default.
pub const ROUNDS: usize = 5;

/// The shape of one run: `writers` threads add ones `updates` times each, while `readers`
/// threads read until they are done.
#[derive(Debug, Clone, Copy)]
pub struct Job {
    pub writers: usize,
    pub readers: usize,
    pub updates: usize,
}

impl Job {
    /// The default on `cores` cores, for `--bin contention` and the report's goal: [`JOB`]
    /// with no more threads than cores. Up to 6 threads, a third of them readers (at least
    /// one from 2 cores on, so that reads are measured), the rest writers, which share
    /// [`JOB`]'s updates between them (a job as long as [`JOB`]).
    pub fn for_cores(cores: usize) -> Job {
        let threads = cores.clamp(1, JOB.writers + JOB.readers);
        let readers = if threads < 2 { 0 } else { (threads / 3).max(1) };
        let writers = threads - readers;
        Job {
            writers,
            readers,
            updates: JOB.total() / writers,
        }
    }

    /// Updates of all writers together.
    pub fn total(&self) -> usize {
        self.writers.saturating_mul(self.updates)
    }
}

/// What a reader does with what it read: the sum of its first [`READ_SLICE`] elements.
fn slice_sum(a: &ArrayD<f32>) -> f32 {
    let slice = a.as_slice().expect("a standard-layout tensor");
    slice[..READ_SLICE].iter().sum()
}

/// What one variant did.
pub struct Outcome {
    pub updates_per_s: f64,
    /// Reads per second, all readers together.
    pub reads_per_s: f64,
    /// Latency of reads (each [`slice_sum`] of a snapshot or under the lock), in nanoseconds, over all readers.
    pub latency: Histogram<u64>,
    /// `Err` describes what was wrong with the final value or with what readers saw.
    pub check: Result<(), String>,
}

/// What one reader saw.
struct ReaderLog {
    latency: Histogram<u64>,
    /// The sum it read last: after every writer had returned, so it must be the final one.
    last: f32,
    /// Reads that returned an older value than the reader's previous read.
    went_back: u64,
}

/// Runs `job` on `subject`, which must hold `initial`.
pub fn run<S: Subject>(subject: &S, initial: &ArrayD<f32>, job: Job) -> Outcome {
    let delta = ArrayD::<f32>::ones(initial.raw_dim());
    let start = Barrier::new(job.writers + job.readers + 1);
    let done = AtomicBool::new(false);

    let (elapsed, logs) = thread::scope(|s| {
        let writers: Vec<_> = (0..job.writers)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    // Each writer's own clock: with more threads than cores the main thread
                    // may run well after the writers begin, and a clock started there would
                    // miss their first updates.
                    let began = Instant::now();
                    for _ in 0..job.updates {
                        subject.assign_add(&delta);
                    }
                    (began, Instant::now())
                })
            })
            .collect();
        let readers: Vec<_> = (0..job.readers)
            .map(|_| s.spawn(|| read_until(subject, &start, &done)))
            .collect();

        start.wait();
        let spans: Vec<(Instant, Instant)> = writers
            .into_iter()
            .map(|w| w.join().expect("a writer panicked"))
            .collect();
        let first = spans.iter().map(|s| s.0).min().expect("a writer");
        let last = spans.iter().map(|s| s.1).max().expect("a writer");
        let elapsed = last - first;
        // Release: every writer's update happens-before the readers' last read.
        done.store(true, Ordering::Release);
        let logs: Vec<ReaderLog> = readers
            .into_iter()
            .map(|r| r.join().expect("a reader panicked"))
            .collect();
        (elapsed, logs)
    });

    let expected = initial + &(&delta * job.total() as f32);
    let mut latency = new_histogram();
    let mut check = compare(&subject.value(), &expected);
    for log in &logs {
        latency.add(&log.latency).expect("same histogram bounds");
        if check.is_ok() && log.went_back > 0 {
            check = Err(format!(
                "a reader went back in time {} times",
                log.went_back
            ));
        }
        if check.is_ok() && log.last != slice_sum(&expected) {
            check = Err(format!("a reader's last read saw {}", log.last));
        }
    }
    Outcome {
        updates_per_s: job.total() as f64 / elapsed.as_secs_f64(),
        reads_per_s: latency.len() as f64 / elapsed.as_secs_f64(),
        latency,
        check,
    }
}

/// mvtensor and the mutex, `rounds` times each, alternating which goes first: every
/// round's outcomes (mvtensor's, the mutex's) and mvtensor's variable of the last round.
pub fn rounds(
    initial: &ArrayD<f32>,
    job: Job,
    rounds: usize,
) -> (Vec<(Outcome, Outcome)>, Variable<f32>) {
    let mut last = None;
    let pairs = (0..rounds)
        .map(|round| {
            let mut mv = || {
                let variable = Variable::new(initial.clone());
                let outcome = run(&variable, initial, job);
                last = Some(variable);
                outcome
            };
            let mutex = || run(&Mutex::new(initial.clone()), initial, job);
            if round % 2 == 0 {
                let a = mv();
                (a, mutex())
            } else {
                let b = mutex();
                (mv(), b)
            }
        })
        .collect();
    (pairs, last.expect("at least one round"))
}

/// A reader: times every read until the writers are done, then reads once more.
fn read_until(subject: &impl Subject, start: &Barrier, done: &AtomicBool) -> ReaderLog {
    let mut log = ReaderLog {
        latency: new_histogram(),
        last: f32::NEG_INFINITY,
        went_back: 0,
    };
    start.wait();
    loop {
        // Acquire: pairs with the Release in `run`, so the read after it sees every update.
        let finished = done.load(Ordering::Acquire);
        let t0 = Instant::now();
        let sum = subject.read_with(slice_sum);
        log.latency.saturating_record(nanos(t0.elapsed()));
        // Elements only grow, so neither may the sum of a prefix.
        log.went_back += u64::from(sum < log.last);
        log.last = sum;
        if finished {
            return log;
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
}

/// `Ok` if `found == expected` element for element, else a description of the first mismatch.
fn compare(found: &ArrayD<f32>, expected: &ArrayD<f32>) -> Result<(), String> {
    if found.shape() != expected.shape() {
        return Err(format!("shape {:?}", found.shape()));
    }
    let mut wrong = found
        .iter()
        .zip(expected)
        .enumerate()
        .filter(|(_, (f, e))| f != e);
    match wrong.next() {
        None => Ok(()),
        Some((i, (f, e))) => Err(format!(
            "{} elements wrong, e.g. [{i}] = {f}, expected {e}",
            1 + wrong.count()
        )),
    }
}
