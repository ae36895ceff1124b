//! Immutable views of one paged version: [`PagedSnapshot`] (pinned, for short reads) and
//! [`OwnedPagedSnapshot`] (counted, for long ones). Both dereference to [`PagedTable`].

use std::fmt;
use std::ops::Deref;
use std::ptr::NonNull;

use super::book;
use super::table::PagedTable;
use crate::sync::{epoch, Ordering};
use crate::Element;

/// A short-lived, wait-free view of one version of a [`PagedVariable`](crate::PagedVariable),
/// from [`read`](crate::PagedVariable::read). It never changes, whatever writers do; it
/// dereferences to [`PagedTable`] (`row`, `gather`, `rows`, `to_array`).
///
/// As with [`Snapshot`](crate::Snapshot), the thread stays pinned while it lives, which
/// delays the reuse of every version retired meanwhile: keep it for a read, and use
/// [`to_owned_snapshot`](Self::to_owned_snapshot) or
/// [`read_owned`](crate::PagedVariable::read_owned) for anything longer. Neither `Send`
/// nor `Sync`: the pin belongs to its thread.
#[must_use = "a snapshot only pins the epoch until it is dropped"]
pub struct PagedSnapshot<A: Element> {
    table: NonNull<PagedTable<A>>,
    _guard: epoch::Guard,
}

impl<A: Element> PagedSnapshot<A> {
    /// Wraps the table loaded from a variable's head while `guard` was pinned.
    pub(crate) fn new(table: NonNull<PagedTable<A>>, guard: epoch::Guard) -> Self {
        // SAFETY: reachable from the head while `guard` is pinned (see `deref`).
        unsafe { table.as_ref() }.handoff.look();
        Self {
            table,
            _guard: guard,
        }
    }

    /// The same version, held by a count instead of a pin: `Send`, `Sync`, and kept for as
    /// long as it lives without holding back the reuse of any other version.
    pub fn to_owned_snapshot(&self) -> OwnedPagedSnapshot<A> {
        // SAFETY: reachable from the head while our pin lives.
        unsafe { OwnedPagedSnapshot::count(self.table) }
    }
}

impl<A: Element> Deref for PagedSnapshot<A> {
    type Target = PagedTable<A>;
    fn deref(&self) -> &PagedTable<A> {
        // SAFETY: the table was reachable from its variable while `_guard` was pinned; its
        // head count is released through the epoch, so it lives until after we unpin.
        unsafe { self.table.as_ref() }
    }
}

impl<A: Element> fmt::Debug for PagedSnapshot<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// A counted view of one paged version, from
/// [`read_owned`](crate::PagedVariable::read_owned): `Send + Sync`, cheap to clone, and it
/// outlives its variable if need be. The version and the pages it reaches are kept until the
/// last clone is dropped, and nothing newer versions made (see the memory bound in
/// [`PagedVariable`](crate::PagedVariable)).
pub struct OwnedPagedSnapshot<A: Element> {
    table: NonNull<PagedTable<A>>,
}

// SAFETY: the table is immutable while counted, and its count is atomic.
unsafe impl<A: Element> Send for OwnedPagedSnapshot<A> {}
// SAFETY: as above.
unsafe impl<A: Element> Sync for OwnedPagedSnapshot<A> {}

impl<A: Element> OwnedPagedSnapshot<A> {
    /// Takes a count of `table`.
    ///
    /// # Safety
    /// The caller is pinned, and reached `table` from its variable's head, or through the link
    /// of a table whose count stays above zero while the caller stands on it, while pinned
    /// (see `TableAt`'s walk): so the count is above zero until the caller unpins.
    pub(crate) unsafe fn count(table: NonNull<PagedTable<A>>) -> Self {
        // SAFETY: the caller's contract.
        let t = unsafe { table.as_ref() };
        t.handoff.look();
        // Relaxed: the count is above zero (the contract), so this one only has to exist,
        // not publish anything.
        t.refs.fetch_add(1, Ordering::Relaxed);
        Self { table }
    }
}

impl<A: Element> Deref for OwnedPagedSnapshot<A> {
    type Target = PagedTable<A>;
    fn deref(&self) -> &PagedTable<A> {
        // SAFETY: our count keeps the table (and its book) alive and unchanged.
        unsafe { self.table.as_ref() }
    }
}

impl<A: Element> Clone for OwnedPagedSnapshot<A> {
    fn clone(&self) -> Self {
        // Relaxed: we hold a count, so it is above zero; a new count publishes nothing.
        self.refs.fetch_add(1, Ordering::Relaxed);
        Self { table: self.table }
    }
}

impl<A: Element> Drop for OwnedPagedSnapshot<A> {
    fn drop(&mut self) {
        // Our last use of the pages, ordered before any reuse or free.
        self.handoff.look();
        // SAFETY: we own one count and give it up.
        unsafe { book::release(self.table.as_ptr()) };
    }
}

impl<A: Element> fmt::Debug for OwnedPagedSnapshot<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}
