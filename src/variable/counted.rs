//! Writes that hold back as little reclamation as they can. Reclamation waits for every
//! thread pinned now to unpin, and with more writers than cores the OS deschedules writers
//! mid-write: a writer pinned for its whole write holds back every version any thread
//! retires meanwhile. So a large write keeps the version it builds on by a count, not a pin,
//! while it computes ([`Variable::write_counted`]), and a compare-and-swap writer that finds
//! its variable at its room waits for a version to come back ([`Inner::make_room`]).

use super::write::Taker;
use super::Inner;
use crate::error::Result;
use crate::limbo;
use crate::running;
use crate::sync::{epoch, yield_now};
use crate::version::{Building, Version, VersionRef};
use crate::{Element, Variable};

/// The most yields of one [`Inner::make_room`]: a few time slices of the descheduled
/// writers it waits for, then the write allocates (a bound on the wait, not on memory).
const ROOM_YIELDS: usize = if cfg!(mvtensor_loom) { 2 } else { 64 };

impl<A: Element> Inner<A> {
    /// Whether plain (not combined) writes keep the version they build on by a count,
    /// unpinned while they compute ([`Variable::write_counted`]): a large variable's do, and
    /// under loom and miri every variable's, so that the models and miri's checks cover the
    /// path (combined passes of small variables keep the pinned one). `update` and
    /// `fetch_update` closures always run unpinned, whatever the size.
    pub(crate) fn writes_counted(&self) -> bool {
        self.large() || cfg!(mvtensor_loom) || cfg!(miri)
    }

    /// Before a write that is not combined (a compare-and-swap write): waits while the
    /// variable has [`limbo::room`] versions or more and none is pooled, yielding the core,
    /// so that a write reuses a version rather than allocate one more (at most
    /// [`ROOM_YIELDS`] yields; then it goes on, and allocates).
    ///
    /// Reclamation waits for every thread pinned now to unpin, and a compare-and-swap writer
    /// is pinned for nearly all of its write: with more writers than cores, the ones the OS
    /// has descheduled are pinned, and the epoch moves only as fast as they get the core
    /// back, while the running writers keep allocating: without a bound a variable grows
    /// without end (`tests/cas_memory.rs`). A waiting writer is not pinned, so it holds
    /// nothing back, and its core goes to the pinned ones. A thread that is pinned already (a
    /// guard of crossbeam-epoch's the caller holds; no snapshot pins) does not wait: its own
    /// pin would hold back what it waits for. Nor does a thread inside an execution or an
    /// `update` closure (neither is pinned): it may hold tickets, and the callers queued
    /// behind would wait with it. Combined writes do not need this: their waiters are not
    /// pinned, and one pass at a time allocates.
    #[inline]
    pub(crate) fn make_room(&self) {
        if self.home.counters.live() >= self.room {
            self.wait_for_room();
        }
    }

    /// [`make_room`](Self::make_room)'s wait, out of the write's way.
    #[cold]
    #[inline(never)]
    fn wait_for_room(&self) {
        // Inside an execution the thread holds its section's tickets: the callers queued
        // behind it would wait with it.
        if epoch::is_pinned() || running::inside() {
            return;
        }
        for _ in 0..ROOM_YIELDS {
            limbo::collect();
            if !self.home.is_dry() || self.home.counters.live() < self.room {
                return;
            }
            yield_now();
        }
    }
}

impl<A: Element> Variable<A> {
    /// [`write_counted`](Self::write_counted) if `counted`, else [`write`](Self::write)
    /// under a pin of its own, after the ticket (waited for unpinned, [`write_queued`]) if
    /// a section holds the variable; returns the new version number.
    ///
    /// [`write_queued`]: Self::write_queued
    pub(super) fn write_either(
        &self,
        counted: bool,
        taker: Taker,
        make: impl FnMut(&Version<A>, &mut Building<A>) -> Result<()>,
    ) -> Result<u64> {
        if counted {
            self.write_counted(taker, make)
        } else if self.inner.head.queued_hint() {
            self.write_queued(taker, make)
        } else {
            // No ticket given: the loop takes one if a section claimed the variable since.
            self.write(&epoch::pin(), None, taker, make)
                .map(|(_, new)| new)
        }
    }

    /// [`write`](Self::write) unpinned while `make` runs (a large variable's writes, and
    /// `update` closures of any size): the version to build on is kept by a count instead,
    /// and the head is loaded again under a new pin to publish (if it moved, `make` runs
    /// again on the newer version). Returns the new version number.
    ///
    /// A pin held across `make` (a large tensor's pass) would hold back every version any
    /// thread retires meanwhile, and with more writers than cores the OS deschedules writers
    /// mid-write, so others would allocate fresh buffers (and fault their pages in). An
    /// `update` closure is the caller's code and may take as long as it likes: pinned, it
    /// would hold back every other variable's versions for as long as it runs
    /// (`tests/long_closures.rs`). A count holds back only the version it counts, which the
    /// write replaces anyway.
    ///
    /// A queued variable's (a critical section's) writer takes the variable's ticket first,
    /// waiting unpinned, and keeps it until the version is published: the closure of a
    /// section's variable runs unpinned too.
    pub(super) fn write_counted(
        &self,
        taker: Taker,
        make: impl FnMut(&Version<A>, &mut Building<A>) -> Result<()>,
    ) -> Result<u64> {
        // `base`'s count goes now, before the caller's `reclaim_now` looks for the version
        // it replaced.
        self.write_counted_from(taker, make).map(|(_, new)| new)
    }

    /// [`write_counted`](Self::write_counted), returning a count of the version it replaced
    /// as well (`fetch_update`'s snapshot).
    pub(super) fn write_counted_from(
        &self,
        taker: Taker,
        mut make: impl FnMut(&Version<A>, &mut Building<A>) -> Result<()>,
    ) -> Result<(VersionRef<A>, u64)> {
        let inner = &*self.inner;
        if let Taker::Anyone = taker {
            running::check_not_updating(inner.id, &inner.name)?;
        }
        // A section holds it: its ticket first, unpinned; it goes when this returns, after
        // the publish (then the next holder may load our version).
        let mut ticket = None;
        if inner.head.queued_hint() {
            ticket = Some(self.take_ticket(taker)?);
        }
        let mut next = None;
        loop {
            let (base, raw) = {
                let guard = epoch::pin();
                let current = inner.head.current(&guard);
                if current.queued() && ticket.is_none() {
                    // Queued since the look: the ticket is waited for unpinned.
                    drop(next.take()); // back to the pool
                    drop(guard);
                    ticket = Some(self.take_ticket(taker)?);
                    continue; // load again: the previous holder has committed
                }
                current.settle(&guard); // free, or we hold the ticket: see `Current::settle`
                (current.version.to_ref(), current.raw)
            };
            let _inside = self.inside_queued_update(&ticket)?;
            let mut building = match next.take() {
                Some(building) => building,
                None => inner.building(&base.data, taker),
            };
            make(&base, &mut building)?;
            building.number = base.number + 1;
            let guard = epoch::pin();
            let current = inner.head.current(&guard);
            // The same pointer is the same version: `base`'s count keeps it from being
            // reused, so the head cannot have left it and come back. Committed still: it
            // was settled, and a head is never uncommitted.
            if current.raw != raw {
                next = Some(building);
                continue;
            }
            match inner.head.publish(&current, building, &guard) {
                Ok(installed) => {
                    inner.published(installed.number, installed.bytes());
                    return Ok((base, installed.number));
                }
                Err(lost) => {
                    inner.home.counters.cas_retried();
                    next = Some(lost);
                }
            }
        }
    }
}
