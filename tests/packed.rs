//! Packed parameter sets (`optim::Packed`): several tensors in one variable, one version a
//! step for all of them.

use mvtensor::checkpoint::Restore;
use mvtensor::optim::{HogwildSgd, Optimizer, Packed, Replicas};
use mvtensor::{Error, Store, Variable};
use ndarray::{Array1, Array2, ArrayViewMutD, Ix1, Ix2, IxDyn};

use crate::common;

fn model(w: &Array2<f32>, b: &Array1<f32>) -> Packed<f32> {
    Packed::builder()
        .name("mlp")
        .tensor("w", w)
        .tensor("b", b)
        .build()
        .unwrap()
}

#[test]
fn views_show_each_tensor_with_its_shape() {
    let w = Array2::from_shape_fn((3, 2), |(i, j)| (i * 2 + j) as f32);
    let b = Array1::from(vec![10.0f32, 20.0]);
    let set = model(&w, &b);
    let layout = set.layout();
    assert_eq!((layout.len(), layout.elements()), (2, 8));
    let tensors: Vec<_> = layout
        .tensors()
        .map(|(n, s, r)| (n, s.to_vec(), r))
        .collect();
    assert_eq!(tensors, [("w", vec![3, 2], 0..6), ("b", vec![2], 6..8)]);
    assert_eq!(layout.position("b"), Some(1));
    let params = set.read();
    assert_eq!(params.get::<Ix2>(0).unwrap(), w);
    assert_eq!(params.get::<Ix1>(1).unwrap(), b);
    assert_eq!(params.by_name::<IxDyn>("w").unwrap(), w.into_dyn());
    assert_eq!(params.snapshot().len(), 8);
}

#[test]
fn a_misfit_view_is_a_typed_error() {
    let set = model(&Array2::zeros((3, 2)), &Array1::zeros(2));
    let params = set.read();
    assert_eq!(
        params.get::<Ix1>(2).unwrap_err(),
        Error::NoSuchTensor {
            set: "mlp".into(),
            index: 2,
            tensors: 2
        }
    );
    assert_eq!(
        params.get::<Ix1>(0).unwrap_err(),
        Error::RankMismatch {
            variable: "mlp.w".into(),
            expected: Some(2),
            found: Some(1)
        }
    );
    assert_eq!(
        params.by_name::<Ix1>("c").unwrap_err(),
        Error::NotFound {
            name: "mlp.c".into()
        }
    );
    let mut short = vec![0.0f32; 7];
    assert_eq!(
        set.layout().split_mut(&mut short).unwrap_err(),
        Error::ShapeMismatch {
            variable: "mlp".into(),
            expected: vec![8],
            found: vec![7]
        }
    );
    // The variable keeps the set's length: views of its versions always fit.
    assert!(matches!(
        set.variable().assign(Array1::zeros(3)),
        Err(Error::ShapeMismatch { .. })
    ));
}

#[test]
fn two_tensors_of_one_name_are_refused() {
    let err = Packed::<f32>::builder()
        .tensor("w", &Array1::zeros(2))
        .tensor("w", &Array1::zeros(3))
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::NameTaken { ref name, .. } if name == "packed.w"));
}

#[test]
fn gradients_computed_into_a_split_buffer() {
    let set = model(&Array2::zeros((3, 2)), &Array1::zeros(2));
    let mut flat = set.layout().zeros::<f32>();
    {
        let mut parts = set
            .layout()
            .split_mut(flat.as_slice_mut().unwrap())
            .unwrap();
        let (w, b): (&mut ArrayViewMutD<f32>, _) = match &mut parts[..] {
            [w, b] => (w, b),
            _ => unreachable!("two tensors"),
        };
        w.fill(1.0);
        b[[1]] = 2.0;
    }
    assert_eq!(flat.to_vec(), [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 2.0]);
    let mut b = set
        .layout()
        .view_mut::<Ix1, _>(1, flat.as_slice_mut().unwrap())
        .unwrap();
    b[0] = 3.0;
    assert_eq!(flat[6], 3.0);
}

