//! Immutable versions of a variable's value.

use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;

use ndarray::ArrayD;

use crate::horizon::{self, Oldest};
use crate::record::Record;
use crate::recycle::Recycler;
use crate::stats::Counters;
use std::cell::Cell;

use crate::sync::{epoch, thread_local, AtomicPtr, Ordering};
use crate::Element;

/// One immutable value of a variable. Nobody mutates a published version; a write builds a
/// new one and swaps the variable's head to it (see [`Head`](crate::head::Head)).
pub(crate) struct Version<A: Element> {
    pub(crate) data: ArrayD<A>,
    /// Grows by one per commit of this variable; the first version is 0.
    pub(crate) number: u64,
    /// The version's own, or shared by every version of one critical-section commit, so
    /// that they become visible together.
    pub(crate) record: Record,
    /// The version this one replaced, kept reachable (one strong count, from
    /// `Arc::into_raw`) until this one commits: a reader that meets this version pending
    /// falls back to `prev`. The committer (or a helper) swaps it to null and retires it.
    pub(crate) prev: AtomicPtr<Version<A>>,
    home: Arc<Home<A>>,
}

/// A version reachable while a guard (lifetime `'g`) is pinned: a pointer that keeps the
/// provenance of the `Arc` allocation it was loaded from, so it can take a strong count
/// ([`to_arc`](Self::to_arc)) that may later drop (and so write to) the version. A `&Version`
/// cannot: memory reached through a shared reference is read-only to the borrow checker's
/// models, and miri (Tree Borrows) flags an `Arc` rebuilt from one.
pub(crate) struct Pinned<'g, A: Element> {
    ptr: NonNull<Version<A>>,
    _guard: PhantomData<&'g Version<A>>,
}

impl<A: Element> Clone for Pinned<'_, A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A: Element> Copy for Pinned<'_, A> {}

impl<'g, A: Element> Pinned<'g, A> {
    /// # Safety
    /// `ptr` must come from `Arc::into_raw` of a version (the head's and `prev`'s counts do),
    /// and the version must stay allocated for `'g` (reachable while the guard is pinned).
    pub(crate) unsafe fn new(ptr: *const Version<A>) -> Self {
        Self {
            ptr: NonNull::new(ptr.cast_mut()).expect("a reachable version is not null"),
            _guard: PhantomData,
        }
    }

    /// The version, borrowed for as long as the guard is pinned.
    pub(crate) fn get(self) -> &'g Version<A> {
        // SAFETY: `new`'s contract: allocated for `'g`.
        unsafe { self.ptr.as_ref() }
    }

    /// The pointer, with its provenance, for a holder of the guard (a [`Snapshot`]) that
    /// cannot name the guard's lifetime.
    ///
    /// [`Snapshot`]: crate::Snapshot
    pub(crate) fn as_ptr(self) -> *const Version<A> {
        self.ptr.as_ptr()
    }

    /// A new strong count on this version.
    pub(crate) fn to_arc(self) -> Arc<Version<A>> {
        let raw = self.ptr.as_ptr().cast_const();
        // SAFETY: `raw` came from `Arc::into_raw` (`new`'s contract) and the version is alive
        // while we are pinned, so adding a count is sound.
        unsafe { Arc::increment_strong_count(raw) };
        // SAFETY: we own the count just added; `raw` carries the allocation's provenance.
        unsafe { Arc::from_raw(raw) }
    }
}

impl<A: Element> std::ops::Deref for Pinned<'_, A> {
    type Target = Version<A>;
    fn deref(&self) -> &Version<A> {
        self.get()
    }
}

/// What every version of a variable shares with it, even after the variable is gone: its
/// counters, and the pool its reclaimed buffers return to.
#[derive(Default)]
pub(crate) struct Home<A> {
    pub(crate) counters: Counters,
    pub(crate) recycler: Recycler<A>,
}

impl<A> Home<A> {
    /// An empty buffer for a dense pass of `len` elements: a reclaimed one when at hand.
    pub(crate) fn buffer(&self, len: usize) -> Vec<A> {
        self.recycler.take(len, || self.counters.fresh_buffer())
    }
}

impl<A: Element> Version<A> {
    pub(crate) fn new(data: ArrayD<A>, number: u64, record: Record, home: Arc<Home<A>>) -> Self {
        home.counters.version_created();
        Self {
            data,
            number,
            record,
            prev: AtomicPtr::new(std::ptr::null_mut()),
            home,
        }
    }

