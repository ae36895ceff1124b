//! The dense workloads (1 to 4, and 6: memory) and the bandwidth baseline.
//! Each is one generic function over [`Subject`], plus a [`Visit`] value that calls it.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use ndarray::{ArrayD, IxDyn};

use super::placement::{placed, tensor_of};
use super::subjects::read_work;
use super::{check_dense, drive, initial, ones, Budget, Subject, Throughput, Visit, EXACT_ADDS};
use crate::measure::status_bytes;
pub use crate::measure::{new_histogram, resident_bytes};

/// In the read-mostly workload every `WRITE_EVERY`-th operation of a thread is an
/// `assign_add`, the rest are reads: 99% reads, 1% writes.
pub const WRITE_EVERY: u64 = 100;

/// The dense workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dense {
    /// 99% `read_with(sum)`, 1% `assign_add(ones)`.
    ReadMostly,
    /// Every operation is an `assign_add(ones)`.
    WriteHeavy,
    /// Every operation is a trainer step: read, gradient, apply.
    TrainerStep,
}

impl Dense {
    pub const ALL: [Dense; 3] = [Dense::ReadMostly, Dense::WriteHeavy, Dense::TrainerStep];

    pub fn key(self) -> &'static str {
        match self {
            Dense::ReadMostly => "read_mostly",
            Dense::WriteHeavy => "write_heavy",
            Dense::TrainerStep => "trainer_step",
        }
    }

    /// The most operations one thread may do while `threads` threads run (each write adds
    /// one to every element, and the sum must stay exact in f32).
    pub fn cap(self, threads: usize) -> u64 {
        let adds = EXACT_ADDS / threads as u64;
        match self {
            Dense::ReadMostly => adds * WRITE_EVERY,
            Dense::WriteHeavy | Dense::TrainerStep => adds,
        }
    }

    /// Runs this workload on `S`: `threads` threads on a tensor of `n` f32.
    pub fn run<S: Subject>(self, n: usize, threads: usize, budget: Budget) -> Throughput {
        match self {
            Dense::ReadMostly => read_mostly::<S>(n, threads, budget),
            Dense::WriteHeavy => write_heavy::<S>(n, threads, budget),
            Dense::TrainerStep => trainer_step::<S>(n, threads, budget),
        }
    }
}

/// A dense workload cell, as a [`Visit`]: `variant.visit(DenseRun { .. })`.
#[derive(Debug, Clone, Copy)]
pub struct DenseRun {
    pub workload: Dense,
    pub n: usize,
    pub threads: usize,
    pub budget: Budget,
}

impl Visit for DenseRun {
    type Out = Throughput;
    fn visit<S: Subject>(self) -> Throughput {
        self.workload.run::<S>(self.n, self.threads, self.budget)
    }
}

/// What a reading thread saw; checked after the run.
#[derive(Debug, Default)]
struct ReadLog {
    /// Adds seen by the previous read (on element 0).
    last: f32,
    /// Reads whose first and last elements showed different numbers of adds.
    torn: u64,
    /// Reads that showed fewer adds than the thread's previous read.
    went_back: u64,
    /// The sums, so that the reads are not optimised away.
    sink: f32,
}

impl ReadLog {
    fn saw(&mut self, (sum, first, last): (f32, f32, f32)) {
        self.torn += u64::from(first != last);
        self.went_back += u64::from(first < self.last);
        self.last = first;
        self.sink += sum;
    }

    fn check(&self, variant: &str) {
        black_box(self.sink);
        assert_eq!(self.torn, 0, "{variant}: TORN READS: {} reads", self.torn);
        assert_eq!(
            self.went_back, 0,
            "{variant}: READS WENT BACK IN TIME: {} reads",
            self.went_back
        );
    }
}

/// One thread's account of a run.
#[derive(Debug, Default)]
struct ThreadLog {
    ops: u64,
    adds: u64,
    reads: ReadLog,
    latency: Option<Histogram<u64>>,
}

fn deltas(n: usize, threads: usize) -> Vec<ArrayD<f32>> {
    (0..threads).map(|_| ones(n)).collect()
}

/// Workload 1: every thread reads (a sum over the whole snapshot) 99 times and adds ones
/// once, per 100 operations. Operations per second, reads and writes together.
pub fn read_mostly<S: Subject>(n: usize, threads: usize, budget: Budget) -> Throughput {
    let init = initial(n);
    let subject = S::new(init.clone());
    let deltas = deltas(n, threads);
    let (elapsed, logs) = drive(threads, budget, Dense::ReadMostly.cap(threads), |t, ctl| {
        let mut log = ThreadLog::default();
        ctl.ready();
        while ctl.go(log.ops) {
            if log.ops % WRITE_EVERY == WRITE_EVERY - 1 {
                subject.assign_add(&deltas[t]);
                log.adds += 1;
            } else {
                log.reads.saw(subject.read_with(read_work));
            }
            log.ops += 1;
        }
        log
    });
    finish(&subject, &init, elapsed, &logs)
}

