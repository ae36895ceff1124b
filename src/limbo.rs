//! Limbo: retired counts wait here for a grace period of crossbeam-epoch, in batches.
//!
//! A writer that unlinks a version cannot release the count it took over at once: a reader
//! pinned earlier may still be looking at the version. crossbeam-epoch decides when every
//! such reader has unpinned, but asking it costs: a `defer` is ~25-30 ns and the `flush` that
//! makes it timely ~160-260 ns (measured here), more than a 1K-element add. So each thread
//! collects its retired counts in a batch and hands the whole batch to crossbeam with one
//! `defer` and one `flush` once it holds [`BATCH_BYTES`] or [`BATCH`] versions.
//!
//! **The deferred function only marks the batch expired** (one compare-and-swap on the
//! batch); the thread that sealed it releases its counts at its next retirement (which
//! looks at its oldest sealed batch), after a large write ([`reclaim_now`]) or when it
//! finds a pool dry ([`collect`]). So versions go back to their pools from the thread that
//! retired them, usually the one that writes them next, rather than from whichever thread
//! crossbeam collects on (measured before: two threads writing two variables each released
//! the other's versions, a cache line moved per version and per pool push). Whichever thread runs the deferred function, a reader's pin
//! included, frees no memory, takes no lock and runs no destructor of ours. (crossbeam's own
//! bookkeeping, a node per 64 deferred functions, is its own.) A thread that exits hands its
//! batches still in their grace period to their deferred functions (*orphaned*), which then
//! release them themselves.
//!
//! The price is memory: a small version waits for its batch to fill, for two epoch advances
//! and for its thread's next retirement, so a variable written by one thread holds about three
//! batches of versions in flight (the pool recycles them; see [`spares`]); a thread that
//! stops writing keeps its last expired batches (at most [`BATCH_BYTES`] each of small
//! versions) until it writes again or exits. A large version (64 KiB and up) is a batch on
//! its own, and its writer pushes the epoch forward and releases it right after the write
//! ([`reclaim_now`]), so a lone writer alternates between two buffers.

use std::cell::{Cell, RefCell};

use crate::holds::{self, Held};
use crate::pool::free_orphans;
use crate::sync::{epoch, thread_local, AtomicUsize, Ordering, ProcessAtomicPtr};
use crate::version::{Version, VersionRef};
use crate::Element;

/// Versions per batch at most. Under loom, one: every retirement is its own grace period, so
/// the models see reclamation happen.
const BATCH: usize = if cfg!(mvtensor_loom) { 1 } else { 32 };
/// A batch is sealed once it holds this many bytes of versions.
pub(crate) const BATCH_BYTES: usize = 64 * 1024;

/// How many idle versions a variable's pool keeps for versions of `bytes` each. A large
/// version comes back before its writer returns ([`reclaim_now`]), so a lone writer
/// alternates between two buffers and never needs a second spare. With several writers one
/// of them is often pinned when another's write returns, so the version it replaced comes
/// back a write or two later: a second spare saves allocating (and faulting in) a fresh
/// buffer then and freeing one afterwards (measured, 64K f32 from 8 threads: 24,609 fresh
/// buffers in 312,500 writes with one spare, 7,915 with two, 11.8 -> 10.0 us a write). Small
/// ones come back a batch at a time, about three batches after they were retired (the one
/// filling, one sealed, one waiting for its second epoch advance): the pool keeps that many,
/// so that a steady writer allocates nothing.
pub(crate) fn spares(bytes: usize) -> usize {
    if bytes >= BATCH_BYTES {
        return 2;
    }
    let per_batch = (BATCH_BYTES / bytes.max(1)).clamp(1, BATCH);
    3 * per_batch + 2
}

/// One retired count: the version, and how to release a count of its element type.
struct Entry {
    version: *const (),
    release: unsafe fn(*const (), &Held),
}

