//! Holds: how a [`Snapshot`](crate::Snapshot) keeps its version without keeping the epoch.
//!
//! A pin is what makes it safe to *find* a version: a retired link's count is released only
//! after everyone pinned at its retirement has unpinned ([limbo](crate::limbo)). But a pin
//! kept for as long as a snapshot lives holds back every version that any thread retires
//! meanwhile, and with more trainer threads than cores the OS deschedules pinned threads for
//! whole time slices: four trainers holding `read()` across their steps kept ~10,000 live
//! versions of one 1K variable on 2 cores.
//!
//! So `read()` pins only to find its version, writes the version's address into one of its
//! thread's *hold slots*, and unpins. A version goes back to its pool only once its last
//! count is released **and** no slot holds it: whoever releases the last count of a held
//! version keeps that count on the *held list* instead, and a later writer looks again
//! ([`recheck`]). A snapshot thus keeps its own version, and nothing else, for as long as it
//! lives.
//!
//! **Why a check sees every hold that matters.** A hold is written while its thread is
//! pinned, on a version reachable then. A version's last count goes only after the version
//! became unreachable: its head's (or link's) count waited in limbo for the grace period of
//! everyone pinned when it was unlinked, and crossbeam orders everything a thread did while
//! pinned before the deferred function that ends that grace period; every later release is
//! ordered after that one by the count's Release/Acquire chain. So the slot store is visible
//! to whoever releases the last count (for that alone it could be Relaxed; it is Release for
//! the slot's next look, see [`hold`]), and a version that nobody holds then can never be
//! held again: counts never climb back from zero.
//!
//! A [`PagedSnapshot`](crate::PagedSnapshot) holds its table the same way: the table's last
//! count is released through `paged::book::release_with`, which looks at the slots first and
//! parks a held table on the same list (a table's first field is a [`Link`] too).
//!
//! Each thread owns a block of [`SLOTS`] slots on a global list that never shrinks (a block
//! goes back to the list when its thread exits holding nothing, for the next new thread). A
//! thread that holds more snapshots at once than it has slots counts the rest on their
//! versions instead, as `read_owned` does (one atomic increment).

use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr;

use crate::grace::Clock;
use crate::pool::Link;
use crate::sync::{thread_local, AtomicBool, AtomicPtr, AtomicUsize, Ordering};

/// Hold slots per thread.
pub(crate) const SLOTS: usize = 8;
/// A holder's mask with every slot free.
const ALL_FREE: u8 = u8::MAX;

/// One thread's slots. Aligned to two cache lines (the adjacent-line prefetcher pairs them),
/// so that a thread's reads and another's scans share a line with nothing else.
#[repr(align(128))]
struct Block {
    slots: [AtomicPtr<()>; SLOTS],
    /// Whether a live thread owns the block.
    owned: AtomicBool,
    /// The owner's grace-period clock (limbo's, see [`clock`]): here because a block is
    /// never freed and passes from an exiting thread to the next new one, which a tick
    /// still in flight needs.
    clock: Clock,
    /// The next block on the list: set before the block is published, never changed.
    next: *const Block,
}

/// Every block, and the held list.
struct Registry {
    blocks: AtomicPtr<Block>,
    /// Versions released while held: each keeps one count until a recheck finds it free.
    /// Linked through their pool link (unused while a version has a count).
    held: AtomicPtr<Link>,
}

impl Registry {
    #[cfg(not(mvtensor_loom))]
    const fn new() -> Self {
        Self {
            blocks: AtomicPtr::new(ptr::null_mut()),
            held: AtomicPtr::new(ptr::null_mut()),
        }
    }

    #[cfg(mvtensor_loom)] // loom's atomics have no `const fn new`
    fn new() -> Self {
        Self {
            blocks: AtomicPtr::new(ptr::null_mut()),
            held: AtomicPtr::new(ptr::null_mut()),
        }
    }

