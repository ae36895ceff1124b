//! `optim::SparseAdam`: lazy Adam over the rows of a paged embedding table (PyTorch's
//! `SparseAdam`), against lazy Adam on plain arrays.

use std::collections::BTreeMap;

use mvtensor::checkpoint::Restore;
use mvtensor::optim::SparseAdam;
use mvtensor::{Error, PagedVariable, Store};
use ndarray::{arr0, Array2, Axis, Ix0};

use crate::common;

const WIDTH: usize = 3;
const LR: f32 = 0.05;
const B1: f32 = 0.9;
const B2: f32 = 0.999;
const EPS: f32 = 1e-8;

/// Lazy Adam on plain arrays: each step's distinct rows get the sum of their gradients (in
/// the order given), the bias corrections of the step's number, Adam's usual expression.
fn reference(p: &mut [f32], m: &mut [f32], v: &mut [f32], t: i32, ids: &[usize], g: &Array2<f32>) {
    let mut sums: BTreeMap<usize, Vec<f32>> = BTreeMap::new();
    for (k, &id) in ids.iter().enumerate() {
        let row = g.row(k);
        match sums.get_mut(&id) {
            Some(sum) => sum.iter_mut().zip(row).for_each(|(s, x)| *s += x),
            None => drop(sums.insert(id, row.to_vec())),
        }
    }
    let (c1, c2) = (1.0 - B1.powi(t), 1.0 - B2.powi(t));
    for (id, g) in sums {
        for (j, g) in g.into_iter().enumerate() {
            let i = id * WIDTH + j;
            m[i] = B1 * m[i] + (1.0 - B1) * g;
            v[i] = B2 * v[i] + (1.0 - B2) * g * g;
            p[i] -= LR * (m[i] / c1) / ((v[i] / c2).sqrt() + EPS);
        }
    }
}

/// A table's first value. Computed once per test and cloned: under miri `sin` is not
/// deterministic, so two computations may differ in the last bit.
fn initial(rows: usize) -> Array2<f32> {
    Array2::from_shape_fn((rows, WIDTH), |(r, c)| {
        ((r * WIDTH + c) as f32 * 0.37).sin()
    })
}

/// Step `k`'s rows (repeats included) and gradients.
fn batch(k: usize, rows: usize) -> (Vec<usize>, Array2<f32>) {
    let ids: Vec<usize> = (0..5)
        .map(|i| (k * 7 + i * i * 3) % rows)
        .chain([k % rows; 2])
        .collect();
    let g = Array2::from_shape_fn((ids.len(), WIDTH), |(i, c)| ((k + i * 3 + c) as f32).cos());
    (ids, g)
}

fn adam(table: &PagedVariable<f32>) -> SparseAdam<f32> {
    SparseAdam::builder(LR)
        .betas(B1, B2)
        .eps(EPS)
        .name("adam")
        .build(table)
        .unwrap()
}

/// Every step against the reference, rows and moments; rows no step touched keep their
/// value and zero moments. With pages of one row and the default (many rows a page).
#[test]
fn sparse_adam_updates_only_the_rows_given_as_lazy_adam_does() {
    let (rows, steps) = (
        if cfg!(miri) { 30 } else { 200 },
        if cfg!(miri) { 4 } else { 60 },
    );
    for rows_per_page in [Some(1), None] {
        let start = initial(rows);
        let builder = PagedVariable::builder(start.clone()).name("emb");
        let builder = match rows_per_page {
            Some(n) => builder.rows_per_page(n),
            None => builder,
        };
        let table = builder.build().unwrap();
        let adam = adam(&table);
        let store = Store::new();
        adam.register_state(&store).unwrap();
        let mut p = start.clone().into_raw_vec_and_offset().0;
        let (mut m, mut v) = (vec![0.0f32; p.len()], vec![0.0f32; p.len()]);
        let mut touched = vec![false; rows];
        for k in 0..steps {
            let (ids, g) = batch(k, rows);
            assert_eq!(adam.step(&ids, &g).unwrap(), k as i64 + 1);
            reference(&mut p, &mut m, &mut v, k as i32 + 1, &ids, &g);
            ids.iter().for_each(|&i| touched[i] = true);
        }
        assert_eq!(adam.steps(), steps as i64);
        let snapshot = store.snapshot();
        let moments = snapshot
            .get_paged::<f32>("adam.moments")
            .unwrap()
            .to_array();
        assert_eq!(moments.shape(), &[rows, 2, WIDTH]);
        let moment = |k: usize| {
            moments
                .index_axis(Axis(1), k)
                .iter()
                .copied()
                .collect::<Vec<_>>()
        };
        common::same_floats(&table.read().to_array().into_raw_vec_and_offset().0, &p);
        common::same_floats(&moment(0), &m);
        common::same_floats(&moment(1), &v);
        assert!(touched.contains(&false), "some rows stay untouched");
        for (r, _) in touched.iter().enumerate().filter(|(_, &t)| !t) {
            assert_eq!(
                table.gather(&[r]).unwrap().into_raw_vec_and_offset().0,
                start.row(r).to_vec()
            );
        }
    }
}

