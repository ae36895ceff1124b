//! `Txn::rewrite`: the next value computed from the current one into a fresh working copy.
//! What the source shows (the committed value, this execution's earlier writes, an earlier
//! execution's of the same batch), rollback, borrow conflicts, typed views.

use crate::common;

use std::sync::Barrier;

use mvtensor::{CriticalSection, Error, Variable};
use ndarray::{arr1, array, Array1, Ix2, Zip};

fn vector(name: &str, xs: &[f32]) -> Variable<f32> {
    Variable::builder(arr1(xs).into_dyn()).name(name).build()
}

fn abort<T>() -> Result<T, Error> {
    Err(Error::NotFound {
        name: "abort".into(),
    })
}

/// `new = 2 * old + 1` through a rewrite.
fn double_plus_one(tx: &mvtensor::Txn<'_>, x: &Variable<f32>) -> Result<(), Error> {
    let mut x = tx.rewrite(x)?;
    let (old, new) = x.split();
    Zip::from(new).and(old).for_each(|n, &o| *n = 2.0 * o + 1.0);
    Ok(())
}

#[test]
fn a_rewrite_reads_the_committed_value_and_commits_the_new_one() {
    let x = vector("x", &[1.0, 2.0, 3.0]);
    let cs = CriticalSection::builder().resource(&x).build().unwrap();
    let before = x.read();
    cs.execute(|tx| {
        let mut rw = tx.rewrite(&x)?;
        assert_eq!(rw.source().as_slice().unwrap(), &[1.0, 2.0, 3.0]);
        rw.target().fill(0.0);
        let (old, new) = rw.split();
        Zip::from(new).and(old).for_each(|n, &o| *n = o * 10.0);
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(x.read().as_slice().unwrap(), &[10.0, 20.0, 30.0]);
    assert_eq!(x.version(), 1);
    // A snapshot from before is untouched: the rewrite wrote a new version.
    assert_eq!(before.as_slice().unwrap(), &[1.0, 2.0, 3.0]);
}

#[test]
fn a_second_rewrite_or_a_write_in_one_execution_sees_the_earlier_writes() {
    let x = vector("x", &[1.0, 2.0]);
    let cs = CriticalSection::builder().resource(&x).build().unwrap();
    cs.execute(|tx| {
        double_plus_one(tx, &x)?; // 3, 5
        double_plus_one(tx, &x)?; // 7, 11
        tx.write(&x)?[0] += 100.0; // 107, 11
        double_plus_one(tx, &x)?; // 215, 23
        assert_eq!(tx.read(&x)?.as_slice().unwrap(), &[215.0, 23.0]);
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(x.read().as_slice().unwrap(), &[215.0, 23.0]);
    assert_eq!(x.version(), 1, "one commit");
}

#[test]
fn a_failed_execution_leaves_no_trace_of_its_rewrites() {
    let (x, y) = (vector("x", &[1.0, 2.0]), vector("y", &[5.0]));
    let cs = CriticalSection::builder()
        .resource(&x)
        .resource(&y)
        .build()
        .unwrap();
    let failed = cs.execute(|tx| {
        double_plus_one(tx, &x)?;
        double_plus_one(tx, &y)?;
        double_plus_one(tx, &x)?;
        abort::<()>()
    });
    assert!(failed.is_err());
    assert_eq!(x.read().as_slice().unwrap(), &[1.0, 2.0]);
    assert_eq!(y.read().as_slice().unwrap(), &[5.0]);
    assert_eq!((x.version(), y.version()), (0, 0));
    cs.execute(|tx| double_plus_one(tx, &x)).unwrap();
    assert_eq!(x.read().as_slice().unwrap(), &[3.0, 5.0]);
}

/// Threads whose executions are batched together: each rewrite must read what the
/// execution before it in the batch left, and a failed one must leave it as it was.
#[test]
fn batched_rewrites_chain_and_failed_ones_drop_out() {
    let threads = 4;
    let per_thread = common::scaled(50, 2_000);
    let x = vector("x", &[0.0; 64]);
    let cs = CriticalSection::builder().resource(&x).build().unwrap();
    let start = Barrier::new(threads);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (x, cs, start) = (&x, &cs, &start);
            s.spawn(move || {
                start.wait();
                for i in 0..per_thread {
                    let fail = (i + t) % 3 == 0;
                    let result = cs.execute(|tx| {
                        let mut rw = tx.rewrite(x)?;
                        let (old, new) = rw.split();
                        Zip::from(new).and(old).for_each(|n, &o| *n = o + 1.0);
                        if fail {
                            abort()
                        } else {
                            Ok(())
                        }
                    });
                    assert_eq!(result.is_err(), fail);
                }
            });
        }
    });
    let kept = (0..threads)
        .flat_map(|t| (0..per_thread).filter(move |i| (i + t) % 3 != 0))
        .count();
    let value = x.read();
    assert!(
        value.iter().all(|&v| v == kept as f32),
        "{kept} kept executions, value {value:?}"
    );
}

#[test]
fn a_rewrite_conflicts_with_other_borrows_and_ends_when_dropped() {
    let (x, outside) = (vector("x", &[1.0]), vector("outside", &[0.0]));
    let cs = CriticalSection::builder()
        .name("opt")
        .resource(&x)
        .build()
        .unwrap();
    cs.execute(|tx| {
        let read = tx.read(&x)?;
        let err = tx.rewrite(&x).unwrap_err();
        let borrowed = |mutably| Error::Borrowed {
            variable: "x".into(),
            section: "opt".into(),
            mutably,
        };
        assert_eq!(err, borrowed(false));
        drop(read);
        let mut rw = tx.rewrite(&x)?;
        assert_eq!(tx.read(&x).unwrap_err(), borrowed(true));
        assert_eq!(tx.rewrite(&x).unwrap_err(), borrowed(true));
        assert_eq!(tx.write(&x).unwrap_err(), borrowed(true));
        rw.target().fill(4.0);
        drop(rw);
        double_plus_one(tx, &x)?; // reads the 4 the first rewrite wrote
        assert_eq!(
            tx.rewrite(&outside).unwrap_err(),
            Error::NotInResourceSet {
                variable: "outside".into(),
                section: "opt".into(),
            }
        );
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(x.read().as_slice().unwrap(), &[9.0]);
}

#[test]
fn a_typed_handle_rewrites_through_typed_views() {
    let w = Variable::new(array![[1.0f32, 2.0], [3.0, 4.0]]);
    let b: Variable<f32, ndarray::Ix1> = Variable::new(Array1::zeros(2));
    let cs = CriticalSection::builder()
        .resource(&w)
        .resource(&b)
        .build()
        .unwrap();
    cs.execute(|tx| {
        let mut rw = tx.rewrite(&w)?;
        let (old, new) = rw.split();
        let _: &ndarray::ArrayRef<f32, Ix2> = old;
        new.assign(&old.t()); // a transpose: indexing by two axes
        let mut rb = tx.rewrite(&b)?;
        let (old, new) = rb.split();
        Zip::from(new).and(old).for_each(|n, &o| *n = o - 1.0);
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(*w.read(), array![[1.0f32, 3.0], [2.0, 4.0]]);
    assert_eq!(*b.read(), array![-1.0f32, -1.0]);
}
