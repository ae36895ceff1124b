//! A variable's home: its head word, in its domain, with the objects it reuses.
//!
//! **Retire.** A writer that replaced the head word looks at the object it unlinked at once:
//! free (no slot holds it, *then* its count is zero) it goes on the **free list**, else on the
//! **retired list**. The order matters: a reader that turns its slot into a count
//! ([`Read::into_counted`]) counts first and clears its slot after, so a look at the count
//! before the slots could miss both; a look at the slots that sees the clear also sees the count.
//!
//! **Reuse.** A writer takes its spare from the free list; when that is empty it looks at the
//! retired objects again first (one pass over the slots for a batch of them). Both lists are
//! taken whole with a swap, never popped one at a time, so a node taken and pushed back
//! meanwhile cannot corrupt them (no ABA): only pushes compare-and-swap, and a push never
//! reads a node it does not own. The free list keeps at most [`SPARES`] objects (its length
//! rides in the list word's top bits); a writer frees what would go beyond.
//!
//! Nothing on a reader's path frees memory or runs a destructor: objects go back to their home,
//! and are freed only by writers (beyond the spares) or once the home and every counted
//! reference to them are gone.

use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;

use super::domain::Domain;
use super::link;
use super::object::{self, Object, Owned, Unaddressable, Unlinked, ADDRESS_BITS};
use super::slots;
use super::word::{Base, HeadWord, Read};
use crate::sync::{AtomicUsize, Ordering};

/// Objects a home keeps for reuse beyond its head: a lone writer alternates between two.
pub(crate) const SPARES: usize = 2;

/// Objects a recheck looks at in one pass over the slots.
const BATCH: usize = 64;

/// Writes after which objects still on the retired list are looked at again, so that one whose
/// reader has let go comes back although no newcomer joined the list and spares remain.
pub(crate) const RECHECK_AFTER: usize = 64;

/// A list of objects: the address of the first, and the length (saturating) above it.
struct Stack<T> {
    word: AtomicUsize,
    _holds: PhantomData<Owned<T>>,
}

/// One in the length field.
const ONE: usize = 1 << ADDRESS_BITS;
const ADDRESS: usize = ONE - 1;
const MAX_LENGTH: usize = usize::MAX >> ADDRESS_BITS;

impl<T> Stack<T> {
    fn new() -> Self {
        Self {
            word: AtomicUsize::new(0),
            _holds: PhantomData,
        }
    }

    /// Pushes `object` unless the list already holds `limit`; `false` if it did.
    ///
    /// # Safety
    /// `object` is the caller's alone, and goes to the list.
    unsafe fn push(&self, object: NonNull<Object<T>>, limit: usize) -> bool {
        // Relaxed: a stale word only fails the compare-and-swap.
        let mut seen = self.word.load(Ordering::Relaxed);
        loop {
            let length = seen >> ADDRESS_BITS;
            if length >= limit {
                return false;
            }
            // SAFETY: ours until the push succeeds.
            unsafe { object::link(object, seen & ADDRESS) };
            let pushed = object::address_of(object) | (length + 1).min(MAX_LENGTH) << ADDRESS_BITS;
            // Release: our last uses of the object happen-before the taker's (the swap's
            // Acquire). Relaxed on failure: the new word is only compared.
            match self.word.compare_exchange_weak(
                seen,
                pushed,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => seen = now,
            }
        }
    }

    fn is_empty(&self) -> bool {
        // Relaxed: a hint; the swap decides.
        self.word.load(Ordering::Relaxed) == 0
    }

    /// Takes the whole list.
    fn take_all(&self) -> Option<NonNull<Object<T>>> {
        if self.is_empty() {
            return None;
        }
        // Acquire: pairs with the pushes' Release.
        let word = self.word.swap(0, Ordering::Acquire);
        // SAFETY: a non-zero list word holds an object's address.
        (word != 0).then(|| unsafe { object::at(word & ADDRESS) })
    }

    /// The length, saturating.
    fn len(&self) -> usize {
        // Relaxed: a hint.
        self.word.load(Ordering::Relaxed) >> ADDRESS_BITS
    }
}

