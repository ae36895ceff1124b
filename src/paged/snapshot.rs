//! Immutable views of one paged version: [`PagedSnapshot`] (held in a slot of its thread)
//! and [`OwnedPagedSnapshot`] (counted: `Send`, `Sync`, cloneable). Both dereference to [`PagedTable`].

use std::fmt;
use std::ops::Deref;
use std::ptr::NonNull;

use super::book;
use super::table::PagedTable;
use crate::holds::{self, Hold};
use crate::sync::{epoch, Ordering};
use crate::Element;

/// A wait-free view of one version of a [`PagedVariable`](crate::PagedVariable), from
/// [`read`](crate::PagedVariable::read). It never changes, whatever writers do; it
/// dereferences to [`PagedTable`] (`row`, `gather`, `rows`, `to_array`).
///
/// As with [`Snapshot`](crate::Snapshot), it keeps its version in one of its thread's hold
/// slots, not by a pin: held across a trainer's step, it keeps its own table (and the pages
/// writes replace meanwhile) and nothing any other variable retires. A thread holding more
/// snapshots at once than it has slots (eight) counts the rest on their tables, as
/// [`to_owned_snapshot`](Self::to_owned_snapshot) does. Neither `Send` nor `Sync` (its
/// `NonNull` sees to that, whether it holds or counts): the slot belongs to its thread; an
/// [`OwnedPagedSnapshot`] is both.
///
/// ```compile_fail
/// let v = mvtensor::PagedVariable::new(ndarray::Array2::<f32>::zeros((2, 2))).unwrap();
/// let snapshot = v.read();
/// std::thread::spawn(move || snapshot.version()); // a hold cannot cross threads
/// ```
#[must_use = "a snapshot keeps its version until it is dropped"]
pub struct PagedSnapshot<A: Element> {
    table: NonNull<PagedTable<A>>,
    /// This thread's slot that holds the table, cleared as it drops; `None`: we own a count.
    hold: Option<Hold>,
}

impl<A: Element> PagedSnapshot<A> {
    /// Keeps `table`, loaded from a variable's head (or its pending `prev`) while `guard`
    /// was pinned, in a hold slot of this thread or by a count; the pin then goes.
    pub(crate) fn new(table: NonNull<PagedTable<A>>, guard: epoch::Guard) -> Self {
        // SAFETY: reachable from the head while `guard` is pinned.
        let t = unsafe { table.as_ref() };
        t.handoff.look();
        let hold = holds::hold(table.as_ptr().cast_const().cast());
        if hold.is_none() {
            // Relaxed: reachable while we are pinned, so counted until we unpin; a new count
            // only has to exist.
            t.refs.fetch_add(1, Ordering::Relaxed);
        }
        drop(guard);
        Self { table, hold }
    }

    /// The same version, held by a count instead of a slot: `Send`, `Sync`, and kept for as
    /// long as it lives without holding back the reuse of any other version.
    pub fn to_owned_snapshot(&self) -> OwnedPagedSnapshot<A> {
        // SAFETY: we keep the table (a hold or a count).
        unsafe { OwnedPagedSnapshot::count(self.table) }
    }
}

impl<A: Element> Drop for PagedSnapshot<A> {
    fn drop(&mut self) {
        // Our last use of the pages, ordered before any reuse (the hold's clearing Release,
        // or the count's).
        self.handoff.look();
        if self.hold.is_none() {
            // SAFETY: the count `new` took, given up once.
            unsafe { book::release(self.table.as_ptr()) };
        }
        // A hold clears its slot as `hold` drops, after this.
    }
}

impl<A: Element> Deref for PagedSnapshot<A> {
    type Target = PagedTable<A>;
    fn deref(&self) -> &PagedTable<A> {
        // SAFETY: the table was reachable from its variable while we were pinned, and its
        // last count, released after that pin, met our hold (the release then keeps it on
        // the held list) or is ours (`hold` of `None`): it lives, unchanged, until we drop.
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
    /// (see `TableAt`'s walk): so the count is above zero until the caller unpins. Or the
    /// caller keeps the table (a [`PagedSnapshot`]'s hold or count): a held table's last
    /// count waits on the held list, and the release that would take it to zero looks at
    /// the holds first and fails its compare-and-swap if this count came in between.
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
