//! A reclaimable object: the engine's allocation of a value, with the small header that the
//! head word, the slots and the lists need, and the three ways to own one.
//!
//! Every object is a `Box<Object<T>>`: a count, a list link, then the value. The count holds the
//! counted references to the object: counts taken through the head word are moved here when a
//! writer unlinks the object, minus the drops of those references, so it may dip below zero
//! while the object is still the head (a reader drops its count before the writer moves the
//! word's). Once unlinked and moved, it is exactly the number of counted references alive.
//!
//! * [`Owned`]: an object nobody else can reach (a spare being built, a fresh allocation).
//! * [`Counted`]: a counted reference that may cross threads and outlive its variable: when
//!   its variable is gone, the last counted reference frees the object ([`orphan`]).
//! * [`Unlinked`]: an object a writer has just replaced on its head word, with the word's counts
//!   moved into its count and the writer's fence issued: what the retire step takes.
//!
//! Every object also carries a *link* ([`link`](super::link)): the object it replaced while it
//! is pending, which readers see until it commits.

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use crate::sync::{AtomicIsize, AtomicPtr, AtomicUsize, Ordering};

/// The bits of an address the head word and the lists keep: the counts sit above them.
pub(crate) const ADDRESS_BITS: u32 = 48;

/// What an orphaned object's count is lowered by: far below any count of live references, so
/// the last one to go sees exactly `-ORPHANED` and knows the variable is gone.
const ORPHANED: isize = 1 << 62;

/// A value with its reclamation header; `#[repr(C)]` so that the header comes first.
#[repr(C)]
pub(crate) struct Object<T> {
    /// Counted references (see the module docs).
    count: AtomicIsize,
    /// The link on a free or retired list: touched only by whoever has the object.
    next: AtomicPtr<Object<T>>,
    /// The object this one replaced while pending, with counts (see [`link`](super::link)); 0
    /// for none.
    prev: AtomicUsize,
    value: T,
}

/// An allocation whose address does not fit the head word's 48 bits (a kernel that hands out
/// 57-bit user addresses): the write is refused before anything was published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unaddressable {
    pub(crate) address: usize,
}

impl fmt::Display for Unaddressable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "an allocation at {:#x} lies above the {ADDRESS_BITS}-bit addresses a head word holds",
            self.address
        )
    }
}

/// One count in a counted word (a head word or a link): counts sit above the address.
pub(super) const ONE: usize = 1 << ADDRESS_BITS;
/// The address in a counted word; bit 0 is the head word's tag, never part of an address.
pub(super) const ADDRESS: usize = (ONE - 1) & !1;
/// The counts in a counted word.
pub(super) const COUNTS: usize = !(ONE - 1);

/// The counts a counted word carries.
pub(super) fn counts(word: usize) -> usize {
    word >> ADDRESS_BITS
}

/// The address of an object as the head word and the lists store it.
pub(super) fn address_of<T>(object: NonNull<Object<T>>) -> usize {
    object.as_ptr().expose_provenance()
}

/// The object at `address` (exposed by [`address_of`]).
///
/// # Safety
/// `address` is an object's, taken from a word that held it.
pub(super) unsafe fn at<T>(address: usize) -> NonNull<Object<T>> {
    // SAFETY: the caller's contract: a non-null object address, exposed when it was stored.
    unsafe { NonNull::new_unchecked(std::ptr::with_exposed_provenance_mut(address)) }
}

/// An object's count.
///
/// # Safety
/// `object` is alive for `'a`.
pub(super) unsafe fn count<'a, T>(object: NonNull<Object<T>>) -> &'a AtomicIsize {
    // SAFETY: the caller's contract; a field of an atomic type, shared freely.
    unsafe { &(*object.as_ptr()).count }
}

/// An object's link word.
///
/// # Safety
/// `object` is alive for `'a`.
pub(super) unsafe fn prev<'a, T>(object: NonNull<Object<T>>) -> &'a AtomicUsize {
    // SAFETY: the caller's contract; a field of an atomic type, shared freely.
    unsafe { &(*object.as_ptr()).prev }
}

/// An object's value.
///
/// # Safety
/// `object` is alive, and nobody writes its value, for `'a`.
pub(super) unsafe fn value<'a, T>(object: NonNull<Object<T>>) -> &'a T {
    // SAFETY: the caller's contract.
    unsafe { &(*object.as_ptr()).value }
}

/// Detaches and returns what follows `object` on its list.
///
/// # Safety
/// `object` and the rest of its list are the caller's alone.
pub(super) unsafe fn detach_next<T>(object: NonNull<Object<T>>) -> Option<NonNull<Object<T>>> {
    // SAFETY: the caller's contract.
    let next = unsafe { &(*object.as_ptr()).next };
    // Relaxed: the list is ours; it reached us through an acquiring take.
    let rest = next.load(Ordering::Relaxed);
    next.store(std::ptr::null_mut(), Ordering::Relaxed);
    NonNull::new(rest)
}

