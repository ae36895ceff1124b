//! A packed set built by its optimizer (`OptimizerBuilder::build_packed`): the optimizer's
//! state after the set's tensors, in the same variable, one version a step for both.

use mvtensor::optim::{HogwildSgd, Optimizer, OptimizerBuilder, Packed, PackedBuilder, SoftUpdate};
use mvtensor::{Error, Store, Variable};
use ndarray::{Array1, Array2, Ix1, Ix2};

use crate::common;

fn tensors(w: &Array2<f32>, b: &Array1<f32>) -> PackedBuilder<f32> {
    Packed::builder().name("mlp").tensor("w", w).tensor("b", b)
}

/// The step count at the end of a state (two floats: `lo + hi * 2^24`).
fn steps_in(state: &[f32]) -> f32 {
    let [lo, hi] = state[state.len() - 2..] else {
        unreachable!("two elements")
    };
    lo + hi * (1 << 24) as f32
}

/// With a parameter of its own before the set, twenty AdamW steps with clipping: the same
/// parameters and the same state, bit for bit, as the optimizer whose state is apart.
#[test]
fn a_set_holding_its_state_steps_as_the_one_with_its_state_apart() {
    let w0 = Array2::from_shape_fn((4, 3), |(i, j)| (i as f32 - j as f32) / 5.0);
    let b0 = Array1::from(vec![0.5f32, -0.25, 1.0]);
    let e0 = Array1::from(vec![0.1f32, 0.2]);
    let options = |o: OptimizerBuilder<f32>| o.betas(0.8, 0.99).clip_global_norm(3.0).name("opt");
    let (e1, e2) = (Variable::new(e0.clone()), Variable::new(e0));
    let (fused_set, fused) = options(Optimizer::adamw(1e-2, 0.05).param(&e1))
        .build_packed(tensors(&w0, &b0))
        .unwrap();
    let apart_set = tensors(&w0, &b0).build().unwrap();
    let apart = options(Optimizer::adamw(1e-2, 0.05).param(&e2))
        .packed(&apart_set)
        .build()
        .unwrap();
    for k in 0..20 {
        let ge = Array1::from_shape_fn(2, |i| (i + k) as f32 - 1.5);
        let gw = Array2::from_shape_fn((4, 3), |(i, j)| ((i + j + k) % 5) as f32 - 2.0);
        let gb = Array1::from_shape_fn(3, |i| (i + k) as f32 * 0.3);
        assert_eq!(fused.step((&ge, &gw, &gb)).unwrap(), k as i64 + 1);
        apart.step((&ge, &gw, &gb)).unwrap();
    }
    assert_eq!((fused.steps(), apart.steps()), (20, 20));
    let (got, want) = (fused_set.read(), apart_set.read());
    same(
        got.get::<Ix2>(0).unwrap().as_slice(),
        want.get::<Ix2>(0).unwrap().as_slice(),
    );
    same(
        got.get::<Ix1>(1).unwrap().as_slice(),
        want.get::<Ix1>(1).unwrap().as_slice(),
    );
    same(e1.read().as_slice(), e2.read().as_slice());
    // The state after the tensors is the other optimizer's state variable.
    let store = Store::new();
    apart.register_state(&store).unwrap();
    let state = store.get::<f32, Ix1>("opt.state").unwrap().read();
    let layout = fused_set.layout();
    let all = got.snapshot();
    assert_eq!((layout.elements(), layout.stored()), (15, 15 + state.len()));
    same(
        all.as_slice().unwrap().get(layout.elements()..),
        state.as_slice(),
    );
}

/// Bit for bit (to a relative 1e-4 under miri: `common::same_floats`).
fn same(got: Option<&[f32]>, want: Option<&[f32]>) {
    common::same_floats(
        got.expect("standard layout"),
        want.expect("standard layout"),
    );
}

