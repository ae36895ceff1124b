//! [`PagedVariableBuilder`]: a paged variable's name and page size, and the first table.

use std::sync::Arc;

use ndarray::{Array, Dimension};

use super::book::Book;
use super::layout::Layout;
use super::{Inner, PagedVariable};
use crate::combine::Combiner;
use crate::error::{check_has_rows, Result};
use crate::kernel::standard_elements;
use crate::section::Claims;
use crate::sync::{next_id, AtomicBool, AtomicPtr, Mutex};
use crate::ticket::TicketQueue;
use crate::Element;

/// How a [`PagedVariable`] is built: its name and page size.
#[derive(Debug)]
pub struct PagedVariableBuilder<A: Element, D: Dimension> {
    init: Array<A, D>,
    name: Option<String>,
    rows_per_page: Option<usize>,
    /// The tree's shape, `(log2 fanout, levels)`; `None` picks it (tests build deep trees).
    tree: Option<(u32, u32)>,
}

impl<A: Element, D: Dimension> PagedVariableBuilder<A, D> {
    pub(super) fn new(init: Array<A, D>) -> Self {
        Self {
            init,
            name: None,
            rows_per_page: None,
            tree: None,
        }
    }

    /// Names the variable; the name appears in every error about it (default `paged#<id>`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Rows per page (at least 1, at most the rows there are): what a row write copies at
    /// least. By default, as many
    /// rows as fit in 256 bytes (at least one): small pages copy little per sparse write;
    /// large ones make the tree and dense writes cheaper.
    pub fn rows_per_page(mut self, rows: usize) -> Self {
        self.rows_per_page = Some(rows.max(1));
        self
    }

    /// Nodes of `2^shift` entries, `levels` deep, whatever the size (tests reach deep trees
    /// with small tables).
    #[cfg(test)]
    pub(crate) fn tree(mut self, shift: u32, levels: u32) -> Self {
        self.tree = Some((shift.clamp(1, 6), levels.max(1)));
        self
    }

    /// Creates the variable; its initial value is version 0.
    ///
    /// # Errors
    /// [`Error::RankMismatch`](crate::Error::RankMismatch) for a 0-d array (it has no rows).
    pub fn build(self) -> Result<PagedVariable<A>> {
        let name: Arc<str> = match self.name {
            Some(name) => name.into(),
            None => format!("paged#{}", next_id()).into(),
        };
        check_has_rows(&name, self.init.shape())?;
        let layout = Arc::new(Layout::new::<A>(
            name,
            self.init.shape(),
            self.rows_per_page,
            self.tree,
        ));
        let init = standard_elements(&self.init);
        let (book, head) = Book::new(Arc::clone(&layout), &init);
        // SAFETY: just built, and ours.
        let pages = Arc::clone(&unsafe { &*book }.pages);
        Ok(PagedVariable {
            inner: Arc::new(Inner {
                id: next_id(),
                layout,
                head: AtomicPtr::new(head),
                book,
                lock: Mutex::new(()),
                queued: AtomicBool::new(false),
                queue: TicketQueue::default(),
                claims: Claims::default(),
                combiner: Combiner::default(),
                pages,
            }),
        })
    }
}
