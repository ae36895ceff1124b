//! A Hogwild trainer on mvtensor: 4 threads train one MLP on the wine-quality data, each
//! reading the parameters, computing a minibatch gradient and applying it, with no lock.
//! `trainer_mutex.rs` is the same trainer on a `Mutex`; the model is
//! `train/wine.rs` (shared with `train.rs` and the benchmarks).
//!
//!     cargo run --release --example trainer

#[path = "train/wine.rs"]
mod wine;

use std::time::Instant;

use mvtensor::{read_all, Error, Variable};
use wine::{batch, init, loss_and_grads, wines};

const THREADS: usize = 4;
const STEPS_PER_THREAD: usize = 5000;
const LR: f32 = 0.01;

fn main() -> Result<(), Error> {
    let data = wines();
    let (w1, b1, w2, b2) = init();
    let (w1, b1, w2, b2) = (
        Variable::new(w1),
        Variable::new(b1),
        Variable::new(w2),
        Variable::new(b2),
    );
    let steps = Variable::scalar(0i64);
    let start = Instant::now();
    std::thread::scope(|s| {
        let trainers: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (w1, b1, w2, b2, steps, data) = (&w1, &b1, &w2, &b2, &steps, &data);
                s.spawn(move || -> Result<(), Error> {
                    for step in 0..STEPS_PER_THREAD {
                        // One consistent set of parameters; writers are never blocked by it.
                        let p = read_all((w1, b1, w2, b2));
                        let rows = batch(data, thread * STEPS_PER_THREAD + step);
                        let (_, g) = loss_and_grads((&p.0, &p.1, &p.2, &p.3), &rows);
                        w1.scaled_add(-LR, &g.0)?; // concurrent updates are combined
                        b1.scaled_add(-LR, &g.1)?;
                        w2.scaled_add(-LR, &g.2)?;
                        b2.scaled_add(-LR, &g.3)?;
                        steps.fetch_add(1)?;
                    }
                    Ok(())
                })
            })
            .collect();
        // A worker's error (none is expected) is the trainer's.
        trainers
            .into_iter()
            .try_for_each(|t| t.join().expect("a trainer panicked"))
    })?;
    let seconds = start.elapsed().as_secs_f64();
    let p = read_all((&w1, &b1, &w2, &b2));
    let (loss, _) = loss_and_grads((&p.0, &p.1, &p.2, &p.3), &data);
    let steps = steps.get();
    println!(
        "mvtensor: {steps} steps in {seconds:.2} s ({:.0} steps/s), loss over all wines {loss:.4}",
        steps as f64 / seconds
    );
    Ok(())
}
