//! The fixed geometry of one paged variable: rows per page, the radix tree's shape (chosen
//! by a cost model), and how a page number finds its slot at each level. Tables
//! ([`PagedTable`](super::PagedTable)) and the book that builds them address pages through it.

use std::sync::Arc;

/// The tree is shaped for writes of this many pages (a typical sparse step: 32 embeddings).
const TYPICAL_PAGES_PER_WRITE: usize = 32;

/// What one more level of nodes costs a write when the shape is chosen, in copied bytes: a
/// dependent load, often a cache miss, per page on every read and write, weighed against the
/// root a write copies. With it, 100k pages keep one level of 64 (a 12 KiB root), 1M pages
/// get two of 32 (8 KiB) and 10M three of 32 (2.4 KiB), where one level of 64 would copy
/// 122 KiB and 1.2 MiB of root per write.
const LEVEL_BYTES: usize = 24 * 1024;

/// Pages aim at this many bytes by default: a sparse write copies whole pages, so small ones
/// copy little (for rows of 64 f32, one row a page).
const DEFAULT_PAGE_BYTES: usize = 256;

/// Pages whose paths are walked together ([`PagedTable::walk_group`]): a typical sparse
/// step's.
pub(crate) const GROUP: usize = TYPICAL_PAGES_PER_WRITE;

/// A page: `Layout::page_len` elements, from a leaked `Box<[A]>`.
pub(crate) type Page<A> = *mut A;
/// An entry of the root or of a node: a node one level down or, at the lowest level, a page
/// (null past the last page).
pub(crate) type Entry = *mut ();
/// A node: `Layout::fanout` entries, from a leaked `Box<[Entry]>`.
pub(crate) type Node = *mut Entry;

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
    /// Entries per node: a power of two, 8 to 64.
    pub(crate) fanout: usize,
    shift: u32,
    /// Levels of nodes under the root (at least 1).
    pub(crate) levels: u32,
    /// Entries in the root: `pages / fanout^levels`, rounded up.
    pub(crate) root_len: usize,
}

impl Layout {
    /// `rows_per_page` of `None` picks [`DEFAULT_PAGE_BYTES`] worth of rows (at least one);
    /// any choice is clamped to the rows there are, so that a page is never larger than the
    /// tensor and `page_len` cannot overflow (ndarray bounds `rows * width`). `tree` of
    /// `None` picks the nodes' size and depth ([`tree_shape`]); tests choose deep trees of
    /// small tables with `Some((log2 fanout, levels))`.
    pub(crate) fn new<A>(
        name: Arc<str>,
        shape: &[usize],
        rows_per_page: Option<usize>,
        tree: Option<(u32, u32)>,
    ) -> Self {
        let rows = shape[0];
        let width: usize = shape[1..].iter().fold(1, |a, &b| a.saturating_mul(b));
        let row_bytes = width.saturating_mul(std::mem::size_of::<A>()).max(1);
        let rows_per_page = rows_per_page
            .unwrap_or(DEFAULT_PAGE_BYTES / row_bytes)
            .clamp(1, rows.max(1));
        let pages = rows.div_ceil(rows_per_page);
        let (shift, levels) = tree.unwrap_or_else(|| tree_shape(pages));
        let fanout = 1usize << shift;
        Self {
            name,
            shape: shape.to_vec(),
            width,
            rows_per_page,
            // Zero-size tensors aside, `rows_per_page <= rows` keeps this within ndarray's bound.
            page_len: if rows == 0 { 0 } else { rows_per_page * width },
            pages,
            fanout,
            shift,
            levels,
            root_len: (0..levels).fold(pages, |n, _| n.div_ceil(fanout)),
        }
    }

    pub(crate) fn rows(&self) -> usize {
        self.shape[0]
    }

    /// Rows of page `page` that exist (the last page may be short).
    pub(crate) fn rows_in(&self, page: usize) -> usize {
        (self.rows() - page * self.rows_per_page).min(self.rows_per_page)
    }

    /// The pages of `rows` (at most [`GROUP`]), one division a row (not one per level),
    /// written into `buf`; pages of one row (the default for wide rows) are the rows
    /// themselves, with no division.
    pub(crate) fn pages_of<'r>(
        &self,
        rows: &'r [usize],
        buf: &'r mut [usize; GROUP],
    ) -> &'r [usize] {
        if self.rows_per_page == 1 {
            return rows;
        }
        for (page, &row) in buf.iter_mut().zip(rows) {
            *page = row / self.rows_per_page;
        }
        &buf[..rows.len()]
    }

    /// Page `page`'s entry in the root.
    pub(crate) fn root_slot(&self, page: usize) -> usize {
        page.checked_shr(self.shift * self.levels).unwrap_or(0)
    }

    /// Page `page`'s entry in its node at `level` (0: the nodes whose entries are pages).
    pub(crate) fn slot(&self, page: usize, level: u32) -> usize {
        (page >> (self.shift * level)) & (self.fanout - 1)
    }
}

/// Nodes of `2^shift` entries and how many levels of them: the shape that copies the fewest
/// bytes for a write of [`TYPICAL_PAGES_PER_WRITE`] pages (the root, and at each level at most
/// that many nodes), each level also charged [`LEVEL_BYTES`].
fn tree_shape(pages: usize) -> (u32, u32) {
    let entry = std::mem::size_of::<Entry>();
    let mut best = (usize::MAX, 3, 1);
    for shift in 3..=6u32 {
        let fanout = 1usize << shift;
        let (mut above, mut nodes_copied) = (pages, 0);
        for levels in 1..=16u32 {
            above = above.div_ceil(fanout);
            nodes_copied += above.min(TYPICAL_PAGES_PER_WRITE);
            let bytes = entry * (above + fanout * nodes_copied) + LEVEL_BYTES * levels as usize;
            if bytes < best.0 {
                best = (bytes, shift, levels);
            }
            if above <= 1 {
                break; // a root of one entry: more levels only add loads
            }
        }
    }
    (best.1, best.2)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shapes the cost model picks: few levels for small tables, a short root for huge
    /// ones (a write never copies a root proportional to the table).
    #[test]
    fn tree_shapes_keep_the_root_short() {
        assert_eq!(tree_shape(0), (3, 1));
        assert_eq!(tree_shape(100), (3, 1));
        assert_eq!(tree_shape(100_000), (6, 1));
        assert_eq!(tree_shape(10_000_000), (5, 3));
        for pages in [1usize, 7, 1000, 100_000, 10_000_000, 1 << 32] {
            let (shift, levels) = tree_shape(pages);
            let root = (0..levels).fold(pages, |n, _| n.div_ceil(1 << shift));
            assert!(root <= 4096, "{pages} pages: a root of {root}");
            assert!(levels <= 8, "{pages} pages: {levels} levels");
        }
    }
}