/// A variable's reclamation state: the head word, the domain its readers protect in, and the
/// objects it reuses.
pub(crate) struct Home<T> {
    word: HeadWord<T>,
    domain: Arc<Domain>,
    /// Objects nobody holds, at most [`SPARES`].
    free: Stack<T>,
    /// Unlinked objects that were held at their last look.
    retired: Stack<T>,
    /// How many retired objects the last recheck found held: a longer list has newcomers.
    kept: AtomicUsize,
    /// Writes since the last recheck, counted while the retired list is not empty.
    since: AtomicUsize,
}

// SAFETY: objects are reached (`&T`) and dropped from any thread that uses the home.
unsafe impl<T: Send + Sync> Send for Home<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for Home<T> {}

impl<T> Home<T> {
    /// A home whose head shows `first`, read in `domain`.
    pub(crate) fn new(domain: Arc<Domain>, first: T) -> Result<Self, Unaddressable> {
        Ok(Self {
            word: HeadWord::new(Owned::new(first)?),
            domain,
            free: Stack::new(),
            retired: Stack::new(),
            kept: AtomicUsize::new(0),
            since: AtomicUsize::new(0),
        })
    }

    /// The current object (wait-free).
    #[inline]
    pub(crate) fn read(&self) -> Read<'_, T> {
        // SAFETY: the home's writers scan its own domain before they reuse an object.
        unsafe { self.word.read(&self.domain) }
    }

    /// The head word (for its mark, and the models' direct use of its paths).
    pub(crate) fn word(&self) -> &HeadWord<T> {
        &self.word
    }

    pub(crate) fn domain(&self) -> &Domain {
        &self.domain
    }

    /// A writer's base: the current object, counted.
    pub(crate) fn base(&self) -> Base<'_, T> {
        self.word.base()
    }

    /// An object to build the next value in: a spare (with whatever value it had), or a new
    /// one made by `make`. The retired objects are looked at again first if there are no
    /// spares, if objects joined them since their last look, or every [`RECHECK_AFTER`] writes
    /// while some wait: so they come back soon after their readers let go, and one held for
    /// long costs a look every so many writes, not one a write.
    pub(crate) fn spare(&self, make: impl FnOnce() -> T) -> Result<Owned<T>, Unaddressable> {
        let retired = self.retired.len();
        // Relaxed: a heuristic; a stale value only moves a recheck by a write.
        let newcomers = retired > self.kept.load(Ordering::Relaxed);
        if self.free.is_empty() || newcomers || (retired > 0 && self.due()) {
            self.recheck();
        }
        let Some(first) = self.free.take_all() else {
            return Owned::new(make());
        };
        // SAFETY: the swap made the list ours.
        let mut rest = unsafe { object::detach_next(first) };
        while let Some(object) = rest {
            // SAFETY: still ours.
            rest = unsafe { object::detach_next(object) };
            self.give_back(object);
        }
        // SAFETY: on the free list: nobody holds it, its count is zero.
        Ok(unsafe { Owned::from_raw(first) })
    }

    /// Publishes `new` in place of `base`'s object and retires that one; `new` comes back if
    /// another writer replaced the base first.
    pub(crate) fn publish(&self, base: Base<'_, T>, new: Owned<T>) -> Result<(), Owned<T>> {
        let old = self.word.replace(base, new)?;
        self.retire(old);
        Ok(())
    }

    /// Whether nobody can reach the unlinked `object`: slots first, then the count.
    fn is_free(&self, object: NonNull<Object<T>>) -> bool {
        !slots::holds(&self.domain, object.as_ptr().cast_const())
            // SAFETY: an unlinked object of ours stays alive until we give it back. Acquire:
            // pairs with the Release of every counted reference's drop.
            && unsafe { object::count(object) }.load(Ordering::Acquire) == 0
    }

    /// Retires an object unlinked from the head word or from a link: back to the free list if
    /// nobody can reach it, else onto the retired list.
    pub(super) fn retire(&self, old: Unlinked<T>) {
        let mut next = Some(old);
        while let Some(object) = next.take() {
            let object = object.into_raw();
            if self.is_free(object) {
                // A loop, not a recursion, down the links.
                next = self.reclaim(object);
            } else {
                // SAFETY: unlinked and ours; it goes to the list.
                unsafe { self.retired.push(object, usize::MAX) };
            }
        }
    }

    /// Gives a free object back, emptying its link first: returns what the link held, to be
    /// retired next.
    fn reclaim(&self, object: NonNull<Object<T>>) -> Option<Unlinked<T>> {
        // SAFETY: free: nobody else can reach it, so nobody else empties its link; `release`
        // looks before it swaps (only a committed object replaced while its link was still set
        // has one), and fences before the scan of what the link held.
        let held = unsafe { link::release(object) };
        self.give_back(object);
        held
    }

    /// Puts a free object on the free list, or frees it if the list is full.
    fn give_back(&self, object: NonNull<Object<T>>) {
        // SAFETY: free and ours; it goes to the list.
        if !unsafe { self.free.push(object, SPARES) } {
            // SAFETY: free: unlinked, no slot, no count, and off every list.
            unsafe { object::free(object) };
        }
    }

    /// Counts a write while retired objects wait; whether a recheck is due.
    fn due(&self) -> bool {
        // Relaxed, and a load and a store rather than an increment: a count of writes that a
        // concurrent writer may lose one of only moves the next recheck by a write.
        let since = self.since.load(Ordering::Relaxed) + 1;
        self.since.store(since, Ordering::Relaxed);
        since >= RECHECK_AFTER
    }

    /// Looks again at the retired objects: the free ones go back, the rest stay.
    #[cold]
    fn recheck(&self) {
        // Relaxed: a heuristic (see `due`).
        self.since.store(0, Ordering::Relaxed);
        let mut rest = self.retired.take_all();
        let mut kept = 0;
        while rest.is_some() {
            let mut batch = [std::ptr::null::<Object<T>>(); BATCH];
            let mut len = 0;
            while let Some(object) = rest.filter(|_| len < BATCH) {
                batch[len] = object.as_ptr().cast_const();
                len += 1;
                // SAFETY: the swap made the list ours.
                rest = unsafe { object::detach_next(object) };
            }
            // Slots first, then the counts (module docs).
            let held = slots::held(&self.domain, &batch[..len]);
            for (i, &object) in batch[..len].iter().enumerate() {
                // SAFETY: filled from list nodes above.
                let object = unsafe { NonNull::new_unchecked(object.cast_mut()) };
                if held & 1 << i == 0
                    // SAFETY: ours, alive. Acquire: as in `is_free`.
                    && unsafe { object::count(object) }.load(Ordering::Acquire) == 0
                {
                    if let Some(held) = self.reclaim(object) {
                        self.retire(held);
                    }
                } else {
                    kept += 1;
                    // SAFETY: ours; back to the list.
                    unsafe { self.retired.push(object, usize::MAX) };
                }
            }
        }
        // Relaxed: a heuristic (see `spare`).
        self.kept.store(kept, Ordering::Relaxed);
    }

    /// How many objects sit on the free and the retired list.
    #[cfg(all(test, not(mvtensor_loom)))]
    pub(crate) fn listed(&self) -> (usize, usize) {
        (self.free.len(), self.retired.len())
    }
}

impl<T> Drop for Home<T> {
    /// Frees the spares; the retired objects go to their counted references (the head word's
    /// own drop does the same with the head).
    fn drop(&mut self) {
        let mut rest = self.free.take_all();
        while let Some(object) = rest {
            // SAFETY: exclusive: the list is ours.
            rest = unsafe { object::detach_next(object) };
            // SAFETY: a spare: nobody holds it.
            unsafe { object::free(object) };
        }
        let mut rest = self.retired.take_all();
        while let Some(object) = rest {
            // SAFETY: as above.
            rest = unsafe { object::detach_next(object) };
            // SAFETY: exclusive: no guard borrows us, no count can be taken; moved already.
            unsafe { object::orphan(object) };
        }
    }
}
