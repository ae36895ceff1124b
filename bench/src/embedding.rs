//! Workload 10: sparse updates of an embedding table, Hogwild's own workload.
//!
//! A table of 100,000 x 64 f32 (25 MiB); an update adds a row of ones to each of 32 rows
//! (a repeated index accumulates), drawn Zipf-distributed (exponent 1, as word frequencies
//! are) or uniformly. Variants: mvtensor's [`PagedVariable`] (`scatter_add`), a std and a
//! parking_lot `Mutex<Array2>` and a parking_lot `RwLock<Array2>` updated in place, an
//! arc-swap cell that copies the table per update (what a dense copy-on-write costs), and a
//! *racy* table with no synchronisation at all, the speed limit that gives up consistency.
//!
//! The racy variant is what the `hogwild` crate does (an `UnsafeCell` written by every
//! thread at once), written with relaxed atomic loads and stores of each element's bits:
//! the same instructions on x86, and the same lost updates, without the data race that is
//! undefined behaviour in Rust (the crate itself is deprecated and built on ndarray 0.12).
//!
//! Every run is checked: the table (all ones at the start) grows by exactly 32 x 64 per
//! update for every variant but the racy one, whose lost element updates are counted and
//! reported.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use mvtensor::{CriticalSection, PagedVariable, Variable};
use ndarray::{arr0, Array0, Array2, Ix0};

use super::costs::thread_cpu_ns;
use super::wide::add_in_place;
use super::{drive, Budget, Throughput};

pub const ROWS: usize = 100_000;
pub const WIDTH: usize = 64;
/// Rows per update.
pub const K: usize = 32;
/// Element updates per table update.
const PER_UPDATE: f64 = (K * WIDTH) as f64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Indices {
    Zipf,
    Uniform,
}