/// Four threads stepping at once with the same batch: every step is applied once and
/// whole, so the table is the reference's after as many identical steps.
#[test]
fn concurrent_sparse_adam_steps_are_serial_and_none_is_lost() {
    let (threads, each, rows) = if cfg!(miri) {
        (2, 3, 20)
    } else {
        (4, 100, 100)
    };
    let start = initial(rows);
    let table = PagedVariable::builder(start.clone())
        .rows_per_page(1)
        .build()
        .unwrap();
    let adam = adam(&table);
    let (ids, g) = batch(3, rows);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..each {
                    adam.step(&ids, &g).unwrap();
                }
            });
        }
    });
    let mut p = start.into_raw_vec_and_offset().0;
    let (mut m, mut v) = (vec![0.0f32; p.len()], vec![0.0f32; p.len()]);
    for t in 1..=threads * each {
        reference(&mut p, &mut m, &mut v, t, &ids, &g);
    }
    assert_eq!(adam.steps(), (threads * each) as i64);
    common::same_floats(&table.read().to_array().into_raw_vec_and_offset().0, &p);
}

/// Bad input is a typed error naming the table, and applies nothing: not the rows before
/// the bad index, not the moments, not the count.
#[test]
fn a_bad_sparse_adam_step_is_a_typed_error_that_applies_nothing() {
    let start = initial(10);
    let table = PagedVariable::builder(start.clone())
        .name("emb")
        .build()
        .unwrap();
    let adam = SparseAdam::builder(LR)
        .error_if_nonfinite()
        .build(&table)
        .unwrap();
    assert_eq!(adam.name(), "emb.adam");
    let ones = Array2::<f32>::ones((2, WIDTH));
    let out = adam.step(&[1, 10], &ones).unwrap_err();
    assert!(
        matches!(&out, Error::IndexOutOfRange { variable, index: 10, bound: 10 } if variable == "emb"),
        "{out}"
    );
    let shape = adam
        .step(&[1, 2], &Array2::<f32>::ones((2, WIDTH + 1)))
        .unwrap_err();
    assert!(matches!(&shape, Error::ShapeMismatch { variable, .. } if variable == "emb"));
    let count = adam.step(&[1], &ones).unwrap_err();
    assert!(
        matches!(count, Error::ShapeMismatch { .. }),
        "one index, two rows"
    );
    let mut nan = ones.clone();
    nan[[1, 2]] = f32::NAN;
    let refused = adam.step(&[1, 2], &nan).unwrap_err();
    assert!(matches!(&refused, Error::NonFinite { parameter, .. } if parameter == "emb"));
    assert_eq!((adam.steps(), table.version()), (0, 0), "nothing applied");
    let bad_beta = SparseAdam::builder(LR)
        .betas(1.0, B2)
        .build(&table)
        .unwrap_err();
    assert!(matches!(
        bad_beta,
        Error::InvalidSetting {
            setting: "beta1",
            ..
        }
    ));
    // An empty batch is a step that changes no row.
    assert_eq!(
        adam.step(&[], &Array2::<f32>::zeros((0, WIDTH))).unwrap(),
        1
    );
    assert_eq!(table.read().to_array(), start.into_dyn());
}

/// A trainer resumed from a checkpoint of the table and the optimizer's state goes on as if
/// it had never stopped: the moments and the bias corrections resume where they were.
#[test]
#[cfg_attr(miri, ignore = "file system I/O (miri isolates it)")]
fn a_checkpoint_resumes_sparse_adam_where_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("emb.safetensors");
    let rows = 50;
    let run = |steps: std::ops::Range<usize>, resume: bool| {
        let store = Store::new();
        let table = PagedVariable::builder(initial(rows))
            .name("emb")
            .build()
            .unwrap();
        store.register_paged(&table).unwrap();
        let adam = adam(&table);
        adam.register_state(&store).unwrap();
        if resume {
            store.restore(&file, Restore::default()).unwrap();
        }
        for k in steps {
            let (ids, g) = batch(k, rows);
            adam.step(&ids, &g).unwrap();
        }
        (store, table)
    };
    let (whole, _) = run(0..20, false);
    let (first, _) = run(0..10, false);
    first.snapshot().save(&file).unwrap();
    let (_, resumed) = run(10..20, true);
    let expected = whole.snapshot().get_paged::<f32>("emb").unwrap().to_array();
    assert_eq!(resumed.read().to_array(), expected);
}

