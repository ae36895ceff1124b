//! The head: one atomic pointer to a variable's newest version.
//!
//! The head owns one strong count of the version it points to (`Arc::into_raw`). Publishing
//! a version is a compare-and-swap of the head; the count the head held on the old version
//! moves into the new version's `prev`, and is retired through the epoch once the new
//! version commits. So at most two versions are reachable from a head: the newest, and while
//! it is pending the committed one before it.
//!
//! The pointer's low bit marks a *queued* variable (one that belongs to a critical section):
//! lock-free writers expect an unmarked pointer, so marking the head makes every one of their
//! in-flight compare-and-swaps fail and sends them to the variable's ticket queue.

use std::sync::Arc;

use crate::sync::{epoch, AtomicPtr, Ordering};
use crate::version::{retire, Pinned, Version};
use crate::Element;

const QUEUED: usize = 1;

pub(crate) struct Head<A: Element> {
    ptr: AtomicPtr<Version<A>>,
}

/// What a writer saw when it loaded the head: the raw word to compare against, and the
/// committed version to build on.
pub(crate) struct Current<'g, A: Element> {
    pub(crate) raw: *mut Version<A>,
    pub(crate) version: Pinned<'g, A>,
}

impl<A: Element> Current<'_, A> {
    /// Whether the variable belongs to a critical section (writers must hold its ticket).
    pub(crate) fn queued(&self) -> bool {
        self.raw.addr() & QUEUED != 0
    }

    /// Makes sure the version to build on is committed, helping a pending write to commit
    /// if need be, so that the chain never grows past two.
    ///
    /// Only a writer entitled to write may call this: on a free variable anyone (its pending
    /// writes are single-variable, fully installed by the CAS that published them); on a
    /// queued one only the ticket holder (then a pending head can only be a lock-free write
    /// that slipped in before the variable was claimed: every ticket holder commits before
    /// serving the next). Anyone else could commit a critical section's record halfway
    /// through its installs.
    pub(crate) fn settle(&self, guard: &epoch::Guard) {
        if !self.version.record.is_committed() {
            self.version.record.commit();
            self.version.release_prev(guard);
        }
    }
}

impl<A: Element> Head<A> {
    pub(crate) fn new(first: Arc<Version<A>>) -> Self {
        debug_assert!(first.record.is_committed());
        Self {
            ptr: AtomicPtr::new(Arc::into_raw(first).cast_mut()),
        }
    }