impl Indices {
    pub const ALL: [Indices; 2] = [Indices::Zipf, Indices::Uniform];
    pub fn name(self) -> &'static str {
        match self {
            Indices::Zipf => "Zipf",
            Indices::Uniform => "uniform",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EmbeddingVariant {
    Paged,
    /// The paged table and a step counter, updated together by a critical section.
    PagedSection,
    StdMutex,
    PlMutex,
    PlRwLock,
    ArcSwap,
    Racy,
}

impl EmbeddingVariant {
    pub const ALL: [EmbeddingVariant; 7] = [
        EmbeddingVariant::Paged,
        EmbeddingVariant::PagedSection,
        EmbeddingVariant::StdMutex,
        EmbeddingVariant::PlMutex,
        EmbeddingVariant::PlRwLock,
        EmbeddingVariant::ArcSwap,
        EmbeddingVariant::Racy,
    ];
    pub fn name(self) -> &'static str {
        match self {
            EmbeddingVariant::Paged => "mvtensor paged",
            EmbeddingVariant::PagedSection => "mvtensor paged + counter, in a section",
            EmbeddingVariant::StdMutex => "std Mutex",
            EmbeddingVariant::PlMutex => "parking_lot Mutex",
            EmbeddingVariant::PlRwLock => "parking_lot RwLock",
            EmbeddingVariant::ArcSwap => "arc-swap (full copy)",
            EmbeddingVariant::Racy => "racy (no sync)",
        }
    }
    pub fn is_lock(self) -> bool {
        matches!(
            self,
            EmbeddingVariant::StdMutex | EmbeddingVariant::PlMutex | EmbeddingVariant::PlRwLock
        )
    }

    /// A table of ones: written element by element, so that every page of it is touched
    /// before the run (a zeroed allocation would fault pages in under a lock's first writes).
    fn table(self) -> Box<dyn Table> {
        let init = Array2::<f32>::from_elem((ROWS, WIDTH), 1.0);
        match self {
            EmbeddingVariant::Paged => Box::new(PagedVariable::new(init).expect("2-d")),
            EmbeddingVariant::PagedSection => {
                let table = PagedVariable::new(init).expect("2-d");
                let steps = Variable::new(arr0(0i64));
                let section = CriticalSection::builder()
                    .paged(&table)
                    .resource(&steps)
                    .build()
                    .expect("fresh variables");
                Box::new(InSection {
                    table,
                    steps,
                    section,
                    one: arr0(1),
                })
            }
            EmbeddingVariant::StdMutex => Box::new(std::sync::Mutex::new(init)),
            EmbeddingVariant::PlMutex => Box::new(parking_lot::Mutex::new(init)),
            EmbeddingVariant::PlRwLock => Box::new(parking_lot::RwLock::new(init)),
            EmbeddingVariant::ArcSwap => Box::new(ArcSwap::from_pointee(init)),
            EmbeddingVariant::Racy => Box::new(
                (0..ROWS * WIDTH)
                    .map(|_| AtomicU32::new(1.0f32.to_bits()))
                    .collect::<Vec<_>>(),
            ),
        }
    }
}

/// One variant's table: add rows of ones, read rows, sum everything.
trait Table: Sync {
    fn add(&self, ids: &[usize], ones: &Array2<f32>);
    /// The rows `ids`, copied out (a reader's gather).
    fn gather(&self, ids: &[usize]) -> Array2<f32>;
    fn sum(&self) -> f64;
}

/// A lock holder's row adds, on slices, with the add at its best ([`wide`](super::wide)).
fn add_rows(t: &mut Array2<f32>, ids: &[usize], ones: &Array2<f32>) {
    let rows = ones.as_slice().expect("standard layout");
    let table = t.as_slice_mut().expect("standard layout");
    for (&id, row) in ids.iter().zip(rows.chunks_exact(WIDTH)) {
        add_in_place(&mut table[id * WIDTH..(id + 1) * WIDTH], row);
    }
}

/// A lock holder's gather, on slices: a copy of each row, as mvtensor's gather does
/// (ndarray's `select` builds a view per row and concatenates them, which costs more).
fn gather_rows(t: &Array2<f32>, ids: &[usize]) -> Array2<f32> {
    let table = t.as_slice().expect("standard layout");
    let mut rows = Vec::with_capacity(ids.len() * WIDTH);
    for &id in ids {
        rows.extend_from_slice(&table[id * WIDTH..(id + 1) * WIDTH]);
    }
    Array2::from_shape_vec((ids.len(), WIDTH), rows).expect("ids x WIDTH")
}

fn sum(t: &Array2<f32>) -> f64 {
    t.iter().map(|&x| f64::from(x)).sum()
}

impl Table for PagedVariable<f32> {
    fn add(&self, ids: &[usize], ones: &Array2<f32>) {
        self.scatter_add(ids, ones).expect("checked indices");
    }
    fn gather(&self, ids: &[usize]) -> Array2<f32> {
        let rows = self.read().gather(ids).expect("checked indices");
        rows.into_dimensionality().expect("2-d")
    }
    fn sum(&self) -> f64 {
        self.read().to_array().iter().map(|&x| f64::from(x)).sum()
    }
}

/// A trainer's step that must change the table and other state together: here a step
/// counter, in one execution (the commit installs the table pending under the batch's
/// record, then the counter, then commits both).
struct InSection {
    table: PagedVariable<f32>,
    steps: Variable<i64, Ix0>,
    section: CriticalSection,
    one: Array0<i64>,
}

impl Table for InSection {
    fn add(&self, ids: &[usize], ones: &Array2<f32>) {
        self.section
            .execute(|tx| {
                tx.scatter_add(&self.table, ids, ones)?;
                tx.assign_add(&self.steps, &self.one)
            })
            .expect("checked indices");
    }
    fn gather(&self, ids: &[usize]) -> Array2<f32> {
        Table::gather(&self.table, ids)
    }
    fn sum(&self) -> f64 {
        Table::sum(&self.table)
    }
}

impl Table for std::sync::Mutex<Array2<f32>> {
    fn add(&self, ids: &[usize], ones: &Array2<f32>) {
        add_rows(&mut self.lock().unwrap(), ids, ones);
    }
    fn gather(&self, ids: &[usize]) -> Array2<f32> {
        gather_rows(&self.lock().unwrap(), ids)
    }
    fn sum(&self) -> f64 {
        sum(&self.lock().unwrap())
    }
}

impl Table for parking_lot::Mutex<Array2<f32>> {
    fn add(&self, ids: &[usize], ones: &Array2<f32>) {
        add_rows(&mut self.lock(), ids, ones);
    }
    fn gather(&self, ids: &[usize]) -> Array2<f32> {
        gather_rows(&self.lock(), ids)
    }
    fn sum(&self) -> f64 {
        sum(&self.lock())
    }
}

impl Table for parking_lot::RwLock<Array2<f32>> {
    fn add(&self, ids: &[usize], ones: &Array2<f32>) {
        add_rows(&mut self.write(), ids, ones);
    }
    fn gather(&self, ids: &[usize]) -> Array2<f32> {
        gather_rows(&self.read(), ids)
    }
    fn sum(&self) -> f64 {
        sum(&self.read())
    }
}

impl Table for ArcSwap<Array2<f32>> {
    fn add(&self, ids: &[usize], ones: &Array2<f32>) {
        self.rcu(|current| {
            let mut next = Array2::clone(current);
            add_rows(&mut next, ids, ones);
            next
        });
    }
    fn gather(&self, ids: &[usize]) -> Array2<f32> {
        gather_rows(&self.load(), ids)
    }
    fn sum(&self) -> f64 {
        sum(&self.load())
    }
}

impl Table for Vec<AtomicU32> {
    fn add(&self, ids: &[usize], ones: &Array2<f32>) {
        for (&id, row) in ids.iter().zip(ones.rows()) {
            for (cell, &d) in self[id * WIDTH..(id + 1) * WIDTH].iter().zip(row) {
                // Relaxed load and store, no read-modify-write: Hogwild's racy add.
                let x = f32::from_bits(cell.load(Ordering::Relaxed)) + d;
                cell.store(x.to_bits(), Ordering::Relaxed);
            }
        }
    }
    fn gather(&self, ids: &[usize]) -> Array2<f32> {
        Array2::from_shape_fn((ids.len(), WIDTH), |(i, c)| {
            // Relaxed: racy by design, as Hogwild's reads; nothing is published through it.
            f32::from_bits(self[ids[i] * WIDTH + c].load(Ordering::Relaxed))
        })
    }
    fn sum(&self) -> f64 {
        self.iter()
            // Relaxed: the final sum, after the writers' join, which orders their stores.
            .map(|c| f64::from(f32::from_bits(c.load(Ordering::Relaxed))))
            .sum()
    }
}

/// Passes over the index stream before a CPU-cost measurement: enough for every variant to
/// reach its steady state. A lock's Zipf updates keep getting cheaper over the first few
/// dozen passes, as its hot rows settle in the caches, where mvtensor's paged table is level
/// from the second pass, so a shorter warm-up would flatter mvtensor.
const WARM_PASSES: usize = 40;

/// Indices per thread, drawn once before a run (so that drawing costs nothing timed).
const STREAM: usize = 1 << 16;

/// `STREAM` row indices for thread `seed`: Zipf over the rows (exponent 1), or uniform.
pub fn stream(indices: Indices, seed: u64) -> Vec<usize> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    };
    match indices {
        Indices::Uniform => (0..STREAM)
            .map(|_| ((next() * ROWS as f64) as usize).min(ROWS - 1))
            .collect(),
        Indices::Zipf => {
            let cdf: Vec<f64> = (1..=ROWS)
                .scan(0.0, |acc, r| {
                    *acc += 1.0 / r as f64;
                    Some(*acc)
                })
                .collect();
            let total = cdf[ROWS - 1];
            (0..STREAM)
                .map(|_| {
                    let u = next() * total;
                    cdf.partition_point(|&c| c < u).min(ROWS - 1)
                })
                .collect()
        }
    }
}

