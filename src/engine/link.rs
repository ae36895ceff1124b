//! A pending object's link: the object it replaced, which readers see until it commits.
//!
//! A critical section installs its new object *pending* over the current one
//! ([`Home::install`](super::pending)): the replaced object leaves the head word but is not
//! retired; the new object's link holds it and owns its retirement. A reader that finds the
//! head pending reads through the link the way it reads a head word: a slot, validated by
//! loading the link again, or a count taken on the link word, whose layout is the head word's
//! (counts above the address; an empty link is 0).
//!
//! Once the pending object commits, whoever empties the link ([`release`]: a swap, so exactly one
//! caller gets the object) moves the link's counts into the object, fences, and retires it, as
//! a writer retires what it unlinks from the head word: the same store-load pairing
//! ([`slots`](super::slots)) makes its scan see every reader whose validation found the link
//! set.
//!
//! A link is set only by its object's owner, before the object is published, and is emptied
//! at most once after: while an object is published its link never points to another object,
//! so a reload that finds it unchanged shows that it was set throughout.

use std::ptr::NonNull;

use super::domain::Domain;
use super::object::{self, counts, Object, Unlinked, ADDRESS, ONE};
use super::slots;
use super::word::{count_through, Read};
use crate::sync::Ordering;

/// Links `new` to `target`, the object it is about to replace.
///
/// # Safety
/// `new` is the caller's alone (not published), and its link is empty.
pub(super) unsafe fn set<T>(new: NonNull<Object<T>>, target: NonNull<Object<T>>) {
    // SAFETY: the caller's contract. Relaxed: published by the head word's Release swap.
    unsafe { object::prev(new) }.store(object::address_of(target), Ordering::Relaxed);
}

/// Empties the link of `new`, whose install failed.
///
/// # Safety
/// `new` is the caller's alone.
pub(super) unsafe fn clear<T>(new: NonNull<Object<T>>) {
    // SAFETY: the caller's contract. Relaxed: not shared.
    unsafe { object::prev(new) }.store(0, Ordering::Relaxed);
}

/// What `object`'s link holds, protected by a slot of this thread's node in `domain` or by a
/// count on the link; `None` if the link is empty (or was emptied meanwhile).
///
/// # Safety
/// The caller protects `object` for the call, `object` belongs to a variable that outlives
/// `'a`, and `domain` is the one that variable's writers scan.
pub(super) unsafe fn read<'a, T>(
    object: NonNull<Object<T>>,
    domain: &'a Domain,
) -> Option<Read<'a, T>> {
    // SAFETY: the caller protects `object`.
    let link = unsafe { object::prev(object) };
    // Acquire: a link found empty was emptied by a release after its object's commit (a Release
    // swap): the caller then shows the pending object as committed, and must see the commit.
    let candidate = link.load(Ordering::Acquire) & ADDRESS;
    if candidate == 0 {
        return None;
    }
    let slot = slots::protect(
        domain,
        std::ptr::with_exposed_provenance_mut(candidate),
        // Relaxed: the fence in `protect` orders it; the contents were published by the head
        // word's release sequence, which the caller's read of `object` acquired.
        || link.load(Ordering::Relaxed) & ADDRESS == candidate,
    );
    if let Some(slot) = slot {
        // SAFETY: validated: the link held it when the slot was fenced in; our variable's.
        return Some(unsafe { Read::slotted(object::at(candidate), slot) });
    }
    // Every slot taken, or the link was emptied: a count on the link word, whose release moves
    // it into the object.
    let seen = count_through::<T>(link);
    if seen & ADDRESS == 0 {
        // Emptied: our count counts nothing; take it back. Relaxed: nothing is published by
        // it, and it is done while the caller protects `object`, so before anyone frees or
        // reuses it (which look at the link and need it 0 when empty).
        link.fetch_sub(ONE, Ordering::Relaxed);
        return None;
    }
    // SAFETY: a set link holds an object's address, and our count on the link protects it.
    Some(unsafe { Read::counted(object::at(seen & ADDRESS)) })
}

/// Empties `object`'s link and hands over what it held: the link's counts moved into it and
/// the fence before the scan issued. `None` if the link was empty, or another caller emptied it
/// first.
///
/// # Safety
/// `object` is committed (or was never published), and the caller protects it for the call.
pub(super) unsafe fn release<T>(object: NonNull<Object<T>>) -> Option<Unlinked<T>> {
    // SAFETY: the caller protects `object`.
    let link = unsafe { object::prev(object) };
    if link.load(Ordering::Relaxed) & ADDRESS == 0 {
        // Relaxed: an emptied link stays empty while the caller protects `object`.
        return None;
    }
    // Release: the commit happens-before a reader that finds the link empty (see `read`).
    // No Acquire: what readers drained into the object is acquired by the fence below, as in
    // the head word's replace.
    let old = link.swap(0, Ordering::Release);
    let target = old & ADDRESS;
    if target == 0 {
        return None;
    }
    // SAFETY: the link held it, and the swap gave it to us alone.
    let target = unsafe { object::at::<T>(target) };
    if counts(old) != 0 {
        // SAFETY: alive: ours now. Relaxed: ordered by the swap and the fence.
        unsafe { object::count(target) }.fetch_add(counts(old) as isize, Ordering::Relaxed);
    }
    slots::after_unlink();
    // SAFETY: unlinked by our swap, counts moved, fenced.
    Some(unsafe { Unlinked::new(target) })
}
