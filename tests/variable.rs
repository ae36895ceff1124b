//! Single-variable behaviour: versions, snapshots, errors. Concurrency lives in `promises.rs`.

use mvtensor::{Error, Variable};
use ndarray::{arr0, arr1, ArrayD, IxDyn};

fn ones(shape: &[usize]) -> ArrayD<f32> {
    ArrayD::ones(IxDyn(shape))
}

#[test]
fn every_write_returns_the_next_version_number() {
    let v = Variable::new(ones(&[3]));
    assert_eq!(v.version(), 0);
    assert_eq!(v.assign(ones(&[3]) * 5.0).unwrap(), 1);
    assert_eq!(v.assign_add(&ones(&[3])).unwrap(), 2);
    assert_eq!(v.assign_sub(&(ones(&[3]) * 2.0)).unwrap(), 3);
    assert_eq!(v.update(|x| x * 10.0).unwrap(), 4);
    assert_eq!(v.compare_and_set(4, ones(&[3])).unwrap(), 5);
    let old = v.fetch_update(|x| x + 1.0).unwrap();
    assert_eq!((old.version(), old[[0]]), (5, 1.0));
    assert_eq!((v.version(), v.read()[[0]]), (6, 2.0));
    assert_eq!(v.stats().commits, 6);
}

#[test]
fn arithmetic_follows_the_writes() {
    let v = Variable::new(arr1(&[1i64, 2, 3]).into_dyn());
    v.assign_add(&arr1(&[10, 20, 30]).into_dyn()).unwrap();
    v.assign_sub(&arr1(&[1, 1, 1]).into_dyn()).unwrap();
    v.update(|x| x * 2).unwrap();
    assert_eq!(v.read().as_slice().unwrap(), &[20, 42, 64]);
}

/// Commit timestamps never go down, and a store snapshot separates the commits before it
/// (at or below its clock value) from those after it (above).
#[test]
fn timestamps_order_commits_against_store_snapshots() {
    let store = mvtensor::Store::new();
    let a = store.variable("a", arr0(0.0f64).into_dyn()).unwrap();
    let b = store.variable("b", arr0(0.0f64).into_dyn()).unwrap();
    a.assign(arr0(1.0).into_dyn()).unwrap();
    b.assign(arr0(1.0).into_dyn()).unwrap();
    assert!(a.read().timestamp() <= b.read().timestamp());
    let snap = store.snapshot();
    a.assign(arr0(2.0).into_dyn()).unwrap();
    assert!(b.read().timestamp() <= snap.timestamp());
    assert!(a.read().timestamp() > snap.timestamp());
    assert_eq!(snap.get::<f64, IxDyn>("a").unwrap()[[]], 1.0);
}

#[test]
fn a_snapshot_outlives_writes_and_the_variable_itself() {
    let v = Variable::new(arr1(&[1.0f32, 2.0]).into_dyn());
    let pinned = v.read();
    let owned = v.read_owned();
    for i in 0..100 {
        v.assign(arr1(&[i as f32, i as f32]).into_dyn()).unwrap();
    }
    drop(v);
    assert_eq!(pinned.as_slice().unwrap(), &[1.0, 2.0]);
    assert_eq!(owned.as_slice().unwrap(), &[1.0, 2.0]);
    assert_eq!((pinned.version(), owned.version()), (0, 0));
}

#[test]
fn owned_snapshots_are_send_and_static() {
    fn assert_send_static<T: Send + Sync + 'static>(_: &T) {}
    let v = Variable::new(ones(&[2]));
    let owned = v.read_owned();
    assert_send_static(&owned);
    assert_send_static(&v);
    let handle = std::thread::spawn(move || owned.sum());
    assert_eq!(handle.join().unwrap(), 2.0);
}