/// One throughput run: updates/s of every thread together, and the fraction of element
/// updates lost (0 for every variant but the racy one, whose losses are counted).
pub struct EmbeddingRun {
    pub throughput: Throughput,
    pub lost: f64,
}

/// `threads` threads update one table for `budget`.
pub fn run(
    variant: EmbeddingVariant,
    indices: Indices,
    threads: usize,
    budget: Budget,
) -> EmbeddingRun {
    let table = variant.table();
    let streams: Vec<Vec<usize>> = (0..threads)
        .map(|t| stream(indices, t as u64 + 1))
        .collect();
    // Every variant's table in its steady state first, as `cpu_costs` does: a lock's hot
    // rows cached, mvtensor's pools full. Timing from the first update would charge the
    // locks their slow early passes, which mvtensor, level from the second, does not have.
    let warm_updates = warm_up(variant, &*table, &streams[0]);
    let (elapsed, counts) = drive(threads, budget, u64::MAX, |t, ctl| {
        let ones = Array2::<f32>::ones((K, WIDTH));
        let ids = &streams[t];
        ctl.ready();
        let mut done = 0u64;
        while ctl.go(done) {
            let at = (done as usize * K) % (STREAM - K);
            table.add(&ids[at..at + K], &ones);
            done += 1;
        }
        done
    });
    let updates: u64 = counts.iter().sum();
    let expected = (ROWS * WIDTH) as f64 + (updates + warm_updates) as f64 * PER_UPDATE;
    let found = table.sum();
    let lost = (expected - found) / (updates as f64 * PER_UPDATE).max(1.0);
    if variant != EmbeddingVariant::Racy {
        assert_eq!(found, expected, "{}: LOST OR EXTRA UPDATE", variant.name());
    }
    EmbeddingRun {
        throughput: Throughput {
            ops: updates,
            elapsed,
            mean_batch: None,
        },
        lost,
    }
}