    fn blocks(&self) -> impl Iterator<Item = &'static Block> {
        // Acquire: pairs with the Release that published a block, so its `next` is seen.
        let mut block = self.blocks.load(Ordering::Acquire).cast_const();
        std::iter::from_fn(move || {
            // SAFETY: blocks are never freed (under loom, not while their execution runs).
            let this = unsafe { block.as_ref::<'static>() }?;
            block = this.next;
            Some(this)
        })
    }

    /// A block for the calling thread: a free one from the list, or a new one.
    fn claim(&self) -> &'static Block {
        for block in self.blocks() {
            // Relaxed pre-check: most blocks are owned. Acquire on the claim: pairs with the
            // Release of the exiting owner, whose clears of the slots happen-before our use.
            if !block.owned.load(Ordering::Relaxed)
                && block
                    .owned
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return block;
            }
        }
        let block = Box::leak(Box::new(Block {
            slots: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            owned: AtomicBool::new(true),
            clock: Clock::default(),
            next: ptr::null(),
        }));
        // Relaxed: the CAS below publishes.
        let mut head = self.blocks.load(Ordering::Relaxed);
        loop {
            block.next = head;
            // Release: the block (its `next`, its empty slots) is complete for scanners.
            match self.blocks.compare_exchange_weak(
                head,
                block,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return block,
                Err(now) => head = now,
            }
        }
    }
}

// SAFETY: a block's slots and flag are atomics; `next` is immutable once published.
unsafe impl Sync for Block {}
// SAFETY: as above.
unsafe impl Send for Block {}

#[cfg(not(mvtensor_loom))]
fn registry() -> &'static Registry {
    static REGISTRY: Registry = Registry::new();
    &REGISTRY
}

/// Under loom the registry holds loom atomics, so each execution needs its own; and
/// crossbeam runs deferred functions (which check holds) while loom tears an execution down,
/// after its lazy statics are gone. So the registry is leaked per execution and found
/// through a pointer that [`new_execution`] replaces: an OS-thread-local one, because loom
/// runs a model's threads on the OS thread of its test, and tests run side by side.
#[cfg(mvtensor_loom)]
fn registry() -> &'static Registry {
    let current = LOOM_REGISTRY.with(Cell::get);
    assert!(
        !current.is_null(),
        "call mvtensor::loom_new_execution() first"
    );
    // SAFETY: leaked, never freed.
    unsafe { &*current }
}

#[cfg(mvtensor_loom)]
std::thread_local! {
    static LOOM_REGISTRY: Cell<*const Registry> = const { Cell::new(ptr::null()) };
}

/// Starts a loom execution's registry (the models call it first thing in every execution).
#[cfg(mvtensor_loom)]
pub(crate) fn new_execution() {
    let fresh = Box::into_raw(Box::new(Registry::new()));
    LOOM_REGISTRY.with(|current| current.set(fresh));
}

/// This thread's block (claimed on first use) and which of its slots are free.
struct Holder {
    block: Cell<Option<&'static Block>>,
    free: Cell<u8>,
}

impl Drop for Holder {
    /// An exiting thread that holds nothing gives its block to the next new thread. (One that
    /// still holds a snapshot, kept in another thread-local, keeps its block for good.)
    fn drop(&mut self) {
        // Not under loom: loom runs a thread's thread-local destructors in no fixed order, so
        // an atomic access here would make the models nondeterministic; and each execution
        // has a registry of its own anyway.
        if cfg!(mvtensor_loom) {
            return;
        }
        if let Some(block) = self.block.get() {
            if self.free.get() == ALL_FREE {
                // Release: our clears of the slots, and the count of ticks we deferred,
                // happen-before the next owner's use.
                block.owned.store(false, Ordering::Release);
            }
        }
    }
}

#[cfg(not(mvtensor_loom))]
thread_local! {
    static HOLDER: Holder = const {
        Holder {
            block: Cell::new(None),
            free: Cell::new(ALL_FREE),
        }
    };
}

#[cfg(mvtensor_loom)] // loom's thread_local! has no `const` form
thread_local! {
    static HOLDER: Holder = Holder {
        block: Cell::new(None),
        free: Cell::new(ALL_FREE),
    };
}

