//! The trainer-facing API: any ndarray in, typed dimensions, scaled adds, scalars.

use crate::common;

use mvtensor::{CriticalSection, Error, Store, Variable};
use ndarray::{arr0, arr1, arr2, s, ArcArray, Array1, Array2, ArrayD, Ix0, Ix1, Ix2, IxDyn};

#[test]
fn deltas_come_as_any_ndarray_without_into_dyn() {
    let w = Variable::new(Array2::<f32>::zeros((2, 3)));
    w.assign_add(&Array2::ones((2, 3))).unwrap(); // owned, typed
    let big = Array2::from_shape_fn((4, 6), |(i, j)| (i * 10 + j) as f32);
    let strided = big.slice(s![..;2, ..;2]); // a non-contiguous view
    w.assign_add(&strided).unwrap();
    w.assign_sub(&ArcArray::from_elem((2, 3), 0.5)).unwrap();
    let other = Variable::new(Array2::from_elem((2, 3), 2.0f32));
    w.assign_add(&*other.read()).unwrap(); // a snapshot is an array too
    w.assign_add(&ArrayD::from_elem(IxDyn(&[2, 3]), 1.0))
        .unwrap(); // dynamic works as before
    let expected = Array2::from_elem((2, 3), 1.0 - 0.5 + 2.0 + 1.0) + strided;
    assert_eq!(*w.read(), expected);
    w.assign(big.slice(s![..2, ..3]).to_owned()).unwrap();
    assert_eq!(*w.read(), big.slice(s![..2, ..3]));
}

#[test]
fn a_delta_of_another_shape_is_a_typed_error_that_applies_nothing() {
    let w = Variable::builder(Array1::<f32>::zeros(3)).name("w").build();
    let err = w.assign_add(&Array2::<f32>::ones((1, 3))).unwrap_err();
    assert_eq!(
        err,
        Error::ShapeMismatch {
            variable: "w".into(),
            expected: vec![3],
            found: vec![1, 3]
        }
    );
    assert_eq!(w.version(), 0);
}

