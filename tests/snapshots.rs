//! Store snapshots are consistent cuts: every variable as of one point in the commit order.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use mvtensor::{CriticalSection, DType, Error, Store};
use ndarray::{arr0, ArrayD, IxDyn};

mod common;
use common::scaled;

/// Two accounts whose sum every execution preserves; 4 writer threads transfer between them
/// while readers take 100,000 snapshots. The sum holds in every one.
#[test]
fn transfers_preserve_the_sum_in_every_snapshot() {
    let store = Store::new();
    let a = store.variable("a", arr0(1000i64).into_dyn()).unwrap();
    let b = store.variable("b", arr0(0i64).into_dyn()).unwrap();
    let bank = CriticalSection::builder()
        .resource(&a)
        .resource(&b)
        .build()
        .unwrap();
    let snapshots_wanted = scaled(20, 100_000);
    let transfers_each = scaled(5, 250);
    let taken = AtomicUsize::new(0);
    let writers_done = AtomicBool::new(false);
    let (a, b, bank) = (&a, &b, &bank);

    std::thread::scope(|s| {
        let writers: Vec<_> = (0..4)
            .map(|t| {
                s.spawn(move || {
                    for i in 0..transfers_each as i64 {
                        let amount = arr0((i + t) % 7 - 3).into_dyn();
                        bank.execute(|tx| {
                            tx.assign_sub(a, &amount)?;
                            tx.assign_add(b, &amount)
                        })
                        .unwrap();
                    }
                })
            })
            .collect();
        for _ in 0..2 {
            s.spawn(|| {
                let mut last = 0;
                // Until both the snapshots are taken and the transfers are done, so that
                // snapshots race transfers all along.
                while taken.fetch_add(1, Ordering::Relaxed) < snapshots_wanted
                    || !writers_done.load(Ordering::Acquire)
                {
                    let snap = store.snapshot();
                    let sum = snap.get::<i64>("a").unwrap()[[]] + snap.get::<i64>("b").unwrap()[[]];
                    assert_eq!(sum, 1000, "a snapshot saw part of a transfer");
                    assert!(snap.timestamp() >= last, "snapshots move forward");
                    last = snap.timestamp();
                }
            });
        }
        writers.into_iter().for_each(|w| w.join().unwrap());
        writers_done.store(true, Ordering::Release);
    });
    assert_eq!(a.read()[[]] + b.read()[[]], 1000);
    assert!(taken.load(Ordering::Relaxed) >= snapshots_wanted);
    // One version per batch of transfers, and both variables commit every batch together.
    assert!(a.version() >= 1 && a.version() <= 4 * transfers_each as u64);
    assert_eq!(a.version(), b.version());
    eprintln!(
        "{} snapshots raced {} transfers in {} batches",
        taken.load(Ordering::Relaxed),
        4 * transfers_each,
        a.version()
    );
}

#[test]
fn a_snapshot_is_frozen_and_lists_every_variable() {
    let store = Store::new();
    let w = store
        .variable("w", ArrayD::<f32>::zeros(IxDyn(&[3])))
        .unwrap();
    let step = store.variable("step", arr0(0i64).into_dyn()).unwrap();
    let snap = store.snapshot();
    w.assign_add(&ArrayD::ones(IxDyn(&[3]))).unwrap();
    step.assign(arr0(9).into_dyn()).unwrap();

    assert_eq!(snap.get::<f32>("w").unwrap().sum(), 0.0);
    assert_eq!(snap.get::<i64>("step").unwrap()[[]], 0);
    let listed: Vec<_> = snap
        .iter()
        .map(|e| {
            (
                e.name().to_owned(),
                e.dtype(),
                e.shape().to_vec(),
                e.version(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        vec![
            ("step".to_owned(), DType::I64, vec![], 0),
            ("w".to_owned(), DType::F32, vec![3], 0),
        ]
    );
    let later = store.snapshot();
    assert!(later.timestamp() > snap.timestamp());
    assert_eq!(later.get::<f32>("w").unwrap().sum(), 3.0);
    assert_eq!(later.get::<f32>("w").unwrap().version(), 1);
}

#[test]
fn variables_created_after_a_snapshot_are_not_in_it() {
    let store = Store::new();
    store.variable("old", arr0(1.0f64).into_dyn()).unwrap();
    let snap = store.snapshot();
    store.variable("new", arr0(2.0f64).into_dyn()).unwrap();
    assert_eq!(snap.len(), 1);
    assert_eq!(
        snap.get::<f64>("new").unwrap_err(),
        Error::NotFound { name: "new".into() }
    );
    assert_eq!(store.snapshot().len(), 2);
}

#[test]
fn snapshot_lookups_are_typed() {
    let store = Store::new();
    store.variable("w", arr0(1.0f32).into_dyn()).unwrap();
    let snap = store.snapshot();
    assert_eq!(
        snap.get::<i32>("w").unwrap_err(),
        Error::DTypeMismatch {
            variable: "w".into(),
            expected: DType::I32,
            found: DType::F32
        }
    );
}

/// Snapshots hold their versions (and only those) after the variables move on.
#[test]
fn a_held_snapshot_keeps_exactly_its_versions() {
    let store = Store::new();
    let w = store
        .variable("w", ArrayD::<f32>::zeros(IxDyn(&[8])))
        .unwrap();
    let snap = store.snapshot();
    for _ in 0..scaled(5, 200) {
        w.assign_add(&ArrayD::ones(IxDyn(&[8]))).unwrap();
    }
    for _ in 0..4 {
        crossbeam_epoch::pin().flush();
    }
    assert!(w.stats().live_versions <= 3, "{:?}", w.stats());
    assert_eq!(snap.get::<f32>("w").unwrap().sum(), 0.0);
    drop(snap);
    for _ in 0..4 {
        crossbeam_epoch::pin().flush();
    }
    assert!(w.stats().live_versions <= 2, "{:?}", w.stats());
}