/// Links `object` in front of the list at `rest` (an address, 0 for none).
///
/// # Safety
/// `object` is the caller's alone until the link is published.
pub(super) unsafe fn link<T>(object: NonNull<Object<T>>, rest: usize) {
    let rest = if rest == 0 {
        std::ptr::null_mut()
    } else {
        // SAFETY: a non-zero list address is an object's, exposed when it was pushed.
        unsafe { at::<T>(rest) }.as_ptr()
    };
    // SAFETY: the caller's contract. Relaxed: published by the push's Release.
    unsafe { (*object.as_ptr()).next.store(rest, Ordering::Relaxed) };
}

/// Frees `object` and its value.
///
/// # Safety
/// Nobody else can reach `object`, and nobody will; its link is empty.
pub(super) unsafe fn free<T>(object: NonNull<Object<T>>) {
    // Checked in the loom models too, which are built optimised: a link left set (or holding
    // stray counts) here is a protocol error.
    if cfg!(any(debug_assertions, mvtensor_loom)) {
        // SAFETY: the caller's contract.
        let link = unsafe { prev(object) };
        // Relaxed: exclusive.
        assert_eq!(link.load(Ordering::Relaxed), 0, "a link left set");
    }
    // SAFETY: allocated as a `Box` by `Owned::new`; the caller's contract.
    drop(unsafe { Box::from_raw(object.as_ptr()) });
}

/// Frees an orphaned `object` and hands what its link held (the counts moved in) to the
/// caller, to orphan in turn.
///
/// # Safety
/// As for [`free`], but the link may be set.
unsafe fn free_linked<T>(object: NonNull<Object<T>>) -> Option<NonNull<Object<T>>> {
    // SAFETY: the caller's contract. Relaxed: exclusive.
    let word = unsafe { prev(object) }.swap(0, Ordering::Relaxed);
    let target = (word & ADDRESS != 0).then(|| {
        // SAFETY: a set link holds an object's address, and keeps that object alive.
        let target = unsafe { at::<T>(word & ADDRESS) };
        // SAFETY: alive, as above. Relaxed: exclusive.
        unsafe { count(target) }.fetch_add(counts(word) as isize, Ordering::Relaxed);
        target
    });
    // SAFETY: as above; the link is empty now.
    unsafe { free(object) };
    target
}

/// Gives up one counted reference to an object whose variable is alive (so it is never the
/// last of an orphan).
///
/// # Safety
/// The caller holds that count, and the object's variable outlives this call.
pub(super) unsafe fn release<T>(object: NonNull<Object<T>>) {
    // SAFETY: the count we give up keeps the object alive until this decrement. Release: our
    // reads of the object happen-before a writer's acquiring look at the count, and so before
    // its reuse.
    unsafe { count(object) }.fetch_sub(1, Ordering::Release);
}

/// Hands an unlinked object of a variable being dropped to its counted references: freed now
/// if there are none, else by the last of them.
///
/// # Safety
/// The caller has the variable exclusively: no slot guard of it is alive, no count can be
/// taken on `object` any more, and the word's counts were moved into the object's.
pub(super) unsafe fn orphan<T>(object: NonNull<Object<T>>) {
    let mut next = Some(object);
    while let Some(object) = next.take() {
        // SAFETY: the caller's contract (down the chain: the link's, which the freed object
        // held alone): ours until orphaned. AcqRel: Acquire so that the references dropped
        // before happen-before our free; Release so that everything before the orphaning
        // happens-before the free of the last reference.
        if unsafe { count(object) }.fetch_sub(ORPHANED, Ordering::AcqRel) == 0 {
            // SAFETY: no counted reference is left, and the caller's contract excludes the
            // rest. A loop, not a recursion, down the links.
            next = unsafe { free_linked(object) };
        }
    }
}

/// An object only its owner can reach: a spare or a fresh allocation, writable.
pub(crate) struct Owned<T> {
    object: NonNull<Object<T>>,
    _owns: PhantomData<T>,
}

// SAFETY: an `Owned` is a unique `Box` in all but name.
unsafe impl<T: Send> Send for Owned<T> {}
// SAFETY: as above: `&Owned` gives only `&T`.
unsafe impl<T: Sync> Sync for Owned<T> {}