#[test]
fn typed_variables_read_as_typed_arrays() {
    let w = Variable::new(arr2(&[[1.0f32, 2.0], [3.0, 4.0]]));
    let x = arr1(&[1.0f32, 1.0]);
    assert_eq!(w.read().dot(&x), arr1(&[3.0, 7.0])); // `dot` needs a 2-d array
    assert_eq!(w.read_owned().dot(&x), arr1(&[3.0, 7.0]));
    let old = w.fetch_update(|w| w.t().to_owned()).unwrap(); // closures see Ix2 too
    assert_eq!(old[[0, 1]], 2.0);
    assert_eq!(w.read()[[0, 1]], 3.0);
    let cs = CriticalSection::builder().resource(&w).build().unwrap();
    cs.execute(|tx| {
        let mut w = tx.write(&w)?;
        w.row_mut(0).fill(0.0); // the working copy is an ArrayViewMut2
        assert_eq!(tx.read(&x_var())?.dim(), 2); // reads of typed outside variables
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(*w.read(), arr2(&[[0.0, 0.0], [2.0, 4.0]]));
}

/// Typed views are built from the version's shape over its elements: every rank and
/// empty tensors show the same values as the untyped handle, in reads and working copies.
#[test]
fn typed_views_match_the_untyped_value_at_every_rank_and_size() {
    let scalar = Variable::new(arr0(7i64));
    assert_eq!(scalar.read()[()], 7);
    let empty = Variable::new(Array2::<f32>::zeros((0, 3)));
    assert_eq!(empty.read().dim(), (0, 3));
    assert_eq!(empty.read_owned().shape(), &[0, 3]);
    let cube = ArrayD::from_shape_fn(IxDyn(&[2, 3, 4]), |i| (i[0] * 12 + i[1] * 4 + i[2]) as f32);
    let typed = Variable::new(cube.clone().into_dimensionality::<ndarray::Ix3>().unwrap());
    assert_eq!(typed.read()[[1, 2, 3]], 23.0);
    assert_eq!(typed.read().view().into_dyn(), cube.view());
    let cs = CriticalSection::builder()
        .resource(&empty)
        .resource(&typed)
        .resource(&scalar)
        .build()
        .unwrap();
    cs.execute(|tx| {
        assert_eq!(tx.write(&empty)?.dim(), (0, 3));
        tx.write(&typed)?[[0, 1, 2]] = -1.0;
        tx.write(&scalar)?[()] += 1;
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(typed.read()[[0, 1, 2]], -1.0);
    assert_eq!(typed.read()[[1, 2, 3]], 23.0);
    assert_eq!(scalar.read()[()], 8);
}

fn x_var() -> Variable<f32, Ix1> {
    Variable::new(arr1(&[1.0, 2.0]))
}

#[test]
fn the_store_checks_rank_as_it_checks_dtype() {
    let store = Store::new();
    let w = store.variable("w", Array2::<f32>::zeros((2, 2))).unwrap();
    w.assign_add(&Array2::ones((2, 2))).unwrap();
    let typed = store.get::<f32, Ix2>("w").unwrap();
    assert_eq!(typed.read().sum(), 4.0);
    let any: Variable<f32> = store.get("w").unwrap();
    assert_eq!(any.read().shape(), &[2, 2]);
    assert_eq!(
        store.get::<f32, Ix1>("w").unwrap_err(),
        Error::RankMismatch {
            variable: "w".into(),
            expected: Some(2),
            found: Some(1)
        }
    );
    let snap = store.snapshot();
    assert_eq!(snap.get::<f32, Ix2>("w").unwrap()[[1, 1]], 1.0);
    assert!(matches!(
        snap.get::<f32, Ix0>("w"),
        Err(Error::RankMismatch { .. })
    ));
}

#[test]
fn a_dynamic_shape_keeps_a_typed_rank() {
    let store = Store::new();
    let w = Variable::builder(Array1::<f32>::zeros(2))
        .name("w")
        .dynamic_shape()
        .build();
    w.assign(Array1::zeros(5)).unwrap(); // a new length, same rank
    let err = w.assign(Array2::<f32>::zeros((1, 5))).unwrap_err();
    assert!(matches!(err, Error::RankMismatch { .. }), "{err}");
    assert_eq!(w.read().len(), 5);
    // An IxDyn variable with a dynamic shape may change rank, so no typed handle names it.
    let any = Variable::builder(ArrayD::<f32>::zeros(IxDyn(&[2])))
        .name("any")
        .dynamic_shape()
        .build();
    store.register(&any).unwrap();
    store.register(&w).unwrap();
    assert!(store.get::<f32, Ix1>("w").is_ok());
    let err = store.get::<f32, Ix1>("any").unwrap_err();
    assert_eq!(
        err.to_string(),
        "rank mismatch on variable `any`: it has a rank that may change, rank 1 was asked for"
    );
}

#[test]
fn scaled_add_matches_ndarray_element_for_element() {
    let w0 = Array1::from_shape_fn(1000, |i| (i as f32).sin());
    let g = Array1::from_shape_fn(1000, |i| (i as f32 * 0.37).cos());
    let w = Variable::new(w0.clone());
    w.scaled_add(-0.01, &g).unwrap();
    w.scaled_add(0.3, &g.slice(s![..;-1])).unwrap();
    let mut expected = w0;
    expected.scaled_add(-0.01, &g);
    expected.scaled_add(0.3, &g.slice(s![..;-1]));
    assert_eq!(*w.read(), expected);
}

#[test]
fn concurrent_scaled_adds_are_combined_without_losing_one() {
    let (threads, writes) = if cfg!(miri) { (2, 10) } else { (4, 2000) };
    let w = Variable::new(Array1::<f64>::zeros(64));
    let g = Array1::<f64>::ones(64);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (w, g) = (&w, &g);
            s.spawn(move || {
                for _ in 0..writes {
                    if t % 2 == 0 {
                        w.scaled_add(2.0, g).unwrap();
                    } else {
                        w.assign_add(g).unwrap();
                    }
                }
            });
        }
    });
    let expected = (writes * (threads / 2) * 3) as f64;
    assert!(w.read().iter().all(|&x| x == expected));
    let stats = w.stats();
    assert_eq!(stats.combined_deltas, (threads * writes) as u64);
}

#[test]
fn scalars_need_no_arrays() {
    let lr = Variable::scalar(0.1f32);
    assert_eq!(lr.get(), 0.1);
    assert_eq!(lr.set(0.05).unwrap(), 1);
    assert_eq!(lr.get(), 0.05);
    let step = Variable::scalar(i64::MAX);
    assert_eq!(step.fetch_add(1).unwrap(), i64::MAX);
    assert_eq!(step.get(), i64::MIN, "integers wrap, as in assign_add");
    assert_eq!(*Variable::scalar(3i32).read(), arr0(3));
}

#[test]
fn fetch_add_hands_out_every_value_once() {
    let (threads, adds) = if cfg!(miri) { (2, 20) } else { (4, 5000) };
    let counter = Variable::scalar(0i64);
    let mut seen: Vec<i64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    (0..adds)
                        .map(|_| counter.fetch_add(1).unwrap())
                        .collect::<Vec<i64>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect::<Vec<i64>>()
    });
    seen.sort_unstable();
    let all: Vec<i64> = (0..(threads * adds) as i64).collect();
    assert_eq!(seen, all);
    assert_eq!(counter.get(), (threads * adds) as i64);
}

