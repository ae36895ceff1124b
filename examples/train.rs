//! A trainer on real data, with every piece of mvtensor's toolkit: an MLP regressing the
//! quality of red wines (1,599 wines, 11 measurements each, the UCI wine-quality data as
//! `linfa-datasets` ships it) from 4 trainer threads.
//!
//! * a producer thread shuffles the data each epoch and feeds batches through a
//!   `TensorQueue`, then closes it;
//! * each trainer dequeues a batch, reads the parameters at one point of the commit order
//!   (`read_all`), computes the gradient and applies Adam to every parameter in one execution
//!   (`optim::Optimizer`);
//! * the loss is a shared `metrics::Mean`, read every 200 ms for the printed curve;
//! * a background `Checkpoints` saves the parameters and Adam's state every 200 ms, while
//!   the trainers run; the last checkpoint is reloaded at the end.
//!
//!     cargo run --release --example train

use std::sync::Arc;
use std::time::{Duration, Instant};

use mvtensor::checkpoint::Checkpoints;
use mvtensor::metrics::Mean;
use mvtensor::optim::Optimizer;
use mvtensor::queue::TensorQueue;
use mvtensor::{read_all, Store};
use ndarray::{s, Array1, Array2, ArrayRef1, ArrayRef2, Axis, Ix2};

const HIDDEN: usize = 32;
const BATCH: usize = 32;
const EPOCHS: usize = 400;
const TRAINERS: usize = 4;

/// Features (standardised) and the quality score of every wine, one row each: `[n, 12]`.
fn wines() -> Array2<f32> {
    let data = linfa_datasets::winequality();
    let (records, targets) = (&data.records, &data.targets);
    let n = records.shape()[0];
    let mut rows = Array2::<f32>::zeros((n, 12));
    for (i, &x) in records.iter().enumerate() {
        rows[[i / 11, i % 11]] = x as f32; // row-major, 11 features per wine
    }
    for (i, &t) in targets.iter().enumerate() {
        rows[[i, 11]] = t as f32;
    }
    for j in 0..11 {
        let col = rows.column(j);
        let (mean, std) = (col.mean().unwrap_or(0.0), col.std(0.0).max(1e-6));
        rows.column_mut(j).mapv_inplace(|x| (x - mean) / std);
    }
    rows
}

/// Mean squared error of one batch and its gradients (w1, b1, w2, b2).
#[allow(clippy::type_complexity)]
fn step(
    (w1, b1, w2, b2): (
        &ArrayRef2<f32>,
        &ArrayRef1<f32>,
        &ArrayRef2<f32>,
        &ArrayRef1<f32>,
    ),
    batch: &Array2<f32>,
) -> (f32, (Array2<f32>, Array1<f32>, Array2<f32>, Array1<f32>)) {
    let x = batch.slice(s![.., ..11]);
    let t = batch.slice(s![.., 11..]);
    let h = (x.dot(w1) + b1).mapv(f32::tanh);
    let y = h.dot(w2) + b2;
    let diff = &y - &t;
    let loss = diff.mapv(|d| d * d).mean().unwrap_or(0.0);
    let dy = diff * (2.0 / batch.nrows() as f32);
    let dh = dy.dot(&w2.t()) * h.mapv(|h| 1.0 - h * h);
    let grads = (
        x.t().dot(&dh),
        dh.sum_axis(Axis(0)),
        h.t().dot(&dy),
        dy.sum_axis(Axis(0)),
    );
    (loss, grads)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let data = wines();
    let n = data.nrows();
    let store = Arc::new(Store::new());
    let init = |r: usize, c: usize, k: f32| {
        Array2::from_shape_fn((r, c), |(i, j)| {
            ((i * 17 + j * 31) % 23) as f32 / 23.0 * k - k / 2.0
        })
    };
    let w1 = store.variable("w1", init(11, HIDDEN, 0.6))?;
    let b1 = store.variable("b1", Array1::<f32>::zeros(HIDDEN))?;
    let w2 = store.variable("w2", init(HIDDEN, 1, 0.4))?;
    let b2 = store.variable("b2", Array1::from_elem(1, 5.6f32))?; // about the mean quality
    let adam = Optimizer::adam(3e-3)
        .name("adam")
        .param(&w1)
        .param(&b1)
        .param(&w2)
        .param(&b2)
        .build()?;
    adam.register_state(&store)?;
    let dir = std::env::temp_dir().join(format!("mvtensor-train-{}", std::process::id()));
    let checkpoints = Checkpoints::new(&dir, 2)?;
    let background = checkpoints
        .clone()
        .every(Arc::clone(&store), Duration::from_millis(200));

    let batches = TensorQueue::<f32>::new("batches", 64, &[BATCH, 12]);
    let loss = Mean::new();
    let start = Instant::now();
    println!("{:>8} {:>10} {:>10}", "time", "steps", "loss (MSE)");
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut order: Vec<usize> = (0..n).collect();
            let mut seed = 0x9e37_79b9_7f4a_7c15u64;
            for _ in 0..EPOCHS {
                for i in (1..n).rev() {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    order.swap(i, (seed % (i as u64 + 1)) as usize);
                }
                for chunk in order.chunks_exact(BATCH) {
                    batches
                        .enqueue(data.select(Axis(0), chunk))
                        .expect("open until we close it");
                }
            }
            batches.close(false);
        });
        for _ in 0..TRAINERS {
            s.spawn(|| {
                while let Ok(batch) = batches.dequeue() {
                    let batch = batch.into_dimensionality::<Ix2>().expect("[BATCH, 12]");
                    let p = read_all((&w1, &b1, &w2, &b2));
                    let (l, g) = step((&p.0, &p.1, &p.2, &p.3), &batch);
                    adam.step((&g.0, &g.1, &g.2, &g.3)).expect("gradients fit");
                    loss.record(f64::from(l));
                }
            });
        }
        let mut last_report = Instant::now();
        while !(batches.is_closed() && batches.is_empty()) {
            std::thread::park_timeout(Duration::from_millis(10));
            if last_report.elapsed() >= Duration::from_millis(200) {
                let interval = loss.take();
                if let Some(mean) = interval.mean() {
                    println!(
                        "{:>7.2}s {:>10} {:>10.4}",
                        start.elapsed().as_secs_f64(),
                        adam.steps(),
                        mean
                    );
                }
                last_report = Instant::now();
            }
        }
    });
    let seconds = start.elapsed().as_secs_f64();
    let saved = background.stop()?;
    let last = checkpoints.save(&store)?;
    let restored = Store::load(&last)?;
    let p = read_all((&w1, &b1, &w2, &b2));
    let (final_loss, _) = step((&p.0, &p.1, &p.2, &p.3), &data);
    println!(
        "{} steps in {seconds:.2} s ({:.0} steps/s) on {TRAINERS} threads; loss over all wines {final_loss:.4}",
        adam.steps(),
        adam.steps() as f64 / seconds
    );
    println!(
        "{saved} background checkpoints while training; the last reloads with {} variables",
        restored.len()
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
