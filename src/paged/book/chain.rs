//! The chain of older tables that store snapshots in progress may need: a paged variable's
//! side of [the horizon protocol](crate::horizon), as `Version::release_prev` is a dense
//! variable's.
//!
//! A store snapshot at clock value `S` needs, from every variable, the newest version committed
//! at or before `S`, however many writes land while it walks the store. A paged write is
//! stamped with the clock it read before publishing (a write of one variable commits as it is
//! installed, like a dense one), then reads the horizon. If no snapshot in progress can need
//! anything older than the new table (none is in progress, or the oldest one's clock value is
//! at or past the new table's timestamp), the new table links to nothing and every link left
//! from earlier writes is cut. Otherwise its `prev` takes a count of the newest older table
//! committed *before* its own timestamp (tables committed at the same timestamp are skipped: no
//! snapshot ticked between them), and every link below the table the oldest snapshot in
//! progress needs is cut. So the chain is at most one table longer than the number of snapshots
//! that ticked since the oldest one in progress, and the first write that finds none in
//! progress cuts it all, whoever still counts the tables on it (a store snapshot held for a
//! checkpoint, say).
//!
//! Only the book lock's holder links or cuts; snapshots only walk, pinned. A cut link's
//! count is released once the book's grace clock says every walker pinned at the cut has
//! unpinned. A table nobody counts any more gives its own link up at the writer's next reclaim,
//! at once: a walker only stands on a table whose count it, or the link that led it there,
//! keeps above zero. A link holds the pages of the table it counts, as an owned snapshot
//! does (the tables between are reused, and what they alone reached).

use std::ptr;
use std::sync::Arc;

use super::super::table::PagedTable;
use super::{release, Ledger};
use crate::horizon::{self, Oldest};
use crate::record::{CommitRecord, Record};
use crate::sync::{clock, Ordering};
use crate::Element;

impl<A: Element> Ledger<A> {
    /// Stamps `new` (built on `old`, the head) with its commit timestamp and links it to what
    /// the store snapshots in progress need. Call right before publishing it.
    ///
    /// # Safety
    /// `new` is unpublished and ours; `old` is the head; the caller holds the book lock.
    pub(crate) unsafe fn link(&mut self, table: *mut PagedTable<A>, old: *mut PagedTable<A>) {
        // SAFETY: the caller's contract.
        let new = unsafe { &mut *table };
        // Acquire: as in `CommitRecord::committed_now`: the tick of every snapshot whose
        // value we read past publishes its registration in the horizon, read next.
        let timestamp = clock().load(Ordering::Acquire);
        new.record = Record::committed_at(timestamp);
        // After the clock read: see the `horizon` module docs. A snapshot we do not see
        // ticked after our clock read, so it needs the new table or a newer one.
        let oldest = horizon::oldest();
        let Some(link) = self.needed(oldest, old, timestamp) else {
            // No snapshot can walk past the new table: nothing below it is needed.
            return self.cut_all();
        };
        // Relaxed: we reached `link` through a counted link that only we can cut, so its count
        // is above zero; the new count publishes nothing (the head's swap publishes `prev`).
        link.refs.fetch_add(1, Ordering::Relaxed);
        // Relaxed: published by the head's swap (Release).
        new.prev
            .store(ptr::from_ref(link).cast_mut(), Ordering::Relaxed);
        self.linked.push(table);
        if let Oldest::At(o) = oldest {
            self.cut_below(link, o);
        }
    }

