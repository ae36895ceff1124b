//! `optim::Replicas`, a synchronous all-reduce over worker threads, and
//! how it ends: a worker that panics or returns early stops the others instead of leaving
//! them waiting for ever. Its asynchronous mode: `replicas_async.rs`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

use mvtensor::optim::{Optimizer, Replicas};
use mvtensor::{read_all, Error, Variable};
use ndarray::{Array1, Array2};

/// Replicas of an SGD (learning rate 1, named `sgd`) over `w`.
pub(crate) fn sgd_replicas(w: &Variable<f64, ndarray::Ix1>, workers: usize) -> Replicas<f64> {
    let sgd = Optimizer::sgd(1.0).name("sgd").param(w).build().unwrap();
    Replicas::new(sgd, workers)
}

fn is_stopped(e: &Error) -> bool {
    matches!(e, Error::ReplicasStopped { optimizer } if optimizer == "sgd")
}

#[test]
fn replicas_apply_the_mean_of_every_workers_gradient_once_per_step() {
    let (workers, steps) = if cfg!(miri) { (2, 3) } else { (4, 200) };
    let w = Variable::new(Array2::<f64>::zeros((2, 3)));
    let b = Variable::new(Array1::<f64>::zeros(3));
    let replicas = Replicas::new(
        Optimizer::sgd(0.1).param(&w).param(&b).build().unwrap(),
        workers,
    );
    let mean = (1..=workers).sum::<usize>() as f64 / workers as f64;
    let mut expected = vec![0.0f64];
    for _ in 0..steps {
        let last = *expected.last().unwrap();
        expected.push(last - 0.1 * mean);
    }
    std::thread::scope(|s| {
        for worker in 0..workers {
            let (replicas, expected, w, b) = (&replicas, &expected, &w, &b);
            s.spawn(move || {
                let gw = Array2::from_elem((2, 3), (worker + 1) as f64);
                let gb = Array1::from_elem(3, (worker + 1) as f64);
                for (step, &want) in expected.iter().enumerate().skip(1) {
                    assert_eq!(replicas.step((&gw, &gb)).unwrap(), step as i64);
                    // Until every worker calls again, the parameters stay at this step.
                    let (w, b) = read_all((w, b));
                    assert_eq!((w[[1, 2]], b[0]), (want, want), "step {step}");
                }
            });
        }
    });
    assert_eq!(replicas.optimizer().steps(), steps as i64);
}

#[test]
fn a_replica_with_bad_gradients_fails_the_step_for_everyone() {
    let w = Variable::new(Array1::<f32>::zeros(2));
    let replicas = Replicas::new(Optimizer::sgd(1.0).param(&w).build().unwrap(), 2);
    let results: Vec<_> = std::thread::scope(|s| {
        let good = s.spawn(|| replicas.step((&Array1::<f32>::ones(2),)));
        let bad = s.spawn(|| replicas.step((&Array1::<f32>::ones(3),)));
        vec![good.join().unwrap(), bad.join().unwrap()]
    });
    assert!(
        results
            .iter()
            .all(|r| matches!(r, Err(Error::ShapeMismatch { .. }))),
        "{results:?}"
    );
    assert_eq!(
        (w.read()[0], replicas.optimizer().steps()),
        (0.0, 0),
        "nothing applied"
    );
    // The next step starts clean: the good worker's sum was cleared.
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| replicas.step((&Array1::<f32>::ones(2),)).unwrap());
        }
    });
    assert_eq!(w.read()[0], -1.0);
}

