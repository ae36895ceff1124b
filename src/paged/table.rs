//! A paged version: a short root over a radix tree of page pointers, each page a fixed
//! number of rows.
//!
//! ```text
//!  PagedTable ── root ──► [n, n, ...]       pages / fanout^levels entries
//!                          │
//!                          ▼
//!                        [n, n, ...]        a node: `fanout` entries; `levels` levels of nodes
//!                          │  ...
//!                          ▼
//!                        [p, p, ...]        the lowest level's entries are pages
//!                          │
//!                          ▼
//!                        rows_per_page rows of `width` elements
//! ```
//!
//! A write touching `k` pages copies the root, at most `k` nodes per level and `k` pages:
//! never a table proportional to the whole tensor. Untouched nodes and pages are shared with
//! the version before. Who owns each node and page, and when it is reused, is the
//! [book](super::book)'s business; a table only reads them.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use ndarray::{Array2, ArrayD, ArrayViewD, IxDyn};

use crate::error::{check_indices, check_setting, Result};
use crate::pool::Link;
use crate::record::Record;
use crate::sync::{AtomicPtr, AtomicUsize, Handoff};
use crate::Element;

use super::layout::{Entry, Layout, Page, GROUP};

/// One immutable version of a [`PagedVariable`](crate::PagedVariable), shown by its
/// snapshots ([`PagedSnapshot`](crate::PagedSnapshot),
/// [`OwnedPagedSnapshot`](crate::OwnedPagedSnapshot)), which dereference to it.
///
/// Rows are read where they are ([`row`](Self::row)) or copied out
/// ([`gather`](Self::gather), [`rows`](Self::rows)); the whole tensor as one ndarray is
/// [`to_array`](Self::to_array), an explicit copy.
#[repr(C)] // `link` first: the held list holds tables by it
pub struct PagedTable<A: Element> {
    /// For the held list ([`holds`](crate::holds)): a table whose last count met a
    /// [`PagedSnapshot`](crate::PagedSnapshot)'s hold waits there, that count kept.
    pub(crate) link: Link,
    pub(crate) number: u64,
    /// When the write that built it commits (see [`record`](crate::record)): committed as
    /// it is published for a write of this variable alone (the clock's value read before);
    /// a critical section's record, pending until every variable of its batch is installed.
    pub(crate) record: Record,
    /// While the record is pending, the table before (readers show that one); while a store
    /// snapshot is in progress, the newest older table one may need. One count of it; null
    /// otherwise. Only the book's holder sets or cuts it (`book::chain`).
    pub(crate) prev: AtomicPtr<PagedTable<A>>,
    /// `layout.root_len` entries: the top level's nodes.
    pub(crate) root: Box<[Entry]>,
    /// The head's link (kept by the book after a write replaces it, until its grace tick has
    /// run), each owned snapshot, each newer table's `prev` link to it, and while the held
    /// list has it, the last of these (`book::release_with`).
    pub(crate) refs: AtomicUsize,
    /// The book that owns this table's pages (see `book::release`); set once.
    pub(crate) book: *const super::book::Book<A>,
    pub(crate) layout: Arc<Layout>,
    /// The writer touches it when it (re)builds the table, readers look when they reach it:
    /// under loom, a reader not ordered after the build, or a reuse not ordered after every
    /// reader, is a reported causality violation (pages themselves are plain memory).
    pub(crate) handoff: Handoff,
}

impl<A: Element> PagedTable<A> {
    /// The commit timestamp; a pending table (a section's, mid-commit) is newer than any.
    pub(crate) fn timestamp(&self) -> u64 {
        self.record.timestamp().unwrap_or(u64::MAX)
    }

    /// The version number: 0 for the initial value, plus one per write (a combined write of
    /// several callers counts once).
    pub fn version(&self) -> u64 {
        self.number
    }

    /// The tensor's shape, `[rows, ..]`.
    pub fn shape(&self) -> &[usize] {
        &self.layout.shape
    }

    /// Rows per page: what a row write copies at least.
    pub fn rows_per_page(&self) -> usize {
        self.layout.rows_per_page
    }

    /// Page `page`'s first element, with the provenance of its allocation (a writer that
    /// owns the page writes through it).
    pub(crate) fn page_ptr(&self, page: usize) -> Page<A> {
        self.walk(page, self.layout.levels).cast()
    }