#[test]
fn non_standard_layouts_are_stored_in_logical_order() {
    let v =
        Variable::new(ArrayD::from_shape_vec(IxDyn(&[2, 2]), vec![1.0f32, 2., 3., 4.]).unwrap());
    let transposed = v.read().t().to_owned();
    v.assign(transposed).unwrap();
    assert_eq!(v.read().as_slice().unwrap(), &[1.0, 3.0, 2.0, 4.0]);
}

// ---- errors: typed, named, and nothing applied -------------------------------------------

fn unchanged<A: mvtensor::Element>(v: &Variable<A>, version: u64, value: &ArrayD<A>) {
    assert_eq!(v.version(), version, "a failed write must not commit");
    assert_eq!(
        &*v.read(),
        value,
        "a failed write must not change the value"
    );
}

#[test]
fn a_scalar_delta_never_broadcasts() {
    let v = Variable::builder(ones(&[4])).name("w").build();
    let err = v.assign_add(&arr0(1.0f32).into_dyn()).unwrap_err();
    assert_eq!(
        err,
        Error::ShapeMismatch {
            variable: "w".into(),
            expected: vec![4],
            found: vec![]
        }
    );
    assert!(err.to_string().contains("`w`") && err.to_string().contains("[4]"));
    unchanged(&v, 0, &ones(&[4]));
}

#[test]
fn every_write_checks_the_shape() {
    let v = Variable::builder(ones(&[2, 3])).name("layer.w").build();
    let wrong = ones(&[3, 2]);
    let is_shape_error = |r: mvtensor::Result<u64>| {
        matches!(r, Err(Error::ShapeMismatch { ref variable, ref expected, ref found })
            if variable == "layer.w" && expected == &[2, 3] && found == &[3, 2])
    };
    assert!(is_shape_error(v.assign(wrong.clone())));
    assert!(is_shape_error(v.assign_add(&wrong)));
    assert!(is_shape_error(v.assign_sub(&wrong)));
    assert!(is_shape_error(v.update(|_| ones(&[3, 2]))));
    assert!(is_shape_error(v.compare_and_set(0, wrong.clone())));
    assert!(matches!(
        v.fetch_update(|_| ones(&[3, 2])),
        Err(Error::ShapeMismatch { .. })
    ));
    unchanged(&v, 0, &ones(&[2, 3]));
}

#[test]
fn a_stale_version_is_a_conflict() {
    let v = Variable::builder(ones(&[1])).name("step").build();
    v.assign(ones(&[1]) * 2.0).unwrap();
    let err = v.compare_and_set(0, ones(&[1]) * 9.0).unwrap_err();
    assert_eq!(
        err,
        Error::VersionConflict {
            variable: "step".into(),
            expected: 0,
            actual: 1
        }
    );
    unchanged(&v, 1, &(ones(&[1]) * 2.0));
}

#[test]
fn a_dynamic_shape_accepts_new_shapes_but_deltas_must_match() {
    let v = Variable::builder(ones(&[2]))
        .name("buf")
        .dynamic_shape()
        .build();
    v.assign(ones(&[5])).unwrap();
    assert_eq!(v.shape(), vec![5]);
    v.update(|x| ArrayD::zeros(IxDyn(&[x.len(), 2]))).unwrap();
    assert_eq!(v.shape(), vec![5, 2]);
    let err = v.assign_add(&ones(&[5])).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { ref expected, .. } if expected == &[5, 2]));
    v.assign_add(&ones(&[5, 2])).unwrap();
    assert_eq!(v.read().sum(), 10.0);
}

#[test]
fn integer_overflow_wraps_and_never_panics() {
    let v = Variable::new(arr1(&[i32::MAX]).into_dyn());
    v.assign_add(&arr1(&[1]).into_dyn()).unwrap();
    assert_eq!(v.read()[[0]], i32::MIN);
}

#[test]
fn unnamed_variables_get_a_name_for_errors() {
    let v = Variable::new(ones(&[1]));
    assert!(v.name().starts_with("var#"));
    let err = v.assign(ones(&[2])).unwrap_err();
    assert!(err.to_string().contains(v.name()));
}

