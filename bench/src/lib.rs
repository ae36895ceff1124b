//! mvtensor's benchmark harness: one [`Subject`] trait implemented by every variant, and one
//! driver per workload that takes a subject type, a thread count and a [`Budget`] and
//! returns figures. The same workload code drives every variant, in the criterion benches
//! (`benches/`), the report (`--bin report`, which writes `docs/benchmarks.md`) and the
//! contention job (`--bin contention`).
//!
//! Every driver checks its result exactly and panics if a variant lost an update, tore a
//! value or went back in time: deltas are tensors of ones and totals stay below 2^24, so
//! f32 sums are exact.

pub mod checkpoints;
pub mod contention;
pub mod costs;
pub mod embedding;
pub mod optimizer;
pub mod placement;
pub mod sections;
pub mod subjects;
pub mod train;
pub mod wide;
pub mod workloads;

// The trainer of `examples/train.rs` (the README's main job): its model, the Adam its Mutex
// twin runs (the lock variants' Adam here too) and its measurements. Compiled from the
// example's own files, so that the benchmarks measure the trainer users run; this crate
// depends on mvtensor's package, never the reverse.
#[path = "../../examples/train/adam.rs"]
pub mod adam;
#[path = "../../examples/train/measure.rs"]
pub mod measure;
#[path = "../../examples/train/wine.rs"]
pub mod wine;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use ndarray::{ArrayD, IxDyn};

pub use subjects::{Subject, Variant, Visit};

/// Tensor sizes of the dense workloads, in f32 elements: 4 KiB, 256 KiB and 4 MiB.
pub const SIZES: [usize; 3] = [1 << 10, 1 << 16, 1 << 20];

/// Thread counts of every workload.
pub const THREADS: [usize; 4] = [1, 2, 4, 8];

/// Initial values are `i % INITIAL_MAX`, not uniform, so that a misplaced element shows.
pub const INITIAL_MAX: usize = 1000;

/// Adds of ones one tensor may receive before its f32 elements stop being exact integers.
pub const EXACT_ADDS: u64 = (1 << 24) - INITIAL_MAX as u64;

/// A short name for a tensor size: `1K`, `64K`, `1M`.
pub fn size_label(n: usize) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{}M", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{}K", n >> 10),
        n => n.to_string(),
    }
}

/// The initial value of every dense workload: `[i % INITIAL_MAX]`, `n` elements.
pub fn initial(n: usize) -> ArrayD<f32> {
    ArrayD::from_shape_fn(IxDyn(&[n]), |i| (i[0] % INITIAL_MAX) as f32)
}

/// A tensor of ones, the delta of every dense write.
pub fn ones(n: usize) -> ArrayD<f32> {
    ArrayD::ones(IxDyn(&[n]))
}

/// How long each thread of a run works.
#[derive(Debug, Clone, Copy)]
pub enum Budget {
    /// Exactly this many operations per thread (criterion's `iter_custom`).
    Ops(u64),
    /// Until this much wall time has passed (the report).
    Time(Duration),
}

/// What a worker thread asks while it runs: may it do operation number `done`?
pub struct Ctl<'a> {
    budget: Budget,
    /// Operations per thread beyond which the exact check could fail.
    cap: u64,
    stop: &'a AtomicBool,
    start: &'a Barrier,
    /// When the first thread started its timed loop.
    first_start: &'a Mutex<Option<Instant>>,
}

impl Ctl<'_> {
    /// Waits for every thread (and the timer) to be ready: call it once, after the
    /// thread's own setup (allocating its delta), right before the timed loop.
    pub fn ready(&self) {
        self.start.wait();
        let now = Instant::now();
        let mut first = self.first_start.lock().unwrap();
        *first = Some(first.map_or(now, |f| f.min(now)));
    }

    /// Whether the thread, having done `done` operations, should do another.
    #[inline]
    pub fn go(&self, done: u64) -> bool {
        done < self.cap
            && match self.budget {
                Budget::Ops(n) => done < n,
                // Relaxed: a stop flag; nothing is published through it.
                Budget::Time(_) => !self.stop.load(Ordering::Relaxed),
            }
    }
}