/// One worker's bad gradients fail every step for every worker, however the workers' steps
/// overlap. (The reset of the last outcome ran after the barrier that let workers into the
/// next step, and wiped a fast worker's error: an audit saw thousands of such steps applied
/// with three workers' gradients and reported `Ok`.)
#[test]
fn a_replica_with_bad_gradients_every_step_fails_every_step() {
    let (workers, steps) = if cfg!(miri) { (2, 5) } else { (4, 3000) };
    let w = Variable::new(Array1::<f64>::zeros(1));
    let replicas = Replicas::new(Optimizer::sgd(1.0).param(&w).build().unwrap(), workers);
    std::thread::scope(|s| {
        for worker in 0..workers {
            let replicas = &replicas;
            s.spawn(move || {
                let (good, bad) = (Array1::from_elem(1, 1.0), Array1::from_elem(2, 1.0));
                for _ in 0..steps {
                    let g = if worker == 0 { &bad } else { &good };
                    assert!(replicas.step((g,)).is_err(), "a failed step reported Ok");
                }
            });
        }
    });
    assert_eq!((w.read()[0], replicas.optimizer().steps()), (0.0, 0));
}

/// An infinite gradient makes one step's parameters infinite, and no later one's: the sums
/// start again from zero (subtracting what was read left inf - inf = NaN in them for good).
#[test]
fn a_replicas_step_after_an_infinite_gradient_starts_clean() {
    let w = Variable::new(Array1::<f64>::zeros(1));
    let replicas = Replicas::new(Optimizer::sgd(1.0).param(&w).build().unwrap(), 1);
    replicas
        .step((&Array1::from_elem(1, f64::INFINITY),))
        .unwrap();
    assert_eq!(w.read()[0], f64::NEG_INFINITY);
    w.assign(Array1::zeros(1)).unwrap(); // rolled back, as from a checkpoint
    replicas.step((&Array1::from_elem(1, 1.0),)).unwrap();
    assert_eq!(w.read()[0], -1.0);
}

/// A worker of `run` that panics at its fourth step: the three others' fourth steps fail
/// with `ReplicasStopped` (before, they waited for it for ever and the scope never ended),
/// nothing of that step is applied, `run` resumes the panic, and the next `run` starts clean.
#[test]
fn a_worker_that_panics_stops_the_others_and_run_resumes_its_panic() {
    let (workers, fails_at) = (4, if cfg!(miri) { 2 } else { 20 });
    let w = Variable::new(Array1::<f64>::zeros(1));
    let replicas = sgd_replicas(&w, workers);
    let g = Array1::from_elem(1, 1.0);
    let errors = Mutex::new(Vec::new());
    let run = catch_unwind(AssertUnwindSafe(|| {
        replicas.run(|worker| {
            for step in 1..=2 * fails_at {
                if worker == 2 && step == fails_at {
                    panic!("worker 2 fails");
                }
                match replicas.step(&g) {
                    Ok(t) => assert_eq!(t, step as i64),
                    Err(e) => return errors.lock().unwrap().push((step, e)),
                }
            }
        })
    }));
    let panic = run.expect_err("run resumes the worker's panic");
    assert_eq!(panic.downcast_ref::<&str>(), Some(&"worker 2 fails"));
    let errors = errors.into_inner().unwrap();
    assert_eq!(errors.len(), workers - 1, "{errors:?}");
    for (step, e) in &errors {
        assert!(is_stopped(e) && *step == fails_at, "step {step}: {e}");
    }
    let applied = fails_at as i64 - 1;
    assert_eq!(replicas.optimizer().steps(), applied);
    assert_eq!(
        w.read()[0],
        -(applied as f64),
        "the failed step applied nothing"
    );
    assert!(!replicas.is_stopped(), "run ends clean");
    // The three gradients added to the failed step's sums are forgotten.
    let again = replicas.run(|_| replicas.step(&g));
    assert!(again.iter().all(|r| *r == Ok(applied + 1)), "{again:?}");
    assert_eq!(w.read()[0], -(applied as f64 + 1.0));
}

