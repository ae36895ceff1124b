//! The main job: a trainer on real data, on mvtensor and on its `Mutex` twin, side by side.
//! An MLP (11 -> 32 tanh -> 1, 417 parameters) learns the quality of the 1,599 red wines of
//! the UCI wine-quality data (as `linfa-datasets` ships it) with Adam.
//!
//! Both sides run the same pipeline: a producer thread shuffles the wines each epoch and
//! feeds batches of 32 through a `TensorQueue`; each trainer thread takes a batch, reads the
//! parameters, computes the gradient and applies Adam. What differs is the shared state:
//!
//! * mvtensor (below): the four parameter tensors and Adam's state packed in one variable
//!   (`optim::Packed`, built by the optimizer). A step reads one snapshot (wait-free) and
//!   applies Adam to every tensor in one execution; `Checkpoints::every` saves the store
//!   from a background thread while the trainers run.
//! * `parking_lot::Mutex` (`train/mutex.rs`): parameters and Adam's state behind one lock.
//!   A step copies the parameters out under the lock, computes the gradient without it and
//!   applies Adam under it again; a background thread locks, clones and writes the same
//!   kind of safetensors file.
//!
//! Rounds alternate which side goes first, each side runs without and then with background
//! checkpoints, and the table shows each figure's median over the rounds: steps/s, the time
//! until the loss over all wines reaches the target, the p99 of a step (read, gradient,
//! Adam; not the wait for a batch) without and with checkpoints, and the largest resident
//! memory (VmRSS) sampled while training (both sides run in this one process, so it
//! includes the data and the program). A run fails (non-zero exit) if a side lost or
//! repeated a step.
//!
//! Defaults: one trainer thread per core, at most 4; 5 rounds of 400 epochs (19,600
//! steps) a run; a target loss of 0.32 (mean squared error; the quality's variance is ~0.65);
//! checkpoints every 50 ms, so that a run of a second or so writes several.
//!
//! ```text
//! cargo run --release --example train [-- --threads N --rounds K --epochs E --target L --checkpoint-ms M]
//! ```

#[path = "train/adam.rs"]
mod adam;
#[path = "train/measure.rs"]
mod measure;
#[path = "train/mutex.rs"]
mod mutex;
#[path = "train/wine.rs"]
mod wine;

use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mvtensor::checkpoint::Checkpoints;
use mvtensor::optim::{Optimizer, Packed};
use mvtensor::queue::TensorQueue;
use mvtensor::Store;
use ndarray::{Array2, Axis, Ix1, Ix2};

use measure::{new_histogram, resident_bytes};
use wine::{init, loss_and_grads, wines, Grads, BATCH, FEATURES};

type Fallible<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Adam's learning rate on both sides: the Mutex side's Adam (`train/adam.rs`) has this rate
/// and mvtensor's default betas and epsilon built in.
const LR: f32 = 1e-3;

/// Stops a side's background checkpoints and returns how many it wrote.
type Stop = Box<dyn FnOnce() -> Fallible<usize>>;

/// One side of the comparison: the shared model and what a trainer does with it.
trait Side: Sync {
    const NAME: &'static str;
    /// One training step on `batch`: read the parameters, compute the gradient, apply Adam.
    fn step(&self, batch: &Array2<f32>) -> Fallible<()>;
    /// The loss over `data` at the current parameters (one consistent read).
    fn loss(&self, data: &Array2<f32>) -> Fallible<f32>;
    /// Steps applied so far.
    fn steps(&self) -> i64;
    /// Starts saving checkpoints into `dir` every `interval`, from a background thread.
    fn checkpoint_every(&self, dir: &Path, interval: Duration) -> Fallible<Stop>;
}

/// The mvtensor trainer: the model and Adam's state in one variable of a store.
struct Mvtensor {
    store: Arc<Store>,
    model: Packed<f32>,
    adam: Optimizer<f32>,
}

impl Mvtensor {
    fn new() -> Fallible<Self> {
        let (w1, b1, w2, b2) = init();
        let (model, adam) = Optimizer::adam(LR).name("adam").build_packed(
            Packed::builder()
                .name("mlp")
                .tensor("w1", &w1)
                .tensor("b1", &b1)
                .tensor("w2", &w2)
                .tensor("b2", &b2),
        )?;
        let store = Arc::new(Store::new());
        store.register(model.variable())?;
        Ok(Self { store, model, adam })
    }

    /// The loss over `rows` and its gradients, from one snapshot of every tensor.
    fn loss_and_grads(&self, rows: &Array2<f32>) -> Fallible<(f32, Grads)> {
        let p = self.model.read();
        let (w1, b1) = (p.get::<Ix2>(0)?, p.get::<Ix1>(1)?);
        let (w2, b2) = (p.get::<Ix2>(2)?, p.get::<Ix1>(3)?);
        Ok(loss_and_grads((&w1, &b1, &w2, &b2), rows))
    }
}

