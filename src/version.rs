//! Immutable versions of a variable's value, and the counts that keep them alive.
//!
//! A version is allocated once and reused for the life of its variable: when nobody holds it
//! any more it goes back to its variable's [pool](crate::pool), and a later write builds its
//! value in the same struct and buffer. So a steady-state write allocates nothing.
//!
//! Who holds a version is counted in `refs`: the head's link, each `prev` link, each
//! [`VersionRef`] (owned snapshots, store snapshots, a transaction's base), and a retired
//! link whose count waits in [limbo] for a grace period. The count that drops
//! to zero hands the version back to its pool; nothing here frees memory while the variable
//! lives, so a reader that happens to release the last count never runs a destructor.

use std::ptr::NonNull;
use std::sync::Arc;

use ndarray::ArrayD;

use crate::holds::{self, Held};
use crate::horizon::{self, Oldest};
use crate::limbo;
use crate::pool::{Home, Link};
use crate::record::Record;
use crate::sync::{epoch, AtomicPtr, AtomicUsize, Ordering};
use crate::Element;

mod handles;

pub(crate) use handles::{Building, Pinned, VersionRef};

/// One immutable value of a variable. Nobody mutates a published version; a write builds a
/// new one (in a recycled struct) and swaps the variable's head to it (see
/// [`Head`](crate::head::Head)).
#[repr(C)] // `link` first: pools and orphans hold versions of any element type by it
pub(crate) struct Version<A: Element> {
    pub(crate) link: Link,
    pub(crate) data: ArrayD<A>,
    /// Grows by one per commit of this variable; the first version is 0.
    pub(crate) number: u64,
    /// The version's own, or shared by every version of one critical-section commit, so
    /// that they become visible together.
    pub(crate) record: Record,
    /// The version this one replaced, or an older one a store snapshot in progress may need
    /// (one count of it). While this version is pending, readers fall back to it.
    pub(crate) prev: AtomicPtr<Version<A>>,
    refs: AtomicUsize,
    home: Arc<Home<A>>,
}

impl<A: Element> Version<A> {
    /// A new version, owned by the caller (one count), for `home`'s variable.
    pub(crate) fn allocate(data: ArrayD<A>, home: &Arc<Home<A>>) -> Building<A> {
        home.counters
            .version_allocated(data.len() * std::mem::size_of::<A>());
        let version = Box::new(Self {
            link: Link::counted::<Self>(release_link::<A>),
            data,
            number: 0,
            record: Record::pending(),
            prev: AtomicPtr::new(std::ptr::null_mut()),
            refs: AtomicUsize::new(1),
            home: Arc::clone(home),
        });
        Building {
            ptr: NonNull::from(Box::leak(version)),
        }
    }

    /// The commit timestamp; versions handed to users are always committed.
    pub(crate) fn timestamp(&self) -> u64 {
        self.record.timestamp().unwrap_or(0)
    }

    /// Its variable's pool and counters.
    pub(crate) fn home(&self) -> &Arc<Home<A>> {
        &self.home
    }

    pub(crate) fn bytes(&self) -> usize {
        self.data.len() * std::mem::size_of::<A>()
    }

    /// Once this version is committed: unlinks the versions before it that no reader can
    /// need any more, and retires them. Idempotent; helpers and the writer may race on it.
    ///
    /// With no store snapshot in progress, that is all of them: readers who pin from now on
    /// see this version. Otherwise a snapshot at `S` needs the newest version committed at or
    /// before `S`, so the chain keeps, below this version, only *boundary* versions (the last
    /// one committed before some clock tick): a version committed at this version's own
    /// timestamp is skipped (no snapshot can fall between the two), and everything below the
    /// version the oldest snapshot needs is cut. The chain is therefore at most one version
    /// longer than the number of snapshots that ticked since the oldest one in progress.
    pub(crate) fn release_prev(&self, guard: &epoch::Guard) {
        debug_assert!(self.record.is_committed());
        // After the commit's clock read: see the `horizon` module docs.
        let oldest = horizon::oldest();
        if oldest == Oldest::Nobody {
            self.cut_prev(guard);
            return;
        }
        self.skip_same_epoch(self.timestamp(), guard);
        if let Oldest::At(oldest) = oldest {
            let mut version: &Version<A> = self;
            loop {
                if version.timestamp() <= oldest {
                    version.cut_prev(guard); // every snapshot in progress needs it or newer
                    return;
                }
                // Acquire: pairs with the Release of the store that linked it.
                let prev = version.prev.load(Ordering::Acquire);
                if prev.is_null() {
                    return;
                }
                // SAFETY: a linked `prev` holds a count, and it was reachable from `self`
                // while we are pinned.
                version = unsafe { Pinned::new(prev) }.get();
            }
        }
    }