/// Adam over a packed set computes what it computes over the same tensors as separate
/// variables, bit for bit: packing changes how many versions a step writes, not the step.
#[test]
fn a_packed_adam_equals_one_over_separate_variables() {
    let w0 = Array2::from_shape_fn((4, 3), |(i, j)| (i as f32 - j as f32) / 5.0);
    let b0 = Array1::from(vec![0.5f32, -0.25, 1.0]);
    let set = model(&w0, &b0);
    let (w, b) = (Variable::new(w0.clone()), Variable::new(b0.clone()));
    let build = |o: mvtensor::optim::OptimizerBuilder<f32>| {
        o.betas(0.8, 0.99).clip_global_norm(3.0).build().unwrap()
    };
    let packed = build(Optimizer::adamw(1e-2, 0.05).packed(&set));
    let separate = build(Optimizer::adamw(1e-2, 0.05).param(&w).param(&b));
    for k in 0..20 {
        let gw = Array2::from_shape_fn((4, 3), |(i, j)| ((i + j + k) % 5) as f32 - 2.0);
        let gb = Array1::from_shape_fn(3, |i| (i + k) as f32 * 0.3);
        assert_eq!(packed.step((&gw, &gb)).unwrap(), k as i64 + 1);
        separate.step((&gw, &gb)).unwrap();
    }
    let params = set.read();
    same(&params.get::<Ix2>(0).unwrap(), &w.read());
    same(&params.get::<Ix1>(1).unwrap(), &b.read());
}

/// Bit for bit (to a relative 1e-4 under miri: `common::same_floats`).
fn same<D: ndarray::Dimension>(got: &ndarray::ArrayRef<f32, D>, want: &ndarray::ArrayRef<f32, D>) {
    assert_eq!(got.shape(), want.shape());
    let (got, want) = (got.as_slice(), want.as_slice());
    common::same_floats(got.expect("standard"), want.expect("standard"));
}

#[test]
fn a_misfit_gradient_names_its_tensor_and_applies_nothing() {
    let set = model(&Array2::ones((3, 2)), &Array1::ones(2));
    let sgd = Optimizer::sgd(0.1).packed(&set).build().unwrap();
    let before = set.read().snapshot().version();
    let err = sgd
        .step((&Array2::<f32>::ones((3, 2)), &Array1::<f32>::ones(3)))
        .unwrap_err();
    assert_eq!(
        err,
        Error::ShapeMismatch {
            variable: "mlp.b".into(),
            expected: vec![2],
            found: vec![3]
        }
    );
    let err = sgd.step((&Array2::<f32>::ones((3, 2)),)).unwrap_err();
    assert_eq!(
        err,
        Error::GradientCount {
            expected: 2,
            found: 1
        }
    );
    assert_eq!(set.read().snapshot().version(), before);
    assert_eq!(sgd.steps(), 0);
}

/// Steps from several threads while readers look: a reader sees every tensor of one step,
/// never `w` after a step and `b` before it; in a set that holds its optimizer's state
/// (`build_packed`), the step count of that step too.
#[test]
fn readers_see_every_tensor_of_one_step() {
    let (threads, steps) = if cfg!(miri) { (2, 5) } else { (3, 400) };
    for state_in_set in [false, true] {
        let tensors = || {
            Packed::builder()
                .name("mlp")
                .tensor("w", &Array2::<f32>::zeros((8, 8)))
                .tensor("b", &Array1::<f32>::zeros(8))
        };
        let (set, sgd) = if state_in_set {
            Optimizer::sgd(1.0).build_packed(tensors()).unwrap()
        } else {
            let set = tensors().build().unwrap();
            let sgd = Optimizer::sgd(1.0).packed(&set).build().unwrap();
            (set, sgd)
        };
        let (gw, gb) = (Array2::<f32>::ones((8, 8)), Array1::<f32>::ones(8));
        let (mut seen, mut looks_mid_way) = (0.0f32, 0);
        common::steps_while_looking(
            threads,
            steps,
            || {
                sgd.step((&gw, &gb)).unwrap();
            },
            || {
                let params = set.read();
                let (w, b) = (params.get::<Ix2>(0).unwrap(), params.get::<Ix1>(1).unwrap());
                let k = -b[0]; // steps so far in this version
                if state_in_set {
                    // The step count, last: `lo + hi * 2^24`.
                    let all = params.snapshot().as_slice().unwrap();
                    let [lo, hi] = all[all.len() - 2..] else {
                        unreachable!("two elements")
                    };
                    assert_eq!(lo + hi * (1 << 24) as f32, k, "the state of another step");
                }
                one_step(w.iter().chain(b.iter()), k, &mut seen);
                looks_mid_way += usize::from(k > 0.0 && k < (threads * steps) as f32);
            },
        );
        assert!(looks_mid_way > 0, "no look while the steps ran");
        assert_eq!(sgd.steps(), (threads * steps) as i64);
        let total = (threads * steps) as f32;
        assert!(set
            .read()
            .get::<Ix1>(1)
            .unwrap()
            .iter()
            .all(|&x| x == -total));
    }
}

