//! Optimizers over shared parameters, each step atomic over the set.

mod state;

use crate::common;

use mvtensor::optim::{HogwildSgd, Optimizer};
use mvtensor::{read_all, Error, Store, Variable};
use ndarray::{Array1, Array2, ArrayD};

/// Adam(W) with clipping, on plain arrays: the reference.
fn reference_adam(
    p: &mut [f32],
    m: &mut [f32],
    v: &mut [f32],
    g: &[f32],
    t: i32,
    (lr, wd, scale): (f32, f32, f32),
) {
    let (b1, b2, eps) = (0.9f32, 0.999f32, 1e-8f32);
    let (c1, c2) = (1.0 - b1.powi(t), 1.0 - b2.powi(t));
    for i in 0..p.len() {
        let g = scale * g[i];
        m[i] = b1 * m[i] + (1.0 - b1) * g;
        v[i] = b2 * v[i] + (1.0 - b2) * g * g;
        p[i] = p[i] * (1.0 - lr * wd) - lr * (m[i] / c1) / ((v[i] / c2).sqrt() + eps);
    }
}

#[test]
fn concurrent_adamw_steps_equal_a_serial_replay_bit_for_bit() {
    let (threads, steps): (usize, usize) = if cfg!(miri) { (2, 3) } else { (4, 250) };
    let w0 = Array2::from_shape_fn((8, 4), |(i, j)| (i as f32 - j as f32) / 7.0);
    let w = Variable::new(w0.clone());
    let b = Variable::new(Array1::<f32>::zeros(4));
    let opt = Optimizer::adamw(1e-2, 0.1)
        .clip_global_norm(2.0)
        .param(&w)
        .param(&b)
        .build()
        .unwrap();
    let gw = Array2::from_shape_fn((8, 4), |(i, j)| ((i * 4 + j) % 5) as f32 - 2.0);
    let gb = Array1::from(vec![1.0f32, -1.0, 0.5, 3.0]);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..steps {
                    opt.step((&gw, &gb)).unwrap();
                }
            });
        }
    });
    let total = threads * steps;
    assert_eq!(opt.steps(), total as i64);
    // Every step had the same gradients, so the order of steps does not matter.
    // The norm as the optimizer computes it: squares summed in f64.
    let norm = gw
        .iter()
        .chain(gb.iter())
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt();
    let scale = if norm > 2.0 { (2.0 / norm) as f32 } else { 1.0 };
    let (mut p, mut m, mut v) = (w0.into_raw_vec_and_offset().0, vec![0.0; 32], vec![0.0; 32]);
    let (mut pb, mut mb, mut vb) = (vec![0.0f32; 4], vec![0.0; 4], vec![0.0; 4]);
    for t in 1..=total as i32 {
        reference_adam(
            &mut p,
            &mut m,
            &mut v,
            gw.as_slice().unwrap(),
            t,
            (1e-2, 0.1, scale),
        );
        reference_adam(
            &mut pb,
            &mut mb,
            &mut vb,
            gb.as_slice().unwrap(),
            t,
            (1e-2, 0.1, scale),
        );
    }
    same(w.read().as_slice().unwrap(), &p);
    same(b.read().as_slice().unwrap(), &pb);
}

/// Bit for bit; under miri, whose `powi` is nondeterministic in its last bits (so the
/// optimizer's bias corrections and the reference's differ), to a relative 1e-4.
fn same(got: &[f32], want: &[f32]) {
    if cfg!(miri) {
        let close = got
            .iter()
            .zip(want)
            .all(|(g, w)| (g - w).abs() <= 1e-4 * w.abs().max(1.0));
        assert!(close && got.len() == want.len(), "{got:?} != {want:?}");
    } else {
        assert_eq!(got, want);
    }
}

#[test]
fn sgd_and_momentum_follow_their_rules() {
    let p = Variable::new(Array1::from(vec![1.0f64, 2.0]));
    let sgd = Optimizer::sgd(0.5).param(&p).build().unwrap();
    sgd.step((&Array1::from(vec![1.0, -2.0]),)).unwrap();
    assert_eq!(p.read().to_vec(), vec![0.5, 3.0]);

    let q = Variable::new(Array1::from(vec![0.0f64]));
    let momentum = Optimizer::momentum(0.1, 0.9).param(&q).build().unwrap();
    let (mut vel, mut expected) = (0.0f64, 0.0f64);
    for k in 1..=5 {
        let g = k as f64;
        momentum.step(&vec![Array1::from(vec![g])]).unwrap();
        vel = 0.9 * vel + g;
        expected -= 0.1 * vel;
    }
    assert_eq!(q.read()[0], expected);
}

