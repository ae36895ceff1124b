//! Promise 7: a reader's pin never frees memory. Retired versions are released by whichever
//! thread crossbeam-epoch runs their batch on, readers included; that release only hands a
//! version back to its pool. A counting allocator checks that a thread that only reads never
//! frees a tensor-sized block while a writer churns through versions. (crossbeam's own
//! bookkeeping, a ~2 KiB bag node now and then, is below the threshold and not ours.) The
//! allocator (`counting`) counts only the frees of threads marked as readers.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use mvtensor::{PagedVariable, Variable};
use ndarray::{ArrayD, IxDyn};

use crate::common;
use crate::counting::{mark_reader, reader_frees};
use common::quiesce;

#[test]
#[cfg_attr(
    miri,
    ignore = "a global allocator and 64 KiB tensors: too slow under miri"
)]
fn a_reader_never_frees_a_version() {
    alone!();
    let len = 16 * 1024; // 64 KiB of f32
    let v = Variable::new(ArrayD::<f32>::zeros(IxDyn(&[len])));
    let delta = ArrayD::<f32>::ones(IxDyn(&[len]));
    let done = AtomicBool::new(false);
    let reads = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            mark_reader();
            // Many short pins: every 128th makes crossbeam collect on this thread, which runs
            // whatever retired batches have expired, the writer's included.
            while !done.load(Ordering::Acquire) {
                let snap = v.read();
                assert_eq!(snap[[len - 1]], snap.version() as f32);
                reads.fetch_add(1, Ordering::Relaxed);
            }
        });
        wait_for_a_read(&reads);
        for _ in 0..2_000 {
            v.assign_add(&delta).unwrap();
        }
        done.store(true, Ordering::Release);
        // Joined, not left to the scope: the reader's thread-local destructors (crossbeam's
        // last pin on it among them) run before the checks below.
        reader.join().unwrap();
    });
    assert_eq!(
        reader_frees(),
        0,
        "a thread that only reads freed a tensor-sized block"
    );
    // And the versions went back to the variable, not to the allocator: once nobody is
    // pinned, a few collections and one write leave the current version and two spares (one
    // the version it replaced). (During the run the count is not a constant: a reader descheduled
    // while pinned holds back every version retired meanwhile; seen here up to ~400 on a
    // loaded machine.)
    quiesce();
    v.assign_add(&delta).unwrap();
    quiesce();
    assert!(v.stats().live_versions <= 3, "{:?}", v.stats());
}

/// The writer starts once the reader has read: the test is about a reader that is running.
fn wait_for_a_read(reads: &AtomicUsize) {
    while reads.load(Ordering::Relaxed) == 0 {
        std::thread::yield_now();
    }
}

/// The same for a paged variable: its retired tables' counts drop inside whichever thread
/// runs the epoch's deferred functions, readers included, and that only decrements; the
/// writer reuses or frees the pages. Pages are 16 KiB here, so a page freed by the reader
/// counts.
#[test]
#[cfg_attr(
    miri,
    ignore = "a global allocator and 16 KiB pages: too slow under miri"
)]
fn a_reader_never_frees_a_page() {
    alone!();
    let (rows, width) = (4096, 64); // 64 rows of 64 f32 per page: 16 KiB
    let table = PagedVariable::builder(ndarray::Array2::<f32>::zeros((rows, width)))
        .rows_per_page(64)
        .build()
        .unwrap();
    let ones = ndarray::Array2::<f32>::ones((4, width));
    let done = AtomicBool::new(false);
    let reads = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            mark_reader();
            while !done.load(Ordering::Acquire) {
                let snap = table.read();
                // Every write adds 1 to rows 0 and 64 (two pages): they always agree.
                assert_eq!(snap.row(0).unwrap()[[0]], snap.row(64).unwrap()[[0]]);
                reads.fetch_add(1, Ordering::Relaxed);
            }
        });
        wait_for_a_read(&reads);
        for i in 0..2_000 {
            let far = 128 + 64 * (i % 60);
            table.scatter_add(&[0, 64, far, far + 1], &ones).unwrap();
        }
        done.store(true, Ordering::Release);
        // Joined, not left to the scope: the reader's thread-local destructors (crossbeam's
        // last pin on it among them) run before the checks below.
        reader.join().unwrap();
    });
    assert_eq!(
        reader_frees(),
        0,
        "a thread that only reads freed a page-sized block"
    );
}
