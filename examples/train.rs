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
use ndarray::{Axis, Ix2};
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
    let (w1, b1) = (store.variable("w1", w1)?, store.variable("b1", b1)?);
    let (w2, b2) = (store.variable("w2", w2)?, store.variable("b2", b2)?);
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
                    let (l, g) = loss_and_grads((&p.0, &p.1, &p.2, &p.3), &batch);
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
    let (final_loss, _) = loss_and_grads((&p.0, &p.1, &p.2, &p.3), &data);
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
