//! What a held store snapshot keeps.

use mvtensor::Store;
use ndarray::{ArrayD, IxDyn};

use crate::common;
use common::{quiesce, scaled};

/// Snapshots hold their versions (and only those) after the variables move on. (64 KiB
/// versions: their pool keeps at most two spares, so the count is exact.)
#[test]
fn a_held_snapshot_keeps_exactly_its_versions() {
    alone!();
    let len = scaled(16, 16 * 1024);
    let store = Store::new();
    let w = store
        .variable("w", ArrayD::<f32>::zeros(IxDyn(&[len])))
        .unwrap();
    let ones = ArrayD::ones(IxDyn(&[len]));
    let snap = store.snapshot();
    for _ in 0..scaled(5, 200) {
        w.assign_add(&ones).unwrap();
    }
    quiesce();
    // The held one, the current one and two spares (one the last write replaced). (Under
    // miri the tensor is tiny, and small versions are pooled by the batch: no exact count.)
    let exact = !cfg!(miri);
    assert!(!exact || w.stats().live_versions <= 4, "{:?}", w.stats());
    assert_eq!(snap.get::<f32, IxDyn>("w").unwrap().sum(), 0.0);
    drop(snap);
    w.assign_add(&ones).unwrap();
    quiesce();
    assert!(!exact || w.stats().live_versions <= 3, "{:?}", w.stats());
}
