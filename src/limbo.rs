//! Limbo: retired counts wait here for a grace period of crossbeam-epoch, in batches.
//!
//! A writer that unlinks a version cannot release the count it took over at once: a reader
//! pinned earlier may still be looking at the version. crossbeam-epoch decides when every
//! such reader has unpinned, but asking it costs: a `defer` is ~25-30 ns and the `flush` that
//! makes it timely ~160-260 ns (measured here), more than a 1K-element add. So each thread
//! collects its retired counts in a batch and hands the whole batch to crossbeam with one
//! `defer` and one `flush` once it holds [`BATCH_BYTES`] or [`BATCH`] versions. The deferred
//! function only releases counts: versions go back to their variables' pools (one CAS
//! each), and the batch itself goes back on a list of empty batches. So whichever thread
//! runs it, a reader's pin included, frees no memory, takes no lock and runs no destructor
//! of ours. (crossbeam's own bookkeeping, a node per 64 deferred functions, is its own.)
//!
//! The price is memory: a small version waits for its batch to fill and then for two epoch
//! advances, so a variable written by one thread holds about three batches of versions in
//! flight (the pool recycles them; see [`spares`]). A large version (64 KiB and up) is a batch
//! on its own, and its writer pushes the epoch forward right after the write
//! ([`reclaim_now`]), so a lone writer alternates between two buffers.

use std::cell::{Cell, RefCell};

use crate::holds::{self, Held};
use crate::pool::free_orphans;
use crate::sync::{epoch, thread_local, Ordering, ProcessAtomicPtr};
use crate::version::{Version, VersionRef};
use crate::Element;

/// Versions per batch at most. Under loom, one: every retirement is its own grace period, so
/// the models see reclamation happen.
const BATCH: usize = if cfg!(mvtensor_loom) { 1 } else { 32 };
/// A batch is sealed once it holds this many bytes of versions.
pub(crate) const BATCH_BYTES: usize = 64 * 1024;

/// How many idle versions a variable's pool keeps for versions of `bytes` each. A large
/// version comes back before its writer returns ([`reclaim_now`]), so one spare is enough
/// for a lone writer to alternate between two buffers. Small ones come back a batch at a
/// time, about three batches after they were retired (the one filling, one sealed, one
/// waiting for its second epoch advance): the pool keeps that many, so that a steady writer
/// allocates nothing.
pub(crate) fn spares(bytes: usize) -> usize {
    if bytes >= BATCH_BYTES {
        return 1;
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
    /// Links empty batches on the global list of returned ones.
    next: *mut Batch,
}

impl Batch {
    fn new() -> Box<Self> {
        Box::new(Self {
            entries: Vec::with_capacity(BATCH),
            bytes: 0,
            next: std::ptr::null_mut(),
        })
    }
}

/// A thread's batch being filled, and empty batches ready for the next.
#[derive(Default)]
#[allow(clippy::vec_box)] // batches cross threads as `Box` pointers: they stay boxed here
struct Local {
    filling: Option<Box<Batch>>,
    spare: Vec<Box<Batch>>,
}

impl Drop for Local {
    /// A thread that exits hands what it retired to crossbeam, as a batch of its own.
    fn drop(&mut self) {
        if let Some(batch) = self.filling.take() {
            if !batch.entries.is_empty() {
                seal(batch, &epoch::pin());
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
        seal(batch, guard);
    }
}

/// # Safety
/// `version` is a `Version<A>` of which the caller owns one count, and gives it up; `held`
/// was read after its grace period.
unsafe fn release<A: Element>(version: *const (), held: &Held) {
    // SAFETY: the caller's contract; every version of a batch (and what its count may release
    // in turn) was unreachable before its grace period began.
    unsafe { Version::<A>::release_with(version.cast(), Some(held)) };
}

/// Hands a batch to crossbeam-epoch and pushes the epoch forward.
///
/// Under loom the flush is left out: exploring crossbeam's collection on every write made the
/// store-snapshot models run for tens of minutes. The models that check reuse
/// (`loom/tests/version.rs`) flush themselves, and the others release at shutdown.
fn seal(batch: Box<Batch>, guard: &epoch::Guard) {
    let batch = SendBatch(Box::into_raw(batch));
    guard.defer(move || {
        let batch = batch;
        // SAFETY: the batch is ours (sealed, handed to this one deferred call) and its
        // counts have waited out the grace period that `defer` promises.
        unsafe { release_batch(batch.0) }
    });
    if !cfg!(mvtensor_loom) {
        guard.flush();
    }
    free_orphans();
    holds::recheck();
}

struct SendBatch(*mut Batch);
// SAFETY: a sealed batch is touched by the one thread that runs its deferred function.
unsafe impl Send for SendBatch {}

/// Releases every count of a sealed batch and returns the empty batch.
///
/// # Safety
/// `batch` is a sealed batch, exclusively the caller's, whose grace period is over.
unsafe fn release_batch(batch: *mut Batch) {
    // SAFETY: the caller's contract.
    let b = unsafe { &mut *batch };
    // The holds, read once for the batch (after its grace period: see `holds`).
    let held = Held::now();
    for entry in b.entries.drain(..) {
        // SAFETY: each entry owns one count, and its grace period is over.
        unsafe { (entry.release)(entry.version, &held) };
    }
    b.bytes = 0;
    let returned = returned();
    // Relaxed: the CAS publishes.
    let mut top = returned.load(Ordering::Relaxed);
    loop {
        b.next = top;
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

/// Empty batches, returned by whichever thread released them. A process-wide static also
/// under loom: crossbeam runs deferred functions while loom tears an execution down, and an
/// empty batch holds nothing of loom's.
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
pub(crate) fn reclaim_now() {
    if SEALED_LARGE.with(|large| large.replace(false)) {
        for _ in 0..2 {
            epoch::pin().flush();
        }
    }
}
