//! Learning-rate schedules: each step's rate is its own step number's, and a bad factor is
//! an error that applies nothing.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::{self, scaled};

use mvtensor::optim::{Optimizer, Packed};
use mvtensor::{Error, Variable};
use ndarray::{Array1, Ix1};

/// Steps from several threads at once each use their own number's factor: with SGD, a
/// gradient of ones and the factor `t`, the parameter ends at `-lr * (1 + 2 + ... + n)`,
/// exactly (halves of whole numbers), whatever order the threads' steps ran in. The threads
/// start each step together (spinning, so that neither has to be woken first), so that
/// steps overlap: a factor read from the step count before the execution would give two
/// steps one number (the window between that read and the execution is short, so the
/// steps must overlap for this test to see it).
#[test]
fn concurrent_steps_each_use_their_own_numbers_rate() {
    let (threads, each) = (2, scaled(3, 300));
    let w = Variable::new(Array1::<f64>::zeros(3));
    let sgd = Optimizer::sgd(0.5)
        .schedule(|t| t as f64)
        .param(&w)
        .build()
        .unwrap();
    let g = Array1::<f64>::ones(3);
    let arrived = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for round in 1..=each {
                    // SeqCst: a start line, nothing published through it.
                    arrived.fetch_add(1, Ordering::SeqCst);
                    while arrived.load(Ordering::SeqCst) < threads * round {
                        std::thread::yield_now(); // the other thread may need this core
                    }
                    sgd.step((&g,)).unwrap();
                }
            });
        }
    });
    let n = (threads * each) as f64;
    assert_eq!(sgd.steps(), n as i64);
    assert!(w.read().iter().all(|&x| x == -0.5 * n * (n + 1.0) / 2.0));
    assert_eq!(sgd.learning_rate(), 0.5 * (n + 1.0));
}

/// A factor of zero moves no parameter; the step still counts and Adam's moments still
/// follow the gradients (as PyTorch's optimizers do with a zero rate). The same schedule
/// on a packed set.
#[test]
fn a_zero_factor_moves_nothing_but_the_state() {
    let w0 = Array1::from_vec(vec![1.0f32, -2.0, 3.0]);
    let w = Variable::new(w0.clone());
    let adam = Optimizer::adam(0.1)
        .schedule(|t| if t <= 2 { 0.0 } else { 1.0 })
        .param(&w)
        .build()
        .unwrap();
    let (set, packed) = Optimizer::adam(0.1)
        .schedule(|t| if t <= 2 { 0.0 } else { 1.0 })
        .build_packed(Packed::builder().tensor("w", &w0))
        .unwrap();
    let g = Array1::from_vec(vec![0.5f32, 0.5, -0.5]);
    for _ in 0..2 {
        adam.step((&g,)).unwrap();
        packed.step((&g,)).unwrap();
    }
    assert_eq!(w.read().to_owned(), w0);
    let stored = set.read();
    let stored = stored.snapshot().as_slice().unwrap();
    assert_eq!(stored[..3], *w0.as_slice().unwrap());
    assert!(stored[3..9].iter().all(|&m| m != 0.0), "the moments moved");
    adam.step((&g,)).unwrap();
    packed.step((&g,)).unwrap();
    assert_ne!(w.read().to_owned(), w0, "the third step moves it");
    let (packed_w, plain_w) = (set.read(), w.read());
    let packed_w = packed_w.get::<Ix1>(0).unwrap();
    // Bit for bit, except under miri (its `powi` differs in the last bits between calls).
    common::same_floats(packed_w.as_slice().unwrap(), plain_w.as_slice().unwrap());
    assert_eq!((adam.steps(), packed.steps()), (3, 3));
}

/// A factor that is not finite, or negative, fails its step with a typed error naming the
/// optimizer's state; nothing of the step is applied, not even its count.
#[test]
fn a_bad_factor_is_an_error_that_applies_nothing() {
    for bad in [f32::NAN, f32::INFINITY, -1.0] {
        let w = Variable::new(Array1::<f32>::ones(2));
        let sgd = Optimizer::sgd(0.1)
            .name("sgd")
            .schedule(move |t| if t == 2 { bad } else { 1.0 })
            .param(&w)
            .build()
            .unwrap();
        let g = Array1::<f32>::ones(2);
        sgd.step((&g,)).unwrap();
        let after_one = w.read().to_owned();
        let err = sgd.step((&g,)).unwrap_err();
        match &err {
            Error::InvalidValue { variable, problem } => {
                assert_eq!(variable, "sgd.state");
                assert!(problem.contains("step 2"), "{problem}");
            }
            other => panic!("{bad}: {other:?}"),
        }
        assert_eq!(w.read().to_owned(), after_one, "{bad}: nothing applied");
        assert_eq!(sgd.steps(), 1, "{bad}: the step is not counted");
    }
}