impl Holder {
    /// This thread's block, claimed on first use.
    fn block(&self) -> &'static Block {
        match self.block.get() {
            Some(block) => block,
            None => {
                let block = registry().claim();
                self.block.set(Some(block));
                block
            }
        }
    }
}

/// This thread's grace-period clock ([`grace`](crate::grace)); `None` once the thread is
/// exiting.
pub(crate) fn clock() -> Option<&'static Clock> {
    HOLDER.try_with(|holder| &holder.block().clock).ok()
}

/// One slot of this thread, holding one version for a snapshot; cleared on drop.
pub(crate) struct Hold {
    slot: &'static AtomicPtr<()>,
    bit: u8,
    /// The slot belongs to this thread's mask: not `Send`.
    _thread: PhantomData<*const ()>,
}

/// Holds `version` in a free slot of this thread; `None` if all are taken (or this thread
/// is exiting). The caller must be pinned and have found `version` reachable.
pub(crate) fn hold(version: *const ()) -> Option<Hold> {
    HOLDER
        .try_with(|holder| {
            let free = holder.free.get();
            if free == 0 {
                return None;
            }
            let block = holder.block();
            let index = free.trailing_zeros() as usize;
            let bit = 1u8 << index;
            holder.free.set(free & !bit);
            let slot = &block.slots[index];
            // Made while pinned, so ordered before any release of the version's last count
            // by the grace period the caller's pin is part of (module docs): for that alone
            // Relaxed would do. Release: a check that reads this store instead of the clear
            // before it (the slot's last holder's, on this thread or the block's last owner)
            // must still see that holder's uses of its version, and its counts taken through
            // the hold (`to_owned_snapshot`): a later plain store does not extend the clear's
            // Release (C++20 release sequences are read-modify-writes only). Free on x86.
            slot.store(version.cast_mut(), Ordering::Release);
            Some(Hold {
                slot,
                bit,
                _thread: PhantomData,
            })
        })
        .ok()
        .flatten()
}

impl Drop for Hold {
    fn drop(&mut self) {
        // Release: our reads of the version happen-before a check that finds the slot
        // empty, and so before the version's reuse.
        self.slot.store(ptr::null_mut(), Ordering::Release);
        // The thread's mask is gone if it is exiting: the slot then stays taken, and the
        // block with it (see `Holder::drop`).
        let _ = HOLDER.try_with(|holder| holder.free.set(holder.free.get() | self.bit));
    }
}

/// The versions held at one moment: what a batch of last counts is checked against. Read
/// into a fixed array (a deferred function may run it inside a reader's pin, which must not
/// allocate); past that many holds, each check reads the slots again.
pub(crate) struct Held {
    versions: [*const (); HELD_INLINE],
    len: usize,
    overflow: bool,
}

/// Holds [`Held`] keeps in its array.
const HELD_INLINE: usize = 64;

impl Held {
    /// Reads every slot once.
    pub(crate) fn now() -> Self {
        let mut held = Self {
            versions: [ptr::null(); HELD_INLINE],
            len: 0,
            overflow: false,
        };
        for_each_hold(|version| {
            if held.len == HELD_INLINE {
                held.overflow = true;
            } else {
                held.versions[held.len] = version;
                held.len += 1;
            }
        });
        held
    }

    pub(crate) fn contains(&self, version: *const ()) -> bool {
        if self.versions[..self.len].contains(&version) {
            return true;
        }
        self.overflow && is_held(version)
    }
}

/// Whether a slot holds `version` now: [`Held::now`]`.contains`, for one version, without
/// building the array (a paged write releases one table's last count per write).
pub(crate) fn is_held(version: *const ()) -> bool {
    registry().blocks().any(|block| {
        block
            .slots
            .iter()
            // Acquire: as in `for_each_hold`.
            .any(|slot| slot.load(Ordering::Acquire).cast_const() == version)
    })
}