#[test]
fn a_reader_sees_every_parameter_of_one_step() {
    let steps = if cfg!(miri) { 10 } else { 3000 };
    let (w, b) = (
        Variable::new(Array1::<f32>::zeros(16)),
        Variable::new(Array1::<f32>::zeros(1)),
    );
    let sgd = Optimizer::sgd(1.0).param(&w).param(&b).build().unwrap();
    let (gw, gb) = (Array1::<f32>::ones(16), Array1::<f32>::ones(1));
    let mut mid_way = 0; // looks between the first step and the last
    common::steps_while_looking(
        1,
        steps,
        || {
            sgd.step((&gw, &gb)).unwrap();
        },
        || {
            let (w, b) = read_all((&w, &b));
            assert!(
                w.iter().all(|&x| x == b[0]),
                "half a step: w {} b {}",
                w[0],
                b[0]
            );
            mid_way += usize::from(b[0] < 0.0 && b[0] > -(steps as f32));
        },
    );
    assert!(mid_way > 0, "no look while the steps ran");
    assert_eq!(b.read()[0], -(steps as f32));
}

#[test]
fn bad_gradients_are_typed_errors_that_apply_nothing() {
    let w = Variable::builder(Array2::<f32>::zeros((2, 2)))
        .name("w")
        .build();
    let b = Variable::builder(Array1::<f32>::zeros(2)).name("b").build();
    let opt = Optimizer::adam(0.1).param(&w).param(&b).build().unwrap();
    let g = Array2::<f32>::ones((2, 2));
    assert_eq!(
        opt.step((&g,)).unwrap_err(),
        Error::GradientCount {
            expected: 2,
            found: 1
        }
    );
    let err = opt.step((&g, &Array1::<f32>::ones(3))).unwrap_err();
    assert!(
        matches!(&err, Error::ShapeMismatch { variable, .. } if variable == "b"),
        "{err}"
    );
    assert_eq!(
        (opt.steps(), w.version(), b.version()),
        (0, 0, 0),
        "nothing applied"
    );
}

/// A parameter built with a dynamic shape may change shape later; its state block does not,
/// so a step then fails with a typed error naming it and applies nothing.
#[test]
fn a_parameter_that_changed_shape_fails_the_step() {
    let w = Variable::builder(Array1::<f32>::zeros(3))
        .name("w")
        .dynamic_shape()
        .build();
    let b = Variable::new(Array1::<f32>::zeros(2));
    let adam = Optimizer::adam(0.1).param(&w).param(&b).build().unwrap();
    w.assign(Array1::<f32>::zeros(4)).unwrap(); // outside any step: ordered in the queue
    let err = adam
        .step((&Array1::<f32>::ones(4), &Array1::<f32>::ones(2)))
        .unwrap_err();
    assert!(
        matches!(&err, Error::ShapeMismatch { variable, expected, found }
            if variable == "w" && expected == &[3] && found == &[4]),
        "{err}"
    );
    assert_eq!((adam.steps(), b.version()), (0, 0), "nothing applied");
}

#[test]
fn optimizer_state_rides_in_store_snapshots() {
    let store = Store::new();
    let w = store.variable("w", Array1::<f32>::ones(3)).unwrap();
    let opt = Optimizer::adam(0.1).name("adam").param(&w).build().unwrap();
    opt.register_state(&store).unwrap();
    opt.step((&Array1::<f32>::ones(3),)).unwrap();
    let snap = store.snapshot();
    let names: Vec<_> = snap.iter().map(|e| e.name().to_owned()).collect();
    assert_eq!(names, ["adam.state", "w"]);
    // w's first moment (0.1 * g), then its second (0.001 * g^2), each in w's order; then
    // the step count, `lo + hi * 2^24`.
    let state = snap.get::<f32, ndarray::Ix1>("adam.state").unwrap();
    assert_adam_block(&state.slice(ndarray::s![..6]), 0.1, 0.001, 1e-6);
    assert_eq!(state.slice(ndarray::s![6..]).to_vec(), [1.0, 0.0]);
}