    /// The commit timestamp; versions handed to users are always committed.
    pub(crate) fn timestamp(&self) -> u64 {
        self.record.timestamp().unwrap_or(0)
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
        let ts = self.timestamp();
        debug_assert!(self.record.is_committed());
        // After the commit's clock read: see the `horizon` module docs.
        let oldest = horizon::oldest();
        if oldest == Oldest::Nobody {
            self.cut_prev(guard);
            return;
        }
        self.skip_same_epoch(ts, guard);
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
                unsafe { Arc::increment_strong_count(next) };
            }
            // AcqRel: Acquire takes over the count `prev` held; Release publishes the new
            // link's target to snapshots walking the chain. Acquire on failure: reread.
            match self
                .prev
                .compare_exchange(prev, next, Ordering::AcqRel, Ordering::Acquire)
            {
                // SAFETY: we took over the count our link held on `prev` (from `into_raw`).
                Ok(_) => retire(unsafe { Arc::from_raw(prev) }, guard),
                Err(_) => {
                    if !next.is_null() {
                        // SAFETY: the count we added above, unused.
                        drop(unsafe { Arc::from_raw(next) });
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
            // SAFETY: a non-null `prev` owns one strong count (from `Arc::into_raw`), and the
            // swap above moved that count to us alone.
            retire(unsafe { Arc::from_raw(prev) }, guard);
        }
    }
}

impl<A: Element> Drop for Version<A> {
    fn drop(&mut self) {
        self.home.counters.version_dropped();
        let data = std::mem::replace(&mut self.data, empty());
        self.home.recycler.give(data.into_raw_vec_and_offset().0);
        // Relaxed: `drop` has exclusive access (the last `Arc` count was released with the
        // ordering that makes every earlier write to this version visible here).
        let prev = self.prev.load(Ordering::Relaxed);
        if !prev.is_null() {
            // A version is freed only after every thread that could reach it has unpinned:
            // its last count goes either through the epoch (a retired link) or to an owner
            // that took it while pinned after that. So nobody pinned can be at `prev` through
            // us any more, and anyone who reaches it another way does so through a link that
            // holds its own count: our count can go at once, without a pin (which a drop run
            // by crossbeam-epoch's own teardown may not take).
            // SAFETY: a non-null `prev` owns one strong count, and we are its last holder.
            drop(unsafe { Arc::from_raw(prev) });
        }
    }
}

impl<A: Element> Version<A> {
    /// Takes the tensor back out of a version nobody else has seen (a lost install).
    pub(crate) fn into_data(mut self) -> ArrayD<A> {
        std::mem::replace(&mut self.data, empty())
    }
}

/// An empty tensor, which allocates nothing.
fn empty<A: Element>() -> ArrayD<A> {
    ArrayD::default(ndarray::IxDyn(&[0]))
}

/// Drops `version`'s count once every thread pinned now has unpinned.
///
/// crossbeam-epoch keeps deferred drops in a per-thread bag of up to 64 and offers them for
/// reclamation only when the bag fills or is flushed. Left alone, that holds up to 64
/// versions per thread however large they are (a 1K f32 variable under 4 writers kept ~600
/// alive). So each thread flushes once it has retired [`FLUSH_BYTES`] or [`FLUSH_COUNT`]
/// versions since its last flush: large tensors at once, small ones in small batches.
pub(crate) fn retire<A: Element>(version: Arc<Version<A>>, guard: &epoch::Guard) {
    let bytes = version.data.len() * std::mem::size_of::<A>();
    guard.defer(move || drop(version));
    if bytes >= FLUSH_BYTES {
        RETIRED_LARGE.with(|large| large.set(true));
    }
    let flush = RETIRED.with(|retired| {
        let (total, count) = retired.get();
        let (total, count) = (total + bytes, count + 1);
        let flush = total >= FLUSH_BYTES || count >= FLUSH_COUNT;
        retired.set(if flush { (0, 0) } else { (total, count) });
        flush
    });
    if flush {
        guard.flush();
    }
}

/// Frees, now, the large versions this thread retired during its last write, if no reader
/// still holds them. Call with no guard of the write still pinned.
///
/// A retired version is freed once the global epoch has advanced twice past its retirement,
/// and each flush advances it at most once. Left to later writes, that kept a variable
/// cycling through three buffers, and at 4 MiB three buffers plus a delta spill out of
/// cache (measured on 2 cores: 250-400 us a single-threaded pass instead of 170 us). Two
/// fresh pins and flushes make both advances now whenever no reader is pinned in an older
/// epoch, so the next pass writes into the buffer the last one read from. Small versions are
/// left to the batched flushes of [`retire`]: for them the pins would cost more than they save.
pub(crate) fn reclaim_retired() {
    if RETIRED_LARGE.with(|large| large.replace(false)) {
        for _ in 0..2 {
            epoch::pin().flush();
        }
        // A drop run by these flushes may have retired (and flagged) a `prev` of its own;
        // that one waits for the usual flushes rather than costing the next write two more.
        RETIRED_LARGE.with(|large| large.set(false));
    }
}

// Retired bytes and versions since this thread last flushed its garbage bag; and whether
// its last retired version was large.
#[cfg(not(loom))]
thread_local! {
    static RETIRED: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
    static RETIRED_LARGE: Cell<bool> = const { Cell::new(false) };
}

#[cfg(loom)] // loom's thread_local! has no `const` form
thread_local! {
    static RETIRED: Cell<(usize, usize)> = Cell::new((0, 0));
    static RETIRED_LARGE: Cell<bool> = Cell::new(false);
}

/// Flush the thread's garbage bag once this many bytes were retired since the last flush.
const FLUSH_BYTES: usize = 64 * 1024;
/// ... or this many versions.
const FLUSH_COUNT: usize = 8;
