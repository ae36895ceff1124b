//! Versions that store snapshots in progress keep linked are unlinked once they are done.

use std::sync::atomic::{AtomicBool, Ordering};

use mvtensor::Store;
use ndarray::{ArrayD, IxDyn};

use crate::common;
use common::{quiesce, scaled};

/// Back-to-back snapshots racing a writer each see a value that matches its version, and
/// once none is in progress the writer unlinks every version they kept.
#[test]
fn versions_kept_for_snapshots_are_unlinked_once_they_are_done() {
    alone!();
    let store = Store::new();
    // 128 KiB versions: their pool keeps at most two spares, so the count below is exact.
    let len = scaled(2, 16 * 1024);
    let w = store
        .variable("w", ArrayD::<i64>::zeros(IxDyn(&[len])))
        .unwrap();
    let ones = ArrayD::<i64>::ones(IxDyn(&[len]));
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let snapshots = s.spawn(|| {
            while !done.load(Ordering::Acquire) {
                let snap = store.snapshot();
                let seen = snap.get::<i64, IxDyn>("w").unwrap();
                assert_eq!(seen[[len - 1]], seen.version() as i64);
            }
        });
        for _ in 0..scaled(50, 3_000) {
            w.assign_add(&ones).unwrap();
        }
        done.store(true, Ordering::Release);
        snapshots.join().unwrap(); // not left to the scope: see `common::quiesce`
    });
    quiesce();
    w.assign_add(&ones).unwrap(); // no snapshot in progress: unlinks every older version
    quiesce();
    // The current one and two spares (one the last write replaced). (Under miri the tensor
    // is tiny, and small versions are pooled by the batch: no exact count.)
    assert!(
        cfg!(miri) || w.stats().live_versions <= 3,
        "{:?}",
        w.stats()
    );
}
