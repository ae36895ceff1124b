//! Promise 7g: a large variable's pool keeps a third spare while several threads add
//! deltas to it (`src/pool/writers.rs`), and gives it back: once the writers stop, one lone
//! write leaves the current version and two spares.

use std::sync::Barrier;

use mvtensor::Variable;
use ndarray::{ArrayD, IxDyn};

use crate::common;
use common::{quiesce, scaled};

#[test]
#[cfg_attr(
    miri,
    ignore = "needs 64 KiB versions: minutes under miri, and no unsafe code of its own"
)]
fn several_writers_leave_the_current_version_and_two_spares() {
    alone!();
    let len = 64 * 1024; // 256 KiB of f32: a large version
    let v = Variable::new(ArrayD::<f32>::zeros(IxDyn(&[len])));
    let delta = ArrayD::<f32>::ones(IxDyn(&[len]));
    let (threads, writes) = (4, scaled(20, 2_000));
    let start = Barrier::new(threads);
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    for _ in 0..writes {
                        v.assign_add(&delta).unwrap();
                    }
                })
            })
            .collect();
        // Joined, not left to the scope: see `common::quiesce`.
        writers.into_iter().for_each(|w| w.join().unwrap());
    });
    let stats = v.stats();
    assert!(
        stats.combined_deltas > stats.combined_batches,
        "the writers overlapped at least once: {stats:?}"
    );
    // Nobody writes or is pinned: every retired version comes home, then one write trims.
    quiesce();
    v.assign_add(&delta).unwrap();
    quiesce();
    let stats = v.stats();
    assert!(
        stats.live_versions <= 3,
        "{stats:?} (the current version and two spares)"
    );
    let total = (threads * writes + 1) as f32;
    assert!(v.read().iter().all(|&x| x == total), "no update lost");
}
