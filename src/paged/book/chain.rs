//! The chain of older tables that store snapshots in progress may need: a paged variable's
//! side of the [horizon](crate::horizon) protocol, as [`Version::release_prev`] is a dense
//! variable's.
//!
//! A store snapshot at clock value `S` needs, from every variable, the newest version committed
//! at or before `S`, however many writes land while it walks the store. A paged write is
//! stamped with the clock it read before publishing (a write of one variable commits as it is
//! installed, like a dense one), then reads the horizon. With no snapshot in progress the new
//! table links to nothing. Otherwise its `prev` takes a count of the newest older table
//! committed *before* its own timestamp (tables committed at the same timestamp are skipped: no
//! snapshot ticked between them), and every link below the table the oldest snapshot in
//! progress needs is cut. So the chain is at most one table longer than the number of snapshots
//! that ticked since the oldest one in progress, and empty again after the first write once
//! none is.
//!
//! Only the combiner flag's holder links or cuts; snapshots only walk, pinned. So a cut link's
//! count is released once the book's grace clock says every walker pinned at the cut has
//! unpinned, and a table nobody counts any more gives its own link up at the writer's next
//! reclaim (a walker could only reach it through a counted link). Since the book reuses tables
//! oldest first, a link holds every newer table's replaced pages too, as an owned snapshot
//! does: a few writes' worth, while a snapshot is in progress.

use std::ptr;

use super::super::table::PagedTable;
use super::{release, Ledger};
use crate::horizon::{self, Oldest};
use crate::sync::{clock, Ordering};
use crate::Element;

impl<A: Element> Ledger<A> {
    /// Stamps `new` (built on `old`, the head) with its commit timestamp and links it to what
    /// the store snapshots in progress need. Call right before publishing it.
    ///
    /// # Safety
    /// `new` is unpublished and ours; `old` is the head; the caller holds the combiner flag.
    pub(crate) unsafe fn link(&mut self, new: *mut PagedTable<A>, old: *mut PagedTable<A>) {
        // SAFETY: the caller's contract.
        let new = unsafe { &mut *new };
        // Acquire: as in `CommitRecord::committed_now`: the tick of every snapshot whose
        // value we read past publishes its registration in the horizon, read next.
        new.timestamp = clock().load(Ordering::Acquire);
        // After the clock read: see the `horizon` module docs.
        let oldest = horizon::oldest();
        let needed = match oldest {
            Oldest::Nobody => return,
            Oldest::At(o) if new.timestamp <= o => return, // every snapshot needs it or newer
            _ => self.linked_below(old, new.timestamp),
        };
        let Some(link) = needed else { return };
        // Relaxed: we reached `link` through a counted link that only we can cut, so its count
        // is above zero; the new count publishes nothing (the head's swap publishes `prev`).
        link.refs.fetch_add(1, Ordering::Relaxed);
        // Relaxed: published by the head's swap (Release).
        new.prev
            .store(ptr::from_ref(link).cast_mut(), Ordering::Relaxed);
        self.linked += 1;
        if let Oldest::At(o) = oldest {
            // Every snapshot in progress needs the first table at or below `o`, or a newer one.
            let mut table = link;
            while table.timestamp > o {
                match self.prev(table) {
                    Some(older) => table = older,
                    None => return,
                }
            }
            self.cut(table);
        }
    }

    /// The newest table at or below `table` committed before `timestamp`.
    fn linked_below<'t>(
        &self,
        old: *mut PagedTable<A>,
        timestamp: u64,
    ) -> Option<&'t PagedTable<A>> {
        // SAFETY: the head is counted, so alive.
        let mut table = unsafe { &*old };
        while table.timestamp >= timestamp {
            table = self.prev(table)?;
        }
        Some(table)
    }

    /// `table`'s link, if any.
    fn prev<'t>(&self, table: &'t PagedTable<A>) -> Option<&'t PagedTable<A>> {
        // Relaxed: only flag holders set links, and the flag orders the last holder's stores
        // before us.
        let prev = table.prev.load(Ordering::Relaxed);
        // SAFETY: a link holds a count of the table it points to.
        (!prev.is_null()).then(|| unsafe { &*prev })
    }

    /// Unlinks everything below `table`; the link's count is released once the book's grace
    /// clock has passed the walkers that may be on it.
    fn cut(&mut self, table: &PagedTable<A>) {
        // Relaxed: a walker that still loads the old link is covered by the grace period; the
        // null publishes nothing.
        let prev = table.prev.swap(ptr::null_mut(), Ordering::Relaxed);
        if !prev.is_null() {
            self.linked -= 1;
            // SAFETY: the book outlives its ledger.
            let point = unsafe { &*self.book }.clock.seal_point();
            self.cut.push((prev, point));
        }
    }

    /// At the start of a write: releases the cut links whose grace period is over, and the
    /// links of tables nobody counts any more (nobody can walk them: a walker reaches a table
    /// only through a counted link, and a link's count is released after its walkers).
    pub(crate) fn release_links(&mut self) {
        if self.cut.is_empty() && self.linked == 0 {
            return;
        }
        // SAFETY: the book outlives its ledger.
        let clock = &unsafe { &*self.book }.clock;
        self.cut.retain(|&(table, point)| {
            let over = clock.passed(point);
            if over {
                // SAFETY: the cut link's count, given up after its grace period.
                unsafe { release(table) };
            }
            !over
        });
        // Newest first: a released link may leave an older table uncounted in turn.
        for kept in self.tables.iter().rev() {
            if self.linked == 0 {
                break;
            }
            // SAFETY: kept tables are alive (the book owns them).
            let table = unsafe { &*kept.table };
            // Acquire: pairs with the Release decrement of its last holder.
            if table.refs.load(Ordering::Acquire) == 0 {
                // Relaxed: nobody else can reach the table now.
                let prev = table.prev.swap(ptr::null_mut(), Ordering::Relaxed);
                if !prev.is_null() {
                    self.linked -= 1;
                    // SAFETY: the link's count, ours to give up.
                    unsafe { release(prev) };
                }
            }
        }
    }

    /// When the variable is dropped: every link and cut link still counted, to be released
    /// after the epoch's grace period (`retire`).
    pub(crate) fn take_links(&mut self) -> Vec<*mut PagedTable<A>> {
        let mut links: Vec<_> = self.cut.drain(..).map(|(table, _)| table).collect();
        for kept in &self.tables {
            // SAFETY: kept tables are alive.
            // Relaxed: `&mut` on the ledger of a dropped variable: no writer, no walker.
            let prev = unsafe { &*kept.table }
                .prev
                .swap(ptr::null_mut(), Ordering::Relaxed);
            if !prev.is_null() {
                links.push(prev);
            }
        }
        self.linked = 0;
        links
    }
}