/// `state` is one 3-element parameter's Adam block: every first moment `m`, then every
/// second moment `v`, each within `tol`.
fn assert_adam_block(state: &ndarray::ArrayRef1<f32>, m: f32, v: f32, tol: f32) {
    assert_eq!(state.len(), 6, "{state:?}");
    assert!(
        state.iter().take(3).all(|x| (x - m).abs() < tol),
        "{state:?}"
    );
    assert!(
        state.iter().skip(3).all(|x| (x - v).abs() < tol),
        "{state:?}"
    );
}

/// The state variable's layout, as `register_state` documents it: per parameter in order,
/// its momentum buffer (or Adam's first moment, then its second), in the parameter's own
/// order; an empty parameter has an empty block and still steps; the step count last.
#[test]
fn the_state_of_every_parameter_has_its_block() {
    let store = Store::new();
    let w = store.variable("w", Array2::<f32>::zeros((2, 2))).unwrap();
    let e = store.variable("e", Array1::<f32>::zeros(0)).unwrap();
    let b = store.variable("b", Array1::<f32>::zeros(3)).unwrap();
    let opt = Optimizer::momentum(1.0, 0.5)
        .name("mom")
        .param(&w)
        .param(&e)
        .param(&b)
        .build()
        .unwrap();
    opt.register_state(&store).unwrap();
    let gw = Array2::from_shape_vec((2, 2), vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
    let (ge, gb) = (Array1::<f32>::zeros(0), Array1::from_elem(3, 10.0f32));
    opt.step((&gw, &ge, &gb)).unwrap();
    opt.step((&gw, &ge, &gb)).unwrap();
    let snap = store.snapshot();
    let state = snap.get::<f32, ndarray::Ix1>("mom.state").unwrap();
    // v = 0.5 * v + g, twice: 1.5 * g.
    assert_eq!(
        state.to_vec(),
        [1.5, 3.0, 4.5, 6.0, 15.0, 15.0, 15.0, 2.0, 0.0]
    );
    assert_eq!(w.read()[[1, 1]], -4.0 - 6.0);

    let e = store.variable("e2", Array1::<f32>::zeros(0)).unwrap();
    let b = store.variable("b2", Array1::<f32>::zeros(3)).unwrap();
    let adam = Optimizer::adam(0.1)
        .name("adam")
        .param(&e)
        .param(&b)
        .build()
        .unwrap();
    adam.register_state(&store).unwrap();
    adam.step((&ge, &gb)).unwrap();
    let state = store.snapshot();
    let state = state.get::<f32, ndarray::Ix1>("adam.state").unwrap();
    // b's first moment (0.1 * g), then its second (0.001 * g^2); e adds nothing.
    assert_adam_block(&state.slice(ndarray::s![..6]), 1.0, 0.1, 1e-5);
    assert_eq!(state.slice(ndarray::s![6..]).to_vec(), [1.0, 0.0]);
}

#[test]
fn hogwild_sgd_loses_no_update() {
    let (threads, steps) = if cfg!(miri) { (2, 5) } else { (4, 2000) };
    let w = Variable::new(Array2::<f32>::zeros((4, 4)));
    let b = Variable::new(Array1::<f32>::zeros(4));
    let sgd = HogwildSgd::new(1.0).param(&w).param(&b);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..steps {
                    let gw = ArrayD::<f32>::ones(ndarray::IxDyn(&[4, 4]));
                    sgd.step((&gw, &Array1::<f32>::ones(4))).unwrap();
                }
            });
        }
    });
    let total = -((threads * steps) as f32);
    assert!(w.read().iter().all(|&x| x == total));
    assert!(b.read().iter().all(|&x| x == total));
}