#[test]
fn a_scalar_written_from_inside_its_section_is_an_error_not_a_panic() {
    let step = Variable::scalar(0i64);
    let cs = CriticalSection::builder()
        .name("opt")
        .resource(&step)
        .build()
        .unwrap();
    let inside = cs.execute(|_| step.fetch_add(1)).unwrap_err();
    assert!(matches!(inside, Error::Reentrant { .. }), "{inside}");
    cs.execute(|tx| {
        tx.write(&step)?[()] += 1; // the way to write it inside
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(step.get(), 1);
}

#[test]
fn read_all_never_sees_half_an_execution() {
    let (rounds, threads) = if cfg!(miri) { (20, 1) } else { (3000, 2) };
    let a = Variable::new(Array1::<i64>::from_elem(4, 1000));
    let b = Variable::new(Array1::<i64>::zeros(4));
    let moves = Variable::scalar(0i64);
    let transfer = CriticalSection::builder()
        .resources([&a, &b])
        .resource(&moves)
        .build()
        .unwrap();
    let step = |_| {
        transfer
            .execute(|tx| {
                tx.assign_sub(&a, &Array1::ones(4))?;
                tx.assign_add(&b, &Array1::ones(4))?;
                tx.write(&moves)?[()] += 1;
                Ok::<_, Error>(())
            })
            .unwrap();
    };
    let total = (rounds * threads) as i64;
    let mut mid_way = 0; // looks between the first execution and the last
    common::while_looking(
        &vec![&step as &(dyn Fn(usize) + Sync); threads],
        rounds,
        || {
            let (sa, sb, n) = mvtensor::read_all((&a, &b, &moves));
            assert_eq!(&*sa + &*sb, Array1::from_elem(4, 1000), "half an execution");
            assert_eq!(sb[0], n[()], "the counter moves with the transfer");
            let all = mvtensor::read_all(&[a.clone(), b.clone()][..]);
            assert_eq!(all[0][1] + all[1][1], 1000);
            mid_way += usize::from(n[()] > 0 && n[()] < total);
        },
    );
    assert!(mid_way > 0, "no look while the executions ran");
    assert_eq!(
        mvtensor::read_all([&a, &b]).map(|s| s[0]),
        [1000 - total, total]
    );
}