/// [`WARM_PASSES`] passes of `ids` over `table` (arc-swap, which copies 25 MiB an update:
/// 3 updates), untimed: hot rows, pools, page faults. Returns the updates made.
fn warm_up(variant: EmbeddingVariant, table: &dyn Table, ids: &[usize]) -> u64 {
    let ones = Array2::<f32>::ones((K, WIDTH));
    let warm = if variant == EmbeddingVariant::ArcSwap {
        3
    } else {
        WARM_PASSES * STREAM / K
    };
    for i in 0..warm {
        let at = (i * K) % (STREAM - K);
        table.add(&ids[at..at + K], &ones);
    }
    warm as u64
}

/// Thread CPU time of one update and of one 32-row gather, on one thread, per operation:
/// the mean over `ops` operations of each (arc-swap, which copies 25 MiB per update, does a
/// fiftieth as many updates), after a warm-up of [`WARM_PASSES`] passes over the index
/// stream, so that every variant is measured in its steady state: its hot rows cached, its
/// pools full (a shorter warm-up times a lock's first touches of cold rows, which flatters
/// mvtensor, whose cost is level from the second pass).
pub fn cpu_costs(variant: EmbeddingVariant, indices: Indices, ops: usize) -> (Duration, Duration) {
    let table = variant.table();
    let updates = if variant == EmbeddingVariant::ArcSwap {
        (ops / 50).max(3)
    } else {
        ops
    };
    let ids = stream(indices, 7);
    let ones = Array2::<f32>::ones((K, WIDTH));
    let slice = |i: usize| {
        let at = (i * K) % (STREAM - K);
        &ids[at..at + K]
    };
    warm_up(variant, &*table, &ids);
    let per_op = |n: usize, f: &dyn Fn(usize)| {
        let start = thread_cpu_ns();
        (0..n).for_each(f);
        Duration::from_nanos((thread_cpu_ns() - start) / n as u64)
    };
    let update = per_op(updates, &|i| table.add(slice(i), &ones));
    let gather = per_op(ops, &|i| {
        std::hint::black_box(table.gather(slice(i)));
    });
    (update, gather)
}
