//! How a paged variable's head is read, replaced by the next table and given up: what its
//! plain writes, combined passes and section commits share.

use std::ptr::NonNull;
use std::sync::Arc;

use super::book;
use super::{Inner, PagedSnapshot, PagedTable};
use crate::combine::Publish;
use crate::help::Helpers;
use crate::holds;
use crate::kernel::Delta;
use crate::pool::free_orphans;
use crate::record::CommitRecord;
use crate::sync::{epoch, Ordering};
use crate::Element;

impl<A: Element> Inner<A> {
    /// The current value (see [`PagedVariable::read`](super::PagedVariable::read)): the
    /// head, or while a section's commit has it pending, the table before.
    pub(crate) fn read(&self) -> PagedSnapshot<A> {
        let guard = epoch::pin();
        // Acquire: pairs with the swap (Release) that published the table and its pages.
        let mut table = self.head.load(Ordering::Acquire);
        // SAFETY: the head is counted, and its count is released after our pin.
        let t = unsafe { &*table };
        if !t.record.is_committed() {
            // Acquire: pairs with the head swap's Release (the link to the table before), and
            // with the Release of `settle` or a cut, which change the link only after the
            // commit: having read such a change, we see the commit when we look again.
            let prev = t.prev.load(Ordering::Acquire);
            if !prev.is_null() && !t.record.is_committed() {
                table = prev;
            }
        }
        // SAFETY (of what `new` dereferences): a link's count is released after the book's
        // grace clock has passed every thread pinned at its cut, ours included.
        PagedSnapshot::new(NonNull::new(table).expect("a head"), guard)
    }

    /// Builds the next table from the head with `deltas`, in order, and publishes it:
    /// committed now (`record` of `None`: the table is stamped with the clock) or pending
    /// with a section's record, which the caller commits and then calls
    /// [`settled`](Self::settled). Returns the new version number.
    ///
    /// # Safety
    /// The caller holds the right to write ([`access`](Self::access), or the ticket and
    /// [`access_with_ticket`](Self::access_with_ticket)).
    pub(crate) unsafe fn write(
        &self,
        deltas: &[Delta<'_, A>],
        record: Option<&Arc<CommitRecord>>,
    ) -> u64 {
        // SAFETY: the caller holds the book's lock, and the book is alive while the variable
        // is.
        let book = unsafe { (*self.book).ledger() };
        book.reclaim();
        // Relaxed: only holders of the lock store the head, and the lock ordered the last
        // holder's store before us.
        let old = self.head.load(Ordering::Relaxed);
        // SAFETY: `old` is the head and we hold the lock.
        let new = unsafe { book.build(old, deltas) };
        match record {
            // SAFETY: `new` is ours until published, `old` the head, and we hold the lock.
            None => unsafe { book.link(new, old) },
            // SAFETY: as above.
            Some(record) => unsafe { book.link_pending(new, old, record) },
        }
        // SAFETY: ours until published, and immutable after.
        let version = unsafe { &*new }.number;
        // AcqRel: Release publishes the new table, its nodes and pages, to readers' Acquire
        // loads. A read-modify-write, as a dense install's CAS, for store snapshots, which
        // read the head with one (`Head::newest_for_snapshot` says why).
        self.head.swap(new, Ordering::AcqRel);
        book.retire_head(&epoch::pin());
        free_orphans();
        // Tables (or versions) whose last count met a snapshot's hold: a program that only
        // writes paged variables must look again too.
        holds::recheck();
        version
    }

    /// After the record of the pending head (a section's) committed: keeps of its link only
    /// what store snapshots in progress need.
    ///
    /// # Safety
    /// As for [`write`](Self::write); the head is the table `write` installed pending, and
    /// its record is committed.
    pub(crate) unsafe fn settled(&self) {
        // SAFETY: the caller's contract.
        let book = unsafe { (*self.book).ledger() };
        // Relaxed: as in `write`.
        let head = self.head.load(Ordering::Relaxed);
        // SAFETY: the head, which we hold the right to write.
        unsafe { book.settle(head) };
    }
}

impl<A: Element> Publish<A> for Inner<A> {
    /// Paged passes are not split for helpers (yet): a sparse write touches a few pages.
    /// The flag's holder is never inside an execution (those write alone), so `access`
    /// cannot fail.
    fn publish(&self, deltas: &[Delta<'_, A>], _: &Helpers, _: &dyn Fn()) -> Option<u64> {
        let _access = self.access().ok()?;
        // SAFETY: we hold the access.
        Some(unsafe { self.write(deltas, None) })
    }
}

/// Releases a count of a table once every thread pinned now has unpinned: for the counts the
/// book still holds when the variable is dropped, the head's and links' (while it lives, the
/// book's grace clock does it: [`Ledger::retire_head`](book::Ledger::retire_head)).
fn retire<A: Element>(table: *mut PagedTable<A>) {
    struct Retired<A: Element>(*mut PagedTable<A>);
    // SAFETY: the count it carries is released on whichever thread runs it; the release is
    // an atomic decrement (and at most an orphan push).
    unsafe impl<A: Element> Send for Retired<A> {}
    let retired = Retired(table);
    let guard = epoch::pin();
    guard.defer(move || {
        let retired = retired;
        // SAFETY: a count the book held (the head's, or a link's), given up once no pinned
        // reader or walker can still see the table.
        unsafe { book::release(retired.0) }
    });
    guard.flush();
}

impl<A: Element> Drop for Inner<A> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no writer is left, and the book is alive while we hold it.
        let ledger = unsafe { (*self.book).ledger() };
        ledger.take_head_counts().for_each(retire);
        ledger.take_links().into_iter().for_each(retire);
        // Relaxed: `&mut self`; no writer is left.
        retire(self.head.load(Ordering::Relaxed));
        // SAFETY: the variable's own hold on its book, given up once.
        unsafe { book::let_go(self.book) };
        free_orphans();
    }
}