    /// Installs a critical section's `new` (built on `old`, the head) pending under
    /// `record`: its link takes a count of `old`, which readers show until the record
    /// commits. Call right before publishing it, and [`settle`](Self::settle) once the record
    /// is committed.
    ///
    /// # Safety
    /// As for [`link`](Self::link).
    pub(crate) unsafe fn link_pending(
        &mut self,
        table: *mut PagedTable<A>,
        old: *mut PagedTable<A>,
        record: &Arc<CommitRecord>,
    ) {
        // SAFETY: the caller's contract.
        let new = unsafe { &mut *table };
        new.record = Record::Shared(Arc::clone(record));
        // Relaxed: `old` is the head, counted; the new count publishes nothing.
        // SAFETY: the head is alive.
        unsafe { &*old }.refs.fetch_add(1, Ordering::Relaxed);
        // Relaxed: published by the head's swap (Release).
        new.prev.store(old, Ordering::Relaxed);
        self.linked.push(table);
    }

    /// After the pending head's record committed: what [`link`](Self::link) does for a
    /// table committed as it is published, now that its timestamp is known. The link to the
    /// table before stays only if a store snapshot in progress may need it, and moves past
    /// the tables committed at the same timestamp (as `link` skips them), so that commits
    /// between two ticks do not chain every table.
    ///
    /// # Safety
    /// `head` is the head, installed by [`link_pending`](Self::link_pending) and committed
    /// since; the caller holds the book.
    pub(crate) unsafe fn settle(&mut self, head: *mut PagedTable<A>) {
        // SAFETY: the head is counted, so alive.
        let head = unsafe { &*head };
        let timestamp = head.timestamp();
        debug_assert!(head.record.is_committed());
        // After the commit's clock read (Acquire): as in `link`.
        let oldest = horizon::oldest();
        // Relaxed: only the book's holder sets links.
        let old = head.prev.load(Ordering::Relaxed);
        // (Never null: linked by `link_pending`, and nobody cuts it before this.)
        let needed = (!old.is_null()).then(|| self.needed(oldest, old, timestamp));
        let Some(link) = needed.flatten() else {
            // No snapshot can walk past the head: nothing below it is needed.
            return self.cut_all();
        };
        if !ptr::eq(link, old) {
            // Relaxed: reached through a counted link only we can cut, as in `link`.
            link.refs.fetch_add(1, Ordering::Relaxed);
            // Release: as a cut's (`cut`): a reader that saw the head pending and loads the
            // new link must then see the commit (`Inner::read` looks at the record again).
            let replaced = head
                .prev
                .swap(ptr::from_ref(link).cast_mut(), Ordering::Release);
            // SAFETY: the book outlives its ledger.
            let point = unsafe { &*self.book }.clock.seal_point();
            // The old link's count goes as a cut one does: after the walkers on it are gone.
            self.cut.push((replaced, point));
        }
        if let Oldest::At(o) = oldest {
            self.cut_below(link, o);
        }
    }

    /// Every snapshot in progress needs the first table at or below `o` (from `from` down),
    /// or a newer one: cuts the link below it.
    fn cut_below(&mut self, from: &PagedTable<A>, o: u64) {
        let mut table = from;
        while table.timestamp() > o {
            match self.prev(table) {
                Some(older) => table = older,
                None => return,
            }
        }
        self.cut(table);
    }