/// A reader's check after SGD steps of gradient one and rate one: every value it saw is
/// `-k`, `k` steps' worth (not a mix of steps), and `k` is not below what it saw before.
fn one_step<'a>(values: impl IntoIterator<Item = &'a f32>, k: f32, seen: &mut f32) {
    assert!(values.into_iter().all(|&x| x == -k), "a mix of steps");
    assert!(k >= *seen, "a later read went back in time");
    *seen = k;
}

#[test]
fn replicas_sum_each_tensor_of_a_packed_set() {
    let workers = 3;
    let set = model(&Array2::zeros((2, 2)), &Array1::zeros(2));
    let replicas = Replicas::new(Optimizer::sgd(1.0).packed(&set).build().unwrap(), workers);
    std::thread::scope(|s| {
        for k in 0..workers {
            let replicas = &replicas;
            s.spawn(move || {
                let gw = Array2::from_elem((2, 2), k as f32);
                let gb = Array1::from_elem(2, 1.0f32);
                replicas.step((&gw, &gb)).unwrap();
            });
        }
    });
    let params = set.read();
    // The mean of 0, 1 and 2 is 1; of three ones, 1.
    assert!(params.get::<Ix2>(0).unwrap().iter().all(|&x| x == -1.0));
    assert!(params.get::<Ix1>(1).unwrap().iter().all(|&x| x == -1.0));
}

#[test]
fn a_packed_set_checkpoints_as_one_tensor_with_its_optimizer_state() {
    let set = model(&Array2::ones((2, 2)), &Array1::ones(2));
    let adam = Optimizer::adam(0.1)
        .packed(&set)
        .name("opt")
        .build()
        .unwrap();
    let store = Store::new();
    store.register(set.variable()).unwrap();
    adam.register_state(&store).unwrap();
    adam.step((&Array2::<f32>::ones((2, 2)), &Array1::<f32>::ones(2)))
        .unwrap();
    let snapshot = store.snapshot();
    let names: Vec<_> = snapshot.iter().map(|e| e.name().to_owned()).collect();
    assert_eq!(names, ["mlp", "opt.state"]);
    let params = snapshot.get::<f32, Ix1>("mlp").unwrap();
    assert_eq!(
        params.as_slice().unwrap(),
        set.read().snapshot().as_slice().unwrap()
    );
    // Both moments of both tensors, then the step count (1: lo 1, hi 0).
    let state = snapshot.get::<f32, Ix1>("opt.state").unwrap();
    assert_eq!(state.len(), 2 * 6 + 2);
    assert_eq!(&state.as_slice().unwrap()[12..], [1.0, 0.0]);
}

/// A packed set's checkpoint records the tensors it packs: a restore into a set that packs
/// others is refused, even of the same length (a 2x3 and a 3x2 tensor: the values would
/// land scrambled), naming both layouts, and nothing is applied; the same layout restores.
#[test]
#[cfg_attr(miri, ignore = "file system I/O (miri isolates it)")]
fn a_restore_into_a_set_of_another_layout_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mlp.safetensors");
    let build = |w: Array2<f32>| {
        let set = model(&w, &Array1::ones(2));
        let store = Store::new();
        store.register(set.variable()).unwrap();
        (set, store)
    };
    let (_saved, store) = build(Array2::from_shape_fn((2, 3), |(i, j)| (i * 3 + j) as f32));
    let bytes = std::fs::read({
        store.save(&path).unwrap();
        &path
    })
    .unwrap();
    let metadata = safetensors::SafeTensors::read_metadata(&bytes).unwrap().1;
    let layout = &metadata.metadata().as_ref().unwrap()["mvtensor.layout.mlp"];
    assert_eq!(layout, "w [2, 3], b [2]; 8 elements");

    let (other, other_store) = build(Array2::zeros((3, 2)));
    let before = other.read().snapshot().to_vec();
    let err = other_store.restore(&path, Restore::default()).unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(err, Error::Checkpoint { .. })
            && message.contains("`mlp`")
            && message.contains("w [2, 3], b [2]")
            && message.contains("w [3, 2], b [2]"),
        "{message}"
    );
    assert_eq!(other.read().snapshot().to_vec(), before, "nothing applied");

    let (same, same_store) = build(Array2::zeros((2, 3)));
    let restored = same_store.restore(&path, Restore::default()).unwrap();
    assert_eq!(restored, 1);
    assert_eq!(same.read().get::<Ix2>(0).unwrap()[[1, 2]], 5.0);
}

