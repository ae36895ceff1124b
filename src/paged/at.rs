//! A paged variable as of a store snapshot's clock value: the read side of the
//! [chain](super::book) that writers keep while store snapshots are in progress.

use std::ptr::NonNull;

use super::{Inner, OwnedPagedSnapshot};
use crate::sync::{epoch, read_for_update, Ordering};
use crate::Element;

/// What a store snapshot finds on a paged variable.
pub(crate) enum TableAt<A: Element> {
    /// The table it shows, counted.
    Table(OwnedPagedSnapshot<A>),
    /// The variable was created after the snapshot's clock value.
    NotYetCreated,
    /// The table it needs was unlinked: a broken invariant (writers keep it linked while the
    /// snapshot is registered in the horizon).
    Unlinked,
}

impl<A: Element> Inner<A> {
    /// The newest table committed at or before `at`, found by walking the links writers keep
    /// while a store snapshot is in progress: at most one step per snapshot that ticked the
    /// clock since `at`, whatever writers do meanwhile.
    pub(crate) fn table_at(&self, at: u64, _guard: &epoch::Guard) -> TableAt<A> {
        // AcqRel: a read-modify-write, which the writers' swap of the head reads from or
        // follows: the store-buffering argument of `Head::newest_for_snapshot`.
        let mut raw = read_for_update(&self.head, Ordering::AcqRel);
        loop {
            let table = NonNull::new(raw).expect("a head and its links are never null");
            // SAFETY: reached from the head, or through the link of a table we stood on, while
            // `_guard` is pinned. The head's count and a cut link's are released only after
            // every walker pinned before the swap or the cut has unpinned (the book's grace
            // clock); a link of a table stays until that table is uncounted, which it is not
            // while we stand on it: by induction along the walk, the table's count is above
            // zero.
            let t = unsafe { table.as_ref() };
            t.handoff.look(); // under loom: the table was not reused while we stand on it
            if t.record.visible_at(at) {
                // SAFETY: as above.
                return TableAt::Table(unsafe { OwnedPagedSnapshot::count(table) });
            }
            if t.number == 0 {
                return TableAt::NotYetCreated;
            }
            // Acquire: not needed for the value (a link is set before its table is published,
            // and later only cut to null or, by `Ledger::settle`, moved to an older table this
            // walk would reach through the old one), but it keeps the walk's reasoning local
            // to each step; free on x86.
            raw = t.prev.load(Ordering::Acquire);
            if raw.is_null() {
                return TableAt::Unlinked;
            }
        }
    }
}
