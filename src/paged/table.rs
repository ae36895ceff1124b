//! A paged version: a directory of chunks, each a fixed array of page pointers, each page a
//! fixed number of rows.
//!
//! ```text
//!  PagedTable ── dir ──► [c0, c1, ...]          one entry per `per_chunk` pages
//!                           │
//!                           ▼
//!                         [p0, p1, ...]          a chunk: `per_chunk` page pointers
//!                           │
//!                           ▼
//!                         rows_per_page rows of `width` elements
//! ```
//!
//! Two levels, so that a write touching `k` pages copies the directory (`pages / per_chunk`
//! entries), `k` chunks and `k` pages: never a table proportional to the whole tensor. Untouched chunks
//! and pages are shared with the version before. Who owns each chunk and page, and when it is
//! reused, is the [book](super::book)'s business; a table only reads them.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use ndarray::{ArrayD, ArrayViewD, IxDyn};

use crate::error::{check_indices, Result};
use crate::sync::{AtomicUsize, Handoff};
use crate::Element;

/// A write of `k` pages copies `pages / per_chunk` directory entries and `k * per_chunk`
/// chunk entries, least in all when `per_chunk` is about `sqrt(pages / k)`. Chunks are sized
/// for writes of this many pages (a typical sparse step: 32 embeddings).
const TYPICAL_PAGES_PER_WRITE: usize = 32;

/// Pages aim at this many bytes by default: a sparse write copies whole pages, so small ones
/// copy little (measured, 100k rows of 64 f32, 32 random rows a write: one row per page is
/// ~15% cheaper than four, eight rows cost ~30% more).
const DEFAULT_PAGE_BYTES: usize = 256;

/// A page: `Layout::page_len` elements, from a leaked `Box<[A]>`.
pub(crate) type Page<A> = *mut A;
/// A chunk: `per_chunk` page pointers (null past the last page), from a leaked `Box<[_]>`.
pub(crate) type Chunk<A> = *mut Page<A>;

/// The fixed geometry of one paged variable.
#[derive(Debug)]
pub(crate) struct Layout {
    pub(crate) name: Arc<str>,
    /// `[rows, ..]`.
    pub(crate) shape: Vec<usize>,
    /// Elements per row: the product of the other axes.
    pub(crate) width: usize,
    pub(crate) rows_per_page: usize,
    /// `rows_per_page * width`; every page has this length (the last one's tail is unused).
    pub(crate) page_len: usize,
    pub(crate) pages: usize,
    /// Page pointers per chunk: a power of two near `sqrt(pages / 32)`, 8 to 1024.
    pub(crate) per_chunk: usize,
    pub(crate) chunks: usize,
}

impl Layout {
    /// `rows_per_page` of `None` picks [`DEFAULT_PAGE_BYTES`] worth of rows (at least one);
    /// any choice is clamped to the rows there are, so that a page is never larger than the
    /// tensor and `page_len` cannot overflow (ndarray bounds `rows * width`).
    pub(crate) fn new<A>(name: Arc<str>, shape: &[usize], rows_per_page: Option<usize>) -> Self {
        let rows = shape[0];
        let width: usize = shape[1..].iter().fold(1, |a, &b| a.saturating_mul(b));
        let row_bytes = width.saturating_mul(std::mem::size_of::<A>()).max(1);
        let rows_per_page = rows_per_page
            .unwrap_or(DEFAULT_PAGE_BYTES / row_bytes)
            .clamp(1, rows.max(1));
        let pages = rows.div_ceil(rows_per_page);
        let balanced = ((pages / TYPICAL_PAGES_PER_WRITE) as f64).sqrt() as usize;
        let per_chunk = balanced.next_power_of_two().clamp(8, 1024);
        Self {
            name,
            shape: shape.to_vec(),
            width,
            rows_per_page,
            // Zero-size tensors aside, `rows_per_page <= rows` keeps this within ndarray's bound.
            page_len: if rows == 0 { 0 } else { rows_per_page * width },
            pages,
            per_chunk,
            chunks: pages.div_ceil(per_chunk),
        }
    }

    pub(crate) fn rows(&self) -> usize {
        self.shape[0]
    }

    /// Pages of chunk `chunk` that exist (the last chunk may be short).
    pub(crate) fn pages_in(&self, chunk: usize) -> usize {
        (self.pages - chunk * self.per_chunk).min(self.per_chunk)
    }

    /// Rows of page `page` that exist (the last page may be short).
    pub(crate) fn rows_in(&self, page: usize) -> usize {
        (self.rows() - page * self.rows_per_page).min(self.rows_per_page)
    }
}

/// One immutable version of a [`PagedVariable`](crate::PagedVariable), shown by its
/// snapshots ([`PagedSnapshot`](crate::PagedSnapshot),
/// [`OwnedPagedSnapshot`](crate::OwnedPagedSnapshot)), which dereference to it.
///
/// Rows are read where they are ([`row`](Self::row)) or copied out
/// ([`gather`](Self::gather), [`rows`](Self::rows)); the whole tensor as one ndarray is
/// [`to_array`](Self::to_array), an explicit copy.
pub struct PagedTable<A: Element> {
    pub(crate) number: u64,
    /// `layout.chunks` chunk pointers.
    pub(crate) dir: Box<[Chunk<A>]>,
    /// The head's link, each owned snapshot, and a retired link waiting out its grace period.
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
        // SAFETY: a live table's chunks are never written or reused while it is counted or
        // reachable under a pin (the book reuses only what no live table reaches), and
        // `page < pages`, so the chunk is non-null and has an entry for it.
        let per_chunk = self.layout.per_chunk;
        // SAFETY: as above.
        unsafe { *self.dir[page / per_chunk].add(page % per_chunk) }
    }

    /// Page `page` as a slice of `page_len` elements.
    pub(crate) fn page(&self, page: usize) -> &[A] {
        // SAFETY: as in `page_ptr`: the page is live, unchanging, `page_len` long.
        unsafe { std::slice::from_raw_parts(self.page_ptr(page), self.layout.page_len) }
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
        Ok(self.collect(indices.len(), indices.iter().copied()))
    }

    /// The rows in `range`, copied into one array of shape `[range.len(), ..]`.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`](crate::Error::IndexOutOfRange) if the range ends past the
    /// rows (or starts after it ends).
    pub fn rows(&self, range: Range<usize>) -> Result<ArrayD<A>> {
        let rows = self.layout.rows();
        if range.start > range.end {
            check_indices(&self.layout.name, range.end, &[range.start])?;
        }
        if range.end > rows {
            check_indices(&self.layout.name, rows, &[range.end - 1])?;
        }
        Ok(self.collect(range.len(), range))
    }

    /// The whole tensor as one array: a copy of every page.
    pub fn to_array(&self) -> ArrayD<A> {
        self.collect(self.layout.rows(), 0..self.layout.rows())
    }

    fn collect(&self, n: usize, rows: impl Iterator<Item = usize>) -> ArrayD<A> {
        let mut data = Vec::with_capacity(n * self.layout.width);
        rows.for_each(|row| data.extend_from_slice(self.row_slice(row)));
        let mut shape = self.layout.shape.clone();
        shape[0] = n;
        ArrayD::from_shape_vec(IxDyn(&shape), data).expect("rows times width elements")
    }
}

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