/// Calls `f` with every version a slot holds now.
fn for_each_hold(mut f: impl FnMut(*const ())) {
    for block in registry().blocks() {
        for slot in &block.slots {
            // Acquire: pairs with a hold's clearing Release (see `Hold::drop`).
            let version = slot.load(Ordering::Acquire);
            if !version.is_null() {
                f(version.cast_const());
            }
        }
    }
}

/// Gives up one count of `refs`, the count of `object` (a version or a paged table, whose
/// first field is its [`Link`]): `true` if it was the last and nobody holds `object` (the
/// count is zero now, and the caller hands the object back), `false` if other counts remain
/// or the last went to the held list with `object`. Holds are looked at against `held` if
/// given (read after `object` became unreachable), else now.
///
/// The look comes *before* the count reaches zero: an object found unheld cannot be held
/// again (holds are made only on reachable objects, and the last count goes only after the
/// grace period of everyone pinned while it was reachable), and a count taken through a
/// hold meanwhile (`to_owned_snapshot`) makes the compare-and-swap fail and the look run
/// again. So a count never comes back from zero.
///
/// # Safety
/// The caller owns one count of `object` and gives it up; `object`'s first field is a
/// [`Link`], unused while it is counted.
#[inline]
pub(crate) unsafe fn release_count(
    refs: &AtomicUsize,
    object: *const (),
    held: Option<&Held>,
) -> bool {
    // Acquire (here and on every failure): if ours turns out to be the last count, every
    // other holder's Release decrement, and the holds made before it, happen-before our
    // look at the holds.
    let mut now = refs.load(Ordering::Acquire);
    loop {
        if now > 1 {
            // Release: our use of the object happens-before the last holder's Acquire, and
            // so before whoever reuses it.
            match refs.compare_exchange_weak(now, now - 1, Ordering::Release, Ordering::Acquire) {
                Ok(_) => return false,
                Err(seen) => now = seen,
            }
            continue;
        }
        debug_assert_eq!(now, 1, "a released object has our count");
        let is_held = match held {
            Some(held) => held.contains(object),
            None => is_held(object),
        };
        if is_held {
            // SAFETY: the caller's contract; our count goes to the list with the object.
            unsafe { keep_held(object.cast_mut().cast::<Link>()) };
            return false;
        }
        // AcqRel. Release: our use of the object happens-before whoever sees zero and
        // reuses it (a paged book's writer loads the count). Acquire: every other holder's
        // use happens-before ours, and so before what our caller does next (an RMW's
        // Acquire, which ThreadSanitizer sees, not a fence's). Acquire on failure: a holder
        // added a count; round again.
        match refs.compare_exchange(1, 0, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(seen) => now = seen,
        }
    }
}

/// Parks a held version, with the count its releaser kept, until [`recheck`] finds it free.
///
/// # Safety
/// `link` heads a version of which the caller owns one count (its last but for holders'
/// increments), and gives it to the list.
unsafe fn keep_held(link: *mut Link) {
    // SAFETY: the caller's count keeps the version ours to link; its pool link is unused
    // while it has a count. The held list is never closed.
    let pushed = unsafe { crate::pool::push(&registry().held, link, link) };
    debug_assert!(pushed, "the held list is never closed");
}

/// Looks again at the versions kept for holders: each whose holds are gone has its count
/// released (and goes back to its pool); the others stay. Writers call it when they seal a
/// batch of retirements and when a pool runs dry.
pub(crate) fn recheck() {
    let list = &registry().held;
    // Relaxed pre-check: usually empty. Acquire on the swap: pairs with `keep_held`'s push.
    if list.load(Ordering::Relaxed).is_null() {
        return;
    }
    let mut link = list.swap(ptr::null_mut(), Ordering::Acquire);
    if link.is_null() {
        return;
    }
    let held = Held::now();
    while !link.is_null() {
        // SAFETY: the swap made the list ours; read the next link before the version moves
        // on (released, or pushed back by `release`).
        let next = unsafe { Link::take_next(link) };
        // SAFETY: each version on the list carries the count `keep_held` was given.
        unsafe { Link::release(link, &held) };
        link = next;
    }
}
