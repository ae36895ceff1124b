//! The trainer of `trainer.rs` on a `Mutex` instead of mvtensor: 4 threads train one MLP on
//! the wine-quality data. A step copies the parameters out under the lock (holding it
//! through the forward and backward pass would serialise the threads), computes the
//! gradient, and applies it under the lock again.
//!
//!     cargo run --release --example trainer_mutex

#[path = "train/wine.rs"]
mod wine;

use std::sync::Mutex;
use std::time::Instant;

use ndarray::{Array1, Array2};
use wine::{batch, init, loss_and_grads, wines};

const THREADS: usize = 4;
const STEPS_PER_THREAD: usize = 5000;
const LR: f32 = 0.01;

#[derive(Clone)]
struct Params {
    w1: Array2<f32>,
    b1: Array1<f32>,
    w2: Array2<f32>,
    b2: Array1<f32>,
}

fn main() {
    let data = wines();
    let (w1, b1, w2, b2) = init();
    let params = Mutex::new(Params { w1, b1, w2, b2 });
    let steps = Mutex::new(0i64);
    let start = Instant::now();
    std::thread::scope(|s| {
        for thread in 0..THREADS {
            let (params, steps, data) = (&params, &steps, &data);
            s.spawn(move || {
                for step in 0..STEPS_PER_THREAD {
                    let p = params.lock().unwrap().clone(); // a consistent copy
                    let rows = batch(data, thread * STEPS_PER_THREAD + step);
                    let (_, g) = loss_and_grads((&p.w1, &p.b1, &p.w2, &p.b2), &rows);
                    let mut p = params.lock().unwrap();
                    p.w1.scaled_add(-LR, &g.0);
                    p.b1.scaled_add(-LR, &g.1);
                    p.w2.scaled_add(-LR, &g.2);
                    p.b2.scaled_add(-LR, &g.3);
                    drop(p);
                    *steps.lock().unwrap() += 1;
                }
            });
        }
    });
    let seconds = start.elapsed().as_secs_f64();
    let p = params.into_inner().unwrap();
    let (loss, _) = loss_and_grads((&p.w1, &p.b1, &p.w2, &p.b2), &data);
    let steps = steps.into_inner().unwrap();
    println!(
        "Mutex: {steps} steps in {seconds:.2} s ({:.0} steps/s), loss over all wines {loss:.4}",
        steps as f64 / seconds
    );
}