    /// The entry on page `page`'s path `hops` nodes below the root: a node of level
    /// `levels - 1 - hops`, or the page itself when `hops == levels`.
    pub(crate) fn walk(&self, page: usize, hops: u32) -> Entry {
        let layout = &*self.layout;
        let mut entry = self.root[layout.root_slot(page)];
        for level in (layout.levels - hops..layout.levels).rev() {
            // SAFETY: a live table's nodes are never written or reused while it is counted or
            // reachable under a pin (the book reuses only what no live table reaches), and
            // `page < pages`, so every node on its path is non-null and has its entry.
            entry = unsafe { *entry.cast::<Entry>().add(layout.slot(page, level)) };
        }
        entry
    }

    /// Page `page` as a slice of `page_len` elements.
    pub(crate) fn page(&self, page: usize) -> &[A] {
        // SAFETY: as in `page_ptr`: the page is live, unchanging, `page_len` long.
        unsafe { std::slice::from_raw_parts(self.page_ptr(page), self.layout.page_len) }
    }

    /// The entries at the ends of the paths to `pages` (at most [`GROUP`], each below
    /// `pages`), walked a level at a time for all of them, so that the loads of one level
    /// wait for memory together; `arrive(entry, is_page)` sees each entry as it is reached
    /// (to ask for what the next level loads).
    pub(crate) fn walk_group(
        &self,
        pages: &[usize],
        mut arrive: impl FnMut(Entry, bool),
    ) -> [Entry; GROUP] {
        let layout = &*self.layout;
        let mut entries = [std::ptr::null_mut(); GROUP];
        for (entry, &page) in entries.iter_mut().zip(pages) {
            *entry = self.root[layout.root_slot(page)];
            arrive(*entry, false); // there is at least one level of nodes
        }
        for level in (0..layout.levels).rev() {
            for (entry, &page) in entries.iter_mut().zip(pages) {
                // SAFETY: as in `walk`: every node on a live table's path to a page below
                // `pages` is live, unchanging and has this slot.
                *entry = unsafe { *entry.cast::<Entry>().add(layout.slot(page, level)) };
                arrive(*entry, level == 0);
            }
        }
        entries
    }

    /// The first elements of `rows` (at most [`GROUP`], checked by the caller), each row
    /// asked for (prefetched) once it is found.
    fn row_starts(&self, rows: &[usize]) -> [*const A; GROUP] {
        let layout = &*self.layout;
        let row_lines = (layout.width * size_of::<A>()).div_ceil(CACHE_LINE);
        let mut starts = [std::ptr::null(); GROUP];
        if layout.rows_per_page == 1 {
            // The default for rows of 256 bytes or more: a row's page is the row.
            let pages = self.walk_group(rows, |entry, is_page| {
                if is_page {
                    prefetch(entry.cast(), row_lines);
                }
            });
            for (start, page) in starts.iter_mut().zip(pages) {
                *start = page.cast::<A>().cast_const();
            }
            return starts;
        }
        let mut buf = [0; GROUP];
        let entries = self.walk_group(layout.pages_of(rows, &mut buf), |_, _| {});
        for ((start, entry), &row) in starts.iter_mut().zip(entries).zip(rows) {
            let offset = row % layout.rows_per_page * layout.width;
            *start = entry.cast::<A>().cast_const().wrapping_add(offset);
            prefetch(start.cast(), row_lines);
        }
        starts
    }

    /// Row `row` (checked by the caller) as a slice of `width` elements.
    fn row_slice(&self, row: usize) -> &[A] {
        let layout = &*self.layout;
        let start = (row % layout.rows_per_page) * layout.width;
        &self.page(row / layout.rows_per_page)[start..start + layout.width]
    }

