//! Store snapshots racing several writers of a dense counter and two paged tables: every
//! cut is whole and in order, and once writers and snapshots stop the tables' pages come
//! back within the plain bound. (Run on a 16-core machine for 160 s with 3-16 writers and
//! 2-16 snapshot threads, 51M writes and 83M snapshots, before it was cut to this size.)

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::{quiesce, scaled};
use mvtensor::Store;
use ndarray::{arr0, Array2, Ix0, Ix2};

/// Every writer adds one to `c`, then one to two rows of `p` (one in column 0, one in
/// column 1), then one to a row of `q` (both columns): in any cut `q <= p <= c`, each
/// table's two columns agree, and `c` is at most one write per writer ahead of `q`.
#[test]
fn store_snapshots_of_paged_tables_stay_whole_and_ordered_under_writers() {
    alone!();
    let (writers, snapshotters, writes) = (4, 2, scaled(30, 5_000));
    let store = Store::new();
    let c = store.variable("c", arr0(0i64)).unwrap();
    // Between `c` and `p` in the snapshot's (name) order: a walk over these gives writers
    // time to commit between its look at `c` and its look at `p`, which a snapshot that
    // showed each table's newest version instead of its version at the cut would show.
    for i in 0..scaled(4, 300) {
        store.variable(&format!("m{i:03}"), arr0(0i64)).unwrap();
    }
    let p = store.paged("p", Array2::<i64>::zeros((1000, 2))).unwrap();
    let q = store.paged("q", Array2::<i64>::zeros((64, 2))).unwrap();
    let done = AtomicUsize::new(0);
    let p_row = Array2::from_shape_vec((2, 2), vec![1, 0, 0, 1]).unwrap();
    let q_row = Array2::<i64>::ones((1, 2));
    std::thread::scope(|s| {
        let mut threads = Vec::new();
        for w in 0..writers {
            let (c, p, q, done, p_row, q_row) = (&c, &p, &q, &done, &p_row, &q_row);
            threads.push(s.spawn(move || {
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (w as u64 + 1);
                for _ in 0..writes {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    c.fetch_add(1).unwrap();
                    let r = (x % 1000) as usize;
                    p.scatter_add(&[r, (r + 1) % 1000], p_row).unwrap();
                    q.scatter_add(&[(x >> 20) as usize % 64], q_row).unwrap();
                }
                done.fetch_add(1, Ordering::Release);
            }));
        }
        for k in 0..snapshotters {
            let (store, done) = (&store, &done);
            threads.push(s.spawn(move || {
                let mut held = std::collections::VecDeque::new();
                let mut last = (0, 0, 0);
                let mut taken = 0usize;
                while done.load(Ordering::Acquire) < writers {
                    let cut = store.snapshot();
                    let cv = cut.get::<i64, Ix0>("c").unwrap()[[]];
                    let sums = |name: &str| {
                        let t = cut.get_paged::<i64>(name).unwrap().to_array();
                        let t = t.into_dimensionality::<Ix2>().unwrap();
                        (t.column(0).sum(), t.column(1).sum())
                    };
                    let ((p0, p1), (q0, q1)) = (sums("p"), sums("q"));
                    assert_eq!((p0, q0), (p1, q1), "half a paged write");
                    assert!(q0 <= p0 && p0 <= cv, "out of order: c {cv}, p {p0}, q {q0}");
                    assert!(cv - q0 <= writers as i64, "too far apart: c {cv}, q {q0}");
                    assert!(cv >= last.0 && p0 >= last.1 && q0 >= last.2, "went back");
                    last = (cv, p0, q0);
                    taken += 1;
                    if (taken + k).is_multiple_of(7) {
                        held.push_back(cut); // held while later snapshots and writes run
                        if held.len() > 3 {
                            held.pop_front();
                        }
                    }
                }
            }));
        }
        // Joined, not left to the scope: see `common::quiesce`.
        threads.into_iter().for_each(|t| t.join().unwrap());
    });
    let total = (writers * writes) as i64;
    assert_eq!(c.get(), total);
    let column = |t: &mvtensor::PagedVariable<i64>| {
        let a = t.read().to_array().into_dimensionality::<Ix2>().unwrap();
        a.column(0).sum()
    };
    assert_eq!((column(&p), column(&q)), (total, total));
    // Let crossbeam's epoch catch up first, as the other memory tests do. A table that a
    // snapshot's cut keeps goes back after the book's next tick; when the writers stopped, a
    // tick could still be in flight, queued behind other threads' bags, and a few writes
    // from here are then not always enough for it and the tick after it to run (on a loaded
    // machine, under a sanitizer). Once it has run, three writes are: the first defers the
    // next tick, the next two flushes run it.
    quiesce();
    for _ in 0..4 {
        p.scatter_add(&[0], &Array2::zeros((1, 2))).unwrap();
    }
    // `paged_memory.rs`'s bound for writes of `k = 2` pages: the table, about four writes'
    // worth waiting out the grace period, and `3k + 8` spares.
    let stats = p.stats();
    let bound = stats.table_pages + 4 * 2 + (3 * 2 + 8);
    assert!(
        stats.pages_allocated <= bound,
        "{} pages once writers and snapshots stopped, bound {bound}",
        stats.pages_allocated
    );
}
