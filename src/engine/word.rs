//! The counted head word: an object's address, the counts taken on it, and one tag bit, in one
//! atomic word.
//!
//! ```text
//!  63        48 47                      1   0
//! [ counts     | address (bits 47..1)     | queued ]
//! ```
//!
//! **Reads** are wait-free: protect the address through a slot ([`slots::protect`]); if the
//! word moved meanwhile, or every slot is taken, take a count with one `fetch_add` on the word
//! instead. Neither path retries. **Writers** take their base the counted way too (so that
//! their own node's line never moves between writers, and no slot of theirs is scanned), build
//! a new object, and replace the word with a compare-and-swap on the exact word: the counts it
//! carried move into the old object's own count, minus the writer's. A base that is counted
//! cannot be reused, so an unchanged address is an unchanged object (no ABA).
//!
//! **Overflow.** Counts live in 16 bits. A read that leaves more than half of them taken moves
//! them into the object's count with one compare-and-swap (adding to the object first, so that
//! a writer never finds the object unheld while the counts are in transit; undoing it if the
//! word moved). Only reads that keep losing that race to other operations on the same word,
//! 32,768 in a row, could overflow it.
//!
//! Every modification of the word is a read-modify-write, so the release sequence of the
//! compare-and-swap that installed an object runs through all of them: any acquiring read of the
//! word that finds the object sees its contents.

#[cfg(not(target_pointer_width = "64"))]
compile_error!("the head word packs counts above a 48-bit address: it needs 64-bit pointers");

use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::ptr::NonNull;

use super::domain::Domain;
use super::object::{self, counts, Counted, Object, Owned, Unlinked, ADDRESS, COUNTS, ONE};
use super::slots::{self, Slot};
use crate::sync::{AtomicUsize, Ordering};

/// The tag bit that sections use for their *queued* mark; writers carry it over.
pub(crate) const QUEUED: usize = 1;
/// Counts at which a read moves them into the object. Loom models use 2, so that the move
/// happens within a few reads.
const DRAIN_AT: usize = if cfg!(mvtensor_loom) { 2 } else { 1 << 15 };

/// An atomic pointer to the current object of type `T`, with counts and a tag.
pub(crate) struct HeadWord<T> {
    word: AtomicUsize,
    _owns: PhantomData<Owned<T>>,
}

impl<T> HeadWord<T> {
    /// A word showing `first`.
    pub(crate) fn new(first: Owned<T>) -> Self {
        Self {
            word: AtomicUsize::new(object::address_of(first.into_raw())),
            _owns: PhantomData,
        }
    }

    /// The current object, protected by a slot of this thread's node in `domain` or by a
    /// count.
    ///
    /// # Safety
    /// `domain` is the one whose slots this word's writers scan before they reuse an object
    /// (its [`Home`](super::retire::Home)'s): a slot in another domain protects nothing.
    #[inline]
    pub(crate) unsafe fn read<'a>(&'a self, domain: &'a Domain) -> Read<'a, T> {
        // Relaxed: a candidate only; nothing is dereferenced before the validating load below.
        let candidate = self.word.load(Ordering::Relaxed) & ADDRESS;
        let slot = slots::protect(
            domain,
            std::ptr::with_exposed_provenance_mut(candidate),
            || {
                // Acquire: the installing compare-and-swap's release sequence (module docs), so the
                // object's contents are visible once it is validated.
                self.word.load(Ordering::Acquire) & ADDRESS == candidate
            },
        );
        match slot {
            // SAFETY: a validated address is the current object's, protected by the slot.
            Some(slot) => unsafe { Read::slotted(object::at(candidate), slot) },
            None => self.read_counted(),
        }
    }