/// Workers that want different numbers of steps (worker `i`: `base + i`): every step that
/// all of them reach is applied, and each worker's next step fails instead of waiting for
/// a worker that has returned.
#[test]
fn a_worker_that_returns_early_stops_the_others_instead_of_hanging() {
    let (workers, base) = (4, if cfg!(miri) { 2 } else { 100 });
    let w = Variable::new(Array1::<f64>::zeros(1));
    let replicas = sgd_replicas(&w, workers);
    let ends = replicas.run(|worker| {
        let g = Array1::from_elem(1, 1.0);
        let mut applied = 0;
        for _ in 0..base + worker {
            match replicas.step(&g) {
                Ok(t) => applied = t,
                Err(e) => return (applied, Some(e)),
            }
        }
        (applied, None)
    });
    assert_eq!(ends[0], (base as i64, None));
    for (applied, error) in &ends[1..] {
        assert_eq!(*applied, base as i64);
        assert!(error.as_ref().is_some_and(is_stopped), "{error:?}");
    }
    assert_eq!(replicas.optimizer().steps(), base as i64);
}

/// `stop` from another thread while two workers started by hand step in a loop: each
/// worker's last `Ok` is the optimizer's last step, and both saw the same steps: a step every
/// worker reached completes, and no applied step is reported as stopped. Both then return
/// (a worker waiting alone when `stop` comes is let go).
#[test]
fn stop_lets_waiting_workers_go_and_never_reports_an_applied_step_as_stopped() {
    let before_stop = if cfg!(miri) { 2 } else { 200 };
    for _ in 0..if cfg!(miri) { 1 } else { 20 } {
        let w = Variable::new(Array1::<f64>::zeros(1));
        let replicas = sgd_replicas(&w, 2);
        let lasts: Vec<(i64, Error)> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        let g = Array1::from_elem(1, 1.0);
                        let mut last = 0;
                        loop {
                            match replicas.step(&g) {
                                Ok(t) => {
                                    assert_eq!(t, last + 1, "steps in order, none skipped");
                                    last = t;
                                }
                                Err(e) => return (last, e),
                            }
                        }
                    })
                })
                .collect();
            while replicas.optimizer().steps() < before_stop {
                std::thread::yield_now();
            }
            replicas.stop();
            workers.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let steps = replicas.optimizer().steps();
        assert!(replicas.is_stopped());
        for (last, e) in &lasts {
            assert!(is_stopped(e), "{e}");
            assert_eq!(
                *last, steps,
                "every applied step reported Ok to every worker"
            );
        }
        assert_eq!(w.read()[0], -(steps as f64));
        assert!(matches!(replicas.step(&Array1::ones(1)), Err(e) if is_stopped(&e)));
    }
}

/// A panic inside the step that the last worker applies for everyone (a learning-rate
/// schedule's closure here) fails that step for the others, who waited for it, instead of
/// leaving them waiting; nothing of it is applied, and `run` resumes the panic.
#[test]
fn a_panic_while_applying_a_step_lets_the_other_workers_go() {
    let workers = 3;
    let w = Variable::new(Array1::<f64>::zeros(1));
    let sgd = Optimizer::sgd(1.0)
        .name("sgd")
        .schedule(|step| {
            if step == 3 {
                panic!("schedule fails")
            } else {
                1.0
            }
        })
        .param(&w)
        .build()
        .unwrap();
    let replicas = Replicas::new(sgd, workers);
    let errors = Mutex::new(Vec::new());
    let run = catch_unwind(AssertUnwindSafe(|| {
        replicas.run(|_| {
            for step in 1..=5 {
                match replicas.step(&Array1::from_elem(1, 1.0)) {
                    Ok(t) => assert_eq!(t, step),
                    Err(e) => return errors.lock().unwrap().push((step, e)),
                }
            }
        })
    }));
    let panic = run.expect_err("run resumes the panic");
    assert_eq!(panic.downcast_ref::<&str>(), Some(&"schedule fails"));
    let errors = errors.into_inner().unwrap();
    assert_eq!(errors.len(), workers - 1, "{errors:?}");
    assert!(
        errors.iter().all(|(step, e)| *step == 3 && is_stopped(e)),
        "{errors:?}"
    );
    assert_eq!((replicas.optimizer().steps(), w.read()[0]), (2, -2.0));
}