impl Side for Mvtensor {
    const NAME: &'static str = "mvtensor";

    fn step(&self, batch: &Array2<f32>) -> Fallible<()> {
        let (_, g) = self.loss_and_grads(batch)?;
        self.adam.step((&g.0, &g.1, &g.2, &g.3))?; // every tensor at once, no lost step
        Ok(())
    }

    fn loss(&self, data: &Array2<f32>) -> Fallible<f32> {
        Ok(self.loss_and_grads(data)?.0)
    }

    fn steps(&self) -> i64 {
        self.adam.steps()
    }

    fn checkpoint_every(&self, dir: &Path, interval: Duration) -> Fallible<Stop> {
        let background = Checkpoints::new(dir, 2)?.every(Arc::clone(&self.store), interval)?;
        Ok(Box::new(move || {
            let progress = background.stop();
            match progress.failed {
                0 => Ok(progress.saved),
                n => Err(format!("{n} background checkpoints failed").into()),
            }
        }))
    }
}

/// What to run, from the command line.
struct Config {
    threads: usize,
    rounds: usize,
    epochs: usize,
    target: f32,
    interval: Duration,
}

impl Config {
    const USAGE: &'static str =
        "usage: train [--threads N] [--rounds K] [--epochs E] [--target L] [--checkpoint-ms M]";

    fn from_args(cores: usize) -> Result<Self, String> {
        let mut cfg = Config {
            threads: cores.min(4),
            rounds: 5,
            epochs: 400,
            target: 0.32,
            interval: Duration::from_millis(50),
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            if flag == "-h" || flag == "--help" {
                println!("{}", Self::USAGE);
                std::process::exit(0);
            }
            let value = args.next().ok_or(format!("{flag} needs a value"))?;
            let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
            let count = || match value.parse::<usize>() {
                Ok(0) => Err(bad(&"must be at least 1")),
                Ok(n) => Ok(n),
                Err(e) => Err(bad(&e)),
            };
            match flag.as_str() {
                "--threads" => cfg.threads = count()?,
                "--rounds" => cfg.rounds = count()?,
                "--epochs" => cfg.epochs = count()?,
                "--checkpoint-ms" => cfg.interval = Duration::from_millis(count()? as u64),
                "--target" => cfg.target = value.parse().map_err(|e| bad(&e))?,
                _ => return Err(format!("unknown argument {flag}\n{}", Self::USAGE)),
            }
        }
        Ok(cfg)
    }
}

/// What one run measured.
struct Run {
    steps_per_s: f64,
    /// Seconds until the loss over all wines was at most the target, if it got there.
    to_target: Option<f64>,
    /// Step times, nanoseconds, over every trainer.
    step_ns: Histogram<u64>,
    /// The largest VmRSS sampled while training, bytes.
    resident: Option<u64>,
    loss: f32,
    saved: usize,
}

/// Trains a fresh `side` for `cfg.epochs` epochs of `data`, with background checkpoints
/// into `dir` if `checkpoints`.
fn run<S: Side>(side: &S, data: &Array2<f32>, cfg: &Config, checkpoints: bool) -> Fallible<Run> {
    let dir = std::env::temp_dir().join(format!("mvtensor-train-{}", std::process::id()));
    let stop = if checkpoints {
        Some(side.checkpoint_every(&dir, cfg.interval)?)
    } else {
        None
    };
    let batches = TensorQueue::<f32>::new("batches", 64, &[BATCH, FEATURES + 1])?;
    let per_epoch = data.nrows() / BATCH;
    let (mut to_target, mut resident) = (None, resident_bytes());
    let start = Instant::now();
    let step_ns = thread::scope(|s| -> Fallible<Histogram<u64>> {
        s.spawn(|| {
            let _close = batches.close_on_panic();
            let mut order: Vec<usize> = (0..data.nrows()).collect();
            let mut seed = 0x9e37_79b9_7f4a_7c15u64; // the same batches for both sides
            for _ in 0..cfg.epochs {
                for i in (1..order.len()).rev() {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    order.swap(i, (seed % (i as u64 + 1)) as usize);
                }
                for chunk in order.chunks_exact(BATCH) {
                    if batches.enqueue(data.select(Axis(0), chunk)).is_err() {
                        return; // closed by a trainer that failed
                    }
                }
            }
            batches.close(false);
        });
        let trainers: Vec<_> = (0..cfg.threads)
            .map(|_| {
                s.spawn(|| -> Fallible<Histogram<u64>> {
                    let _close = batches.close_on_panic();
                    let mut times = new_histogram();
                    while let Ok(batch) = batches.dequeue() {
                        let batch = batch.into_dimensionality()?; // the queue's shape: 2-d
                        let t0 = Instant::now();
                        if let Err(e) = side.step(&batch) {
                            batches.close(true); // stops the producer and the others
                            return Err(e);
                        }
                        times.saturating_record(t0.elapsed().as_nanos() as u64);
                    }
                    Ok(times)
                })
            })
            .collect();
        // Samples the loss and resident memory while the trainers run.
        while !trainers.iter().all(|t| t.is_finished()) {
            if to_target.is_none() && side.loss(data)? <= cfg.target {
                to_target = Some(start.elapsed().as_secs_f64());
            }
            resident = resident.max(resident_bytes());
            thread::sleep(Duration::from_millis(10));
        }
        let mut all = new_histogram();
        for t in trainers {
            all.add(t.join().expect("a trainer panicked")?)?;
        }
        Ok(all)
    })?;
    let seconds = start.elapsed().as_secs_f64();
    let saved = stop.map_or(Ok(0), |stop| stop())?;
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    let expected = (cfg.epochs * per_epoch) as i64;
    if side.steps() != expected {
        return Err(format!("{}: {} steps for {expected} batches", S::NAME, side.steps()).into());
    }
    let loss = side.loss(data)?;
    Ok(Run {
        steps_per_s: expected as f64 / seconds,
        to_target: to_target.or((loss <= cfg.target).then_some(seconds)),
        step_ns,
        resident,
        loss,
        saved,
    })
}