    /// Links this version past every predecessor committed at its own timestamp: no
    /// snapshot needs them (none ticked between their commit and ours).
    fn skip_same_epoch(&self, ts: u64, guard: &epoch::Guard) {
        loop {
            // Acquire: pairs with the Release of the store that linked it.
            let prev = self.prev.load(Ordering::Acquire);
            if prev.is_null() {
                return;
            }
            // SAFETY: a linked `prev` holds a count and is reachable from us while pinned.
            let p = unsafe { Pinned::<A>::new(prev) };
            if p.timestamp() < ts {
                return; // a boundary: snapshots between its commit and ours need it
            }
            // Acquire: as above.
            let next = p.prev.load(Ordering::Acquire);
            if !next.is_null() {
                // SAFETY: `next` is reachable from `p` while we are pinned, and its count is
                // held until at least our unpin even if `p` unlinks it now, so adding one is
                // sound; it becomes the count our link holds.
                unsafe { Pinned::new(next) }.add_count();
            }
            // AcqRel: Release, because a reader that saw `self` pending and loads this link
            // must then see the commit when it looks again (`Head::visible`): the component
            // model `paged::loom_paged_settle` fails with Acquire alone (a reader showed a
            // version older than its own write). It also orders the count just added on
            // `next` before whoever takes this link over and releases it; Acquire, the same
            // for the count on `prev` we take over. Acquire on failure: reread.
            match self
                .prev
                .compare_exchange(prev, next, Ordering::AcqRel, Ordering::Acquire)
            {
                // SAFETY: we took over the count our link held on `prev`.
                Ok(_) => limbo::retire(unsafe { VersionRef::from_count(prev) }, guard),
                Err(_) => {
                    if !next.is_null() {
                        // SAFETY: the count we added above, unused.
                        drop(unsafe { VersionRef::from_count(next) });
                    }
                }
            }
        }
    }

    /// Unlinks and retires everything below this version.
    fn cut_prev(&self, guard: &epoch::Guard) {
        // AcqRel: Acquire takes ownership of the count published by the install; Release orders
        // our commit before the null, so a reader who sees null sees us committed.
        let prev = self.prev.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !prev.is_null() {
            // SAFETY: a non-null `prev` owns one count, and the swap moved it to us alone.
            limbo::retire(unsafe { VersionRef::from_count(prev) }, guard);
        }
    }

    /// Drops one count; the last one hands the version back to its pool, unless a snapshot
    /// holds it (see [`holds`]): then the count stays, on the held list.
    ///
    /// # Safety
    /// The caller owns one count of the version at `ptr`, and gives it up.
    pub(crate) unsafe fn release(ptr: *const Version<A>) {
        // SAFETY: the caller's contract.
        unsafe { Self::release_with(ptr, None) }
    }

