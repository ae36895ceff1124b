//! Writes called from rayon's pool threads never wait on that pool (issue: a combining pass
//! that split its work across rayon's pool deadlocked when the pool's own threads were the
//! writers waiting for it). A watchdog turns a hang into a failure.

use std::sync::mpsc;
use std::time::Duration;

use mvtensor::{CriticalSection, Variable};
use ndarray::{ArrayD, IxDyn};
use rayon::prelude::*;

/// Runs `job` on its own thread and fails if it has not finished within `limit`. (A hang is
/// the bug; the limit is generous so that a slow machine does not fail the test.)
fn within(limit: Duration, job: impl FnOnce() + Send + 'static) {
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        job();
        let _ = done.send(());
    });
    match finished.recv_timeout(limit) {
        Ok(()) => {}
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("deadlock: no progress in {limit:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the job panicked"),
    }
}

/// Large enough (1M elements) that the old kernel split the pass across rayon's pool.
const LEN: usize = 1 << 20;

/// The scenario: a plain thread writes 50 times while 200 writes run on rayon's pool,
/// each `write(&with, v, ones)` where `with = setup(v)`; every element ends at 250.
fn from_a_thread_and_the_pool<S: Sync>(
    setup: impl FnOnce(&Variable<f32>) -> S + Send + 'static,
    write: impl Fn(&S, &Variable<f32>, &ArrayD<f32>) + Sync + Send + 'static,
) {
    within(Duration::from_secs(120), move || {
        let v = Variable::new(ArrayD::<f32>::zeros(IxDyn(&[LEN])));
        let d = ArrayD::<f32>::ones(IxDyn(&[LEN]));
        let with = setup(&v);
        std::thread::scope(|s| {
            s.spawn(|| (0..50).for_each(|_| write(&with, &v, &d)));
            (0..200).into_par_iter().for_each(|_| write(&with, &v, &d));
        });
        assert!(v.read().iter().all(|&x| x == 250.0));
    });
}

#[test]
#[cfg_attr(
    miri,
    ignore = "4 MiB passes: hours under miri; no unsafe code of its own"
)]
fn combined_writes_from_rayon_pool_threads_finish() {
    from_a_thread_and_the_pool(|_| (), |_, v, d| assert!(v.assign_add(d).unwrap() >= 1));
}

#[test]
#[cfg_attr(
    miri,
    ignore = "4 MiB passes: hours under miri; no unsafe code of its own"
)]
fn executions_from_rayon_pool_threads_finish() {
    from_a_thread_and_the_pool(
        |v| CriticalSection::builder().resource(v).build().unwrap(),
        |cs, v, d| cs.execute(|tx| tx.assign_add(v, d)).unwrap(),
    );
}
