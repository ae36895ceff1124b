//! The head: one atomic pointer to a variable's newest version.
//!
//! The head owns one count of the version it points to. Publishing a version is a
//! compare-and-swap of the head. A write of one variable ([`Head::publish`]) installs its
//! version already committed and retires the head's count of the old one (or, while a store
//! snapshot is in progress, moves it into the new version's `prev`). A critical section
//! ([`Head::install`]) installs a *pending* version whose `prev` keeps the old one reachable
//! for readers until the section's shared record commits.
//!
//! The pointer's low bit marks a *queued* variable (one that belongs to a critical section):
//! lock-free writers expect an unmarked pointer, so marking the head makes every one of their
//! in-flight compare-and-swaps fail and sends them to the variable's ticket queue.

use crate::horizon::{self, Oldest};
use crate::limbo;
use crate::record::Record;
use crate::sync::{epoch, AtomicPtr, Ordering};
use crate::version::{Building, Pinned, Version, VersionRef};
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
    pub(crate) fn new(first: Building<A>) -> Self {
        debug_assert!(first.record.is_committed());
        Self {
            ptr: AtomicPtr::new(first.into_raw()),
        }
    }

    /// The newest *committed* version: the read path. Wait-free: one acquire load of the head,
    /// one of the record, and (only while a write is mid-commit) one of `prev`.
    pub(crate) fn visible<'g>(&self, guard: &'g epoch::Guard) -> Pinned<'g, A> {
        let newest = self.newest(guard);
        if newest.record.is_committed() {
            return newest;
        }
        // Acquire: pairs with the install's Release so the older version's contents are seen,
        // and with the Release of whoever changed the link since, which happens only after
        // the commit: a cut (null) or a skip past versions of the same timestamp
        // (`Version::release_prev`) to an *older* one.
        let prev = newest.prev.load(Ordering::Acquire);
        if prev.is_null() || newest.record.is_committed() {
            // Having read a changed link, we see the commit: the newest one is visible. (Not
            // looking again showed a version older than one this thread had already read,
            // when a section committed twice during one store snapshot: the component model
            // `paged::loom_paged_settle`, at preemption bound 3.)
            return newest;
        }
        // SAFETY: `prev` holds a count, and it was reachable from the
        // head while we are pinned, so its retirement (if any) happens after our pin and its
        // memory outlives `guard`.
        unsafe { Pinned::new(prev) }
    }

    /// The version a snapshot at clock value `at` sees: the newest one committed at or before
    /// `at`, found by walking the `prev` links that writers keep while the snapshot is in
    /// progress (see [`horizon`]). Its work is the walk: at most one step
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
            // SAFETY: `prev` holds a count, and it was reachable from the head while we are
            // pinned, so its release (if any) waits for our pin.
            version = unsafe { Pinned::new(prev) };
        }
    }

    /// Whether a critical section holds the variable now, without pinning: a hint for a
    /// writer about to pin (it takes the ticket first, so that it does not wait pinned); the
    /// write loop reads the mark again under its pin.
    pub(crate) fn queued_hint(&self) -> bool {
        // Relaxed: a hint, not followed; the loaded pointer is never dereferenced.
        self.ptr.load(Ordering::Relaxed).addr() & QUEUED != 0
    }

    /// Loads the head for a write. The version may be pending; see [`Current::settle`].
    pub(crate) fn current<'g>(&self, _guard: &'g epoch::Guard) -> Current<'g, A> {
        // Acquire: pairs with the install's Release, so the version's contents are visible.
        let raw = self.ptr.load(Ordering::Acquire);
        // SAFETY: the head always holds a count on its version, and the release of a
        // replaced head's count waits for our pin.
        let version = unsafe { Pinned::new(untag(raw)) };
        Current { raw, version }
    }

    /// Publishes `new` (committed now) if the head is still `expected.raw`, keeping the queued
    /// mark as it was, and retires what the head held. On failure `new` comes back untouched
    /// but for its record.
    ///
    /// The clock is read before the install, and the horizon after the clock: with no store
    /// snapshot in progress, `new` links to nothing and the old version's count is retired at
    /// once; otherwise `new.prev` takes the old version (a snapshot may need it) and
    /// [`Version::release_prev`] keeps only what snapshots need.
    pub(crate) fn publish<'g>(
        &self,
        expected: &Current<'g, A>,
        mut new: Building<A>,
        guard: &'g epoch::Guard,
    ) -> Result<Pinned<'g, A>, Building<A>> {
        debug_assert!(expected.version.record.is_committed(), "settled first");
        new.record = Record::committed_now();
        let keep = horizon::oldest() != Oldest::Nobody;
        let old = untag(expected.raw);
        if keep {
            // Relaxed: published by the install's Release. The head's count moves here.
            new.prev.store(old, Ordering::Relaxed);
        }
        match self.install_raw(expected, new) {
            Ok(installed) => {
                // SAFETY: `installed` is the head now, which keeps it alive at least until a
                // later write retires it, and that retirement waits for the caller's pin.
                let installed = unsafe { Pinned::new(installed) };
                if keep {
                    installed.release_prev(guard);
                } else {
                    // SAFETY: the head held one count of `old`; the install took it over.
                    limbo::retire(unsafe { VersionRef::from_count(old) }, guard);
                }
                Ok(installed)
            }
            Err(new) => {
                // Relaxed: `new` is private again; the count stays with the head.
                new.prev.store(std::ptr::null_mut(), Ordering::Relaxed);
                Err(new)
            }
        }
    }

    /// Installs `new`, whose record is pending, on top of the settled `expected`; its `prev`
    /// takes over the head's count of the old version, so readers fall back to it until the
    /// record commits. The caller then commits the record and calls
    /// [`Version::release_prev`]. On failure `new` comes back untouched.
    pub(crate) fn install<'g>(
        &self,
        expected: &Current<'g, A>,
        new: Building<A>,
        _guard: &'g epoch::Guard,
    ) -> Result<Pinned<'g, A>, Building<A>> {
        // Relaxed: published by the install's Release.
        new.prev.store(untag(expected.raw), Ordering::Relaxed);
        match self.install_raw(expected, new) {
            // SAFETY: `installed` is the head now, which keeps it alive at least until a later
            // write retires it, and that retirement waits for the caller's pin.
            Ok(installed) => Ok(unsafe { Pinned::new(installed) }),
            Err(new) => {
                // Relaxed: `new` is private again; the count stays with the head.
                new.prev.store(std::ptr::null_mut(), Ordering::Relaxed);
                Err(new)
            }
        }
    }

    /// The compare-and-swap: `new` becomes the head if the head is still `expected.raw`.
    fn install_raw(
        &self,
        expected: &Current<'_, A>,
        new: Building<A>,
    ) -> Result<*mut Version<A>, Building<A>> {
        let new_raw = new.into_raw();
        let tagged = new_raw.map_addr(|a| a | (expected.raw.addr() & QUEUED));
        // AcqRel on success: Release publishes `new` (data, record, prev) to readers; Acquire
        // orders the old head's retirement after its readers' view (and synchronises with a
        // snapshot's read-modify-write of the head, `newest_for_snapshot`). Relaxed on
        // failure: the caller reloads with Acquire before looking at anything.
        match self
            .ptr
            .compare_exchange(expected.raw, tagged, Ordering::AcqRel, Ordering::Relaxed)
        {
            Ok(_) => Ok(new_raw),
            // SAFETY: the CAS failed, so nobody saw `new_raw`: it is ours again.
            Err(_) => Err(unsafe { Building::from_raw(new_raw) }),
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
        // SAFETY: the head holds a count on its version, and releasing a replaced head's count
        // waits for every thread pinned now, `_guard`'s thread included.
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
        // SAFETY: the head owns one count of its version. A `Snapshot` may still borrow it
        // under a pin, so the count goes through the epoch.
        limbo::retire(unsafe { VersionRef::from_count(raw) }, &epoch::pin());
    }
}

fn untag<A: Element>(p: *mut Version<A>) -> *mut Version<A> {
    p.map_addr(|a| a & !QUEUED)
}