/// An `update` closure that writes its own variable gets `Error::Reentrant` from that write:
/// were the write to succeed, the update would lose its compare-and-swap to it and run the
/// closure again, forever. Writes to other variables
/// still work inside it, closures of different variables nest, and the mark goes with the
/// closure, also when it panics.
#[test]
fn an_update_closure_writing_its_own_variable_is_refused_not_retried_forever() {
    use std::cell::{Cell, RefCell};
    let w = Variable::new(arr1(&[1.0f32, 2.0]));
    let other = Variable::new(arr1(&[0.0f32]));
    let (runs, refused) = (Cell::new(0), RefCell::new(Vec::new()));
    let version = w
        .update(|x| {
            runs.set(runs.get() + 1);
            if runs.get() < 100 {
                // (bounded, so that a regression fails here instead of hanging)
                let mut refused = refused.borrow_mut();
                refused.push(w.assign_add(&arr1(&[1.0, 1.0])).err());
                refused.push(w.assign(arr1(&[9.0, 9.0])).err());
                refused.push(w.fetch_update(|x| x + 1.0).err());
            }
            other.assign_add(&arr1(&[1.0])).unwrap(); // another variable: fine
            x * 2.0
        })
        .unwrap();
    assert_eq!(
        runs.get(),
        1,
        "the closure's own writes made the update retry"
    );
    assert_eq!(version, 1);
    assert_eq!(w.read().to_vec(), [2.0, 4.0], "no refused write landed");
    assert_eq!(other.read().to_vec(), [1.0]);
    for err in refused.borrow().iter() {
        let err = err.as_ref().expect("refused");
        assert!(err.to_string().contains("retry forever"), "{err}");
    }

    // Nested across variables: inside `w`'s closure, run inside `other`'s, both are marked.
    let before = other
        .fetch_update(|o| {
            w.update(|x| {
                assert!(matches!(
                    other.assign_add(&arr1(&[1.0])),
                    Err(Error::Reentrant { .. })
                ));
                assert!(matches!(
                    w.assign_add(&arr1(&[1.0, 1.0])),
                    Err(Error::Reentrant { .. })
                ));
                x + 1.0
            })
            .unwrap();
            o + 10.0
        })
        .unwrap();
    assert_eq!(before.to_vec(), [1.0]);
    assert_eq!(
        (w.read().to_vec(), other.read().to_vec()),
        (vec![3.0, 5.0], vec![11.0])
    );

    // The mark ends with the closure, also on unwind.
    let panicked = std::panic::catch_unwind(|| w.update(|_| -> ndarray::Array1<f32> { panic!() }));
    assert!(panicked.is_err());
    w.assign_add(&arr1(&[1.0, 1.0])).unwrap();
    assert_eq!(w.read().to_vec(), [4.0, 6.0]);
}

/// The same refusal for a variable a critical section holds: at once, with the update's
/// message, before any wait for the variable's ticket (a write to a queued variable waits
/// for its ticket before it pins; the refusal is checked first, so a closure never waits for
/// the section's queue to be told it may not write its own variable).
#[test]
fn an_update_closure_writing_its_own_queued_variable_is_refused_at_once() {
    let x = Variable::scalar(0i64);
    let _holds_it = mvtensor::CriticalSection::builder()
        .resource(&x)
        .build()
        .unwrap();
    let mut refused = Vec::new();
    x.update(|v| {
        refused.push(x.fetch_add(1).unwrap_err());
        refused.push(x.fetch_update(|a| a + 1).unwrap_err());
        refused.push(x.assign_add(&arr0(1)).unwrap_err());
        v + 1
    })
    .unwrap();
    assert_eq!(x.get(), 1, "no refused write landed");
    for err in &refused {
        assert!(matches!(err, Error::Reentrant { .. }), "{err}");
        assert!(err.to_string().contains("retry forever"), "{err}");
    }
}