/// Retired counts waiting together for one grace period.
struct Batch {
    entries: Vec<Entry>,
    bytes: usize,
    /// Whose job the release is, once sealed: [`PENDING`], [`EXPIRED`] or [`ORPHANED`].
    state: AtomicUsize,
    /// Links empty batches on the global list of returned ones.
    next: *mut Batch,
}

/// Sealed, in its grace period: its thread will release it once it expires.
const PENDING: usize = 0;
/// Its grace period is over: its thread releases it at its next look.
const EXPIRED: usize = 1;
/// Its thread exited during its grace period: the deferred function releases it.
const ORPHANED: usize = 2;

impl Batch {
    fn new() -> Box<Self> {
        Box::new(Self {
            entries: Vec::with_capacity(BATCH),
            bytes: 0,
            state: AtomicUsize::new(PENDING),
            next: std::ptr::null_mut(),
        })
    }
}

/// A thread's batch being filled, its sealed batches (oldest first), and empty batches
/// ready for the next.
#[derive(Default)]
#[allow(clippy::vec_box)] // batches cross threads as `Box` pointers: they stay boxed here
struct Local {
    filling: Option<Box<Batch>>,
    sealed: Vec<*mut Batch>,
    spare: Vec<Box<Batch>>,
}

impl Local {
    /// Releases every sealed batch whose grace period is over.
    fn release_expired(&mut self) {
        // Acquire: pairs with the deferred function's Release (see `expire`).
        let expired = |batch: &*mut Batch| {
            // SAFETY: a sealed batch stays allocated until its release, below.
            unsafe { &**batch }.state.load(Ordering::Acquire) == EXPIRED
        };
        if !self.sealed.iter().any(expired) {
            return;
        }
        // The holds, read once for every expired batch (after their grace periods).
        let held = Held::now();
        let mut i = 0;
        while i < self.sealed.len() {
            if expired(&self.sealed[i]) {
                let batch = self.sealed.remove(i);
                // SAFETY: expired, so ours again: the deferred function is done with it.
                let batch = unsafe { release_batch(batch, &held) };
                self.spare.push(batch);
            } else {
                i += 1;
            }
        }
    }
}

impl Drop for Local {
    /// A thread that exits seals what it retired, and leaves each batch still in its grace
    /// period to its deferred function.
    ///
    /// Not under loom, where a thread-local destructor must make no atomic access (loom runs
    /// them as its thread ends, in no fixed order, and an access there crashed the models):
    /// an exited thread's retirements stay unreleased for the rest of the execution.
    fn drop(&mut self) {
        if cfg!(mvtensor_loom) {
            return;
        }
        if let Some(batch) = self.filling.take() {
            if !batch.entries.is_empty() {
                let guard = epoch::pin();
                self.sealed.push(seal(batch, &guard));
            }
        }
        let mut held = None;
        for batch in std::mem::take(&mut self.sealed) {
            // AcqRel: Release hands the batch to the deferred function; Acquire (also on
            // failure) pairs with its Release if it expired first.
            // SAFETY: a sealed batch stays allocated until its release.
            if let Err(EXPIRED) = unsafe { &*batch }.state.compare_exchange(
                PENDING,
                ORPHANED,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                let held = held.get_or_insert_with(Held::now);
                // SAFETY: expired, so ours.
                give_away(unsafe { release_batch(batch, held) });
            }
        }
    }
}

#[cfg(not(mvtensor_loom))]
thread_local! {
    static LOCAL: RefCell<Local> = RefCell::new(Local::default());
    static SEALED_LARGE: Cell<bool> = const { Cell::new(false) };
}

#[cfg(mvtensor_loom)] // loom's thread_local! has no `const` form
thread_local! {
    static LOCAL: RefCell<Local> = RefCell::new(Local::default());
    static SEALED_LARGE: Cell<bool> = Cell::new(false);
}