/// Workload 2: every thread adds tensors of ones, nothing else. Updates per second.
pub fn write_heavy<S: Subject>(n: usize, threads: usize, budget: Budget) -> Throughput {
    let init = initial(n);
    let subject = S::new(init.clone());
    let deltas = deltas(n, threads);
    let (elapsed, logs) = write_loop(&subject, &deltas, budget);
    finish(&subject, &init, elapsed, &logs)
}

fn write_loop<S: Subject>(
    subject: &S,
    deltas: &[ArrayD<f32>],
    budget: Budget,
) -> (Duration, Vec<ThreadLog>) {
    let threads = deltas.len();
    drive(threads, budget, Dense::WriteHeavy.cap(threads), |t, ctl| {
        let mut log = ThreadLog::default();
        ctl.ready();
        while ctl.go(log.ops) {
            subject.assign_add(&deltas[t]);
            log.ops += 1;
        }
        log.adds = log.ops;
        log
    })
}

/// Workload 3: every thread runs trainer steps: read the parameters, compute a gradient of
/// the same size ([`gradient`](super::subjects::gradient)), apply it. Steps per second.
pub fn trainer_step<S: Subject>(n: usize, threads: usize, budget: Budget) -> Throughput {
    let init = initial(n);
    let subject = S::new(init.clone());
    let (elapsed, logs) = drive(
        threads,
        budget,
        Dense::TrainerStep.cap(threads),
        |_, ctl| {
            // Stored to while the tensor is read, and read while the tensor is stored to.
            let t = [tensor_of(&subject)];
            let zeros = || ArrayD::<f32>::zeros(IxDyn(&[n]));
            let mut grad = placed(zeros, ArrayD::as_ptr, &t, &t);
            let mut log = ThreadLog::default();
            ctl.ready();
            while ctl.go(log.ops) {
                subject.step(&mut grad);
                log.ops += 1;
            }
            log.adds = log.ops;
            log
        },
    );
    finish(&subject, &init, elapsed, &logs)
}

/// Checks the final value and every reader's log; returns the throughput.
fn finish<S: Subject>(
    subject: &S,
    init: &ArrayD<f32>,
    elapsed: Duration,
    logs: &[ThreadLog],
) -> Throughput {
    let adds = logs.iter().map(|l| l.adds).sum();
    check_dense(S::NAME, &subject.value(), init, adds);
    for log in logs {
        log.reads.check(S::NAME);
    }
    Throughput {
        ops: logs.iter().map(|l| l.ops).sum(),
        elapsed,
        mean_batch: subject.mean_batch(),
    }
}

/// Read latency under writes (workload 4).
#[derive(Debug, Clone)]
pub struct Latency {
    /// Nanoseconds of each `read_with(sum)` call, all readers together.
    pub hist: Histogram<u64>,
    pub reads_per_s: f64,
    pub updates_per_s: f64,
}

impl Latency {
    /// The latency at quantile `q` (0.5, 0.99, 0.999), in nanoseconds.
    pub fn at(&self, q: f64) -> u64 {
        self.hist.value_at_quantile(q)
    }

    /// Adds another run's figures (the report runs each cell in a few interleaved rounds).
    pub fn merge(&mut self, other: &Latency, rounds: f64) {
        self.hist.add(&other.hist).expect("same bounds");
        self.reads_per_s += other.reads_per_s / rounds;
        self.updates_per_s += other.updates_per_s / rounds;
    }

    pub fn empty() -> Latency {
        Latency {
            hist: new_histogram(),
            reads_per_s: 0.0,
            updates_per_s: 0.0,
        }
    }
}

/// Workload 4: `writers` threads add ones to a tensor of `n` f32 while `readers` threads
/// time each `read()` + sum over the snapshot.
pub fn read_latency<S: Subject>(
    n: usize,
    writers: usize,
    readers: usize,
    budget: Budget,
) -> Latency {
    let init = initial(n);
    let subject = S::new(init.clone());
    let deltas = deltas(n, writers);
    let (elapsed, logs) = drive(
        writers + readers,
        budget,
        EXACT_ADDS / writers as u64,
        |t, ctl| {
            let mut log = ThreadLog::default();
            if t < writers {
                ctl.ready();
                while ctl.go(log.ops) {
                    subject.assign_add(&deltas[t]);
                    log.ops += 1;
                }
                log.adds = log.ops;
            } else {
                let mut hist = new_histogram();
                ctl.ready();
                while ctl.go(log.ops) {
                    let t0 = Instant::now();
                    let seen = subject.read_with(read_work);
                    hist.saturating_record(nanos(t0.elapsed()));
                    log.reads.saw(seen);
                    log.ops += 1;
                }
                log.latency = Some(hist);
            }
            log
        },
    );
    finish(&subject, &init, elapsed, &logs);
    let mut hist = new_histogram();
    for h in logs.iter().filter_map(|l| l.latency.as_ref()) {
        hist.add(h).expect("same bounds");
    }
    let secs = elapsed.as_secs_f64();
    let updates: u64 = logs.iter().map(|l| l.adds).sum();
    Latency {
        reads_per_s: hist.len() as f64 / secs,
        updates_per_s: updates as f64 / secs,
        hist,
    }
}