/// Hogwild over a packed set: one combined write per step for every tensor; concurrent
/// steps lose nothing, and a misfit gradient applies nothing.
#[test]
fn hogwild_over_a_packed_set_loses_no_update() {
    let (threads, steps) = if cfg!(miri) { (2, 5) } else { (4, 500) };
    let set = model(&Array2::zeros((4, 4)), &Array1::zeros(4));
    let sgd = HogwildSgd::new(1.0).packed(&set);
    let (gw, gb) = (
        Array2::<f32>::ones((4, 4)),
        Array1::<f32>::from_elem(4, 2.0),
    );
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..steps {
                    sgd.step((&gw, &gb)).unwrap();
                }
            });
        }
    });
    let n = (threads * steps) as f32;
    let params = set.read();
    assert!(params.get::<Ix2>(0).unwrap().iter().all(|&x| x == -n));
    assert!(params.get::<Ix1>(1).unwrap().iter().all(|&x| x == -2.0 * n));
    let version = params.snapshot().version();
    drop(params);
    let err = sgd.step((&gw, &Array1::<f32>::ones(5))).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { ref variable, .. } if variable == "mlp.b"));
    assert_eq!(set.read().snapshot().version(), version, "nothing applied");
}

#[test]
fn hogwild_checks_every_gradient_before_applying_any() {
    let (w, b) = (
        Variable::new(Array1::<f32>::zeros(2)),
        Variable::new(Array1::<f32>::zeros(3)),
    );
    let sgd = HogwildSgd::new(1.0).param(&w).param(&b);
    let err = sgd
        .step((&Array1::<f32>::ones(2), &Array1::<f32>::ones(2)))
        .unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { .. }));
    assert_eq!(
        (w.version(), b.version()),
        (0, 0),
        "w was not written either"
    );
}

/// Gradients computed in place into a split buffer go to a step as they are: a `Vec` of
/// views is `Gradients`.
#[test]
fn a_step_takes_the_views_of_a_split_gradient_buffer() {
    let set = model(&Array2::ones((3, 2)), &Array1::ones(2));
    let sgd = Optimizer::sgd(0.5).packed(&set).build().unwrap();
    let layout = set.layout();
    assert_eq!(layout.name(), "mlp");
    assert_eq!(layout.tensor(1), Some(("b", &[2usize][..], 6..8)));
    assert_eq!(layout.tensor(2), None);
    let mut flat = layout.zeros::<f32>();
    let mut views = layout.split_mut(flat.as_slice_mut().unwrap()).unwrap();
    views[0].fill(2.0);
    views[1].fill(-2.0);
    sgd.step(&views).unwrap();
    let params = set.read();
    assert!(params.get::<Ix2>(0).unwrap().iter().all(|&x| x == 0.0));
    assert!(params.get::<Ix1>(1).unwrap().iter().all(|&x| x == 2.0));
}

/// A parameter of a dynamic shape that changes between `param` and `build` gets gradients
/// and state of the shape it has at `build`; a step checks it still has it.
#[test]
fn a_parameter_reshaped_before_build_takes_its_new_shape() {
    let v = Variable::builder(ndarray::ArrayD::<f32>::zeros(IxDyn(&[4])))
        .dynamic_shape()
        .build();
    let builder = Optimizer::sgd(1.0).param(&v);
    v.assign(ndarray::ArrayD::from_elem(IxDyn(&[2]), 7.0))
        .unwrap();
    let sgd = builder.build().unwrap();
    let err = sgd
        .step((&ndarray::ArrayD::<f32>::ones(IxDyn(&[4])),))
        .unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { ref expected, .. } if expected == &[2]));
    sgd.step((&ndarray::ArrayD::<f32>::ones(IxDyn(&[2])),))
        .unwrap();
    assert_eq!(v.read().as_slice().unwrap(), [6.0, 6.0]);
    drop(sgd); // its section lets `v` go
    let builder = Optimizer::sgd(1.0).param(&v);
    v.assign(ndarray::ArrayD::from_elem(IxDyn(&[3]), 6.0))
        .unwrap();
    let replicas = Replicas::new(builder.build().unwrap(), 1);
    replicas
        .step((&ndarray::ArrayD::<f32>::ones(IxDyn(&[3])),))
        .unwrap();
    assert_eq!(v.read().as_slice().unwrap(), [5.0, 5.0, 5.0]);
}