    /// The current object, protected by a count taken on the word: the fallback of
    /// [`read`](Self::read).
    #[cold]
    pub(super) fn read_counted(&self) -> Read<'_, T> {
        let (object, _) = self.count();
        // SAFETY: the count just taken, on an object of our variable.
        unsafe { Read::counted(object) }
    }

    /// A writer's base: the current object, counted.
    pub(crate) fn base(&self) -> Base<'_, T> {
        let (object, seen) = self.count();
        Base {
            object,
            seen,
            _word: PhantomData,
        }
    }

    /// Takes one count on the current object: returns it and the word as the `fetch_add` left
    /// it.
    #[inline]
    fn count(&self) -> (NonNull<Object<T>>, usize) {
        let seen = count_through::<T>(&self.word);
        // SAFETY: the word always holds an object's address.
        (unsafe { object::at(seen & ADDRESS) }, seen)
    }

    /// Publishes `new` in place of `base`'s object if the word still shows it; then `base`'s
    /// object is unlinked, its counts moved, and the fence before the scan issued. If another
    /// writer replaced it first, or the *queued* mark changed since `base` was taken, `new`
    /// comes back unpublished: a writer that looked at an unmarked word must not publish past
    /// a mark set meanwhile (it would change a variable a section now holds), so it looks at
    /// the mark again instead. Counts taken or drained meanwhile only send it round again.
    pub(crate) fn replace(
        &self,
        base: Base<'_, T>,
        new: Owned<T>,
    ) -> Result<Unlinked<T>, Owned<T>> {
        let base = ManuallyDrop::new(base);
        let mut current = base.seen;
        loop {
            // Release: publishes `new`'s contents to acquiring reads of the word. No Acquire:
            // what a draining read moved into the old object (whose release sequence this
            // swap may read) is acquired by the SeqCst fence that follows, before the count
            // is looked at; the base was acquired when it was counted. Relaxed on failure:
            // only the address is looked at, and nothing is read through it.
            match self.word.compare_exchange(
                current,
                new.address() | (current & QUEUED),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    // The counts the word carried, ours among them: ours goes, the rest move.
                    let others = counts(current) as isize - 1;
                    if others != 0 {
                        // SAFETY: the count we held until now keeps it. Relaxed: the object
                        // reaches any later look through a Release push.
                        unsafe { object::count(base.object) }.fetch_add(others, Ordering::Relaxed);
                    }
                    slots::after_unlink();
                    let _ = new.into_raw();
                    // SAFETY: just unlinked by our compare-and-swap, counts moved, fenced.
                    return Ok(unsafe { Unlinked::new(base.object) });
                }
                Err(now) if (now ^ base.seen) & (ADDRESS | QUEUED) == 0 => current = now,
                Err(_) => {
                    // SAFETY: our count; the object's variable is `self`'s, borrowed.
                    unsafe { object::release(base.object) };
                    return Err(new);
                }
            }
        }
    }

    /// Whether the *queued* mark is set.
    pub(crate) fn is_queued(&self) -> bool {
        // Acquire: pairs with the marking's Release.
        self.word.load(Ordering::Acquire) & QUEUED != 0
    }

    /// Sets or clears the *queued* mark.
    pub(crate) fn set_queued(&self, queued: bool) {
        // AcqRel: Release: what the marker did before is visible to a writer that sees the
        // mark; Acquire: the mark's earlier setter or clearer happens-before us.
        if queued {
            self.word.fetch_or(QUEUED, Ordering::AcqRel);
        } else {
            self.word.fetch_and(!QUEUED, Ordering::AcqRel);
        }
    }

    /// The counts the word carries now.
    #[cfg(all(test, not(mvtensor_loom)))]
    pub(crate) fn counts(&self) -> usize {
        // Relaxed: a test's look, with no other thread using the word.
        counts(self.word.load(Ordering::Relaxed))
    }
}

impl<T> Drop for HeadWord<T> {
    /// The last object goes to its counted references (or is freed now if there are none).
    fn drop(&mut self) {
        // Relaxed: exclusive; every operation on the word happened-before.
        let word = self.word.load(Ordering::Relaxed);
        // SAFETY: the word holds an object's address.
        let object = unsafe { object::at::<T>(word & ADDRESS) };
        if counts(word) != 0 {
            // SAFETY: alive: the word's counts keep it. Relaxed: exclusive, as above.
            unsafe { object::count(object) }.fetch_add(counts(word) as isize, Ordering::Relaxed);
        }
        // SAFETY: exclusive: no guard borrows the word, and no count can be taken any more.
        unsafe { object::orphan(object) };
    }
}

/// Takes one count through a counted word (a head word, or a link): returns the word as the
/// `fetch_add` left it. Counts on a word that holds no object (an emptied link) count nothing.
#[inline]
pub(super) fn count_through<T>(word: &AtomicUsize) -> usize {
    // Acquire: the installing compare-and-swap's release sequence (module docs); for an
    // emptied link, the release that emptied it ([`link`](super::link)).
    let seen = word.fetch_add(ONE, Ordering::Acquire).wrapping_add(ONE);
    if counts(seen) >= DRAIN_AT && seen & ADDRESS != 0 {
        // SAFETY: our count keeps the object alive.
        unsafe { drain::<T>(word, seen, object::at(seen & ADDRESS)) };
    }
    seen
}