/// Workload 4 as a [`Visit`].
#[derive(Debug, Clone, Copy)]
pub struct LatencyRun {
    pub n: usize,
    pub writers: usize,
    pub readers: usize,
    pub budget: Budget,
}

impl Visit for LatencyRun {
    type Out = Latency;
    fn visit<S: Subject>(self) -> Latency {
        read_latency::<S>(self.n, self.writers, self.readers, self.budget)
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
}

/// Memory of workload 2 (workload 6). Byte figures are resident memory above what the
/// process held before the subject was created (the deltas were already allocated).
#[derive(Debug, Clone)]
pub struct Memory {
    pub updates_per_s: f64,
    /// The kernel's peak resident set (`VmHWM`, reset just before), minus the baseline;
    /// `None` where the peak cannot be reset.
    pub peak_bytes: Option<u64>,
    /// Sampled resident memory over the baseline, every millisecond or so.
    pub rss_samples: Vec<u64>,
    /// Sampled `live_copies()` (mvtensor only; empty for the others).
    pub live_samples: Vec<usize>,
}

/// Workload 6: workload 2 on one tensor of `n` f32 with `threads` writers, sampling resident
/// memory (and mvtensor's live versions) meanwhile. Meant to run alone in its process.
pub fn memory<S: Subject>(n: usize, threads: usize, duration: Duration) -> Memory {
    let init = initial(n);
    let deltas = deltas(n, threads);
    let mut rss_samples = Vec::with_capacity(1 << 16);
    let mut live_samples = Vec::with_capacity(1 << 16);
    let base = resident_bytes().unwrap_or(0);
    let peak_reset = reset_peak_resident();
    let subject = S::new(init.clone());
    let done = AtomicBool::new(false);
    let (elapsed, logs) = thread::scope(|s| {
        s.spawn(|| {
            // Relaxed: a stop flag.
            while !done.load(Ordering::Relaxed) {
                if let Some(rss) = resident_bytes() {
                    rss_samples.push(rss.saturating_sub(base));
                }
                if let Some(live) = subject.live_copies() {
                    live_samples.push(live);
                }
                thread::sleep(Duration::from_millis(1));
            }
        });
        let out = write_loop(&subject, &deltas, Budget::Time(duration));
        // Relaxed: a stop flag; the samples come back through the scope's join.
        done.store(true, Ordering::Relaxed);
        out
    });
    let peak_bytes = peak_reset
        .then(peak_resident_bytes)
        .flatten()
        .map(|p| p.saturating_sub(base));
    let t = finish(&subject, &init, elapsed, &logs);
    Memory {
        updates_per_s: t.per_s(),
        peak_bytes,
        rss_samples,
        live_samples,
    }
}

/// Workload 6 as a [`Visit`].
#[derive(Debug, Clone, Copy)]
pub struct MemoryRun {
    pub n: usize,
    pub threads: usize,
    pub duration: Duration,
}

impl Visit for MemoryRun {
    type Out = Memory;
    fn visit<S: Subject>(self) -> Memory {
        memory::<S>(self.n, self.threads, self.duration)
    }
}

/// This process's peak resident memory since start or the last reset.
pub fn peak_resident_bytes() -> Option<u64> {
    status_bytes("VmHWM:")
}

/// Resets the kernel's peak-resident-memory mark (Linux 4.0+); false if it could not.
pub fn reset_peak_resident() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The memory-bandwidth baseline: `c = a + b` over `n` f32 (split evenly over `threads`
/// threads), repeated for `duration`. GB/s, counting three arrays of traffic per pass.
pub fn bandwidth(n: usize, threads: usize, duration: Duration) -> f64 {
    let (elapsed, bytes) = drive(threads, Budget::Time(duration), u64::MAX, |t, ctl| {
        let part = n / threads + usize::from(t < n % threads);
        let a = ArrayD::<f32>::from_elem(IxDyn(&[part]), 1.0);
        let b = ArrayD::<f32>::from_elem(IxDyn(&[part]), 2.0);
        let mut c = ArrayD::<f32>::zeros(IxDyn(&[part]));
        let mut passes = 0;
        ctl.ready();
        while ctl.go(passes) {
            // In AVX2 where the processor has it, as every variant's add: a narrower loop
            // here would put the bound below what the locks' own adds reach.
            super::wide::add_out_of_place(
                c.as_slice_mut().expect("standard layout"),
                a.as_slice().expect("standard layout"),
                b.as_slice().expect("standard layout"),
            );
            black_box(&mut c);
            passes += 1;
        }
        assert!(c.iter().all(|&x| x == 3.0), "c = a + b is wrong");
        passes * part as u64 * 3 * std::mem::size_of::<f32>() as u64
    });
    bytes.iter().sum::<u64>() as f64 / elapsed.as_secs_f64() / 1e9
}