impl<T> Owned<T> {
    /// Allocates an object for `value`; refused if its address does not fit the head word.
    pub(crate) fn new(value: T) -> Result<Self, Unaddressable> {
        let object = NonNull::from(Box::leak(Box::new(Object {
            count: AtomicIsize::new(0),
            next: AtomicPtr::new(std::ptr::null_mut()),
            prev: AtomicUsize::new(0),
            value,
        })));
        let address = address_of(object);
        if address >> ADDRESS_BITS != 0 {
            // SAFETY: just allocated, never shared.
            unsafe { free(object) };
            return Err(Unaddressable { address });
        }
        Ok(Self {
            object,
            _owns: PhantomData,
        })
    }

    /// Takes `object` over.
    ///
    /// # Safety
    /// Nobody else can reach `object`, its count is zero, and it came from [`Owned::new`].
    pub(super) unsafe fn from_raw(object: NonNull<Object<T>>) -> Self {
        Self {
            object,
            _owns: PhantomData,
        }
    }

    /// Gives the object up (to a head word that publishes it).
    pub(super) fn into_raw(self) -> NonNull<Object<T>> {
        let object = self.object;
        std::mem::forget(self);
        object
    }

    pub(super) fn object(&self) -> NonNull<Object<T>> {
        self.object
    }

    pub(super) fn address(&self) -> usize {
        address_of(self.object)
    }
}

impl<T> Deref for Owned<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: ours alone.
        unsafe { &(*self.object.as_ptr()).value }
    }
}

impl<T> DerefMut for Owned<T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: ours alone, and `&mut self` makes this the only borrow.
        unsafe { &mut (*self.object.as_ptr()).value }
    }
}

impl<T> Drop for Owned<T> {
    /// An object never published (a write that gave up) is freed.
    fn drop(&mut self) {
        // SAFETY: ours alone.
        unsafe { free(self.object) };
    }
}

/// A counted reference: keeps its object from reuse for as long as it lives, on any thread,
/// after its variable is gone too.
pub(crate) struct Counted<T> {
    object: NonNull<Object<T>>,
    _holds: PhantomData<T>,
}

// SAFETY: it gives `&T` to whichever thread has it, and the last one may drop the value there.
unsafe impl<T: Send + Sync> Send for Counted<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for Counted<T> {}

impl<T> Counted<T> {
    /// Takes over a count held on `object`.
    ///
    /// # Safety
    /// The caller holds one count of `object` and gives it to the reference.
    pub(super) unsafe fn from_count(object: NonNull<Object<T>>) -> Self {
        Self {
            object,
            _holds: PhantomData,
        }
    }
}

impl<T> Clone for Counted<T> {
    fn clone(&self) -> Self {
        // SAFETY: our count keeps the object. Relaxed: like `Arc::clone`, a count added while
        // we hold one; our own release orders what we did.
        unsafe { count(self.object) }.fetch_add(1, Ordering::Relaxed);
        Self {
            object: self.object,
            _holds: PhantomData,
        }
    }
}

impl<T> Deref for Counted<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: our count keeps the object from reuse, so nobody writes it.
        unsafe { &(*self.object.as_ptr()).value }
    }
}

impl<T> Drop for Counted<T> {
    fn drop(&mut self) {
        // SAFETY: our count keeps the object until this very decrement. Release: our reads
        // happen-before the writer (or orphaning) that finds the count back at its floor.
        let before = unsafe { count(self.object) }.fetch_sub(1, Ordering::Release);
        if before == 1 - ORPHANED {
            // The variable is gone and ours was the last reference. Acquire: everything the
            // other references and the variable did happens-before the free (our decrement
            // continues the release sequence of each earlier one, and this load reads it). A
            // load rather than a fence, which ThreadSanitizer does not see.
            // SAFETY: ours is the last reference: the object lives until the free below.
            unsafe { count(self.object) }.load(Ordering::Acquire);
            // SAFETY: orphaned (no slot, no word can reach it) and no count left.
            if let Some(target) = unsafe { free_linked(self.object) } {
                // SAFETY: what the freed object's link held, alone; its variable is gone.
                unsafe { orphan(target) };
            }
        }
    }
}

/// An object a writer has unlinked from its head word: counts moved, fence issued.
#[must_use = "an unlinked object goes to its home's retire step (dropping it leaks it)"]
pub(crate) struct Unlinked<T>(NonNull<Object<T>>);

impl<T> Unlinked<T> {
    /// # Safety
    /// `object` was just replaced on its head word by the caller's compare-and-swap, the
    /// word's counts were moved into its count, and the caller fenced after the swap
    /// ([`after_unlink`](super::slots::after_unlink)).
    pub(super) unsafe fn new(object: NonNull<Object<T>>) -> Self {
        Self(object)
    }

    pub(super) fn into_raw(self) -> NonNull<Object<T>> {
        self.0
    }
}
