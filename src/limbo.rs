//! Limbo: retired counts wait here for a grace period of crossbeam-epoch, in batches.
//!
//! A writer that unlinks a version cannot release the count it took over at once: a reader
//! pinned earlier may still be looking at the version. crossbeam-epoch decides when every
//! such reader has unpinned, but asking it costs (a `defer` and the `flush` that makes it
//! timely). So each thread collects its retired counts in a batch, and seals the batch once
//! it holds [`BATCH_BYTES`] or [`BATCH`] versions: a sealed batch waits for the next tick of
//! its thread's [grace clock](crate::grace), one deferred call that serves every batch sealed
//! before it, instead of a deferred call and a flush of its own.
//!
//! **The thread that sealed a batch releases it** at its next retirement (which looks at
//! its oldest sealed batch), after a large write ([`reclaim_now`]) or when it finds a pool
//! dry ([`collect`]). So versions go back to their pools from the thread that retired them,
//! usually the one that writes them next, rather than from whichever thread crossbeam
//! collects on (two threads writing two variables would each release the other's versions,
//! a cache line moved per version and per pool push). Whichever thread runs a
//! deferred call, a reader's pin included, frees no memory, takes no lock and runs no
//! destructor of ours: a tick stores a number. (crossbeam's own bookkeeping, a node per
//! flushed bag, is its own.) A thread that exits hands its batches to one deferred call,
//! which releases them.
//!
//! The price is memory: a small version waits for its batch to fill, for the tick after
//! its seal and for its thread's next retirement, so a variable written by one thread holds
//! about three batches of versions in flight (the pool recycles them; see [`spares`]); a
//! thread that stops writing keeps its last batches (at most [`BATCH_BYTES`] each of small
//! versions) until it writes again or exits. A large version (64 KiB and up) is a batch on
//! its own, and its writer pushes the epoch forward and releases it right after the write
//! ([`reclaim_now`]), so a lone writer alternates between two buffers.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

use crate::grace::Clock;
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
/// version comes back before its writer returns ([`reclaim_now`]), so a lone writer
/// alternates between two buffers and never needs a second spare. With several writers one
/// of them is often pinned when another's write returns, so the version it replaced comes
/// back a write or two later: a second spare saves allocating (and faulting in) a fresh
/// buffer then and freeing one afterwards, which cuts such allocations to a third. Small
/// ones come back a batch at a time, about three batches after they were retired (the one
/// filling, one sealed, one waiting for its second epoch advance): the pool keeps that many,
/// so that a steady writer allocates nothing. (Large variables keep one more while several
/// threads add deltas to them: [`Writers`](crate::pool::Writers).)
pub(crate) fn spares(bytes: usize) -> usize {
    if bytes >= BATCH_BYTES {
        return 2;
    }
    let per_batch = (BATCH_BYTES / bytes.max(1)).clamp(1, BATCH);
    3 * per_batch + 2
}

/// How many versions of `bytes` a variable may have before a compare-and-swap writer waits
/// for one to come back ([`Inner::make_room`](crate::variable::Inner::make_room)): what
/// [`ROOM_BYTES`] holds (a version's struct counted as [`VERSION_OVERHEAD`] bytes), and at
/// least six times its pool's spares and 8 more (for large versions: 20). Not a tight bound:
/// grace periods on a shared machine run long now and then (two threads on 2 cores kept
/// 2-25 thousand versions of a scalar counter at moments, and waiting for them halved the
/// counter's throughput), and a few MiB of small versions cost nothing; what it stops is
/// growth without end.
pub(crate) fn room(bytes: usize) -> usize {
    (6 * spares(bytes) + 8).max(ROOM_BYTES / (bytes + VERSION_OVERHEAD))
}

/// The memory of small versions one variable may have before its compare-and-swap writers
/// wait ([`room`]).
const ROOM_BYTES: usize = 4 << 20;
/// About what a version costs beside its elements: the struct, its shape, the allocations.
const VERSION_OVERHEAD: usize = 256;

/// One retired count: the version, and how to release a count of its element type.
struct Entry {
    version: *const (),
    release: unsafe fn(*const (), &Held),
}

/// Retired counts waiting together for one grace period.
struct Batch {
    entries: Vec<Entry>,
    bytes: usize,
    /// The tick of its thread's clock that ends its grace period, once sealed.
    point: u64,
    /// Links an exited thread's batches (for their deferred call) and empty batches on the
    /// global list of returned ones.
    next: *mut Batch,
}