    /// Row `row`, where it is stored (no copy), shaped as the tensor's other axes.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`](crate::Error::IndexOutOfRange).
    pub fn row(&self, row: usize) -> Result<ArrayViewD<'_, A>> {
        check_indices(&self.layout.name, self.layout.rows(), &[row])?;
        Ok(
            ArrayViewD::from_shape(IxDyn(&self.layout.shape[1..]), self.row_slice(row))
                .expect("a row holds exactly its axes' elements"),
        )
    }

    /// The rows `indices`, in that order (repeats included), as one array of shape
    /// `[indices.len(), ..]`.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`](crate::Error::IndexOutOfRange) naming the first index past
    /// the rows.
    pub fn gather(&self, indices: &[usize]) -> Result<ArrayD<A>> {
        check_indices(&self.layout.name, self.layout.rows(), indices)?;
        let width = self.layout.width;
        // Checked: the rows are written through a raw pointer, so a wrapped length would be
        // written past the buffer. (A product that large could not be allocated anyway.)
        let len = indices
            .len()
            .checked_mul(width)
            .expect("gathered elements fit a usize");
        let mut data = Vec::with_capacity(len);
        let out = data.spare_capacity_mut().as_mut_ptr().cast::<A>();
        // [`GROUP`] rows at a time, each group walked a level at a time for all its rows
        // before any row is copied, so that the group's loads at one level (and then its
        // rows' copies) wait for memory together. Row by row, each row would wait for its
        // node and then its page before the next row began, which on a table out of cache
        // costs most of a gather.
        for (g, group) in indices.chunks(GROUP).enumerate() {
            let at = out.wrapping_add(g * GROUP * width);
            for (i, &start) in self.row_starts(group)[..group.len()].iter().enumerate() {
                // SAFETY: `row_starts` points at a row's first element, and the row's `width`
                // elements lie in its page, live and unchanged while `self` is; row `i` of
                // the group goes to its own `width` elements of `data`'s capacity.
                unsafe { std::ptr::copy_nonoverlapping(start, at.add(i * width), width) };
            }
        }
        // SAFETY: every row was written above, `len` elements in all.
        unsafe { data.set_len(len) };
        Ok(self.array(indices.len(), data))
    }

    /// The rows in `range`, copied into one array of shape `[range.len(), ..]`.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`](crate::Error::IndexOutOfRange) if the range ends past the
    /// rows; [`Error::InvalidSetting`](crate::Error::InvalidSetting) if it starts after it
    /// ends.
    pub fn rows(&self, range: Range<usize>) -> Result<ArrayD<A>> {
        let rows = self.layout.rows();
        let owner = || format!("paged variable `{}`", self.layout.name);
        let ordered = range.start <= range.end;
        check_setting(
            owner,
            "rows",
            &range,
            ordered,
            "a range that starts at most where it ends",
        )?;
        if range.end > rows {
            check_indices(&self.layout.name, rows, &[range.end - 1])?;
        }
        Ok(self.copy_rows(range))
    }

    /// The whole tensor as one array: a copy of every page.
    pub fn to_array(&self) -> ArrayD<A> {
        self.copy_rows(0..self.layout.rows())
    }

    /// The rows in `range` (checked by the caller) as one array, copied a page at a time.
    fn copy_rows(&self, range: Range<usize>) -> ArrayD<A> {
        let layout = &*self.layout;
        let mut data = Vec::with_capacity(range.len() * layout.width);
        let mut row = range.start;
        while row < range.end {
            let (page, first) = (row / layout.rows_per_page, row % layout.rows_per_page);
            let rows = (layout.rows_per_page - first).min(range.end - row);
            let start = first * layout.width;
            data.extend_from_slice(&self.page(page)[start..start + rows * layout.width]);
            row += rows;
        }
        self.array(range.len(), data)
    }

    /// `data`, `n` rows of the tensor's other axes, as an array.
    fn array(&self, n: usize, data: Vec<A>) -> ArrayD<A> {
        let width = self.layout.width;
        assert_eq!(data.len(), n * width, "rows times width elements");
        if let [_, columns] = self.layout.shape[..] {
            // Rows of a matrix (an embedding table's): ndarray builds a 2-d array's strides
            // without a loop over axes, cheaper than the general case below.
            return Array2::from_shape_vec((n, columns), data)
                .expect("rows times width elements")
                .into_dyn();
        }
        let mut shape = IxDyn(&self.layout.shape); // inline up to 4 axes: no allocation
        shape[0] = n;
        ArrayD::from_shape_vec(shape, data).expect("rows times width elements")
    }
}

/// Asks the processor for `lines` cache lines from `at`: rows and nodes of a large table are
/// scattered, each a cache miss, and asking for a group of them before using any lets their
/// misses overlap. A hint: it never faults and changes nothing.
#[inline]
pub(crate) fn prefetch(at: *const u8, lines: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let line = |i: usize| {
            // SAFETY: SSE is part of x86_64's baseline; a prefetch of any address is harmless.
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(i * CACHE_LINE).cast());
            }
        };
        // Four at a time: a loop of one prefetch a turn costs a few instructions a line in
        // loop control, which unrolling saves on every gather and write.
        let mut i = 0;
        while i + 4 <= lines {
            line(i);
            line(i + 1);
            line(i + 2);
            line(i + 3);
            i += 4;
        }
        while i < lines {
            line(i);
            i += 1;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (at, lines);
}

/// Bytes in a cache line (x86_64 and most others).
pub(crate) const CACHE_LINE: usize = 64;

impl<A: Element> fmt::Debug for PagedTable<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PagedTable")
            .field("variable", &self.layout.name)
            .field("version", &self.number)
            .field("shape", &self.layout.shape)
            .field("rows_per_page", &self.layout.rows_per_page)
            .finish()
    }
}