#[test]
fn a_soft_update_is_atomic_over_the_targets_while_the_online_net_trains() {
    use mvtensor::optim::SoftUpdate;
    let rounds = if cfg!(miri) { 10 } else { 2000 };
    let (w, b) = (
        Variable::new(Array1::<f64>::zeros(8)),
        Variable::new(Array1::<f64>::zeros(1)),
    );
    let (tw, tb) = (
        Variable::new(Array1::<f64>::zeros(8)),
        Variable::new(Array1::<f64>::zeros(1)),
    );
    let train = Optimizer::sgd(1.0).param(&w).param(&b).build().unwrap();
    let polyak = SoftUpdate::new()
        .pair(&tw, &w)
        .pair(&tb, &b)
        .build()
        .unwrap();
    let step = |_| {
        train
            // Gradients of -1: w and b grow together.
            .step((&Array1::from_elem(8, -1.0), &Array1::from_elem(1, -1.0)))
            .unwrap();
    };
    let blend = |_| {
        polyak.apply(0.25).unwrap();
    };
    let mut moving = 0; // looks at targets that had left zero
    common::while_looking(&[&step, &blend], rounds, || {
        let (tw, tb) = read_all((&tw, &tb));
        assert!(tw.iter().all(|&x| x == tb[0]), "half a soft update");
        moving += usize::from(tb[0] != 0.0);
    });
    assert!(moving > 0, "no look while the targets moved");
    polyak.apply(1.0).unwrap();
    assert_eq!((tw.read()[3], tb.read()[0]), (rounds as f64, rounds as f64));
    // A pair whose shapes differ is refused at build (accepted, every apply would fail);
    // one that comes to differ later fails the apply.
    let other = Variable::builder(Array1::<f64>::zeros(3))
        .name("other")
        .dynamic_shape()
        .build();
    let refused = SoftUpdate::new().pair(&other, &w).build().unwrap_err();
    assert!(
        matches!(&refused, Error::ShapeMismatch { variable, .. } if variable == "other"),
        "{refused}"
    );
    other.assign(Array1::<f64>::zeros(w.shape()[0])).unwrap();
    let later = SoftUpdate::new().pair(&other, &w).build().unwrap();
    other.assign(Array1::<f64>::zeros(3)).unwrap();
    assert!(matches!(later.apply(0.5), Err(Error::ShapeMismatch { .. })));
}

/// A state whose step count is garbage (assigned by hand here; a checkpoint from elsewhere
/// could do the same) fails the step with a typed error naming it, and applies nothing.
#[test]
fn a_garbage_step_count_is_an_error_not_a_panic() {
    let store = Store::new();
    let w = store.variable("w", Array1::<f32>::ones(3)).unwrap();
    let adam = Optimizer::adam(0.1).name("adam").param(&w).build().unwrap();
    adam.register_state(&store).unwrap();
    adam.step((&Array1::<f32>::ones(3),)).unwrap();
    let state = store.get::<f32, ndarray::Ix1>("adam.state").unwrap();
    let (w_before, state_before) = (w.read().to_owned(), state.read().to_owned());
    for garbage in [[f32::NAN, 0.0], [-1.0, 0.0], [0.0, 1e15], [2.5, 0.0]] {
        let mut bad = state_before.clone();
        bad.slice_mut(ndarray::s![6..])
            .assign(&ndarray::arr1(&garbage));
        state.assign(bad).unwrap();
        let err = adam.step((&Array1::<f32>::ones(3),)).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidValue { variable, .. } if variable == "adam.state"),
            "{err}"
        );
        assert_eq!(*w.read(), w_before, "nothing applied");
        assert_eq!(adam.steps(), 0, "no valid count");
    }
    state.assign(state_before).unwrap();
    assert_eq!(adam.step((&Array1::<f32>::ones(3),)).unwrap(), 2);
}

/// Threads that each decay their own rate (word2vec's Hogwild schedule) get each step
/// applied with the rate it was given, none lost; a bad rate applies nothing.
#[test]
fn hogwild_steps_apply_each_callers_own_learning_rate() {
    let (threads, steps) = if cfg!(miri) { (2, 4) } else { (4, 1000) };
    let w = Variable::new(Array1::<f64>::zeros(3));
    let sgd = HogwildSgd::new(1.0).param(&w);
    std::thread::scope(|s| {
        for t in 0..threads {
            let sgd = &sgd;
            s.spawn(move || {
                for i in 0..steps {
                    // Thread t's i-th rate: distinct whole numbers, so every sum is exact.
                    let lr = (t * steps + i) as f64;
                    sgd.step_with_lr(lr, (&Array1::<f64>::ones(3),)).unwrap();
                }
            });
        }
    });
    let n = (threads * steps) as f64;
    let expected = -(n * (n - 1.0) / 2.0);
    assert!(
        w.read().iter().all(|&x| x == expected),
        "{:?}",
        w.read().to_vec()
    );
    assert_eq!(sgd.lr(), 1.0);
    for bad in [-1.0, f64::NAN, f64::INFINITY] {
        let err = sgd
            .step_with_lr(bad, (&Array1::<f64>::ones(3),))
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidSetting { owner, setting: "lr", .. }
                if owner.contains(w.name())),
            "{err}"
        );
        assert!(w.read().iter().all(|&x| x == expected));
    }
}

