//! A dense optimizer's state that makes a step non-finite (restored from elsewhere, or
//! assigned): a NaN moment or momentum buffer, an infinite first moment, a negative second
//! moment. The step is an `InvalidValue` naming the state variable, the parameter and the
//! element, and writes nothing: every parameter and the state keep their bits and their
//! versions.

use mvtensor::optim::{Optimizer, Packed};
use mvtensor::{Error, Store, Variable};
use ndarray::{Array1, Ix1};

/// Every element's bits (a NaN compares unequal to itself).
fn bits(values: &Variable<f32, Ix1>) -> Vec<u32> {
    values.read().iter().map(|x| x.to_bits()).collect()
}

/// Puts `value` at `at` of `state`, steps with `grads`, and checks the refusal: an
/// `InvalidValue` naming `state` whose message names `of` and `moment`; the parameters and
/// the state unchanged, bit for bit and version for version. Then puts the state back.
fn refused(
    step: impl Fn() -> mvtensor::Result<i64>,
    state: &Variable<f32, Ix1>,
    params: &[&Variable<f32, Ix1>],
    (at, value): (usize, f32),
    (of, moment): (&str, &str),
) {
    let good = state.read().to_owned();
    let mut bad = good.clone();
    bad[at] = value;
    state.assign(bad).unwrap();
    let before: Vec<_> = params.iter().map(|p| (bits(p), p.version())).collect();
    let (state_bits, state_version) = (bits(state), state.version());
    let err = step().unwrap_err();
    match &err {
        Error::InvalidValue { variable, problem } => {
            assert_eq!(variable, state.name(), "{err}");
            assert!(problem.contains(&format!("{moment} of `{of}`")), "{err}");
            assert!(problem.contains(&format!("{value:?}")), "{err}");
        }
        other => panic!("not InvalidValue: {other}"),
    }
    let after: Vec<_> = params.iter().map(|p| (bits(p), p.version())).collect();
    assert_eq!(after, before, "no parameter written: {err}");
    assert_eq!((bits(state), state.version()), (state_bits, state_version));
    state.assign(good).unwrap();
}

#[test]
fn adam_refuses_a_state_with_an_invalid_moment_and_writes_nothing() {
    let store = Store::new();
    let w = store.variable("w", Array1::<f32>::ones(3)).unwrap();
    let b = store.variable("b", Array1::<f32>::zeros(2)).unwrap();
    let adam = Optimizer::adam(0.1)
        .name("adam")
        .param(&w)
        .param(&b)
        .build()
        .unwrap();
    adam.register_state(&store).unwrap();
    let grads = (Array1::<f32>::ones(3), Array1::<f32>::ones(2));
    let step = || adam.step((&grads.0, &grads.1));
    assert_eq!(step().unwrap(), 1);
    let state = store.get::<f32, Ix1>("adam.state").unwrap();
    // The state: w's m (0..3) and v (3..6), b's m (6..8) and v (8..10), the count.
    let params = [&w, &b];
    refused(step, &state, &params, (4, -1.0), ("w", "second moment"));
    refused(step, &state, &params, (6, f32::NAN), ("b", "first moment"));
    refused(step, &state, &params, (9, f32::NAN), ("b", "second moment"));
    refused(
        step,
        &state,
        &params,
        (0, f32::NEG_INFINITY),
        ("w", "first moment"),
    );
    // A second moment of 0 is valid (a fresh state's), and the state put back steps on.
    assert_eq!(step().unwrap(), 2);
    assert_eq!(adam.steps(), 2);
    assert!(w.read().iter().all(|x| x.is_finite() && *x < 1.0));
}

#[test]
fn momentum_refuses_a_buffer_that_is_not_finite() {
    let w = Variable::builder(Array1::<f32>::ones(4)).name("w").build();
    let sgd = Optimizer::momentum(0.1, 0.9)
        .name("sgd")
        .param(&w)
        .build()
        .unwrap();
    let store = Store::new();
    sgd.register_state(&store).unwrap();
    let g = Array1::<f32>::ones(4);
    let step = || sgd.step(&g);
    step().unwrap();
    let state = store.get::<f32, Ix1>("sgd.state").unwrap();
    refused(step, &state, &[&w], (2, f32::NAN), ("w", "momentum buffer"));
    // A negative buffer is a velocity, not an error.
    let mut negative = state.read().to_owned();
    negative[1] = -5.0;
    state.assign(negative).unwrap();
    assert_eq!(step().unwrap(), 2);
}

/// A state kept after a packed set's tensors is checked the same way: the error names the
/// set's variable and the tensor (`<set>.<tensor>`), and the set keeps its version.
#[test]
fn a_packed_sets_state_is_checked_as_a_state_of_its_own() {
    let tensors = Packed::builder()
        .name("mlp")
        .tensor("w", &Array1::<f32>::ones(2))
        .tensor("b", &Array1::<f32>::ones(3));
    let (set, adam) = Optimizer::adam(0.1)
        .name("opt")
        .build_packed(tensors)
        .unwrap();
    let grads = (Array1::<f32>::ones(2), Array1::<f32>::ones(3));
    let step = || adam.step((&grads.0, &grads.1));
    step().unwrap();
    // The set's 5 elements, then w's m (5..7) and v (7..9), b's m (9..12) and v (12..15).
    let state = set.variable();
    assert_eq!(state.read().len(), 5 + 10 + 2);
    refused(step, state, &[], (13, -0.5), ("mlp.b", "second moment"));
    refused(step, state, &[], (5, f32::NAN), ("mlp.w", "first moment"));
    assert_eq!(step().unwrap(), 2);
}