/// Releases `version`'s count once every thread pinned now has unpinned.
pub(crate) fn retire<A: Element>(version: VersionRef<A>, guard: &epoch::Guard) {
    let bytes = version.bytes();
    let entry = Entry {
        version: version.into_raw().cast_const().cast(),
        release: release::<A>,
    };
    let full = LOCAL.with(|local| {
        let mut local = local.borrow_mut();
        let local = &mut *local;
        // The oldest sealed batch is usually the first to expire: one load per retirement
        // brings batches home as soon as they can come (not only at this thread's next seal).
        if local.sealed.first().is_some_and(|&oldest| {
            // Acquire: as in `release_expired`.
            // SAFETY: a sealed batch stays allocated until its release.
            unsafe { &*oldest }.state.load(Ordering::Acquire) == EXPIRED
        }) {
            local.release_expired();
        }
        let batch = local
            .filling
            .get_or_insert_with(|| empty_batch(&mut local.spare));
        batch.entries.push(entry);
        batch.bytes += bytes;
        (batch.entries.len() >= BATCH || batch.bytes >= BATCH_BYTES)
            .then(|| local.filling.take())
            .flatten()
    });
    if let Some(batch) = full {
        // Only a large version is worth pushing the epoch for (`reclaim_now`); a batch of
        // small ones that reached the byte limit is not.
        if bytes >= BATCH_BYTES {
            SEALED_LARGE.with(|large| large.set(true));
        }
        // The flush in `seal` may run deferred functions on this thread: not while `LOCAL`
        // is borrowed (an orphaned batch's release must not find it borrowed).
        let sealed = seal(batch, guard);
        LOCAL.with(|local| {
            let mut local = local.borrow_mut();
            local.sealed.push(sealed);
            local.release_expired();
        });
        free_orphans();
        holds::recheck();
    }
}

/// Releases what this thread retired whose grace period is over, and looks again at held
/// versions: for a writer whose pool is dry.
pub(crate) fn collect() {
    // `try_with`: not while this thread's limbo is being torn down.
    let _ = LOCAL.try_with(|local| {
        if let Ok(mut local) = local.try_borrow_mut() {
            local.release_expired();
        }
    });
    holds::recheck();
}

/// # Safety
/// `version` is a `Version<A>` of which the caller owns one count, and gives it up; `held`
/// was read after its grace period.
unsafe fn release<A: Element>(version: *const (), held: &Held) {
    // SAFETY: the caller's contract; every version of a batch (and what its count may release
    // in turn) was unreachable before its grace period began.
    unsafe { Version::<A>::release_with(version.cast(), Some(held)) };
}

/// Hands a batch to crossbeam-epoch and pushes the epoch forward. Returns the sealed batch,
/// for its thread's list.
///
/// Under loom the flush is left out: exploring crossbeam's collection on every write made the
/// store-snapshot models run for tens of minutes. The models that check reuse
/// (`loom/tests/version.rs`) flush themselves, and the others release at shutdown.
fn seal(batch: Box<Batch>, guard: &epoch::Guard) -> *mut Batch {
    // Relaxed: handed to the deferred function by `defer` itself.
    batch.state.store(PENDING, Ordering::Relaxed);
    let batch = Box::into_raw(batch);
    let sealed = SendBatch(batch);
    guard.defer(move || {
        let sealed = sealed;
        // SAFETY: the deferred call's grace period is over; the batch is allocated until
        // someone releases it, which is after this expiry.
        unsafe { expire(sealed.0) }
    });
    if !cfg!(mvtensor_loom) {
        guard.flush();
    }
    batch
}

struct SendBatch(*mut Batch);
// SAFETY: a sealed batch's state is atomic, and its entries are touched only by whoever
// the state makes responsible for its release.
unsafe impl Send for SendBatch {}

