//! In-place transactions: several borrows at once, working copies changed in place, typed
//! borrow conflicts, rollback of in-place writes, and what `Variable::read` shows inside.

use mvtensor::{CriticalSection, Error, Variable};
use ndarray::{arr0, arr1, ArrayD, Zip};

fn vector(xs: &[f32]) -> Variable<f32> {
    Variable::new(arr1(xs).into_dyn())
}

/// Adam's moment updates and parameter step on three resources held mutably together, as a
/// trainer writes it; the result matches the same arithmetic on plain arrays.
#[test]
fn an_optimizer_step_holds_several_resources_mutably_at_once() {
    alone!();
    let (w, m, v) = (
        vector(&[1.0, -2.0, 3.0]),
        vector(&[0.0; 3]),
        vector(&[0.0; 3]),
    );
    let step = Variable::new(arr0(0i64).into_dyn());
    let adam = CriticalSection::builder()
        .resources([&w, &m, &v])
        .resource(&step)
        .build()
        .unwrap();
    let grad = arr1(&[0.5f32, -1.0, 0.25]).into_dyn();
    let (b1, b2, lr, eps) = (0.9f32, 0.999f32, 0.01f32, 1e-8f32);

    let (mut ew, mut em, mut ev) = (
        arr1(&[1.0f32, -2.0, 3.0]),
        arr1(&[0.0f32; 3]),
        arr1(&[0.0f32; 3]),
    );
    for t in 1..=3 {
        // Computed once for both sides: miri makes `powi` nondeterministic in its last bits.
        let (c1, c2) = (1.0 - b1.powi(t), 1.0 - b2.powi(t));
        adam.execute(|tx| {
            {
                let mut step = tx.write(&step)?;
                step[[]] += 1;
                assert_eq!(step[[]], i64::from(t));
            }
            let (mut w, mut m, mut v) = (tx.write(&w)?, tx.write(&m)?, tx.write(&v)?);
            Zip::from(&mut *w)
                .and(&mut *m)
                .and(&mut *v)
                .and(&grad)
                .for_each(|w, m, v, &g| {
                    *m = b1 * *m + (1.0 - b1) * g;
                    *v = b2 * *v + (1.0 - b2) * g * g;
                    *w -= lr * (*m / c1) / ((*v / c2).sqrt() + eps);
                });
            Ok::<_, Error>(())
        })
        .unwrap();
        for i in 0..3 {
            let g = grad[[i]];
            em[i] = b1 * em[i] + (1.0 - b1) * g;
            ev[i] = b2 * ev[i] + (1.0 - b2) * g * g;
            ew[i] -= lr * (em[i] / c1) / ((ev[i] / c2).sqrt() + eps);
        }
    }
    assert_eq!(w.read().as_slice().unwrap(), ew.as_slice().unwrap());
    assert_eq!(m.read().as_slice().unwrap(), em.as_slice().unwrap());
    assert_eq!(v.read().as_slice().unwrap(), ev.as_slice().unwrap());
    assert_eq!(step.read()[[]], 3);
    // One version per execution and variable, all of them published by the section.
    assert_eq!((w.version(), step.version()), (3, 3));
}