    /// [`release`](Self::release), checking holds against `held` if given: holds read after
    /// the version became unreachable (a batch's, read once for all its versions).
    ///
    /// # Safety
    /// As for `release`; and `held`, if given, was read after the version (and every version
    /// whose count it may release in turn, its `prev`) became unreachable.
    pub(crate) unsafe fn release_with(mut ptr: *const Version<A>, held: Option<&Held>) {
        // A loop down the `prev` links, not a recursion: while a store snapshot is in
        // progress a steady writer links every version it makes, and releasing such a chain
        // one call deep per version could overflow a thread's stack.
        loop {
            // SAFETY: the caller's count (or, down the chain, the link's) keeps the version
            // alive until the decrement.
            let version = unsafe { &*ptr };
            // The last count goes back only if nobody holds the version; else it waits on the
            // held list (`holds::release_count` looks before the count reaches zero).
            // SAFETY: the caller's count (or the link's); a version's first field is its
            // `Link`.
            if !unsafe { holds::release_count(&version.refs, ptr.cast(), held) } {
                return;
            }
            // Nobody can reach the version any more (a count is taken only from a holder of
            // one, a hold, or under a pin that a retired link's grace period outlives), and
            // nobody holds it. Its own `prev` count goes too: anyone pinned who reached that
            // version through us has unpinned, and anyone who holds it made the hold before
            // our grace period ended (so `held` shows it).
            // Relaxed (both): exclusive access now. A load, and a store only when there is a
            // link: no read-modify-write on the path every retired version takes.
            let prev = version.prev.load(Ordering::Relaxed);
            if !prev.is_null() {
                version.prev.store(std::ptr::null_mut(), Ordering::Relaxed);
            }
            // SAFETY: the last count was ours: the version is exclusively ours to hand back.
            unsafe { Home::give_back(ptr.cast_mut()) };
            if prev.is_null() {
                return;
            }
            // `prev` held one count, now ours; `held` covers it (the contract): release it.
            ptr = prev;
        }
    }
}

/// [`Version::release_with`] through a type-erased link (the held list's).
///
/// # Safety
/// As for `release_with`; `link` heads a `Version<A>`.
unsafe fn release_link<A: Element>(link: *mut Link, held: &Held) {
    // SAFETY: the caller's contract; `link` is the version's first field.
    unsafe { Version::<A>::release_with(link.cast::<Version<A>>(), Some(held)) };
}

impl<A: Element> Drop for Version<A> {
    fn drop(&mut self) {
        // Freed only by its pool (trimmed, or the variable gone): nobody holds it.
        // Relaxed: exclusive access.
        debug_assert!(self.prev.load(Ordering::Relaxed).is_null());
        self.home.counters.version_freed(self.bytes());
    }
}

#[cfg(all(test, not(mvtensor_loom)))]
mod tests {
    use super::*;

    /// A raw version, to hand to another thread.
    struct Raw(*mut Version<f32>);
    // SAFETY: the version is handed over whole: only the receiving thread uses it.
    unsafe impl Send for Raw {}

    /// Releasing the newest of a long chain of linked versions (what a steady writer leaves
    /// while a store snapshot is in progress) gives every one back to the pool, on a thread
    /// with a small stack: one call deep per version, the release overflowed it.
    #[test]
    fn releasing_a_long_chain_of_versions_takes_no_stack_per_version() {
        let n = if cfg!(miri) { 300 } else { 100_000 };
        let variable = crate::Variable::new(ndarray::arr1(&[0.0f32]));
        let home = &variable.inner.home;
        let mut newest: *mut Version<f32> = std::ptr::null_mut();
        for _ in 0..n {
            let version = Version::allocate(ArrayD::zeros(ndarray::IxDyn(&[1])), home).into_raw();
            // Relaxed: not shared yet. The link takes over the count of the one below.
            // SAFETY: `version` is ours, fresh from `into_raw`.
            unsafe { (*version).prev.store(newest, Ordering::Relaxed) };
            newest = version;
        }
        let live = || variable.stats().live_versions;
        assert_eq!(live(), n + 1);
        let chain = Raw(newest);
        std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || {
                let chain = chain;
                // SAFETY: the chain's newest count is ours (each link holds the next one's),
                // and no version of it was ever reachable by anyone else.
                unsafe { Version::release(chain.0) };
            })
            .expect("a thread")
            .join()
            .expect("released without overflowing the stack");
        variable.inner.home.trim(0);
        assert_eq!(
            live(),
            1,
            "every version of the chain went back and was freed"
        );
    }
}