/// One version a step, one variable in the store: registering the set registers the state,
/// and `register_state` then finds it there.
#[test]
fn one_version_a_step_and_one_tensor_to_checkpoint() {
    let (set, adam) = Optimizer::adam(0.1)
        .name("opt")
        .build_packed(tensors(&Array2::ones((2, 2)), &Array1::ones(2)))
        .unwrap();
    let store = Store::new();
    store.register(set.variable()).unwrap();
    adam.register_state(&store).unwrap();
    for _ in 0..3 {
        adam.step((&Array2::<f32>::ones((2, 2)), &Array1::<f32>::ones(2)))
            .unwrap();
    }
    assert_eq!(set.variable().version(), 3, "one version a step");
    let snapshot = store.snapshot();
    let names: Vec<_> = snapshot.iter().map(|e| e.name().to_owned()).collect();
    assert_eq!(names, ["mlp"]);
    // The tensors (6), both moments of each (12), the step count (2).
    let all = snapshot.get::<f32, Ix1>("mlp").unwrap();
    assert_eq!(all.len(), 6 + 12 + 2);
    assert_eq!(steps_in(all.as_slice().unwrap()), 3.0);
    // The layout's views take the whole variable as well as the tensors' elements alone.
    let w = set
        .layout()
        .view::<Ix2, _>(0, all.as_slice().unwrap())
        .unwrap();
    assert!(w.iter().all(|&x| x < 1.0));
    // Without the set registered, `register_state` registers it; another variable of the
    // set's name is not the state.
    let other = Store::new();
    adam.register_state(&other).unwrap();
    assert!(other.contains("mlp"));
    let taken = Store::new();
    taken
        .register(
            &Variable::builder(Array1::<f32>::zeros(20))
                .name("mlp")
                .build(),
        )
        .unwrap();
    let err = adam.register_state(&taken).unwrap_err();
    assert!(matches!(err, Error::NameTaken { ref name, .. } if name == "mlp"));
}

/// The set belongs to its optimizer: Hogwild's writes would not cover the state, so its
/// steps are refused whole, before any parameter is written; so is a second optimizer.
#[test]
fn a_set_holding_state_is_refused_to_hogwild_and_to_another_optimizer() {
    let (set, adam) = Optimizer::adam(0.1)
        .build_packed(tensors(&Array2::zeros((2, 2)), &Array1::zeros(2)))
        .unwrap();
    let refused = |err: Error| {
        assert!(
            matches!(&err, Error::InvalidSetting { owner, setting: "optimizer", value, .. }
                if owner == "packed set `mlp`" && value.contains("6 elements")
                    && value.contains(&format!("{} in all", 6 + 2 * 6 + 2))),
            "{err}"
        );
    };
    let e = Variable::new(Array1::<f32>::zeros(2));
    let hogwild = HogwildSgd::new(1.0).param(&e).packed(&set);
    let (ge, gw, gb) = (Array1::ones(2), Array2::ones((2, 2)), Array1::ones(2));
    refused(hogwild.step((&ge, &gw, &gb)).unwrap_err());
    assert_eq!(
        (e.version(), set.variable().version()),
        (0, 0),
        "nothing applied"
    );
    drop(adam); // the set's section is gone, not its state
    refused(Optimizer::sgd(1.0).packed(&set).build().unwrap_err());
    let other = tensors(&Array2::zeros((2, 2)), &Array1::zeros(2));
    refused(
        Optimizer::sgd(1.0)
            .packed(&set)
            .build_packed(other)
            .unwrap_err(),
    );
}