/// Settings no step could use are refused by `build` (and `build_packed`), naming the
/// optimizer and the setting, before anything is built: the parameters stay unclaimed.
#[test]
fn optimizer_settings_out_of_range_are_refused_before_anything_is_built() {
    let w = Variable::new(Array1::<f32>::zeros(2));
    let nan = f32::NAN;
    let cases = [
        ("lr", Optimizer::sgd(nan)),
        ("lr", Optimizer::adam(-1e-3)),
        ("lr", Optimizer::momentum(f32::INFINITY, 0.9)),
        ("momentum", Optimizer::momentum(0.1, -0.5)),
        ("beta1", Optimizer::adam(1e-3).betas(1.0, 0.999)),
        ("beta2", Optimizer::adam(1e-3).betas(0.9, nan)),
        ("eps", Optimizer::adam(1e-3).eps(-1e-8)),
        ("weight_decay", Optimizer::adamw(1e-3, nan)),
        (
            "clip_global_norm",
            Optimizer::sgd(0.1).clip_global_norm(-1.0),
        ),
    ];
    for (bad, builder) in cases {
        let err = builder.name("opt").param(&w).build().unwrap_err();
        assert!(
            matches!(&err, Error::InvalidSetting { owner, setting, .. }
                if owner == "optimizer `opt`" && *setting == bad),
            "{bad}: {err}"
        );
    }
    let packed = mvtensor::optim::Packed::builder().tensor("t", &Array1::<f32>::zeros(2));
    let err = Optimizer::adam(nan).build_packed(packed).unwrap_err();
    assert!(
        matches!(err, Error::InvalidSetting { setting: "lr", .. }),
        "{err}"
    );
    // Nothing was claimed: a section can still take the parameter exclusively.
    mvtensor::CriticalSection::builder()
        .resource(&w)
        .build()
        .unwrap();
    // An optimizer of nothing: every step would do nothing.
    let err = Optimizer::adam(1e-3f32).name("opt").build().unwrap_err();
    assert!(
        matches!(&err, Error::InvalidSetting { owner, setting: "params", .. }
            if owner == "optimizer `opt`"),
        "{err}"
    );
    // The edges are in range: a zero rate, no momentum, an infinite clipping norm.
    let zero = Optimizer::momentum(0.0, 0.0).clip_global_norm(f32::INFINITY);
    zero.param(&Variable::new(Array1::<f32>::zeros(2)))
        .build()
        .unwrap();
}

/// A soft update's `tau` outside `[0, 1]` (NaN included) is refused and blends nothing.
#[test]
fn a_soft_update_refuses_a_tau_outside_zero_to_one() {
    use mvtensor::optim::SoftUpdate;
    let (target, online) = (
        Variable::builder(Array1::<f64>::zeros(2))
            .name("target")
            .build(),
        Variable::new(Array1::<f64>::ones(2)),
    );
    let soft = SoftUpdate::new().pair(&target, &online).build().unwrap();
    for tau in [-0.1, 1.5, f64::NAN] {
        let err = soft.apply(tau).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidSetting { owner, setting: "tau", .. }
                if owner.contains("`target`")),
            "{err}"
        );
        assert_eq!(target.read().to_vec(), vec![0.0, 0.0]);
    }
    soft.apply(1.0).unwrap();
    assert_eq!(target.read().to_vec(), vec![1.0, 1.0]);
}

/// A parameter added twice is refused (PyTorch refuses it too): each step would apply two
/// gradients to it, and Adam keep two states for it.
#[test]
fn a_parameter_added_twice_is_refused() {
    let w = Variable::builder(Array1::<f32>::zeros(2)).name("w").build();
    let b = Variable::new(Array1::<f32>::zeros(2));
    let twice = |err: Error| {
        matches!(&err, Error::InvalidSetting { setting: "params", value, .. }
            if value.contains("`w`"))
    };
    let built = Optimizer::adam(1e-3).param(&w).param(&b).param(&w).build();
    assert!(twice(built.unwrap_err()));
    let set = mvtensor::optim::Packed::builder()
        .name("w")
        .tensor("t", &Array1::<f32>::zeros(2))
        .build()
        .unwrap();
    let built = Optimizer::sgd(0.1f32).packed(&set).packed(&set).build();
    assert!(twice(built.unwrap_err()));
    let sgd = HogwildSgd::new(1.0).param(&w).param(&w);
    let ones = Array1::<f32>::ones(2);
    assert!(twice(sgd.step((&ones, &ones)).unwrap_err()));
    assert_eq!(w.read().to_vec(), vec![0.0, 0.0], "nothing applied");
}