/// Moves the counts of `seen` into `object`'s count if `word` still is `seen`.
///
/// # Safety
/// `object` is `seen`'s, and the caller holds a count on it.
#[cold]
unsafe fn drain<T>(word: &AtomicUsize, seen: usize, object: NonNull<Object<T>>) {
    let moved = counts(seen) as isize;
    // SAFETY: the caller's count keeps the object. Relaxed: published by the Release of the
    // compare-and-swap below.
    let count = unsafe { object::count(object) };
    count.fetch_add(moved, Ordering::Relaxed);
    // Release: a writer whose compare-and-swap reads this word (or a later one) sees the
    // counts in the object. Relaxed on failure: nothing read is used.
    if word
        .compare_exchange(seen, seen & !COUNTS, Ordering::Release, Ordering::Relaxed)
        .is_err()
    {
        // Relaxed: undoes an over-count, which only ever kept the object longer.
        count.fetch_sub(moved, Ordering::Relaxed);
    }
}

/// A read: the object protected by a slot, or by a count. Not `Send` (a slot is the thread's).
pub(crate) struct Read<'a, T> {
    object: NonNull<Object<T>>,
    /// `None`: the object is counted.
    slot: Option<Slot<'a>>,
    _word: PhantomData<&'a HeadWord<T>>,
}

impl<'a, T> Read<'a, T> {
    /// A read of `object` that `slot` protects.
    ///
    /// # Safety
    /// `slot` protects `object` (validated against a word that held it), of a variable that
    /// outlives `'a`.
    pub(super) unsafe fn slotted(object: NonNull<Object<T>>, slot: Slot<'a>) -> Self {
        Self {
            object,
            slot: Some(slot),
            _word: PhantomData,
        }
    }

    /// A read of `object` that a count the caller took protects.
    ///
    /// # Safety
    /// The caller holds a count of `object` (of a variable that outlives `'a`) and gives it up.
    pub(super) unsafe fn counted(object: NonNull<Object<T>>) -> Self {
        Self {
            object,
            slot: None,
            _word: PhantomData,
        }
    }

    /// The object read.
    pub(super) fn object(&self) -> NonNull<Object<T>> {
        self.object
    }

    /// A counted reference to the same object, for a snapshot that crosses threads. A slot is
    /// converted by counting first and clearing the slot after, so that a scan that sees the
    /// slot empty sees the count.
    pub(crate) fn into_counted(self) -> Counted<T> {
        let mut this = ManuallyDrop::new(self);
        if let Some(slot) = this.slot.take() {
            // SAFETY: the slot keeps the object alive. Relaxed: published by the slot's
            // clearing Release.
            unsafe { object::count(this.object) }.fetch_add(1, Ordering::Relaxed);
            drop(slot);
        }
        // SAFETY: we hold one count now, given to the reference.
        unsafe { Counted::from_count(this.object) }
    }

    /// Whether a slot protects the object (else a count does).
    #[cfg(all(test, not(mvtensor_loom)))]
    pub(crate) fn is_slot(&self) -> bool {
        self.slot.is_some()
    }
}

impl<T> Deref for Read<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the slot or the count keeps the object from reuse while we live.
        unsafe { object::value(self.object) }
    }
}

impl<T> Drop for Read<'_, T> {
    fn drop(&mut self) {
        if self.slot.is_none() {
            // SAFETY: our count; the word we borrow keeps the object's variable alive.
            unsafe { object::release(self.object) };
        }
    }
}

/// A writer's base: the current object when the write began, counted.
pub(crate) struct Base<'a, T> {
    object: NonNull<Object<T>>,
    /// The word as our count left it: what the compare-and-swap expects first.
    seen: usize,
    _word: PhantomData<&'a HeadWord<T>>,
}

impl<T> Base<'_, T> {
    /// The object the base is.
    pub(super) fn object(&self) -> NonNull<Object<T>> {
        self.object
    }
}

impl<T> Deref for Base<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: our count keeps the object from reuse.
        unsafe { object::value(self.object) }
    }
}

impl<T> Drop for Base<'_, T> {
    /// A write that gave up before replacing.
    fn drop(&mut self) {
        // SAFETY: our count; the word we borrow keeps the object's variable alive.
        unsafe { object::release(self.object) };
    }
}