/// The state of a trainer (table, moments, count) as its store holds it, bit for bit, with
/// each variable's version.
fn state_bits(store: &Store) -> Vec<(Vec<u32>, u64)> {
    let snapshot = store.snapshot();
    let paged = |name: &str| {
        let v = snapshot.get_paged::<f32>(name).unwrap();
        let bits = v.to_array().iter().map(|x| x.to_bits()).collect();
        (bits, store.get_paged::<f32>(name).unwrap().version())
    };
    let steps = store.get::<i64, Ix0>("adam.steps").unwrap();
    let count = (
        vec![steps.get() as u32, (steps.get() >> 32) as u32],
        steps.version(),
    );
    vec![paged("emb"), paged("adam.moments"), count]
}

/// A checkpoint whose optimizer state no step can use (a count of -1 or `i64::MAX`, a
/// negative second moment or a NaN first moment in a row the batch touches) restores, and
/// the next step is `InvalidValue` naming the state variable and the value: no row, moment
/// or count is written. A count of `i64::MAX - 1` is valid (its step is number `i64::MAX`),
/// and a row the batch does not touch is not read.
#[test]
#[cfg_attr(miri, ignore = "file system I/O (miri isolates it)")]
fn a_restored_state_no_step_can_use_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.safetensors");
    let rows = 12;
    let trainer = || {
        let store = Store::new();
        let table = PagedVariable::builder(initial(rows))
            .name("emb")
            .rows_per_page(4)
            .build()
            .unwrap();
        store.register_paged(&table).unwrap();
        let adam = adam(&table);
        adam.register_state(&store).unwrap();
        (store, adam)
    };
    // A row's moments: `[1, 2, WIDTH]` (the first moment, then the second).
    let moments = |m: f32, v: f32| {
        let mut mv = ndarray::Array3::<f32>::zeros((1, 2, WIDTH));
        mv[[0, 0, 1]] = m;
        mv[[0, 1, 2]] = v;
        mv
    };
    enum Bad {
        Steps(i64),
        Row(usize, f32, f32),
    }
    let (ids, g) = batch(0, rows); // rows 0, 3 and 0 again
    assert!(ids.contains(&3) && !ids.contains(&5));
    for (bad, variable, value) in [
        (Bad::Steps(-1), "adam.steps", "-1".to_owned()),
        (Bad::Steps(i64::MAX), "adam.steps", i64::MAX.to_string()),
        (Bad::Row(3, 0.5, -1.0), "adam.moments", "-1.0".to_owned()),
        (Bad::Row(3, f32::NAN, 1.0), "adam.moments", "NaN".to_owned()),
    ] {
        let (saved, adam) = trainer();
        adam.step(&ids, &g).unwrap();
        match bad {
            Bad::Steps(n) => saved
                .get::<i64, Ix0>("adam.steps")
                .unwrap()
                .assign(arr0(n))
                .unwrap(),
            Bad::Row(row, m, v) => saved
                .get_paged::<f32>("adam.moments")
                .unwrap()
                .scatter_update(&[row], &moments(m, v))
                .unwrap(),
        };
        saved.snapshot().save(&file).unwrap();
        let (store, adam) = trainer();
        store.restore(&file, Restore::default()).unwrap();
        let before = state_bits(&store);
        let err = adam.step(&ids, &g).unwrap_err();
        match &err {
            Error::InvalidValue {
                variable: v,
                problem,
            } => {
                assert_eq!(v, variable, "{err}");
                assert!(problem.contains(&value), "{err}");
            }
            other => panic!("not InvalidValue: {other}"),
        }
        assert_eq!(state_bits(&store), before, "nothing written: {err}");
    }
    // The largest count a step can follow, and a bad row the batch leaves alone.
    let (store, adam) = trainer();
    store
        .get::<i64, Ix0>("adam.steps")
        .unwrap()
        .assign(arr0(i64::MAX - 1))
        .unwrap();
    store
        .get_paged::<f32>("adam.moments")
        .unwrap()
        .scatter_update(&[5], &moments(f32::NAN, -1.0))
        .unwrap();
    assert_eq!(adam.step(&ids, &g).unwrap(), i64::MAX);
    let rows_after = adam.table().gather(&ids).unwrap();
    assert!(rows_after.iter().all(|x| x.is_finite()), "{rows_after}");
}
