//! The only module that names atomics, locks, epochs or threads.
//!
//! Every other module imports its synchronisation primitives from here, so that a build with
//! `RUSTFLAGS="--cfg mvtensor_loom --cfg crossbeam_loom"` swaps all of them for loom's
//! model-checked versions at once (crossbeam-epoch follows through its own `loom` feature).
//! The cfg is named after the crate so that a dependent's own `--cfg loom` leaves mvtensor
//! alone. Tensor payloads
//! (ndarray) contain no synchronisation of ours, so the models in `loom/` drive the real
//! protocols on tiny scalar tensors.

#[cfg(not(mvtensor_loom))]
pub(crate) use std::sync::atomic::AtomicIsize;
#[cfg(not(mvtensor_loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize};

// loom models SeqCst *fences* but treats SeqCst accesses as AcqRel, so a protocol that needs
// a store-load (Dekker) guarantee states it with a fence, which both builds then check.
#[cfg(mvtensor_loom)]
pub(crate) use loom::sync::atomic::AtomicIsize;
#[cfg(mvtensor_loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize};

pub(crate) use std::sync::atomic::Ordering;

/// Epoch-based reclamation (crossbeam-epoch, loom-aware under `--cfg crossbeam_loom`).
pub(crate) use crossbeam_epoch as epoch;