impl Batch {
    fn new() -> Box<Self> {
        Box::new(Self {
            entries: Vec::with_capacity(BATCH),
            bytes: 0,
            point: 0,
            next: std::ptr::null_mut(),
        })
    }
}

/// A thread's batch being filled, its sealed batches (oldest first, so their points never
/// decrease), and empty batches ready for the next.
#[derive(Default)]
#[allow(clippy::vec_box)] // batches cross threads as `Box` pointers: they stay boxed here
struct Local {
    filling: Option<Box<Batch>>,
    sealed: VecDeque<Box<Batch>>,
    spare: Vec<Box<Batch>>,
}

impl Local {
    /// Releases every sealed batch whose grace period is over. (Inline: on most retirements
    /// it is one look at the oldest batch.)
    #[inline]
    fn release_passed(&mut self, clock: &Clock) {
        if self
            .sealed
            .front()
            .is_some_and(|oldest| clock.passed(oldest.point))
        {
            self.release_from_oldest(clock);
        }
    }

    #[inline(never)]
    fn release_from_oldest(&mut self, clock: &Clock) {
        // The holds, read once for every batch (after their grace periods: `passed` acquired).
        let held = Held::now();
        // (Not `pop_front_if`: newer than the crate's rust-version.)
        while self
            .sealed
            .front()
            .is_some_and(|oldest| clock.passed(oldest.point))
        {
            let batch = self.sealed.pop_front().expect("a front");
            // SAFETY: its grace period is over, and it is ours.
            self.spare.push(unsafe { release_batch(batch, &held) });
        }
    }
}