#[test]
fn conflicting_borrows_are_typed_errors_and_end_when_dropped() {
    alone!();
    let x = Variable::builder(arr1(&[1.0f32]).into_dyn())
        .name("x")
        .build();
    let cs = CriticalSection::builder()
        .name("opt")
        .resource(&x)
        .build()
        .unwrap();
    cs.execute(|tx| {
        let read = tx.read(&x)?;
        let again = tx.read(&x)?; // shared borrows coexist
        let err = tx.write(&x).unwrap_err();
        assert_eq!(
            err,
            Error::Borrowed {
                variable: "x".into(),
                section: "opt".into(),
                mutably: false
            }
        );
        assert!(matches!(
            tx.assign_add(&x, &arr1(&[1.0]).into_dyn()),
            Err(Error::Borrowed { .. })
        ));
        drop((read, again));

        let mut write = tx.write(&x)?;
        write[0] = 5.0;
        let err = tx.read(&x).unwrap_err();
        assert_eq!(
            err.to_string(),
            "variable `x` is already borrowed mutably in this execution of section `opt`: \
             drop that borrow first"
        );
        drop(write);
        assert_eq!(
            tx.read(&x)?[0],
            5.0,
            "the execution sees its own in-place write"
        );
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(x.read()[0], 5.0);
}

#[test]
fn a_failed_execution_leaves_no_trace_of_its_in_place_writes() {
    alone!();
    let x = vector(&[1.0, 2.0]);
    let cs = CriticalSection::builder().resource(&x).build().unwrap();
    let failed = cs.execute(|tx| {
        tx.write(&x)?[0] = 100.0;
        tx.assign_add(&x, &arr1(&[1.0, 1.0]).into_dyn())?;
        Err::<(), _>(Error::NotFound {
            name: "abort".into(),
        })
    });
    assert!(failed.is_err());
    assert_eq!(x.read().as_slice().unwrap(), &[1.0, 2.0]);
    assert_eq!(x.version(), 0);
    // The next execution starts from the committed value, not from the abandoned copy.
    cs.execute(|tx| tx.assign_add(&x, &arr1(&[1.0, 1.0]).into_dyn()))
        .unwrap();
    assert_eq!(x.read().as_slice().unwrap(), &[2.0, 3.0]);
}

/// The decided answer to "what does `Variable::read` of a resource show inside an
/// execution": the committed value, never the execution's working copy.
#[test]
fn variable_read_inside_an_execution_shows_the_committed_value() {
    alone!();
    let x = vector(&[1.0]);
    let cs = CriticalSection::builder().resource(&x).build().unwrap();
    cs.execute(|tx| {
        tx.write(&x)?[0] = 2.0;
        assert_eq!(tx.read(&x)?[0], 2.0);
        assert_eq!(x.read()[0], 1.0, "not this execution's uncommitted write");
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(x.read()[0], 2.0);
}

#[test]
fn in_place_adds_match_whole_array_arithmetic() {
    alone!();
    let x = vector(&[1.0, 2.0, 3.0]);
    let cs = CriticalSection::builder().resource(&x).build().unwrap();
    let d = arr1(&[0.5f32, 0.5, 0.5]).into_dyn();
    cs.execute(|tx| {
        tx.assign_add(&x, &d)?; // the copy and the add in one sweep
        tx.assign_add(&x, &d)?; // in place
        tx.assign_sub(&x, &arr1(&[1.0, 0.0, 0.0]).into_dyn())?;
        tx.scaled_add(&x, 2.0, &d)?;
        tx.update(&x, |cur| cur * 10.0)?;
        let wrong = tx.scaled_add(&x, 2.0, &ArrayD::zeros(vec![2]));
        assert!(matches!(wrong, Err(Error::ShapeMismatch { .. })));
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(x.read().as_slice().unwrap(), &[20.0, 40.0, 50.0]);
}

#[test]
fn builder_and_txn_print_their_resources() {
    alone!();
    let a = Variable::builder(arr0(1i64).into_dyn()).name("a").build();
    let b = Variable::builder(arr0(2i64).into_dyn()).name("b").build();
    let builder = CriticalSection::builder().name("s").resources([&a, &b]);
    let printed = format!("{builder:?}");
    assert!(
        printed.contains("\"a\"") && printed.contains("\"b\""),
        "{printed}"
    );
    let cs = builder.build().unwrap();
    let seen = cs.execute(|tx| Ok::<_, Error>(format!("{tx:?}"))).unwrap();
    assert!(
        seen.starts_with("Txn") && seen.contains("\"s\"") && seen.contains("\"b\""),
        "{seen}"
    );
}

/// `assign` copies a value of any memory layout into the working copy in logical order.
#[test]
fn assign_copies_any_layout_in_logical_order() {
    alone!();
    use ndarray::ShapeBuilder;
    let x = Variable::new(ArrayD::<f32>::zeros(vec![2, 3]));
    let cs = CriticalSection::builder().resource(&x).build().unwrap();
    let fortran = ArrayD::from_shape_vec(vec![2, 3].f(), vec![1.0f32, 4., 2., 5., 3., 6.]).unwrap();
    cs.execute(|tx| tx.assign(&x, fortran.clone())).unwrap();
    assert_eq!(x.read().as_slice().unwrap(), &[1.0, 2., 3., 4., 5., 6.]);
}

/// `&mut ArrayRef` reaches ndarray's layout methods (`invert_axis`, `swap_axes`,
/// `collapse_axis`). On a working copy they change only the borrow's view: the committed
/// version keeps its variable's shape and standard layout, later writes (a combined
/// `assign_add`, another execution, a rewrite) work on it, and what was written through the
/// inverted view lands where that view showed it.
#[test]
fn layout_methods_on_a_working_copy_change_only_the_view() {
    alone!();
    use ndarray::{arr2, Axis};
    let w: Variable<f32> = Variable::new(arr2(&[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).into_dyn());
    let section = CriticalSection::builder().resource(&w).build().unwrap();
    section
        .execute(|tx| {
            let mut copy = tx.write(&w)?;
            copy.invert_axis(Axis(0)); // the view's row 0 is the copy's row 1
            copy[[0, 0]] = 40.0;
            copy.swap_axes(0, 1);
            copy.collapse_axis(Axis(1), 0); // the view is now a column of length 3
            copy[[2, 0]] = 60.0; // the copy's row 1 again (inverted), column 2 (swapped)
            Ok::<_, Error>(())
        })
        .unwrap();
    let expected = arr2(&[[1.0, 2.0, 3.0], [40.0, 5.0, 60.0]]).into_dyn();
    let snapshot = w.read();
    assert_eq!(*snapshot, expected);
    assert_eq!(snapshot.shape(), &[2, 3]);
    assert!(snapshot.is_standard_layout());
    // Writes after it still see a 2 x 3 tensor in standard layout.
    w.assign_add(&ArrayD::ones(vec![2, 3])).unwrap();
    section
        .execute(|tx| {
            let mut next = tx.rewrite(&w)?;
            next.target().invert_axis(Axis(1));
            let (before, after) = next.split();
            // The target's view is inverted: its column 0 is the value's column 2.
            after.assign(&before.slice(ndarray::s![.., ..;-1]));
            Ok::<_, Error>(())
        })
        .unwrap();
    let expected = arr2(&[[2.0, 3.0, 4.0], [41.0, 6.0, 61.0]]).into_dyn();
    assert_eq!(*w.read(), expected);
    assert!(w.read().is_standard_layout());
}
