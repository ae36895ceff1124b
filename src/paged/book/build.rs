//! A write's new table: the paths it copies from the head (copy-on-write, a node or page at
//! most once per write) and the deltas it applies to them.

use std::ptr;
use std::sync::Arc;

use super::super::layout::{Entry, Layout, GROUP};
use super::super::table::{prefetch, PagedTable, CACHE_LINE};
use super::{Ledger, Piece};
use crate::kernel::{accumulate, zip_into, Delta};
use crate::sync::Ordering;
use crate::Element;

impl<A: Element> Ledger<A> {
    /// Builds the next version from `old` (the head) and `deltas` (checked, in arrival
    /// order): copies the nodes and pages they touch, applies them, and returns the new
    /// table (count 1, for the head) for the caller to publish.
    ///
    /// # Safety
    /// `old` is the head, this book's newest table; the caller holds the book lock.
    pub(crate) unsafe fn build(
        &mut self,
        old: *mut PagedTable<A>,
        deltas: &[Delta<'_, A>],
    ) -> *mut PagedTable<A> {
        let (pages, rows_per_page) = (self.layout.pages, self.layout.rows_per_page);
        // SAFETY: the head is counted, so alive, and never written.
        let old_ref = unsafe { &*old };
        let new = self.table(old_ref.number + 1);
        // SAFETY: a fresh table is ours alone until published.
        let t = unsafe { &mut *new };
        t.root.copy_from_slice(&old_ref.root);
        // The head's list is empty (nothing replaced it yet) and keeps its capacity.
        let mut replaced = std::mem::take(&mut self.tables.back_mut().expect("kept").last_used);
        for rows in deltas.iter().filter_map(|d| d.rows) {
            prefetch_rows(old_ref, &self.layout, rows);
        }
        // Each delta in arrival order: a page is copied from the head the first time a delta
        // touches it, and every later delta adds to that copy.
        for delta in deltas {
            match delta.rows {
                Some(rows) if rows_per_page == 1 => {
                    self.own_and_apply_rows(t, old_ref, rows, delta, &mut replaced);
                }
                None => {
                    (0..pages).for_each(|p| self.own(t, old_ref, p, &mut replaced));
                    apply(t, &self.layout, delta);
                }
                Some(rows) => {
                    rows.iter()
                        .for_each(|&row| self.own(t, old_ref, row / rows_per_page, &mut replaced));
                    apply(t, &self.layout, delta);
                }
            }
        }
        let pages = replaced
            .iter()
            .filter(|p| matches!(p, Piece::Page(..)))
            .count();
        self.last_write = (pages, replaced.len() - pages);
        let back = self.tables.back_mut().expect("the head is kept");
        debug_assert_eq!(back.table, old);
        back.last_used = replaced;
        // Relaxed: the book is freed only after the variable's own hold goes, which is after
        // this (same thread, or published with the variable's drop).
        // SAFETY: the book outlives its ledger.
        unsafe { &*self.book }
            .holders
            .fetch_add(1, Ordering::Relaxed);
        self.keep(new);
        new
    }

    /// A row delta on pages of one row each: every row's page is copied from the head fused
    /// with its add (one sweep, as a dense pass's first delta is), or added to in place when
    /// an earlier row or delta of this write copied it already.
    fn own_and_apply_rows(
        &mut self,
        new: &mut PagedTable<A>,
        old: &PagedTable<A>,
        rows: &[usize],
        delta: &Delta<'_, A>,
        replaced: &mut Vec<Piece<A>>,
    ) {
        let width = self.layout.width;
        if width == 0 {
            return; // zero-width rows: nothing to copy or add
        }
        for (&row, values) in rows.iter().zip(delta.data.chunks_exact(width)) {
            let (slot, was) = self.own_path(new, old, row, replaced);
            // SAFETY: a page of one row has `width` elements; the fresh one and one this write
            // copied already are the new table's alone, and `was` is live and never written.
            unsafe {
                match self.replace_page(slot, was, row, replaced) {
                    Some(page) => zip_into(
                        std::slice::from_raw_parts_mut(page, width),
                        std::slice::from_raw_parts(was.cast::<A>(), width),
                        values,
                        delta.op,
                    ),
                    None => accumulate(
                        std::slice::from_raw_parts_mut((*slot).cast::<A>(), width),
                        values,
                        delta.op,
                    ),
                }
            }
        }
    }

    /// Gives `new` its own copy of page `p` (and of every node on its path), unless it has
    /// one already.
    fn own(
        &mut self,
        new: &mut PagedTable<A>,
        old: &PagedTable<A>,
        p: usize,
        replaced: &mut Vec<Piece<A>>,
    ) {
        if self.layout.page_len == 0 {
            return; // zero-width rows: nothing to copy (and empty pages share one address)
        }
        let (slot, was) = self.own_path(new, old, p, replaced);
        // SAFETY: as `replace_page` asks; `was` is live, `page_len` elements like the fresh
        // page, which is ours.
        unsafe {
            if let Some(page) = self.replace_page(slot, was, p, replaced) {
                ptr::copy_nonoverlapping(was.cast::<A>(), page, self.layout.page_len);
            }
        }
    }

    /// Puts a fresh page (contents stale, for the caller to fill) at `slot` if the new table
    /// still shares the old one, `was` (page `p`), which the write then replaced; `None` if
    /// the new table has its own page there already.
    ///
    /// # Safety
    /// `slot` is a page's entry in a node the new table owns, `was` that page's entry in the
    /// old table (as [`own_path`](Self::own_path) returns them).
    unsafe fn replace_page(
        &mut self,
        slot: *mut Entry,
        was: Entry,
        p: usize,
        replaced: &mut Vec<Piece<A>>,
    ) -> Option<*mut A> {
        // SAFETY: the caller's contract: the new table's node, ours to read and write.
        unsafe {
            if *slot != was {
                return None;
            }
            let page = self.page();
            replaced.push(Piece::Page(was.cast(), p));
            *slot = page.cast();
            Some(page)
        }
    }

    /// Gives `new` its own copy of every node on page `p`'s path, unless it has them
    /// already, and returns the page's entry in the new table's last node and the old
    /// table's page (equal while the new table still shares the page).
    fn own_path(
        &mut self,
        new: &mut PagedTable<A>,
        old: &PagedTable<A>,
        p: usize,
        replaced: &mut Vec<Piece<A>>,
    ) -> (*mut Entry, Entry) {
        let (levels, fanout) = (self.layout.levels, self.layout.fanout);
        let r = self.layout.root_slot(p);
        // Walk both paths down: `slot` is the new table's entry, `was` the old table's. An
        // entry equal to the old one is shared, so copied before anything under it changes.
        let mut slot: *mut Entry = &mut new.root[r];
        let mut was = old.root[r];
        for level in (0..levels).rev() {
            // SAFETY: `slot` is in the new table's root or in a node it owns (below); `was`
            // is a live node of the old table, never written.
            unsafe {
                if *slot == was {
                    let node = self.node();
                    ptr::copy_nonoverlapping(was.cast::<Entry>(), node, fanout);
                    replaced.push(Piece::Node(was.cast(), p, levels - 1 - level));
                    *slot = node.cast();
                }
                let i = self.layout.slot(p, level);
                slot = (*slot).cast::<Entry>().add(i);
                was = *was.cast::<Entry>().add(i);
            }
        }
        (slot, was)
    }

    /// The entry of page `p` in `table`'s nodes, adding empty nodes where its path has none
    /// (the initial table only).
    ///
    /// # Safety
    /// `table` is fresh and ours, its root entries null or nodes it alone owns.
    pub(super) unsafe fn grow(&mut self, table: &mut PagedTable<A>, p: usize) -> *mut Entry {
        let layout = Arc::clone(&self.layout);
        let mut slot: *mut Entry = &mut table.root[layout.root_slot(p)];
        for level in (0..layout.levels).rev() {
            // SAFETY: the caller's contract: `slot` is ours, and so is every node under it.
            unsafe {
                if (*slot).is_null() {
                    *slot = self.node().cast();
                    ptr::write_bytes(slot.read().cast::<Entry>(), 0, layout.fanout);
                }
                slot = (*slot).cast::<Entry>().add(layout.slot(p, level));
            }
        }
        slot
    }
}

/// Asks the processor for the nodes and pages a row delta will copy, a level at a time
/// ([`PagedTable::walk_group`]): rows of a large table are scattered, so each is a cache
/// miss, and copying them one by one would wait for each miss in turn (each node on the
/// path, then the page).
fn prefetch_rows<A: Element>(old: &PagedTable<A>, layout: &Layout, rows: &[usize]) {
    if !cfg!(target_arch = "x86_64") {
        return; // `prefetch` does nothing there
    }
    let node_lines = (layout.fanout * size_of::<Entry>()).div_ceil(CACHE_LINE);
    let page_lines = (layout.page_len * size_of::<A>())
        .min(4 * CACHE_LINE)
        .div_ceil(CACHE_LINE);
    for group in rows.chunks(GROUP) {
        let mut buf = [0; GROUP];
        old.walk_group(layout.pages_of(group, &mut buf), |entry, is_page| {
            prefetch(entry.cast(), if is_page { page_lines } else { node_lines });
        });
    }
}

/// Applies one checked delta to the pages `new` owns (every page it touches is its own).
fn apply<A: Element>(new: &PagedTable<A>, layout: &Layout, delta: &Delta<'_, A>) {
    let page_mut = |p: usize| {
        // SAFETY: `build` copied every page this delta touches into `new`, which nobody else
        // can reach yet, so the page is ours to write.
        unsafe { std::slice::from_raw_parts_mut(new.page_ptr(p), layout.page_len) }
    };
    match delta.rows {
        None => {
            for p in 0..layout.pages {
                let n = layout.rows_in(p) * layout.width;
                let from = p * layout.page_len;
                accumulate(&mut page_mut(p)[..n], &delta.data[from..from + n], delta.op);
            }
        }
        Some(rows) if layout.width > 0 => {
            for (&row, values) in rows.iter().zip(delta.data.chunks_exact(layout.width)) {
                let start = (row % layout.rows_per_page) * layout.width;
                let page = page_mut(row / layout.rows_per_page);
                accumulate(&mut page[start..start + layout.width], values, delta.op);
            }
        }
        Some(_) => {}
    }
}