/// Clipping by global norm counts every element: squares summed in `f32` lost each one
/// once the sum was ~2^24 times larger (here: a gradient of 4096 beside a thousand ones had
/// a norm of exactly 4096, and a model of 2^26 ones clipped to a step of norm 2 for 1).
#[test]
fn clipping_counts_every_element_of_a_large_gradient() {
    let n = 1001;
    let w = Variable::new(Array1::<f32>::zeros(n));
    let sgd = Optimizer::sgd(1.0f32)
        .clip_global_norm(1.0)
        .param(&w)
        .build()
        .unwrap();
    let mut g = Array1::<f32>::ones(n);
    g[0] = 4096.0; // 4096^2 = 2^24
    sgd.step((&g,)).unwrap();
    let norm = (16_777_216.0f64 + 1000.0).sqrt();
    assert_eq!(w.read()[1], -((1.0 / norm) as f32));
}

/// An optimizer built with `error_if_nonfinite` refuses a step whose gradients hold a NaN or
/// an infinity (in any gradient, at any position, a packed set's tensor named by its label)
/// and applies nothing: the parameters, the moments and the step count are as before, so
/// the next finite step gives the same result as if the bad one never came. Without it,
/// the step is applied and the NaN stays in Adam's moments, which the next step refuses.
#[test]
fn nonfinite_gradients_are_refused_when_asked_and_poison_otherwise() {
    use mvtensor::optim::Packed;
    let grad = |bad: Option<(usize, f32)>| {
        let mut g = Array1::from_shape_fn(37, |i| (i as f32 * 0.37).sin());
        if let Some((at, x)) = bad {
            g[at] = x;
        }
        g
    };
    let build = |guard: bool| {
        let (w, b) = (
            Variable::builder(Array1::<f32>::ones(37)).name("w").build(),
            Variable::builder(Array1::<f32>::ones(3)).name("b").build(),
        );
        let builder = Optimizer::adam(0.1f32).param(&w).param(&b);
        let adam = if guard {
            builder.error_if_nonfinite()
        } else {
            builder
        }
        .build()
        .unwrap();
        (w, b, adam)
    };
    let fine = Array1::<f32>::ones(3);
    let (w, b, adam) = build(true);
    let (w_ref, b_ref, reference) = build(true);
    for (at, x) in [
        (0, f32::NAN),
        (36, f32::INFINITY),
        (8, f32::NEG_INFINITY),
        (31, f32::NAN),
    ] {
        let refused = adam.step((&grad(Some((at, x))), &fine)).unwrap_err();
        assert!(
            matches!(&refused, Error::NonFinite { parameter, .. } if parameter == "w"),
            "{refused}"
        );
        let in_b = adam
            .step((&grad(None), &Array1::from_elem(3, x)))
            .unwrap_err();
        assert!(matches!(&in_b, Error::NonFinite { parameter, .. } if parameter == "b"));
        assert_eq!(adam.steps(), 0, "nothing applied");
    }
    for _ in 0..2 {
        adam.step((&grad(None), &fine)).unwrap();
        reference.step((&grad(None), &fine)).unwrap();
    }
    // Bit for bit (to a relative 1e-4 under miri, whose `powi` is nondeterministic).
    common::same_floats(&w.read().to_vec(), &w_ref.read().to_vec());
    common::same_floats(&b.read().to_vec(), &b_ref.read().to_vec());
    assert_eq!(adam.steps(), 2);

    // A packed set's tensor is named by its label.
    let set = Packed::builder()
        .tensor("w", &Array1::<f32>::ones(37))
        .tensor("b", &Array1::<f32>::ones(3))
        .build()
        .unwrap();
    let packed = Optimizer::adam(0.1f32)
        .error_if_nonfinite()
        .packed(&set)
        .build()
        .unwrap();
    let refused = packed
        .step((&grad(None), &Array1::from_elem(3, f32::NAN)))
        .unwrap_err();
    assert!(
        matches!(&refused, Error::NonFinite { parameter, .. } if parameter.ends_with(".b")),
        "{refused}"
    );

    // Without the guard the NaN is applied, and stays in the moments: the next step refuses
    // that state (a step from it would write NaN), naming it, and applies nothing.
    let (w, _, unguarded) = build(false);
    unguarded.step((&grad(Some((0, f32::NAN))), &fine)).unwrap();
    assert!(w.read()[0].is_nan());
    let stuck = unguarded.step((&grad(None), &fine)).unwrap_err();
    assert!(
        matches!(&stuck, Error::InvalidValue { problem, .. } if problem.contains("moment of `w`")),
        "{stuck}"
    );
    assert_eq!((unguarded.steps(), w.version()), (1, 1), "nothing applied");
}

