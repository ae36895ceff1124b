//! Shared by the integration tests.

/// `big` normally, `small` under miri (which runs these tests too, slowly).
pub fn scaled(small: usize, big: usize) -> usize {
    if cfg!(miri) {
        small
    } else {
        big
    }
}

/// CPU time this thread has used: unlike wall time, it does not grow while the thread waits
/// for a core, so it measures work on a shared machine. (Not under miri, which has no
/// per-thread clock.)
#[allow(dead_code)] // not every test file measures
pub fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill in.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Brings every retired version home, once no other thread is pinned: each `flush` advances
/// crossbeam's epoch (nobody else holds it back) and runs at most 8 expired bags of the
/// global queue, and a writer that was held back by a descheduled reader may have left
/// hundreds queued (one bag per large version). 512 flushes drain 4,096 bags, quickly.
/// (Under miri, where no count is exact, a few.)
///
/// Join the test's threads explicitly first, not through the end of `thread::scope`: a
/// scope returns once each closure has returned, before the thread's thread-local
/// destructors run (std's scoped threads signal the scope from the closure's wrapper), and
/// those are where a writer hands its retired batches over and crossbeam unregisters it,
/// pinned for a moment. A `join` waits for the thread's exit.
#[allow(dead_code)] // not every test file counts versions
pub fn quiesce() {
    for _ in 0..scaled(8, 512) {
        crossbeam_epoch::pin().flush();
    }
}

/// A variable of `len` f32 zeros, a delta of ones of its shape, and a critical section over
/// the variable: the set-up of the tests that write one large variable both ways.
#[allow(dead_code)] // not every test file writes through a section
pub fn large_with_section(
    len: usize,
) -> (
    mvtensor::Variable<f32>,
    ndarray::ArrayD<f32>,
    mvtensor::CriticalSection,
) {
    let v = mvtensor::Variable::new(ndarray::ArrayD::<f32>::zeros(ndarray::IxDyn(&[len])));
    let delta = ndarray::ArrayD::<f32>::ones(ndarray::IxDyn(&[len]));
    let section = mvtensor::CriticalSection::builder()
        .resource(&v)
        .build()
        .expect("a fresh variable is unclaimed");
    (v, delta, section)
}

/// A critical section over a paged table and a step counter: the set-up of the tests of
/// paged variables as section resources.
#[allow(dead_code)] // not every test file builds one
pub fn table_and_counter<A: mvtensor::Element>(
    table: &mvtensor::PagedVariable<A>,
    steps: &mvtensor::Variable<i64, ndarray::Ix0>,
) -> mvtensor::CriticalSection {
    mvtensor::CriticalSection::builder()
        .paged(table)
        .resource(steps)
        .build()
        .expect("fresh variables")
}

/// The same floats bit for bit; under miri, whose `powi` is nondeterministic in its last
/// bits (so two optimizers' bias corrections differ), to a relative 1e-4.
#[allow(dead_code)] // not every test file compares optimizers
pub fn same_floats(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    if cfg!(miri) {
        let close = got
            .iter()
            .zip(want)
            .all(|(g, w)| (g - w).abs() <= 1e-4 * w.abs().max(1.0));
        assert!(close, "{got:?} != {want:?}");
    } else {
        assert_eq!(got, want);
    }
}

/// Sets its flag when dropped: when a test's looking is over, or has failed, so that the
/// threads that run until then stop and the test fails instead of hanging.
#[allow(dead_code)] // not every test file stops free-running threads
pub struct Over<'a>(pub &'a std::sync::atomic::AtomicBool);

impl Drop for Over<'_> {
    fn drop(&mut self) {
        // Release: what the looking thread did happens-before the threads that see the flag
        // stop (a stop flag besides; nothing else is published through it).
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// Runs `step` `steps` times on each of `threads` threads while this thread calls `look`
/// until they are all done, paced as [`while_looking`] paces them.
#[allow(dead_code)] // not every test file races readers against steps
pub fn steps_while_looking(
    threads: usize,
    steps: usize,
    step: impl Fn() + Sync,
    look: impl FnMut(),
) {
    let step = |_| step();
    while_looking(
        &vec![&step as &(dyn Fn(usize) + Sync); threads],
        steps,
        look,
    );
}

/// Runs `op(0)`, `op(1)`, ... `op(ops - 1)` of each of `writers` on a thread of its own
/// while this thread calls `look` until they are all done, in lockstep up to a window of
/// `w = min(8, ops / 8)`: a writer makes its `i`-th call only once `look` has run `i - w`
/// times, and `look` runs for the `j`-th time only once the writers have made `j - 1 - w`
/// calls together, so the looks see the writes in progress (the window saves a hand-off per
/// call when the threads outnumber the cores). A looking loop that nothing paced saw only
/// the end: on 2 cores the writers were often done before it began, or ran while it waited
/// for a core. A `look` that panics lets the writers finish, and a writer that panics
/// counts as done, so that the test fails instead of hanging.
#[allow(dead_code)] // not every test file races readers against writers
pub fn while_looking(writers: &[&(dyn Fn(usize) + Sync)], ops: usize, mut look: impl FnMut()) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    /// Lets every writer go on, when the looking is over or has failed.
    struct Release<'a>(&'a AtomicUsize);
    impl Drop for Release<'_> {
        fn drop(&mut self) {
            self.0.store(usize::MAX, Ordering::SeqCst);
        }
    }
    let (done, looks, calls) = (
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    );
    /// Counts its writer as done, also when it panics (else the looker would wait forever
    /// for it, and the test hang instead of failing).
    struct Done<'a>(&'a AtomicUsize);
    impl Drop for Done<'_> {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let window = (ops / 8).min(8);
    std::thread::scope(|s| {
        for op in writers {
            let (done, looks, calls) = (&done, &looks, &calls);
            s.spawn(move || {
                let _done = Done(done);
                for i in 0..ops {
                    // Saturating: a failed look sets `looks` to `usize::MAX`.
                    while looks.load(Ordering::SeqCst).saturating_add(window) < i {
                        std::thread::yield_now(); // the looker may need this core
                    }
                    op(i);
                    calls.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        let _release = Release(&looks);
        let mut looked = 0;
        while done.load(Ordering::SeqCst) < writers.len() {
            if calls.load(Ordering::SeqCst) + 1 + window >= looked {
                look();
                looked += 1;
                looks.store(looked, Ordering::SeqCst);
            } else {
                std::thread::yield_now(); // a writer may need this core
            }
        }
    });
}
