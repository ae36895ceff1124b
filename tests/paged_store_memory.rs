//! The chain a paged variable keeps for store snapshots in progress is given back: once no
//! snapshot is in progress, a few writes bring its pages back within the bound of a paged
//! variable that was never in a store snapshot. Counted in pages, not time. One test per
//! file: other tests' pins would hold back the epoch the bound relies on.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};

use common::{quiesce, scaled};
use mvtensor::Store;
use ndarray::{arr0, Array2};

#[test]
fn store_snapshots_leave_no_chain_behind() {
    alone!();
    let (rows, width, k) = (scaled(200, 20_000), 16, 8);
    let store = Store::new();
    let emb = store
        .paged("emb", Array2::<f32>::zeros((rows, width)))
        .unwrap();
    let step = store.variable("step", arr0(0i64)).unwrap();
    let table_pages = emb.stats().table_pages;
    // `paged_memory.rs`'s bound: the table, about four writes' worth of replaced pages
    // waiting out the grace period, and `3k + 8` spares.
    let bound = table_pages + 4 * k + (3 * k + 8);
    let grads = Array2::<f32>::ones((k, width));
    let mut next = 0usize;
    let mut write = || {
        let ids: Vec<usize> = (0..k).map(|i| (next + i * 97) % rows).collect();
        next += 1;
        emb.scatter_add(&ids, &grads).unwrap();
        step.fetch_add(1).unwrap();
    };
    let done = AtomicBool::new(false);
    let snapshots = std::thread::scope(|s| {
        let snapshotter = s.spawn(|| {
            let mut taken = 0u64;
            while !done.load(Ordering::Relaxed) {
                let cut = store.snapshot();
                let steps = cut.get::<i64, ndarray::Ix0>("step").unwrap()[[]];
                let version = cut.get_paged::<f32>("emb").unwrap().version() as i64;
                assert!(
                    steps == version || steps + 1 == version,
                    "{steps} {version}"
                );
                taken += 1;
            }
            taken
        });
        // Under miri 60: a chain kept per write would still be 480 pages over the bound.
        for _ in 0..scaled(60, 20_000) {
            write();
        }
        done.store(true, Ordering::Relaxed);
        snapshotter.join().unwrap()
    });
    assert!(snapshots > 0);
    // The epoch caught up first (see `paged_store_stress.rs`): the book's tick in flight
    // when the snapshots stopped must run before the cut tables' ticks can.
    quiesce();
    for _ in 0..4 {
        write();
    }
    let after = emb.stats().pages_allocated;
    assert!(
        after <= bound,
        "{after} pages after {snapshots} store snapshots, bound {bound}"
    );
}