/// Runs `body(thread_index, ctl)` on `threads` threads. Each body sets itself up, calls
/// `ctl.ready()`, then works while `ctl.go(done)`. Returns the wall time from the first
/// thread's start to the last thread's end, and each thread's result.
///
/// The workers take their own timestamps: with more threads than cores the coordinating
/// thread may run only well after the workers have started, and a clock started there
/// would miss their first operations.
///
/// `cap` bounds the operations of one thread (for the exact f32 check); with
/// [`Budget::Ops`] asking for more is a bug in the caller, so it panics.
pub fn drive<T: Send>(
    threads: usize,
    budget: Budget,
    cap: u64,
    body: impl Fn(usize, &Ctl<'_>) -> T + Sync,
) -> (Duration, Vec<T>) {
    if let Budget::Ops(n) = budget {
        assert!(
            n <= cap,
            "{n} operations per thread would break the exact f32 check (at most {cap})"
        );
    }
    let stop = AtomicBool::new(false);
    let start = Barrier::new(threads + 1);
    let first_start = Mutex::new(None);
    let ctl = Ctl {
        budget,
        cap,
        stop: &stop,
        start: &start,
        first_start: &first_start,
    };
    thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (ctl, body) = (&ctl, &body);
                s.spawn(move || {
                    let out = body(t, ctl);
                    (out, Instant::now())
                })
            })
            .collect();
        start.wait();
        if let Budget::Time(d) = budget {
            thread::sleep(d);
            // Relaxed: a stop flag; the workers' results come back through their join.
            stop.store(true, Ordering::Relaxed);
        }
        let (results, ends): (Vec<T>, Vec<Instant>) = handles
            .into_iter()
            .map(|h| h.join().expect("a worker thread panicked"))
            .unzip();
        let first = first_start
            .lock()
            .unwrap()
            .expect("every worker calls ctl.ready()");
        let last = ends.into_iter().max().expect("at least one thread");
        (last.duration_since(first), results)
    })
}

/// Panics unless `found == init + adds` element for element, naming the variant.
pub fn check_dense(variant: &str, found: &ArrayD<f32>, init: &ArrayD<f32>, adds: u64) {
    assert!(adds <= EXACT_ADDS, "{adds} adds: f32 is no longer exact");
    assert_eq!(found.shape(), init.shape(), "{variant}: the shape changed");
    let mut wrong = found
        .iter()
        .zip(init)
        .enumerate()
        .filter(|(_, (&f, &i))| f != i + adds as f32);
    if let Some((i, (f, e))) = wrong.next() {
        panic!(
            "{variant}: LOST OR EXTRA UPDATE: {} elements wrong, e.g. [{i}] = {f}, expected {} ({adds} adds of ones)",
            1 + wrong.count(),
            e + adds as f32
        );
    }
}

/// Throughput of one run.
#[derive(Debug, Clone, Copy)]
pub struct Throughput {
    /// Operations of every thread together (reads + writes, updates, steps...).
    pub ops: u64,
    pub elapsed: Duration,
    /// mvtensor only: deltas per combined pass (1.0 = no two updates ever overlapped).
    pub mean_batch: Option<f64>,
}

impl Throughput {
    pub fn per_s(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }
}

/// Elapsed time of `iters` operations per thread run in chunks small enough for the exact
/// check (criterion's `iter_custom` may ask for more than one tensor can count exactly).
pub fn chunked(iters: u64, cap: u64, mut run: impl FnMut(u64) -> Duration) -> Duration {
    let mut left = iters;
    let mut total = Duration::ZERO;
    while left > 0 {
        let n = left.min(cap);
        total += run(n);
        left -= n;
    }
    total
}

/// The median of some figures (the report runs every cell a few times, interleaved). Sorted
/// by `total_cmp`, so a NaN sorts last instead of panicking.
pub fn median(mut xs: Vec<f64>) -> f64 {
    assert!(!xs.is_empty());
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}