    /// The newest *committed* version: the read path. Wait-free: one acquire load of the head,
    /// one of the record, and (only while a write is mid-commit) one of `prev`.
    pub(crate) fn visible<'g>(&self, guard: &'g epoch::Guard) -> Pinned<'g, A> {
        let newest = self.newest(guard);
        if newest.record.is_committed() {
            return newest;
        }
        // Acquire: pairs with the install's Release so the older version's contents are seen.
        let prev = newest.prev.load(Ordering::Acquire);
        if prev.is_null() {
            // `prev` is cleared only after the commit, so the newest one is committed by now.
            return newest;
        }
        // SAFETY: `prev` holds a count from `Arc::into_raw`, and it was reachable from the
        // head while we are pinned, so its retirement (if any) happens after our pin and its
        // memory outlives `guard`.
        unsafe { Pinned::new(prev) }
    }

    /// The version a snapshot at clock value `at` sees: the newest one committed at or before
    /// `at`, found by walking the `prev` links that writers keep while the snapshot is in
    /// progress (see [`horizon`](crate::horizon)). Its work is the walk: at most one step
    /// per snapshot that ticked the clock since `at`, whatever writers do meanwhile.
    pub(crate) fn visible_at<'g>(&self, at: u64, guard: &'g epoch::Guard) -> At<'g, A> {
        let mut version = self.newest_for_snapshot(guard);
        loop {
            if version.record.visible_at(at) {
                return At::Version(version);
            }
            if version.number == 0 {
                return At::NotYetCreated; // the variable's creation is after `at`
            }
            // Acquire: pairs with the Release of the store (install or relink) that set it.
            let prev = version.prev.load(Ordering::Acquire);
            if prev.is_null() {
                return At::Unlinked;
            }
            // SAFETY: `prev` holds a count from `into_raw`, and it was reachable from the head
            // while we are pinned, so its retirement (if any) waits for our pin.
            version = unsafe { Pinned::new(prev) };
        }
    }

    /// Loads the head for a write. The version may be pending; see [`Current::settle`].
    pub(crate) fn current<'g>(&self, _guard: &'g epoch::Guard) -> Current<'g, A> {
        // Acquire: pairs with the install's Release, so the version's contents are visible.
        let raw = self.ptr.load(Ordering::Acquire);
        // SAFETY: the head always holds a count (from `into_raw`) on its version, and
        // retirement of a replaced head waits for our pin.
        let version = unsafe { Pinned::new(untag(raw)) };
        Current { raw, version }
    }

    /// Publishes `new` if the head is still `expected.raw`; keeps the queued mark as it was.
    /// On success the head's count of the old version moves into `new.prev`, and the caller
    /// must commit `new`'s record (then call [`Version::release_prev`]). On failure `new` is
    /// handed back untouched.
    pub(crate) fn install<'g>(
        &self,
        expected: &Current<'g, A>,
        new: Arc<Version<A>>,
        _guard: &'g epoch::Guard,
    ) -> Result<Pinned<'g, A>, Arc<Version<A>>> {
        // Relaxed: the successful CAS below releases it together with the rest of `new`.
        new.prev.store(untag(expected.raw), Ordering::Relaxed);
        let new_raw = Arc::into_raw(new).cast_mut();
        let tagged = new_raw.map_addr(|a| a | (expected.raw.addr() & QUEUED));
        // AcqRel on success: Release publishes `new` (data, record, prev) to readers; Acquire
        // orders the old head's retirement after its readers' view. Relaxed on failure: the
        // caller reloads with Acquire before looking at anything.
        match self
            .ptr
            .compare_exchange(expected.raw, tagged, Ordering::AcqRel, Ordering::Relaxed)
        {
            // SAFETY: `new_raw` comes from `into_raw` and is now the head, which keeps it
            // alive at least until a later write retires it, and that retirement waits for the
            // caller's pin.
            Ok(_) => Ok(unsafe { Pinned::new(new_raw) }),
            Err(_) => {
                // SAFETY: the CAS failed, so nobody else saw `new_raw`; we take back the count
                // we gave away with `into_raw`.
                let new = unsafe { Arc::from_raw(new_raw) };
                // Relaxed: `new` is private again.
                new.prev.store(std::ptr::null_mut(), Ordering::Relaxed);
                Err(new)
            }
        }
    }

    /// Marks or unmarks the head as queued (see the module docs). Returns whether it changed.
    pub(crate) fn set_queued(&self, queued: bool) -> bool {
        // Acquire on loads: as with any head load, and to see the claim bookkeeping of the
        // last marker. AcqRel on success: the mark must be ordered with the claim bookkeeping
        // around it, and a failed lock-free CAS that observes it must see the claim.
        let mut p = self.ptr.load(Ordering::Acquire);
        loop {
            let want = if queued {
                p.addr() | QUEUED
            } else {
                p.addr() & !QUEUED
            };
            if want == p.addr() {
                return false;
            }
            match self.ptr.compare_exchange_weak(
                p,
                p.with_addr(want),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(now) => p = now,
            }
        }
    }

    /// The newest version, committed or not.
    fn newest<'g>(&self, _guard: &'g epoch::Guard) -> Pinned<'g, A> {
        // Acquire: pairs with the install's Release, so the version's contents are visible.
        let raw = self.ptr.load(Ordering::Acquire);
        // SAFETY: the head holds a count (from `into_raw`) on its version, and retiring a
        // replaced head waits for every thread pinned now, `_guard`'s thread included.
        unsafe { Pinned::new(untag(raw)) }
    }

    /// The newest version, read for a store snapshot by a read-modify-write that changes
    /// nothing. Commits only *read* the clock, so a plain load here could miss an install
    /// that happened before a commit the snapshot sees elsewhere (two stores, two loads: the
    /// store-buffering pattern). An RMW reads the latest head; and if it comes first, the
    /// writer's install reads from it, which orders the snapshot's tick before the writer's
    /// clock read, so that write's timestamp is past the snapshot.
    fn newest_for_snapshot<'g>(&self, _guard: &'g epoch::Guard) -> Pinned<'g, A> {
        // AcqRel: Acquire as in `newest`; Release is what the installing CAS synchronises with.
        let raw = crate::sync::read_for_update(&self.ptr, Ordering::AcqRel);
        // SAFETY: as in `newest`.
        unsafe { Pinned::new(untag(raw)) }
    }
}

/// What a snapshot finds on a variable.
pub(crate) enum At<'g, A: Element> {
    /// The version it shows.
    Version(Pinned<'g, A>),
    /// The variable was created after the snapshot's clock value.
    NotYetCreated,
    /// The version was unlinked: a broken invariant (writers keep it while the snapshot is
    /// registered in the horizon); the snapshot retries at a newer clock value.
    Unlinked,
}

impl<A: Element> Drop for Head<A> {
    fn drop(&mut self) {
        // Relaxed: `drop` has exclusive access to the head.
        let raw = untag(self.ptr.load(Ordering::Relaxed));
        // SAFETY: the head owns one strong count of its version. A `Snapshot` may still
        // borrow it under a pin, so the count goes through the epoch.
        retire(unsafe { Arc::from_raw(raw) }, &epoch::pin());
    }
}

fn untag<A: Element>(p: *mut Version<A>) -> *mut Version<A> {
    p.map_addr(|a| a & !QUEUED)
}