/// Hogwild SGD refuses non-finite gradients when asked, before writing any parameter (a
/// NaN in the second gradient leaves the first parameter as it was), naming the parameter
/// or the packed set's tensor; without the guard the NaN is applied.
#[test]
fn hogwild_refuses_nonfinite_gradients_when_asked() {
    use mvtensor::optim::Packed;
    let build = || {
        let w = Variable::builder(Array1::<f32>::ones(5)).name("w").build();
        let b = Variable::builder(Array1::<f32>::ones(2)).name("b").build();
        (w, b)
    };
    let (w, b) = build();
    let guarded = HogwildSgd::new(0.5f32)
        .error_if_nonfinite()
        .param(&w)
        .param(&b);
    let (good, ones) = (Array1::<f32>::ones(5), Array1::<f32>::ones(2));
    for x in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let refused = guarded
            .step((&good, &Array1::from_vec(vec![1.0, x])))
            .unwrap_err();
        assert!(
            matches!(&refused, Error::NonFinite { parameter, .. } if parameter == "b"),
            "{refused}"
        );
        let mut bad_w = good.clone();
        bad_w[4] = x;
        let refused = guarded.step((&bad_w, &ones)).unwrap_err();
        assert!(matches!(&refused, Error::NonFinite { parameter, .. } if parameter == "w"));
    }
    assert_eq!((w.version(), b.version()), (0, 0), "nothing applied");
    guarded.step((&good, &ones)).unwrap();
    assert_eq!((w.read()[0], b.read()[0]), (0.5, 0.5));

    let set = Packed::builder()
        .tensor("w", &Array1::<f32>::ones(5))
        .tensor("b", &Array1::<f32>::ones(2))
        .build()
        .unwrap();
    let packed = HogwildSgd::new(0.5f32).error_if_nonfinite().packed(&set);
    let refused = packed
        .step((&good, &Array1::from_elem(2, f32::NAN)))
        .unwrap_err();
    assert!(
        matches!(&refused, Error::NonFinite { parameter, .. } if parameter.ends_with(".b")),
        "{refused}"
    );

    let (w, b) = build();
    let unguarded = HogwildSgd::new(0.5f32).param(&w).param(&b);
    unguarded
        .step((&good, &Array1::from_vec(vec![1.0, f32::NAN])))
        .unwrap();
    assert!(b.read()[1].is_nan());
}

/// An optimizer of one parameter takes its gradient alone, as an array, a view or a
/// snapshot's array, the same as the 1-tuple; a lone gradient for several parameters is a
/// count error.
#[test]
fn a_lone_parameters_gradient_needs_no_tuple() {
    let w = Variable::new(Array1::<f32>::zeros(3));
    let sgd = Optimizer::sgd(1.0f32).param(&w).build().unwrap();
    let g = Array1::<f32>::ones(3);
    sgd.step(&g).unwrap();
    sgd.step(&g.view()).unwrap();
    let held = Variable::new(Array1::<f32>::ones(3));
    sgd.step(&*held.read()).unwrap();
    sgd.step((&g,)).unwrap();
    assert_eq!(w.read().to_vec(), [-4.0; 3]);
    let two = Optimizer::sgd(1.0f32)
        .param(&w)
        .param(&held)
        .build()
        .unwrap();
    assert!(matches!(
        two.step(&g),
        Err(Error::GradientCount {
            expected: 2,
            found: 1
        })
    ));
}
