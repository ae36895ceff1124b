//! The trainer of `trainer.rs` on a `Mutex` instead of mvtensor: 4 threads train one MLP on
//! the two-spirals problem. A step copies the parameters out under the lock (holding it
//! through the forward and backward pass would serialise the threads), computes the
//! gradient, and applies it under the lock again.
//!
//!     cargo run --release --example trainer_mutex

#[path = "trainer_common/mod.rs"]
mod common;

use std::sync::Mutex;
use std::time::Instant;

use common::{accuracy, batch, gradients, init, spirals, BATCH, LR, STEPS_PER_THREAD, THREADS};
use ndarray::{Array1, Array2};

#[derive(Clone)]
struct Params {
    w1: Array2<f32>,
    b1: Array1<f32>,
    w2: Array2<f32>,
    b2: Array1<f32>,
}

fn main() {
    let data = spirals(2000);
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
                    let g = gradients(
                        (&p.w1, &p.b1, &p.w2, &p.b2),
                        data,
                        &batch(thread, step, 2000),
                    );
                    let mut p = params.lock().unwrap();
                    p.w1.scaled_add(-LR, &g.w1);
                    p.b1.scaled_add(-LR, &g.b1);
                    p.w2.scaled_add(-LR, &g.w2);
                    p.b2.scaled_add(-LR, &g.b2);
                    drop(p);
                    *steps.lock().unwrap() += 1;
                }
            });
        }
    });
    let seconds = start.elapsed().as_secs_f64();
    let p = params.into_inner().unwrap();
    let accuracy = accuracy((&p.w1, &p.b1, &p.w2, &p.b2), &data);
    let steps = steps.into_inner().unwrap();
    println!(
        "Mutex: {steps} steps of {BATCH} in {seconds:.2} s ({:.0} steps/s), accuracy {:.1}%",
        steps as f64 / seconds,
        accuracy * 100.0
    );
}
