//! Sparse Hogwild SGD on shared embedding tables: matrix factorization of a generated
//! ratings matrix, trained by 4 threads at once, on mvtensor's paged variables, on
//! mutex-guarded tables, and on racy tables with no synchronisation at all.
//!
//! ```text
//! cargo run --release --example embeddings
//! ```
//!
//! The data is generated, said plainly: 20,000 users and 5,000 items with true rank-16
//! factors; 400,000 observed ratings (the true score plus noise), users and items drawn
//! Zipf-distributed, as popular items are rated more; 20,000 held-out ratings to measure
//! the error. Each step takes 32 ratings, reads the 32 user rows and 32 item rows it needs,
//! computes their gradients and adds them back (`scatter_scaled_add`) to the two tables.
//!
//! Every table has one extra column that each update adds 1 to: at the end it counts the
//! row updates that landed, which must be exactly the number made. The racy tables show
//! what Hogwild without synchronisation loses; mvtensor and the mutex lose nothing.
//!
//! After training, mvtensor's two tables go into a `Store` and are written as one checkpoint
//! (a consistent cut of both) and read back paged: the reloaded model predicts exactly as the
//! trained one.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use mvtensor::{PagedVariable, Store};
use ndarray::{Array2, ArrayView1, Axis};

const USERS: usize = 20_000;
const ITEMS: usize = 5_000;
const RANK: usize = 16;
/// Factors plus the update-count column.
const WIDTH: usize = RANK + 1;
const RATINGS: usize = 400_000;
const HELD_OUT: usize = 20_000;
const BATCH: usize = 32;
const EPOCHS: usize = 10;
const THREADS: usize = 4;
/// A power of two: the count column, scaled by it and back, stays exact.
const LEARNING_RATE: f32 = 0.0625;
const L2: f32 = 0.01;

/// xorshift64*: reproducible data without a dependency.
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [-a, a).
    fn sym(&mut self, a: f64) -> f32 {
        ((self.unit() * 2.0 - 1.0) * a) as f32
    }
}

/// Zipf (exponent 1) over `n` ranks, by inverting the cumulative weights.
struct Zipf(Vec<f64>);

impl Zipf {
    fn new(n: usize) -> Self {
        let mut acc = 0.0;
        Zipf(
            (1..=n)
                .map(|r| {
                    acc += 1.0 / r as f64;
                    acc
                })
                .collect(),
        )
    }
    fn draw(&self, rng: &mut Rng) -> usize {
        let u = rng.unit() * self.0[self.0.len() - 1];
        self.0.partition_point(|&c| c < u).min(self.0.len() - 1)
    }
}

struct Rating {
    user: usize,
    item: usize,
    score: f32,
}

fn generate() -> (Vec<Rating>, Vec<Rating>) {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let scale = (1.0 / RANK as f64).sqrt() * 1.7;
    let users = Array2::from_shape_fn((USERS, RANK), |_| rng.sym(scale));
    let items = Array2::from_shape_fn((ITEMS, RANK), |_| rng.sym(scale));
    let (zu, zi) = (Zipf::new(USERS), Zipf::new(ITEMS));
    let mut draw = |n| -> Vec<Rating> {
        (0..n)
            .map(|_| {
                let (user, item) = (zu.draw(&mut rng), zi.draw(&mut rng));
                let truth = users.row(user).dot(&items.row(item));
                let score = truth + rng.sym(0.05);
                Rating { user, item, score }
            })
            .collect()
    };
    (draw(RATINGS), draw(HELD_OUT))
}

/// The two tables (users, items) of one variant.
trait Tables: Sync {
    /// The rows `ids` of the user (`users`) or item table.
    fn gather(&self, users: bool, ids: &[usize]) -> Array2<f32>;
    fn add(&self, users: bool, ids: &[usize], alpha: f32, rows: &Array2<f32>);
}

/// One table of one variant: read rows, add scaled rows.
trait Table: Sync {
    fn gather(&self, ids: &[usize]) -> Array2<f32>;
    fn add(&self, ids: &[usize], alpha: f32, rows: &Array2<f32>);
}

/// A user table and an item table of the same kind.
struct Pair<T>(T, T);

