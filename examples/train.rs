//! A trainer on real data, with every piece of mvtensor's toolkit: an MLP regressing the
//! quality of red wines (1,599 wines, 11 measurements each, the UCI wine-quality data as
//! `linfa-datasets` ships it) from 4 trainer threads.
//!
//! * a producer thread shuffles the data each epoch and feeds batches through a
//!   `TensorQueue`, then closes it;
//! * the four parameter tensors and Adam's state are packed in one variable
//!   (`optim::Packed`, built by the optimizer): one version a step for all of them;
//! * each trainer dequeues a batch, reads the parameters (one snapshot: every tensor of the
//!   same step), computes the gradient and applies Adam to every parameter in one execution
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
use mvtensor::optim::{Optimizer, Packed};
use mvtensor::queue::TensorQueue;
use mvtensor::Store;
use ndarray::{Axis, Ix1, Ix2};
use wine::{init, loss_and_grads, wines, BATCH};

#[path = "../benches/harness/wine.rs"]
mod wine;

const EPOCHS: usize = 400;
const TRAINERS: usize = 4;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let data = wines();
    let n = data.nrows();
    let store = Arc::new(Store::new());
    let (w1, b1, w2, b2) = init();
    // The model and Adam's state (both moments, the step count) in one variable: a step
    // writes one version, and a checkpoint of it can resume training.
    let (model, adam) = Optimizer::adam(3e-3).name("adam").build_packed(
        Packed::builder()
            .name("mlp")
            .tensor("w1", &w1)
            .tensor("b1", &b1)
            .tensor("w2", &w2)
            .tensor("b2", &b2),
    )?;
    store.register(model.variable())?;
    // The model as the forward and backward pass take it: typed views of one snapshot.
    let step_loss = |batch: &ndarray::Array2<f32>| -> mvtensor::Result<_> {
        let p = model.read();
        let (w1, b1) = (p.get::<Ix2>(0)?, p.get::<Ix1>(1)?);
        let (w2, b2) = (p.get::<Ix2>(2)?, p.get::<Ix1>(3)?);
        Ok(loss_and_grads((&w1, &b1, &w2, &b2), batch))
    };
    let dir = std::env::temp_dir().join(format!("mvtensor-train-{}", std::process::id()));
    let checkpoints = Checkpoints::new(&dir, 2)?;
    let background = checkpoints
        .clone()
        .every(Arc::clone(&store), Duration::from_millis(200))?;

    let batches = TensorQueue::<f32>::new("batches", 64, &[BATCH, 12])?;
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
                    let (l, g) = step_loss(&batch).expect("the layout fits");
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
    let progress = background.stop();
    let last = checkpoints.save(&store)?;
    let restored = Store::load(&last)?;
    let (final_loss, _) = step_loss(&data)?;
    println!(
        "{} steps in {seconds:.2} s ({:.0} steps/s) on {TRAINERS} threads; loss over all wines {final_loss:.4}",
        adam.steps(),
        adam.steps() as f64 / seconds
    );
    println!(
        "{} background checkpoints while training ({} failed); the last reloads with {} variables",
        progress.saved,
        progress.failed,
        restored.len()
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
