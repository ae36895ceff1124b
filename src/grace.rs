//! Grace periods, counted: how a thread learns that crossbeam-epoch's grace period for
//! something it retired is over, with (usually) one deferred call in flight at a time.
//!
//! crossbeam-epoch says when every thread pinned at some moment has unpinned by running a
//! function deferred at that moment. Handing it one function per batch of retirements, each
//! with the `flush` that makes it timely, is costly, and more so with two threads doing it:
//! a flush moves the thread's whole bag of deferred functions onto crossbeam's global queue
//! (a 2 KiB node allocated by one thread and freed by whichever collects it, so the threads'
//! allocator arenas take each other's locks). It would be most of what a second thread
//! writing its own small variable costs.
//!
//! So each thread keeps a [`Clock`]: a count of *ticks* it deferred and the highest number of
//! one that ran. A tick is a deferred function that only raises `done` to its number; a
//! thread defers the next one only once the last has run ([`Clock::advance`]), except for a
//! large version, which its writer wants back before its write returns
//! ([`Clock::advance_now`]). Something retired before tick `k` was deferred is unreachable
//! once `done >= k`: the batches a thread seals wait for the first tick deferred after them
//! ([`Clock::seal_point`]). In between ticks the thread only flushes (usually an empty bag: a
//! collection, no node), which pushes the tick along.
//!
//! The clock lives in the thread's hold block ([`holds`](crate::holds)), which is never freed
//! and goes to the next new thread once its own exits: a tick still in flight then may store
//! its number after the exit, and the next owner carries the count on from there.
//!
//! A paged variable's book has a clock of its own, advanced by whichever thread holds the
//! variable's book lock (the lock hands `deferred` from holder to holder), so that the tables its
//! writes replace wait for the variable's next writes, not for one thread's
//! (`paged::book::Ledger::retire_head`); a tick in flight keeps
//! the book alive.

use crate::sync::{epoch, AtomicU64, Ordering};

/// A thread's ticks: how many it deferred, and the highest number of one that ran.
#[derive(Default)]
pub(crate) struct Clock {
    /// Ticks deferred so far. Written only by the owning thread; atomic so that it passes to
    /// the block's next owner (published by the hand-over's Release).
    deferred: AtomicU64,
    /// The highest number of a tick that ran. Ticks in flight together (see
    /// [`advance_now`](Self::advance_now)) may run out of order, on different threads; a
    /// later tick's grace period covers everything an earlier one's does, so the highest is
    /// what counts.
    done: AtomicU64,
}

impl Clock {
    /// The tick that something sealed now waits for: the first one deferred after now. (If
    /// one is in flight, it was deferred before, so it is the one after that.)
    pub(crate) fn seal_point(&self) -> u64 {
        // Relaxed: our own writes (or the previous owner's, published by the hand-over).
        self.deferred.load(Ordering::Relaxed) + 1
    }

    /// Whether the grace period of what was sealed at `point` is over.
    ///
    /// Acquire: pairs with the tick's Release, and through it with everything that the
    /// threads pinned before the tick was deferred did while pinned (crossbeam orders it
    /// before the deferred call): their holds are then visible to the caller's release.
    pub(crate) fn passed(&self, point: u64) -> bool {
        self.done.load(Ordering::Acquire) >= point
    }

    /// Moves this thread's grace period along: defers the next tick if every tick deferred
    /// before has run (so that a thread has one in flight, and one bag to push, per grace
    /// period), and (outside loom) flushes, so that crossbeam collects and advances its epoch.
    ///
    /// Under loom the flush is left out, as it always was: exploring crossbeam's collection on
    /// every write made the store-snapshot models run for tens of minutes. The models that
    /// check reuse flush themselves.
    pub(crate) fn advance(&'static self, guard: &epoch::Guard) {
        self.flush_after(false, guard);
    }

    /// Like [`advance`](Self::advance), but defers the next tick even if others are in
    /// flight: for a large version, whose writer wants it back before the write returns
    /// (a tick in flight was deferred before the version's seal, so it does not serve).
    pub(crate) fn advance_now(&'static self, guard: &epoch::Guard) {
        self.flush_after(true, guard);
    }

    fn flush_after(&'static self, always: bool, guard: &epoch::Guard) {
        if let Some(tick) = self.next_tick(always) {
            // The clock is never freed (it lives in a hold block).
            guard.defer(move || self.ran(tick));
        }
        if !cfg!(mvtensor_loom) {
            guard.flush();
        }
    }

    /// The number of the next tick to defer, counted as deferred, if `always` or if every
    /// tick deferred before has run; `None` if one is still in flight. For an owner whose
    /// clock is not `'static` (a paged variable's book): it defers the tick itself, with what
    /// keeps the clock alive until the tick has [`ran`](Self::ran). Only one thread at a time
    /// may call it (the owner of the clock).
    pub(crate) fn next_tick(&self, always: bool) -> Option<u64> {
        // Relaxed: only the owner writes it, and reads it until a hand-over (a new thread,
        // or the next holder of a paged variable's book lock) orders it. (One load each, and `done`
        // only when it matters: every atomic access is a branch point of the loom models.)
        let deferred = self.deferred.load(Ordering::Relaxed);
        // Relaxed: the decision only; a tick still in flight just makes us wait for it.
        if !always && self.done.load(Ordering::Relaxed) != deferred {
            return None;
        }
        self.deferred.store(deferred + 1, Ordering::Relaxed);
        Some(deferred + 1)
    }

    /// Tick `tick` ran: its grace period is over. Called from the deferred function.
    pub(crate) fn ran(&self, tick: u64) {
        // Release: see `passed`.
        self.done.fetch_max(tick, Ordering::Release);
    }
}