/// Both runs of one side (without and with checkpoints), each on a fresh model.
fn both<S: Side>(new: fn() -> Fallible<S>, data: &Array2<f32>, cfg: &Config) -> Fallible<[Run; 2]> {
    Ok([
        run(&new()?, data, cfg, false)?,
        run(&new()?, data, cfg, true)?,
    ])
}

/// The median of `xs` (`None` if any is `None`: a side that missed the target in a round).
fn median(xs: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let mut xs: Vec<f64> = xs.collect::<Option<_>>()?;
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied()
}

fn main() -> Fallible<()> {
    let cores = thread::available_parallelism().map_or(1, NonZeroUsize::get);
    let cfg = match Config::from_args(cores) {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let data = wines();
    println!(
        "train: an MLP (11-32-1) on {} wines, Adam (lr {LR}), batches of {BATCH} through a queue; \
         {} trainer threads ({cores} cores), {} epochs ({} steps) a run; the medians of {} \
         alternated rounds",
        data.nrows(),
        cfg.threads,
        cfg.epochs,
        cfg.epochs * (data.nrows() / BATCH),
        cfg.rounds
    );
    let mut rounds: Vec<[[Run; 2]; 2]> = Vec::new();
    for round in 0..cfg.rounds {
        let pair = if round % 2 == 0 {
            let ours = both(Mvtensor::new, &data, &cfg)?;
            [ours, both(mutex::Mutex::new, &data, &cfg)?]
        } else {
            let theirs = both(mutex::Mutex::new, &data, &cfg)?;
            [both(Mvtensor::new, &data, &cfg)?, theirs]
        };
        rounds.push(pair);
    }
    let figure = |side: usize, f: &dyn Fn(&[Run; 2]) -> Option<f64>| {
        median(rounds.iter().map(|r| f(&r[side])))
    };
    let p99 = |r: &Run| r.step_ns.value_at_quantile(0.99) as f64 / 1e3;
    type Figure<'a> = &'a dyn Fn(&[Run; 2]) -> Option<f64>;
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    let rows: [(String, Figure, usize); 7] = [
        ("steps/s".into(), &|r| Some(r[0].steps_per_s), 0),
        (
            format!("seconds to loss {}", cfg.target),
            &|r| r[0].to_target,
            2,
        ),
        (
            "p99 step (us), no checkpoints".into(),
            &|r| Some(p99(&r[0])),
            1,
        ),
        (
            format!(
                "p99 step (us), checkpoints every {} ms",
                cfg.interval.as_millis()
            ),
            &|r| Some(p99(&r[1])),
            1,
        ),
        (
            "resident memory (MiB, max VmRSS)".into(),
            &|r| r[0].resident.max(r[1].resident).map(mib),
            1,
        ),
        (
            "loss over all wines at the end".into(),
            &|r| Some(f64::from(r[0].loss)),
            4,
        ),
        (
            "checkpoints written a run".into(),
            &|r| Some(r[1].saved as f64),
            0,
        ),
    ];
    println!();
    println!(
        "{:<40} {:>12} {:>12} {:>16}",
        "",
        Mvtensor::NAME,
        mutex::Mutex::NAME,
        "mvtensor/Mutex"
    );
    for (label, f, decimals) in &rows {
        let (a, b) = (figure(0, *f), figure(1, *f));
        let show = |x: Option<f64>| x.map_or("-".into(), |x| format!("{:.*}", decimals, x));
        let ratio = match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
            _ => "-".into(),
        };
        println!("{label:<40} {:>12} {:>12} {ratio:>16}", show(a), show(b));
    }
    Ok(())
}