/// A target network follows an online one built by its optimizer: the tensors are blended,
/// the online state is left alone, and a target's own state is kept as it is.
#[test]
fn a_soft_update_blends_the_tensors_of_sets_holding_state() {
    let (online, adam) = Optimizer::adam(0.1)
        .build_packed(tensors(&Array2::ones((2, 2)), &Array1::ones(2)))
        .unwrap();
    adam.step((&Array2::<f32>::ones((2, 2)), &Array1::<f32>::ones(2)))
        .unwrap();
    let plain = Packed::builder()
        .name("target")
        .tensor("w", &Array2::<f32>::zeros((2, 2)))
        .tensor("b", &Array1::<f32>::zeros(2))
        .build()
        .unwrap();
    // A target that holds a state of its own (its optimizer gone: a section holds its
    // variables exclusively): the state is kept.
    let (holding, momentum) = Optimizer::momentum(0.1, 0.9)
        .build_packed(
            Packed::builder()
                .name("target2")
                .tensor("w", &Array2::<f32>::zeros((2, 2)))
                .tensor("b", &Array1::<f32>::zeros(2)),
        )
        .unwrap();
    momentum
        .step((&Array2::<f32>::ones((2, 2)), &Array1::<f32>::ones(2)))
        .unwrap();
    drop(momentum);
    let polyak = SoftUpdate::new()
        .packed(&plain, &online)
        .packed(&holding, &online)
        .build()
        .unwrap();
    let online_before = online.read().snapshot().as_slice().unwrap().to_vec();
    let holding_before = holding.read().snapshot().as_slice().unwrap().to_vec();
    polyak.apply(0.5).unwrap();
    let want: Vec<f32> = online_before.iter().take(6).map(|&x| 0.5 * x).collect();
    assert_eq!(plain.read().snapshot().as_slice().unwrap(), &want[..]);
    let got = holding.read();
    let got = got.snapshot().as_slice().unwrap();
    let blended = |(&o, &t): (&f32, &f32)| 0.5 * o + 0.5 * t;
    let want2: Vec<f32> = online_before
        .iter()
        .zip(&holding_before)
        .take(6)
        .map(blended)
        .collect();
    assert_eq!(&got[..6], &want2[..]);
    assert_eq!(&got[6..], &holding_before[6..], "its state kept");
    assert_eq!(
        online.read().snapshot().as_slice().unwrap().to_vec(),
        online_before,
        "online untouched"
    );
    // Sets of other tensors are refused.
    let small = Packed::builder()
        .tensor("w", &Array1::<f32>::zeros(3))
        .build()
        .unwrap();
    let err = SoftUpdate::new()
        .packed(&small, &online)
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { ref variable, .. } if variable == "packed.w"));
    let transposed = Packed::builder()
        .tensor("w", &Array2::<f32>::zeros((2, 2)))
        .tensor("b", &Array2::<f32>::zeros((1, 2)))
        .build()
        .unwrap();
    let err = SoftUpdate::new()
        .packed(&transposed, &online)
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        Error::ShapeMismatch {
            variable: "packed.b".into(),
            expected: vec![2],
            found: vec![1, 2]
        }
    );
}

#[test]
fn two_tensors_of_one_name_are_refused() {
    let err = Optimizer::<f32>::adam(0.1)
        .build_packed(
            Packed::builder()
                .tensor("w", &Array1::zeros(2))
                .tensor("w", &Array1::zeros(3)),
        )
        .unwrap_err();
    assert!(matches!(err, Error::NameTaken { ref name, .. } if name == "packed.w"));
}

/// Adam steps from several threads while a reader looks: every version it sees holds the
/// tensors, both moments and the step count of one step, each as a serial replay of that
/// many steps has them (every step takes the same gradients, so any order replays), and
/// the step counts it sees never go back.
#[test]
fn a_reader_sees_the_moments_of_the_step_it_sees() {
    let (threads, steps) = if cfg!(miri) { (2, 3) } else { (3, 150) };
    let w0 = Array2::from_shape_fn((8, 8), |(i, j)| (i as f32 - j as f32) / 7.0);
    let b0 = Array1::from_shape_fn(8, |i| i as f32 / 4.0);
    let gw = Array2::from_shape_fn((8, 8), |(i, j)| ((i * 3 + j) % 5) as f32 - 2.0);
    let gb = Array1::from_elem(8, 0.5f32);
    let build = || {
        Optimizer::adam(1e-2)
            .build_packed(tensors(&w0, &b0))
            .unwrap()
    };
    let stored = |set: &Packed<f32>| set.read().snapshot().as_slice().unwrap().to_vec();
    // The whole stored value after each number of steps, one thread.
    let (replay_set, replay) = build();
    let mut after = vec![stored(&replay_set)];
    for _ in 0..threads * steps {
        replay.step((&gw, &gb)).unwrap();
        after.push(stored(&replay_set));
    }
    let (set, adam) = build();
    let mut counts = std::collections::BTreeSet::new();
    let mut seen = 0;
    common::steps_while_looking(
        threads,
        steps,
        || {
            adam.step((&gw, &gb)).unwrap();
        },
        || {
            let version = set.read();
            let all = version.snapshot().as_slice().unwrap();
            let t = steps_in(all) as usize;
            assert!(t >= seen, "a later read went back in time");
            seen = t;
            // Tensors, moments and count of step `t`, never a mix.
            same(Some(all), Some(&after[t]));
            counts.insert(t);
        },
    );
    let total = threads * steps;
    assert!(
        counts.range(1..total).next().is_some(),
        "no look while the steps ran: {counts:?}"
    );
    same(Some(&stored(&set)), after.last().map(Vec::as_slice));
}
