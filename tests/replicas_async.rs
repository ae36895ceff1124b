//! The asynchronous mode of replicas: `Replicas::step_async` applies each worker's
//! gradients as a step of their own and waits for nobody (the synchronous all-reduce:
//! `replicas.rs`).

use std::sync::{mpsc, Barrier};
use std::time::Duration;

use mvtensor::optim::{Optimizer, Replicas};
use mvtensor::{read_all, Error, Variable};
use ndarray::{Array1, Array2};

use crate::replicas::sgd_replicas;

/// `step_async` from every worker of `run`: each call is one step of its own (the
/// optimizer's section serialises them), so the step numbers are exactly `1..=workers *
/// steps`, each once, and increase within a worker; and every gradient is applied once,
/// unaveraged: the parameters end at minus the sum of all of them (integers, so exact in
/// any order), where `step` would have applied their mean `steps` times.
#[test]
fn async_steps_apply_every_workers_gradient_once_unaveraged() {
    let (workers, steps) = if cfg!(miri) { (2, 3) } else { (4, 500) };
    let w = Variable::new(Array2::<f64>::zeros((2, 3)));
    let b = Variable::new(Array1::<f64>::zeros(3));
    let replicas = Replicas::new(
        Optimizer::sgd(1.0).param(&w).param(&b).build().unwrap(),
        workers,
    );
    let numbers = replicas.run(|worker| {
        // Worker i: 2^i on w, -(i + 1) on b.
        let gw = Array2::from_elem((2, 3), (1u32 << worker) as f64);
        let gb = Array1::from_elem(3, -((worker + 1) as f64));
        (0..steps)
            .map(|_| replicas.step_async((&gw, &gb)))
            .collect::<Result<Vec<i64>, Error>>()
    });
    let mut all = Vec::new();
    for (worker, numbers) in numbers.into_iter().enumerate() {
        let numbers = numbers.unwrap_or_else(|e| panic!("worker {worker}: {e}"));
        assert_eq!(numbers.len(), steps);
        assert!(
            numbers.windows(2).all(|p| p[0] < p[1]),
            "worker {worker}'s steps out of order: {numbers:?}"
        );
        all.extend(numbers);
    }
    all.sort_unstable();
    let total = (workers * steps) as i64;
    assert_eq!(all, (1..=total).collect::<Vec<_>>(), "a step lost or twice");
    assert_eq!(replicas.optimizer().steps(), total);
    let sum_w = (steps * ((1 << workers) - 1)) as f64; // steps * (1 + 2 + ... + 2^(n-1))
    let sum_b = (steps * workers * (workers + 1) / 2) as f64;
    let (w, b) = read_all((&w, &b));
    assert_eq!(*w, Array2::from_elem((2, 3), -sum_w));
    assert_eq!(*b, Array1::from_elem(3, sum_b));
}

/// A worker's `step_async` never waits for the others: worker 0 takes all its steps while
/// every other worker is held (before any call of theirs) at a barrier that only opens after
/// worker 0 is done, so its steps are 1..=steps and the parameters hold exactly its
/// gradients. The others then step too. (Were `step_async` to wait for them, as `step` does,
/// the watchdog stops the replicas and the test fails instead of hanging.)
#[test]
fn an_async_step_never_waits_for_the_other_workers() {
    let (workers, steps) = if cfg!(miri) { (3, 3) } else { (4, 200) };
    let w = Variable::new(Array1::<f64>::zeros(1));
    let replicas = sgd_replicas(&w, workers);
    // The other workers and this thread: opened by this thread once worker 0 is done.
    let others_go = Barrier::new(workers);
    let (done, fast_done) = mpsc::channel();
    let (fast, before_others, others) = std::thread::scope(|s| {
        // `done` moves in: a panic here drops it, and the watchdog's wait ends at once.
        let replicas = &replicas;
        let fast = s.spawn(move || {
            let g = Array1::from_elem(1, 1.0);
            let numbers = (0..steps)
                .map(|_| replicas.step_async(&g))
                .collect::<Result<Vec<i64>, Error>>();
            done.send(()).unwrap();
            numbers
        });
        let others: Vec<_> = (1..workers)
            .map(|_| {
                s.spawn(|| {
                    others_go.wait();
                    replicas.step_async(&Array1::from_elem(1, 2.0))
                })
            })
            .collect();
        // A watchdog only, never a wait for anything to happen: worker 0 finishes at once.
        if fast_done.recv_timeout(Duration::from_secs(120)).is_err() {
            replicas.stop();
        }
        let fast = fast.join().unwrap();
        let before_others = (replicas.optimizer().steps(), w.read()[0]);
        others_go.wait();
        let others: Vec<_> = others.into_iter().map(|t| t.join().unwrap()).collect();
        (fast, before_others, others)
    });
    let n = steps as i64;
    assert_eq!(
        fast,
        Ok((1..=n).collect()),
        "worker 0 stepped alone, without waiting"
    );
    assert_eq!(before_others, (n, -(steps as f64)), "only worker 0's steps");
    let mut others = others
        .into_iter()
        .collect::<Result<Vec<i64>, Error>>()
        .unwrap();
    others.sort_unstable();
    assert_eq!(others, (n + 1..=n + workers as i64 - 1).collect::<Vec<_>>());
    assert_eq!(w.read()[0], -(steps as f64) - 2.0 * (workers - 1) as f64);
}

/// Bad gradients in `step_async` fail that worker's call alone, with the optimizer's typed
/// error, and apply nothing of it; another worker's steps meanwhile are applied (unlike
/// `step`, where one worker's bad gradients fail the step for every worker).
#[test]
fn bad_gradients_fail_only_their_own_async_step() {
    let steps = if cfg!(miri) { 3 } else { 300 };
    let w = Variable::builder(Array1::<f64>::zeros(2)).name("w").build();
    let replicas = Replicas::new(Optimizer::sgd(1.0).param(&w).build().unwrap(), 2);
    let two = Array1::<f64>::ones(2);
    assert_eq!(
        replicas.step_async((&two, &two)).unwrap_err(),
        Error::GradientCount {
            expected: 1,
            found: 2
        }
    );
    assert_eq!((w.version(), replicas.optimizer().steps()), (0, 0));
    let ends = replicas.run(|worker| {
        let g = Array1::from_elem(if worker == 0 { 2 } else { 3 }, 1.0);
        (0..steps)
            .map(|_| replicas.step_async(&g))
            .collect::<Vec<_>>()
    });
    assert_eq!(ends[0], (1..=steps as i64).map(Ok).collect::<Vec<_>>());
    for e in &ends[1] {
        assert!(
            matches!(e, Err(Error::ShapeMismatch { variable, .. }) if variable == "w"),
            "{e:?}"
        );
    }
    assert_eq!(replicas.optimizer().steps(), steps as i64);
    assert_eq!(
        *w.read(),
        Array1::from_elem(2, -(steps as f64)),
        "the good only"
    );
}