impl<T: Table> Tables for Pair<T> {
    fn gather(&self, users: bool, ids: &[usize]) -> Array2<f32> {
        if users { &self.0 } else { &self.1 }.gather(ids)
    }
    fn add(&self, users: bool, ids: &[usize], alpha: f32, rows: &Array2<f32>) {
        if users { &self.0 } else { &self.1 }.add(ids, alpha, rows)
    }
}

impl Table for PagedVariable<f32> {
    fn gather(&self, ids: &[usize]) -> Array2<f32> {
        let rows = PagedVariable::gather(self, ids).expect("ids in range");
        rows.into_dimensionality().expect("2-d")
    }
    fn add(&self, ids: &[usize], alpha: f32, rows: &Array2<f32>) {
        self.scatter_scaled_add(alpha, ids, rows)
            .expect("ids in range, rows of the table's width");
    }
}

impl Table for Mutex<Array2<f32>> {
    fn gather(&self, ids: &[usize]) -> Array2<f32> {
        self.lock().unwrap().select(Axis(0), ids)
    }
    fn add(&self, ids: &[usize], alpha: f32, rows: &Array2<f32>) {
        let mut table = self.lock().unwrap();
        for (&id, row) in ids.iter().zip(rows.rows()) {
            table.row_mut(id).scaled_add(alpha, &row);
        }
    }
}

/// Hogwild without synchronisation: relaxed loads and stores of each element's bits.
impl Table for Vec<AtomicU32> {
    fn gather(&self, ids: &[usize]) -> Array2<f32> {
        Array2::from_shape_fn((ids.len(), WIDTH), |(r, c)| {
            f32::from_bits(self[ids[r] * WIDTH + c].load(Ordering::Relaxed))
        })
    }
    fn add(&self, ids: &[usize], alpha: f32, rows: &Array2<f32>) {
        for (&id, row) in ids.iter().zip(rows.rows()) {
            for (cell, &d) in self[id * WIDTH..(id + 1) * WIDTH].iter().zip(row) {
                let x = f32::from_bits(cell.load(Ordering::Relaxed)) + alpha * d;
                cell.store(x.to_bits(), Ordering::Relaxed);
            }
        }
    }
}

/// Small random initial factors (the same for every variant), count column 0.
fn initial(n: usize, seed: u64) -> Array2<f32> {
    let mut rng = Rng(seed);
    Array2::from_shape_fn(
        (n, WIDTH),
        |(_, c)| if c == RANK { 0.0 } else { rng.sym(0.1) },
    )
}

