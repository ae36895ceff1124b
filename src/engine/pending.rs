//! Pending objects on a home: a critical section's install, the read that sees past it, and
//! the release of what it replaced once it commits.
//!
//! The engine does not know what "committed" means (the commit record lives in the object's
//! value): [`Home::read_visible`] asks the caller, and the caller releases a link only once its
//! object is committed. A writer never publishes over a pending object: it helps it commit
//! first and releases its link ([`Home::release_prev`]); an object unlinked with its link still
//! set has it emptied when it is found free ([`link`]).

use std::ptr::NonNull;

use super::link;
use super::object::{self, Object, Owned};
use super::retire::Home;
use super::word::{Base, Read};
use crate::sync::Ordering;

/// A pending object as its installer keeps it: counted, so that it outlives its replacement
/// on the head word until the installer has released its link.
#[must_use = "release the link once the object commits"]
pub(crate) struct Installed<'a, T> {
    object: NonNull<Object<T>>,
    home: &'a Home<T>,
}

/// Something that keeps an object of a home from reuse: a read, a base, an install.
pub(crate) trait Protects<T> {
    /// The protected object.
    fn protected(&self) -> NonNull<Object<T>>;
}

impl<T> Protects<T> for Read<'_, T> {
    fn protected(&self) -> NonNull<Object<T>> {
        self.object()
    }
}

impl<T> Protects<T> for Base<'_, T> {
    fn protected(&self) -> NonNull<Object<T>> {
        self.object()
    }
}

impl<T> Protects<T> for Installed<'_, T> {
    fn protected(&self) -> NonNull<Object<T>> {
        self.object
    }
}

impl<T> Home<T> {
    /// Publishes `new` *pending* in place of `base`'s object: readers that
    /// [`read_visible`](Self::read_visible) and find it not yet visible see the replaced object
    /// through `new`'s link, which owns its retirement from now on. `new` comes back if the
    /// word changed (as for [`publish`](Self::publish)).
    pub(crate) fn install(
        &self,
        base: Base<'_, T>,
        new: Owned<T>,
    ) -> Result<Installed<'_, T>, Owned<T>> {
        let object = new.object();
        // SAFETY: `new` is ours and unpublished; a spare's link is empty (emptied when it was
        // found free) and a fresh object's too.
        unsafe { link::set(object, base.object()) };
        // The installer's count, taken while the object is ours. Relaxed: published with it.
        // SAFETY: alive: ours.
        unsafe { object::count(object) }.fetch_add(1, Ordering::Relaxed);
        match self.word().replace(base, new) {
            Ok(replaced) => {
                // Not retired: the link owns it now.
                let _ = replaced.into_raw();
                Ok(Installed { object, home: self })
            }
            Err(new) => {
                // SAFETY: unpublished, ours again: undo the link and the count.
                unsafe { link::clear(object) };
                // SAFETY: as above. Relaxed: not shared.
                unsafe { object::count(object) }.fetch_sub(1, Ordering::Relaxed);
                Err(new)
            }
        }
    }

    /// The newest object `visible` accepts: the head, or, while the head is pending (not
    /// `visible`) and its link still set, the object it replaced. Wait-free: a read of the head
    /// word and at most one of the link, each a slot or a count.
    #[inline]
    pub(crate) fn read_visible(&self, visible: impl FnOnce(&T) -> bool) -> Read<'_, T> {
        let newest = self.read();
        if visible(&newest) {
            return newest;
        }
        // SAFETY: `newest` protects its object for the call; the link's object is ours, and
        // our domain is the one our writers scan.
        match unsafe { link::read(newest.protected(), self.domain()) } {
            Some(replaced) => replaced,
            // Emptied: the head has committed (the link's Acquire shows the commit).
            None => newest,
        }
    }

    /// Once `of`'s object is committed: empties its link and retires what it held. Idempotent,
    /// and safe to race: exactly one caller retires the replaced object.
    pub(crate) fn release_prev(&self, of: &impl Protects<T>) {
        // SAFETY: `of` protects the object for the call; the caller says it is committed.
        if let Some(replaced) = unsafe { link::release(of.protected()) } {
            self.retire(replaced);
        }
    }
}

impl<T> Installed<'_, T> {
    /// The installed value.
    pub(crate) fn get(&self) -> &T {
        // SAFETY: our count keeps it from reuse, and nobody writes a published value.
        unsafe { object::value(self.object) }
    }

    /// Releases the link of the object, now committed, and lets it go.
    pub(crate) fn committed(self) {
        self.home.release_prev(&self);
    }
}

impl<T> Drop for Installed<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the installer's count; the home we borrow keeps the variable alive.
        unsafe { object::release(self.object) };
    }
}