/// The end of a batch's grace period (its deferred function): marks it expired for its
/// thread, or releases it if its thread has exited.
///
/// # Safety
/// `batch` is sealed, its grace period is over, and this is its one deferred call.
unsafe fn expire(batch: *mut Batch) {
    // AcqRel: Release hands the grace period (everything ordered before this call, the holds
    // made by pinned readers included) to the thread that releases the batch; Acquire (also on
    // failure) pairs with the exiting thread's Release if it orphaned the batch first.
    // SAFETY: allocated until released, which needs this call's mark or its own release.
    let state = unsafe { &*batch }.state.compare_exchange(
        PENDING,
        EXPIRED,
        Ordering::AcqRel,
        Ordering::Acquire,
    );
    if state == Err(ORPHANED) {
        // SAFETY: orphaned, so ours; its grace period is over.
        give_away(unsafe { release_batch(batch, &Held::now()) });
    }
}

/// Releases every count of a sealed batch and returns the empty batch.
///
/// # Safety
/// `batch` is a sealed batch, exclusively the caller's, whose grace period is over; `held`
/// was read after it.
unsafe fn release_batch(batch: *mut Batch, held: &Held) -> Box<Batch> {
    // SAFETY: the caller's contract; every sealed batch came from `Box::into_raw`.
    let mut b = unsafe { Box::from_raw(batch) };
    for entry in b.entries.drain(..) {
        // SAFETY: each entry owns one count, and its grace period is over.
        unsafe { (entry.release)(entry.version, held) };
    }
    b.bytes = 0;
    b
}

/// Puts an empty batch of an exited thread on the global list for any thread's next batch.
/// (Under loom it is freed: a batch holds a loom atomic, which must not outlive its
/// execution on a process-wide list.)
fn give_away(batch: Box<Batch>) {
    if cfg!(mvtensor_loom) {
        return;
    }
    let batch = Box::into_raw(batch);
    let returned = returned();
    // Relaxed: the CAS publishes.
    let mut top = returned.load(Ordering::Relaxed);
    loop {
        // SAFETY: ours until the CAS succeeds.
        unsafe { (*batch).next = top };
        // Release: hands the batch (its emptied vector) to the thread that takes it.
        match returned.compare_exchange_weak(top, batch, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => return,
            Err(now) => top = now,
        }
    }
}

/// An empty batch: this thread's spare, or one returned by any thread, or a new one.
#[allow(clippy::vec_box)] // as in `Local`
fn empty_batch(spare: &mut Vec<Box<Batch>>) -> Box<Batch> {
    if let Some(batch) = spare.pop() {
        return batch;
    }
    // Acquire: pairs with `release_batch`'s Release.
    let mut list = returned().swap(std::ptr::null_mut(), Ordering::Acquire);
    while !list.is_null() {
        // SAFETY: every batch on the list came from `Box::into_raw` and is ours now.
        let batch = unsafe { Box::from_raw(list) };
        list = batch.next;
        spare.push(batch);
    }
    spare.pop().unwrap_or_else(Batch::new)
}

/// Empty batches of exited threads. (Unused under loom: see `give_away`.)
fn returned() -> &'static ProcessAtomicPtr<Batch> {
    static RETURNED: ProcessAtomicPtr<Batch> = ProcessAtomicPtr::new(std::ptr::null_mut());
    &RETURNED
}

/// After a write, with none of its guards still pinned: if it sealed a large batch, pushes
/// the epoch forward twice so that the batch's versions are back in their pool before the
/// write returns (when no reader is pinned in an older epoch).
///
/// A sealed batch is released once the global epoch has advanced twice past it, and each
/// flush advances it at most once. Left to later writes, a lone writer of a 4 MiB variable
/// cycled through three buffers, and three buffers plus a delta spill out of cache
/// (measured on 2 cores: 250-400 us a pass instead of 170 us). Small versions are left to
/// the flush of the next batch: for them these pins would cost more than they save.
///
/// Returns whether it did (the caller then trims the pool it wrote to: see
/// `Inner::reclaimed`).
pub(crate) fn reclaim_now() -> bool {
    let sealed = SEALED_LARGE.with(|large| large.replace(false));
    if sealed {
        for _ in 0..2 {
            epoch::pin().flush();
        }
        LOCAL.with(|local| local.borrow_mut().release_expired());
    }
    sealed
}