fn factors(row: ArrayView1<'_, f32>) -> ArrayView1<'_, f32> {
    row.slice_move(ndarray::s![..RANK])
}

/// One SGD step over `batch`: gradients of the squared error (plus L2) for its user and item
/// rows, each with 1 in the count column, added back with `-LEARNING_RATE` (the count
/// column is scaled back to +1).
fn step(tables: &dyn Tables, batch: &[Rating]) {
    let users: Vec<usize> = batch.iter().map(|r| r.user).collect();
    let items: Vec<usize> = batch.iter().map(|r| r.item).collect();
    let (p, q) = (tables.gather(true, &users), tables.gather(false, &items));
    let mut dp = Array2::<f32>::zeros((batch.len(), WIDTH));
    let mut dq = Array2::<f32>::zeros((batch.len(), WIDTH));
    for (k, r) in batch.iter().enumerate() {
        let (pu, qi) = (factors(p.row(k)), factors(q.row(k)));
        let err = pu.dot(&qi) - r.score;
        for f in 0..RANK {
            dp[[k, f]] = err * qi[f] + L2 * pu[f];
            dq[[k, f]] = err * pu[f] + L2 * qi[f];
        }
        dp[[k, RANK]] = -1.0 / LEARNING_RATE;
        dq[[k, RANK]] = -1.0 / LEARNING_RATE;
    }
    tables.add(true, &users, -LEARNING_RATE, &dp);
    tables.add(false, &items, -LEARNING_RATE, &dq);
}

/// Root mean squared error on the held-out ratings.
fn rmse(tables: &dyn Tables, held_out: &[Rating]) -> f64 {
    let mut sum = 0.0;
    for chunk in held_out.chunks(BATCH) {
        let users: Vec<usize> = chunk.iter().map(|r| r.user).collect();
        let items: Vec<usize> = chunk.iter().map(|r| r.item).collect();
        let (p, q) = (tables.gather(true, &users), tables.gather(false, &items));
        for (k, r) in chunk.iter().enumerate() {
            let e = f64::from(factors(p.row(k)).dot(&factors(q.row(k))) - r.score);
            sum += e * e;
        }
    }
    (sum / held_out.len() as f64).sqrt()
}

/// Row updates that landed, by the count columns.
fn landed(tables: &dyn Tables) -> u64 {
    let all_users: Vec<usize> = (0..USERS).collect();
    let all_items: Vec<usize> = (0..ITEMS).collect();
    let count = |t: Array2<f32>| {
        t.column(RANK)
            .iter()
            .map(|&c| c.round() as u64)
            .sum::<u64>()
    };
    count(tables.gather(true, &all_users)) + count(tables.gather(false, &all_items))
}

/// Trains on `tables` and prints what it did; `exact` variants must land every row update.
fn train(name: &str, tables: &dyn Tables, exact: bool, ratings: &[Rating], held_out: &[Rating]) {
    let before = rmse(tables, held_out);
    let start = Instant::now();
    let shard = ratings.len().div_ceil(THREADS);
    std::thread::scope(|s| {
        for part in ratings.chunks(shard) {
            s.spawn(move || {
                for _ in 0..EPOCHS {
                    part.chunks(BATCH).for_each(|batch| step(tables, batch));
                }
            });
        }
    });
    let secs = start.elapsed().as_secs_f64();
    let made = 2 * (EPOCHS * ratings.len()) as u64;
    let got = landed(tables);
    println!(
        "{name:<22} {:>9.0} ratings/s   held-out RMSE {before:.3} -> {:.3}   row updates \
         landed {got} of {made} ({} lost)",
        (EPOCHS * ratings.len()) as f64 / secs,
        rmse(tables, held_out),
        made - got.min(made),
    );
    assert!(!exact || got == made, "{name} lost row updates");
}

/// The trained tables in a store, written as one checkpoint (a consistent cut of both, as a
/// trainer would save it while training) and read back: the reloaded tables are paged again
/// and predict exactly as the trained ones.
fn checkpoint(paged: &Pair<PagedVariable<f32>>, held_out: &[Rating]) {
    let store = Store::new();
    store.register_paged(&paged.0).expect("a new name");
    store.register_paged(&paged.1).expect("a new name");
    let bytes = store.snapshot().to_bytes().expect("a small header");
    let back = Store::load_bytes(&bytes).expect("what mvtensor wrote");
    let reloaded = Pair(
        back.get_paged::<f32>("users").expect("paged again"),
        back.get_paged::<f32>("items").expect("paged again"),
    );
    let (trained, again) = (rmse(paged, held_out), rmse(&reloaded, held_out));
    println!(
        "{:<22} both tables in one checkpoint ({:.1} MiB), reloaded paged: held-out RMSE {again:.3}",
        "",
        bytes.len() as f64 / (1024.0 * 1024.0)
    );
    assert_eq!(trained, again, "the checkpoint changed the model");
}

fn main() {
    let (ratings, held_out) = generate();
    println!(
        "matrix factorization, {USERS} users x {ITEMS} items, rank {RANK}: {RATINGS} ratings \
         (Zipf users and items), {EPOCHS} epochs of batches of {BATCH} on {THREADS} threads"
    );
    let (p, q) = (initial(USERS, 1), initial(ITEMS, 2));
    let paged = Pair(
        PagedVariable::builder(p.clone())
            .name("users")
            .build()
            .expect("2-d"),
        PagedVariable::builder(q.clone())
            .name("items")
            .build()
            .expect("2-d"),
    );
    train("mvtensor PagedVariable", &paged, true, &ratings, &held_out);
    checkpoint(&paged, &held_out);
    let locked = Pair(Mutex::new(p.clone()), Mutex::new(q.clone()));
    train("std Mutex", &locked, true, &ratings, &held_out);
    let cells = |t: &Array2<f32>| -> Vec<AtomicU32> {
        t.iter().map(|x| AtomicU32::new(x.to_bits())).collect()
    };
    let racy = Pair(cells(&p), cells(&q));
    train("racy (no sync)", &racy, false, &ratings, &held_out);
}