impl Drop for Local {
    /// A thread that exits hands what it retired to one deferred call, which releases it.
    ///
    /// Not under loom, where a thread-local destructor must make no atomic access (loom runs
    /// them as its thread ends, in no fixed order, and an access there crashed the models):
    /// an exited thread's retirements stay unreleased for the rest of the execution.
    fn drop(&mut self) {
        if cfg!(mvtensor_loom) {
            return;
        }
        let batches = self.filling.take().into_iter().chain(self.sealed.drain(..));
        hand_over(
            batches.filter(|batch| !batch.entries.is_empty()),
            &epoch::pin(),
        );
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
    // `None` while this thread exits: then a full batch goes to a deferred call of its own.
    let clock = holds::clock();
    let full = LOCAL.with(|local| {
        let mut local = local.borrow_mut();
        let local = &mut *local;
        // The oldest sealed batch is the first to pass: one load per retirement brings
        // batches home as soon as they can come (not only at this thread's next seal).
        if let Some(clock) = clock {
            local.release_passed(clock);
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
    let Some(mut batch) = full else {
        return;
    };
    // Only a large version is worth pushing the epoch for (`reclaim_now`), and a tick of its
    // own; a batch of small ones that reached the byte limit is not.
    let large = bytes >= BATCH_BYTES;
    if large {
        SEALED_LARGE.with(|large| large.set(true));
    }
    match clock {
        Some(clock) => {
            batch.point = clock.seal_point();
            // The flush may run deferred calls on this thread: not while `LOCAL` is
            // borrowed (an exited thread's batches must not find it borrowed).
            if large {
                clock.advance_now(guard);
            } else {
                clock.advance(guard);
            }
            LOCAL.with(|local| {
                let mut local = local.borrow_mut();
                local.sealed.push_back(batch);
                local.release_passed(clock);
            });
        }
        None => hand_over(std::iter::once(batch), guard),
    }
    free_orphans();
    holds::recheck();
}

/// Releases what this thread retired whose grace period is over, pushes the rest along,
/// and looks again at held versions: for a writer whose pool is dry.
pub(crate) fn collect() {
    if let Some(clock) = holds::clock() {
        // `try_with`: not while this thread's limbo is being torn down.
        let waiting = LOCAL
            .try_with(|local| {
                local.try_borrow_mut().is_ok_and(|mut local| {
                    local.release_passed(clock);
                    !local.sealed.is_empty()
                })
            })
            .unwrap_or(false);
        if waiting {
            clock.advance(&epoch::pin());
        }
    }
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

/// Hands `batches` (sealed or not: everything in them was retired before now) to one
/// deferred call, which releases them after their grace period: for a thread that exits.
fn hand_over(batches: impl Iterator<Item = Box<Batch>>, guard: &epoch::Guard) {
    let mut list: *mut Batch = std::ptr::null_mut();
    for mut batch in batches {
        batch.next = list;
        list = Box::into_raw(batch);
    }
    if list.is_null() {
        return;
    }
    let list = SendBatch(list);
    guard.defer(move || {
        let list = list;
        // SAFETY: the deferred call's grace period began after every count in the list was
        // retired; the list is this call's alone.
        unsafe { release_list(list.0) }
    });
    guard.flush();
}

/// A list of batches linked through `next`, owned by one deferred call.
struct SendBatch(*mut Batch);
// SAFETY: the batches are touched only by the one deferred call that owns the list.
unsafe impl Send for SendBatch {}

/// Releases every batch of a list and puts the empty ones on the global list.
///
/// # Safety
/// The list is exclusively the caller's, and the grace period of all it holds is over.
unsafe fn release_list(mut batch: *mut Batch) {
    let held = Held::now();
    while !batch.is_null() {
        // SAFETY: the caller's contract; every listed batch came from `Box::into_raw`.
        let b = unsafe { Box::from_raw(batch) };
        batch = b.next;
        // SAFETY: the caller's contract.
        give_away(unsafe { release_batch(b, &held) });
    }
}

/// Releases every count of a batch and returns it empty.
///
/// # Safety
/// The grace period of every count in `batch` is over; `held` was read after it.
unsafe fn release_batch(mut batch: Box<Batch>, held: &Held) -> Box<Batch> {
    for entry in batch.entries.drain(..) {
        // SAFETY: each entry owns one count, and its grace period is over.
        unsafe { (entry.release)(entry.version, held) };
    }
    batch.bytes = 0;
    batch
}

/// Puts an empty batch of an exited thread on the global list for any thread's next batch.
fn give_away(batch: Box<Batch>) {
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
    // Acquire: pairs with `give_away`'s Release.
    let mut list = returned().swap(std::ptr::null_mut(), Ordering::Acquire);
    while !list.is_null() {
        // SAFETY: every batch on the list came from `Box::into_raw` and is ours now.
        let batch = unsafe { Box::from_raw(list) };
        list = batch.next;
        spare.push(batch);
    }
    spare.pop().unwrap_or_else(Batch::new)
}

/// Empty batches of exited threads: a process-wide list (a batch holds nothing of loom's).
fn returned() -> &'static ProcessAtomicPtr<Batch> {
    static RETURNED: ProcessAtomicPtr<Batch> = ProcessAtomicPtr::new(std::ptr::null_mut());
    &RETURNED
}

/// Flushes at most this many times in [`reclaim_now`]: the tick deferred at the seal runs
/// after one more when no other thread holds the epoch back (its bag needs two epoch
/// advances, and the seal's flush made one), as the two flushes of a batch's own deferred
/// call did before the clock.
const RECLAIM_FLUSHES: usize = 2;

/// After a write, with none of its guards still pinned: if it sealed a large batch, pushes
/// the epoch forward until the batch's tick has run (when no reader is pinned in an older
/// epoch, at most [`RECLAIM_FLUSHES`] times), so that its versions are back in their pool
/// before the write returns.
///
/// Left to later writes, a lone writer of a large variable would cycle through three
/// buffers, and three buffers plus a delta spill out of cache, slowing each pass by half or
/// more. Small versions are left to the next seal: for them these pins would
/// cost more than they save.
///
/// Returns whether it did (the caller then trims the pool it wrote to: see
/// `Inner::reclaimed`).
pub(crate) fn reclaim_now() -> bool {
    let sealed = SEALED_LARGE.with(|large| large.replace(false));
    if !sealed {
        return false;
    }
    let Some(clock) = holds::clock() else {
        return true;
    };
    LOCAL.with(|local| {
        for _ in 0..RECLAIM_FLUSHES {
            let newest = local.borrow().sealed.back().map(|batch| batch.point);
            if newest.is_none_or(|point| clock.passed(point)) {
                break;
            }
            // Not while `LOCAL` is borrowed: see `retire`.
            clock.advance(&epoch::pin());
        }
        local.borrow_mut().release_passed(clock);
    });
    true
}
