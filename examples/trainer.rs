//! A Hogwild trainer on mvtensor: 4 threads train one MLP on the two-spirals problem, each
//! reading the parameters, computing a minibatch gradient and applying it, with no lock.
//! `trainer_mutex.rs` is the same trainer on a `Mutex`; the model is `trainer_common/`.
//!
//!     cargo run --release --example trainer

#[path = "trainer_common/mod.rs"]
mod common;

use std::time::Instant;

use common::{accuracy, batch, gradients, init, spirals, BATCH, LR, STEPS_PER_THREAD, THREADS};
use mvtensor::{read_all, Error, Variable};

fn main() -> Result<(), Error> {
    let data = spirals(2000);
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
        for thread in 0..THREADS {
            let (w1, b1, w2, b2, steps, data) = (&w1, &b1, &w2, &b2, &steps, &data);
            s.spawn(move || -> Result<(), Error> {
                for step in 0..STEPS_PER_THREAD {
                    // One consistent set of parameters; writers are never blocked by it.
                    let p = read_all((w1, b1, w2, b2));
                    let g = gradients((&p.0, &p.1, &p.2, &p.3), data, &batch(thread, step, 2000));
                    w1.scaled_add(-LR, &g.w1)?; // concurrent updates are combined
                    b1.scaled_add(-LR, &g.b1)?;
                    w2.scaled_add(-LR, &g.w2)?;
                    b2.scaled_add(-LR, &g.b2)?;
                    steps.fetch_add(1)?;
                }
                Ok(())
            });
        }
    });
    let seconds = start.elapsed().as_secs_f64();
    let p = read_all((&w1, &b1, &w2, &b2));
    let accuracy = accuracy((&p.0, &p.1, &p.2, &p.3), &data);
    let steps = steps.get();
    println!(
        "mvtensor: {steps} steps of {BATCH} in {seconds:.2} s ({:.0} steps/s), accuracy {:.1}%",
        steps as f64 / seconds,
        accuracy * 100.0
    );
    Ok(())
}
