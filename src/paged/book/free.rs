//! What gives a book's pieces back: a page, a node, a tree; the counts of tables and the
//! book's holders, the last of which hands the book to the orphan list; and the ledger's
//! drop, which frees everything once no table is counted.

use std::ptr;

use super::{Book, Ledger, Piece};
use crate::holds::{self, Held};
use crate::paged::layout::{Entry, Node, Page};
use crate::paged::table::PagedTable;
use crate::pool::{orphan, Link};
use crate::sync::Ordering;
use crate::Element;

impl<A: Element> Ledger<A> {
    /// # Safety
    /// `page` came from [`page`](Self::page) and is ours alone.
    pub(super) unsafe fn free_page(&self, page: Page<A>) {
        // Relaxed: a statistic.
        self.pages.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: the caller's contract: a leaked `Box<[A]>` of `page_len` elements.
        drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(page, self.layout.page_len)) });
    }

    /// Frees `entry` (null: nothing) and everything under it: a node with `levels` levels of
    /// nodes under it counting itself, or a page when `levels` is 0.
    ///
    /// # Safety
    /// Everything under `entry` is ours alone, and reachable from nowhere else.
    unsafe fn free_tree(&self, entry: Entry, levels: u32) {
        if entry.is_null() {
            return; // past the last page
        }
        if levels == 0 {
            // SAFETY: the caller's contract; a lowest-level entry is a page.
            return unsafe { self.free_page(entry.cast()) };
        }
        let node = entry.cast::<Entry>();
        for i in 0..self.layout.fanout {
            // SAFETY: the caller's contract, for each child of a node we own.
            unsafe { self.free_tree(*node.add(i), levels - 1) };
        }
        // SAFETY: as above; its children are freed.
        unsafe { free_node(node, self.layout.fanout) };
    }
}

/// # Safety
/// `node` came from [`Ledger::node`] of a layout of `fanout`, and is ours alone.
pub(super) unsafe fn free_node(node: Node, fanout: usize) {
    // SAFETY: the caller's contract: a leaked `Box<[Entry]>` of `fanout` entries.
    drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(node, fanout)) });
}

/// Drops one count of `table`; the last one goes back to the writer (which reuses the table
/// once it sees the count at zero), unless a [`PagedSnapshot`](crate::PagedSnapshot) holds
/// the table: then the count stays, on the held list ([`holds`]). The last count of the last
/// table of a dropped variable hands its book to the orphan list. Never frees anything itself.
///
/// # Safety
/// The caller owns one count of `table`, and gives it up.
pub(crate) unsafe fn release<A: Element>(table: *const PagedTable<A>) {
    // SAFETY: the caller's contract.
    unsafe { release_with(table, None) }
}

/// [`release`], checking holds against `held` if given (read after the table became
/// unreachable: the held list's recheck).
///
/// # Safety
/// As for [`release`]; and `held`, if given, was read after the table became unreachable.
pub(crate) unsafe fn release_with<A: Element>(table: *const PagedTable<A>, held: Option<&Held>) {
    // Read before the decrement: once the count is zero the writer may reuse the table. The
    // book outlives this call: our count keeps it among the book's holders until below.
    // SAFETY: our count keeps the table alive until the decrement.
    let (book, refs) = unsafe { ((*table).book, &(*table).refs) };
    // Looks at the holds before the count reaches zero, as a dense version's release does;
    // its final compare-and-swap is AcqRel: our reads of the table happen-before the writer
    // that sees zero reuses it, and every other holder's before whoever frees the book
    // after our `let_go` (with a fence instead, ThreadSanitizer reported a page read by a
    // dropped owned snapshot as racing with the book's free). Not a later load of `refs`:
    // once it is zero the writer may reuse the table and store a new count, which would not
    // carry the holders' Release.
    // SAFETY: the caller's count; a table's first field is its `Link` (`repr(C)`).
    if !unsafe { holds::release_count(refs, table.cast(), held) } {
        return; // other counts remain, or the last waits on the held list
    }
    // SAFETY: `book` is alive while it counts this table among its holders.
    unsafe { let_go(book) };
}

/// The held list's release of a table ([`Link::release`]).
///
/// # Safety
/// `link` is a `PagedTable<A>`'s, whose count the caller owns and gives up; `held` was read
/// after the table became unreachable.
pub(super) unsafe fn release_link<A: Element>(link: *mut Link, held: &Held) {
    // SAFETY: the caller's contract; `link` is the table's first field (`repr(C)`).
    unsafe { release_with(link.cast_const().cast::<PagedTable<A>>(), Some(held)) }
}

/// Drops one of the book's holders; the last hands the book to the orphan list.
///
/// # Safety
/// The caller is one of the book's holders, and stops being one.
pub(crate) unsafe fn let_go<A: Element>(book: *const Book<A>) {
    // Release: our use of the book happens-before whoever frees it.
    // SAFETY: a holder keeps the book alive.
    let holders = &unsafe { &*book }.holders;
    if holders.fetch_sub(1, Ordering::Release) == 1 {
        // Acquire: pairs with every other holder's Release decrement (a load, which
        // ThreadSanitizer sees, rather than a fence).
        holders.load(Ordering::Acquire);
        // SAFETY: the last holder: the book is ours, and its `link` is its first field.
        unsafe { orphan(book.cast_mut().cast::<Link>()) };
    }
}

impl<A: Element> Drop for Ledger<A> {
    /// Runs once no table is counted: frees every table, node and page (each is in exactly
    /// one place: reachable from the newest table, in an entry's `last_used`, or spare).
    fn drop(&mut self) {
        if let Some(head) = self.tables.back() {
            // SAFETY: kept tables are alive.
            let head = unsafe { &*head.table };
            for &entry in head.root.iter() {
                // SAFETY: reachable from the newest table, so in no other place.
                unsafe { self.free_tree(entry, self.layout.levels) };
            }
        }
        for kept in std::mem::take(&mut self.tables) {
            for piece in kept.last_used {
                match piece {
                    // SAFETY: in one `last_used` only.
                    Piece::Page(page, _) => unsafe { self.free_page(page) },
                    // SAFETY: as above.
                    Piece::Node(node, ..) => unsafe { free_node(node, self.layout.fanout) },
                }
            }
            // SAFETY: a kept table came from `Box::into_raw`.
            let table = unsafe { Box::from_raw(kept.table) };
            // Under loom: every holder's last look at the table (and its pages) happened
            // before this free (`release`'s AcqRel; `loom_paged_release`).
            table.handoff.touch();
        }
        for page in std::mem::take(&mut self.spare_pages) {
            // SAFETY: spare: ours alone.
            unsafe { self.free_page(page) };
        }
        for node in self.spare_nodes.drain(..) {
            // SAFETY: as above.
            unsafe { free_node(node, self.layout.fanout) };
        }
    }
}