/// A mutex for bookkeeping (claims on a resource) and a paged variable's book (one lock a
/// write pass); never on a read path.
#[derive(Debug)]
pub(crate) struct Mutex<T>(
    #[cfg(not(mvtensor_loom))] std::sync::Mutex<T>,
    #[cfg(mvtensor_loom)] loom::sync::Mutex<T>,
);

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        #[cfg(not(mvtensor_loom))]
        return Self(std::sync::Mutex::new(value));
        #[cfg(mvtensor_loom)]
        return Self(loom::sync::Mutex::new(value));
    }

    /// Locks, ignoring poison: every critical region here leaves the data consistent before
    /// it can panic, so a panic elsewhere never makes the state unusable.
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Locks a std mutex, one that loom never models (behind a condvar, in a thread of its own,
/// across a barrier), ignoring poison: its holders leave the data whole before they can
/// panic.
pub(crate) fn lock_std<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A held [`Mutex`].
#[cfg(not(mvtensor_loom))]
pub(crate) type MutexGuard<'a, T> = std::sync::MutexGuard<'a, T>;
/// A held [`Mutex`].
#[cfg(mvtensor_loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

/// Marks where a protocol hands something from one thread to another (a served request's
/// results): both sides `touch` it, the sender before its releasing store, the receiver after
/// its acquiring load. Free in a normal build; under loom a tracked cell, so a model fails
/// with a causality violation if the ordering between the two is ever weakened.
#[derive(Default)]
pub(crate) struct Handoff(#[cfg(mvtensor_loom)] loom::cell::UnsafeCell<()>);

impl Handoff {
    /// Records a write access (loom only).
    #[inline(always)]
    pub(crate) fn touch(&self) {
        #[cfg(mvtensor_loom)]
        self.0.with_mut(|_| ());
    }

    /// Records a read access (loom only): many readers may look at once, but every look
    /// must happen-before the next `touch` and after the last one.
    #[inline(always)]
    pub(crate) fn look(&self) {
        #[cfg(mvtensor_loom)]
        self.0.with(|_| ());
    }
}

/// Gives the processor (or, under loom, the model's scheduler) to another thread.
pub(crate) fn yield_now() {
    #[cfg(not(mvtensor_loom))]
    std::thread::yield_now();
    #[cfg(mvtensor_loom)]
    loom::thread::yield_now();
}

/// Busy-waits politely: spins briefly, then yields the core. Waiting happens only between
/// writers (a ticket not yet served, a combiner not yet done), never on a read path.
#[derive(Default)]
pub(crate) struct Backoff {
    step: u32,
}

impl Backoff {
    /// Spins for a short, doubling while, then yields once spinning stops paying off. With more
    /// threads than cores (the trainers' usual case) the thread we wait for needs our core.
    pub(crate) fn snooze(&mut self) {
        // Under loom spinning only adds branches: yield at once.
        if !cfg!(mvtensor_loom) && self.step <= 6 {
            for _ in 0..(1u32 << self.step) {
                std::hint::spin_loop();
            }
            self.step += 1;
            return;
        }
        #[cfg(all(test, mvtensor_loom))] // the component models' pruning (`loom_model`)
        crate::loom_model::snoozed(&mut self.step);
        yield_now();
    }
}

/// Process-wide unique ids (variables, sections): resource-id order is what makes critical
/// sections deadlock-free. Not part of any modelled protocol, so a plain std atomic serves.
pub(crate) fn next_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    // Relaxed: only uniqueness matters, and a read-modify-write is unique in any ordering.
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Numbers threads in the order they first ask (the metrics' shards): consecutive threads
/// get consecutive numbers, whatever ids are drawn meanwhile.
pub(crate) fn next_thread_number() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    // Relaxed: as for `next_id`, only uniqueness matters.
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The global commit clock. Store snapshots tick it; every commit, of any variable in any
/// store, reads its timestamp here, so a store snapshot is a cut through the commit order
/// (see [`record`](crate::record)).
#[cfg(not(mvtensor_loom))]
pub(crate) fn clock() -> &'static AtomicU64 {
    static CLOCK: AtomicU64 = AtomicU64::new(1);
    &CLOCK
}

#[cfg(mvtensor_loom)]
pub(crate) fn clock() -> &'static AtomicU64 {
    loom::lazy_static! {
        static ref CLOCK: AtomicU64 = AtomicU64::new(1);
    }
    &CLOCK
}

/// An atomic pointer for a process-wide static that must outlive a loom execution: a deferred
/// function that crossbeam-epoch runs while loom tears an execution down may still reach it,
/// after loom's own statics are gone. Only for data that holds nothing of loom's.
pub(crate) type ProcessAtomicPtr<T> = std::sync::atomic::AtomicPtr<T>;

/// Reads `ptr` with a read-modify-write that leaves it unchanged: the latest value in its
/// modification order, and a write that later CASes `ptr` synchronises with this read.
pub(crate) fn read_for_update<T>(ptr: &AtomicPtr<T>, order: Ordering) -> *mut T {
    #[cfg(not(mvtensor_loom))]
    return ptr.fetch_or(0, order);
    #[cfg(mvtensor_loom)] // loom's AtomicPtr has no `fetch_or`: the same RMW as a CAS loop
    {
        let mut current = ptr.load(Ordering::Relaxed);
        loop {
            match ptr.compare_exchange(current, current, order, Ordering::Relaxed) {
                Ok(read) => return read,
                Err(now) => current = now,
            }
        }
    }
}

/// Rarely-replaced shared state (a store's registry): readers load an `Arc` without locking
/// (arc-swap), writers replace the whole value, retrying if another writer got in first.
/// Under loom a mutex stands in, so that the models stay inside loom's world.
pub(crate) struct RcuCell<T> {
    #[cfg(not(mvtensor_loom))]
    cell: arc_swap::ArcSwap<T>,
    #[cfg(mvtensor_loom)]
    cell: Mutex<std::sync::Arc<T>>,
}

impl<T> RcuCell<T> {
    pub(crate) fn new(value: T) -> Self {
        Self {
            #[cfg(not(mvtensor_loom))]
            cell: arc_swap::ArcSwap::from_pointee(value),
            #[cfg(mvtensor_loom)]
            cell: Mutex::new(std::sync::Arc::new(value)),
        }
    }

    /// The current value.
    pub(crate) fn load(&self) -> std::sync::Arc<T> {
        #[cfg(not(mvtensor_loom))]
        return self.cell.load_full();
        #[cfg(mvtensor_loom)]
        return std::sync::Arc::clone(&self.cell.lock());
    }

    /// Replaces the value with `f(current)`, or leaves it alone if `f` fails. `f` may run
    /// more than once.
    pub(crate) fn update<E>(&self, mut f: impl FnMut(&T) -> Result<T, E>) -> Result<(), E> {
        #[cfg(not(mvtensor_loom))]
        loop {
            let current = self.cell.load_full();
            let next = std::sync::Arc::new(f(&current)?);
            let previous = self.cell.compare_and_swap(&current, next);
            if std::sync::Arc::ptr_eq(&previous, &current) {
                return Ok(());
            }
        }
        #[cfg(mvtensor_loom)]
        {
            let mut cell = self.cell.lock();
            *cell = std::sync::Arc::new(f(&cell)?);
            Ok(())
        }
    }
}

/// Per-thread state (which execution this thread is inside), per loom thread under loom.
#[cfg(not(mvtensor_loom))]
pub(crate) use std::thread_local;

#[cfg(mvtensor_loom)]
pub(crate) use loom::thread_local;

/// A thread to wake: the combiner wakes each writer whose delta it applied.
#[cfg(not(mvtensor_loom))]
pub(crate) use std::thread::{current as current_thread, Thread};

#[cfg(mvtensor_loom)]
pub(crate) use loom::thread::{current as current_thread, Thread};

/// Sleeps until another thread unparks this one (or spuriously: every caller re-checks its
/// condition in a loop). Whoever waits this way must be guaranteed a wake-up by the
/// protocol itself; under loom a missing one shows up as a deadlock.
pub(crate) fn park() {
    #[cfg(not(mvtensor_loom))]
    std::thread::park();
    #[cfg(mvtensor_loom)]
    loom::thread::park();
}
