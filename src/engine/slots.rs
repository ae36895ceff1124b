//! Hazard slots: how a reader protects one object with a store to its own cache line, and how
//! a writer learns which objects are protected.
//!
//! **The pairing.** A reader stores the candidate into a free slot of its node, fences, and
//! reads the source again ([`protect`]); a writer unlinks an object from its source, fences
//! ([`after_unlink`]), and reads the slots ([`held`]). Both fences are SeqCst, so one of them
//! comes first in their single total order: if the writer's does, the reader's second read
//! sees the unlink (or something later) and the reader does not use its slot; if the reader's
//! does, the writer's scan sees the slot (or a later store of it). So a writer that finds no
//! slot holding an unlinked object knows no reader can start using it. (The stores and loads
//! themselves are Release and Acquire; the fences carry the store-load order, which loom checks
//! for fences and not for SeqCst accesses.)
//!
//! **Clearing.** A guard's drop stores null with Release, and a scan loads with Acquire: a scan
//! that sees the clear (or any later store to the slot, each a Release) sees every read the
//! guard's holder made of its object, so the object's reuse comes after them.

use std::marker::PhantomData;
use std::ptr;

use super::domain::Domain;
use crate::sync::{fence, AtomicPtr, Ordering};

/// One taken slot of this thread's node; cleared on drop. Not `Send`: the slot belongs to the
/// thread that took it.
pub(crate) struct Slot<'d> {
    slot: &'d AtomicPtr<()>,
    _thread: PhantomData<*const ()>,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        // Release: our reads of the object happen-before a scan that sees the slot empty.
        self.slot.store(ptr::null_mut(), Ordering::Release);
    }
}

/// Protects `candidate` in a free slot of this thread's node in `domain`, then asks `still`
/// whether the source still shows it. `Some` only if it does (the object is then protected
/// until the slot drops); `None` if it did not, if every slot is taken, or if the thread is
/// exiting.
#[inline]
pub(crate) fn protect<'d>(
    domain: &'d Domain,
    candidate: *mut (),
    still: impl FnOnce() -> bool,
) -> Option<Slot<'d>> {
    let node = domain.node()?;
    let slot = node
        .slots
        .iter()
        // Relaxed: only this thread writes its own slots.
        .find(|slot| slot.load(Ordering::Relaxed).is_null())?;
    // Release: a scan that reads this store instead of the clear before it must still see
    // what the slot's last holder did (a later plain store does not carry an earlier store's
    // Release: release sequences are read-modify-writes only).
    slot.store(candidate, Ordering::Release);
    fence(Ordering::SeqCst);
    if still() {
        return Some(Slot {
            slot,
            _thread: PhantomData,
        });
    }
    // Relaxed: the fence before it is a release fence, so a scan that reads this clear still
    // sees what the slot's last holder did; the candidate itself was never used.
    slot.store(ptr::null_mut(), Ordering::Relaxed);
    None
}

/// The writer's half of the pairing: between the compare-and-swap that unlinked an object and
/// the scan of the slots.
#[inline]
pub(crate) fn after_unlink() {
    fence(Ordering::SeqCst);
}

/// Which of `candidates` (at most 64) some slot of `domain` holds: bit `i` for `candidates[i]`.
/// One pass over every slot of every node.
pub(crate) fn held<P>(domain: &Domain, candidates: &[*const P]) -> u64 {
    debug_assert!(candidates.len() <= 64, "a batch is at most 64 objects");
    let mut held = 0;
    for node in domain.nodes() {
        for slot in &node.slots {
            // Acquire: pairs with the Release of whichever store we read (see the module docs).
            let protected = slot.load(Ordering::Acquire).cast_const();
            if protected.is_null() {
                continue;
            }
            for (i, &candidate) in candidates.iter().enumerate() {
                if candidate.cast::<()>() == protected {
                    held |= 1 << i;
                }
            }
        }
    }
    held
}

/// Whether some slot of `domain` holds `candidate`.
pub(crate) fn holds<P>(domain: &Domain, candidate: *const P) -> bool {
    held(domain, &[candidate]) != 0
}