    /// What a table committed at `timestamp` on top of `old` must keep linked for the store
    /// snapshots in progress (`oldest`): nothing if none can walk past it, else the newest
    /// table at or below `old` committed before it.
    fn needed<'t>(
        &self,
        oldest: Oldest,
        old: *mut PagedTable<A>,
        timestamp: u64,
    ) -> Option<&'t PagedTable<A>> {
        match oldest {
            Oldest::Nobody => None,
            Oldest::At(o) if timestamp <= o => None, // every snapshot needs it or newer
            _ => self.linked_below(old, timestamp),
        }
    }

    /// The newest table at or below `old` committed before `timestamp`.
    fn linked_below<'t>(
        &self,
        old: *mut PagedTable<A>,
        timestamp: u64,
    ) -> Option<&'t PagedTable<A>> {
        // SAFETY: `old` is counted (the head's count in `link`; in `settle`, the pending
        // head's link to it), so alive.
        let mut table = unsafe { &*old };
        while table.timestamp() >= timestamp {
            table = self.prev(table)?;
        }
        Some(table)
    }

    /// `table`'s link, if any.
    fn prev<'t>(&self, table: &'t PagedTable<A>) -> Option<&'t PagedTable<A>> {
        // Relaxed: only holders of the book lock set links, and the lock orders the last
        // holder's stores before us.
        let prev = table.prev.load(Ordering::Relaxed);
        // SAFETY: a link holds a count of the table it points to.
        (!prev.is_null()).then(|| unsafe { &*prev })
    }

    /// Unlinks everything below `table`; the link's count is released once the book's grace
    /// clock has passed the walkers that may be on it. (`table` stays on the `linked` list
    /// until the next [`release_links`](Self::release_links) drops it.)
    fn cut(&mut self, table: &PagedTable<A>) {
        // Release: a reader that finds the link of a head it saw pending cut takes the head as
        // committed (`Inner::read`), so the null must publish the commit that came before the
        // cut (and with it the batch's other installs: loom found a reader showing a section's
        // row but not its counter with a Relaxed cut). A walker that still loads the old link
        // is covered by the grace period.
        let prev = table.prev.swap(ptr::null_mut(), Ordering::Release);
        if !prev.is_null() {
            // SAFETY: the book outlives its ledger.
            let point = unsafe { &*self.book }.clock.seal_point();
            self.cut.push((prev, point));
        }
    }

    /// Cuts every link: none is needed any more.
    fn cut_all(&mut self) {
        // Taken and put back empty, so that the list keeps its capacity (a section's commit
        // links and cuts once each: a fresh list was an allocation per commit).
        let mut linked = std::mem::take(&mut self.linked);
        for &table in &linked {
            // SAFETY: a table on the list is kept (not reused) while its link is in place, and
            // `release_links` drops every table whose link is gone before any reuse.
            self.cut(unsafe { &*table });
        }
        linked.clear();
        self.linked = linked;
    }

    /// At the start of a write, before any table is reused: releases the cut links whose grace
    /// period is over, gives up the links of tables nobody counts any more, and drops from
    /// the `linked` list every table whose link is gone (so that none of them is on it when it
    /// is reused).
    pub(crate) fn release_links(&mut self) {
        if self.cut.is_empty() && self.linked.is_empty() {
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
        // Newest first (the list is in linking order): a released link may leave an older
        // table uncounted in turn, and links always point to older tables.
        let mut linked = std::mem::take(&mut self.linked);
        linked.reverse();
        linked.retain(|&table| {
            // SAFETY: on the list, so kept (see `cut_all`).
            let table = unsafe { &*table };
            // Acquire: pairs with the Release decrement of its last holder.
            let uncounted = table.refs.load(Ordering::Acquire) == 0;
            // Relaxed: only we write links; nobody can walk an uncounted table.
            let prev = table.prev.load(Ordering::Relaxed);
            if prev.is_null() {
                return false; // cut
            }
            if uncounted {
                table.prev.store(ptr::null_mut(), Ordering::Relaxed);
                // SAFETY: the link's count, ours to give up: no walker stands on `table` (its
                // count is zero), so none can follow the link any more.
                unsafe { release(prev) };
                return false;
            }
            true
        });
        linked.reverse();
        self.linked = linked;
    }

    /// When the variable is dropped: every link and cut link still counted, to be released
    /// after the epoch's grace period (`retire`).
    pub(crate) fn take_links(&mut self) -> Vec<*mut PagedTable<A>> {
        let mut links: Vec<_> = self.cut.drain(..).map(|(table, _)| table).collect();
        for table in std::mem::take(&mut self.linked) {
            // SAFETY: on the list, so kept.
            // Relaxed: `&mut` on the ledger of a dropped variable: no writer, no walker.
            let prev = unsafe { &*table }
                .prev
                .swap(ptr::null_mut(), Ordering::Relaxed);
            if !prev.is_null() {
                links.push(prev);
            }
        }
        links
    }
}
