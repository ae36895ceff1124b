//! Paged variables: large tables (embeddings, sparse linear models) whose row updates copy
//! only the pages they touch.
//!
//! A [`Variable`](crate::Variable) is one dense version: any write, a row update included,
//! copies the whole tensor. A [`PagedVariable`] stores each version as a radix tree of
//! pages ([`table`]): a write copies the short root, the nodes and the pages it touches, and
//! shares every other node and page with the version before. Readers see the same promises as on a
//! dense variable: a snapshot never changes, a read is a pin and a load and never waits.
//! Writers are combined as dense deltas are (one new version for every write pending at
//! once, in arrival order), and reclamation is the book's ([`book`]): a version's pages are
//! reused once no live version reaches them, and a reader's pin never frees anything.
//!
//! Files: the public handle here; how it is built ([`builder`]); how its head is read,
//! replaced and given up ([`inner`]); who may write ([`access`]); the tree ([`table`]) and
//! the writer's book of pages ([`book`]); snapshots ([`snapshot`]).

mod access;
mod at;
mod book;
mod builder;
mod inner;
mod layout;
mod snapshot;
mod table;
#[cfg(test)]
mod tests;

#[cfg(all(test, mvtensor_loom))]
#[path = "../tests/loom_paged_behind.rs"]
mod loom_paged_behind;
#[cfg(all(test, mvtensor_loom))]
#[path = "../tests/loom_paged_release.rs"]
mod loom_paged_release;
#[cfg(all(test, mvtensor_loom))]
#[path = "../tests/loom_paged_reuse.rs"]
mod loom_paged_reuse;
#[cfg(all(test, mvtensor_loom))]
#[path = "../tests/loom_paged_settle.rs"]
mod loom_paged_settle;

use std::fmt;
use std::sync::Arc;

use ndarray::{Array, ArrayRef, Dimension};

pub(crate) use self::at::TableAt;
use self::book::Book;
pub use self::builder::PagedVariableBuilder;
use self::layout::Layout;
pub use self::snapshot::{OwnedPagedSnapshot, PagedSnapshot};
pub use self::table::PagedTable;
use crate::combine::Combiner;
use crate::error::{check_rows, check_shape, Result};
use crate::kernel::{standard_elements, Delta, Op};
use crate::running;
use crate::section::Claims;
use crate::sync::{AtomicBool, AtomicPtr, AtomicUsize, Mutex, Ordering};
use crate::ticket::TicketQueue;
use crate::Element;

/// A tensor whose first axis is rows, stored in pages, for sparse updates of large tables:
/// a row write copies the pages it touches, not the tensor.
///
/// ```
/// use mvtensor::PagedVariable;
/// use ndarray::{arr2, Array2};
///
/// // 100,000 embeddings of 64 f32 (25 MiB); a step changes a few rows.
/// let table = PagedVariable::new(Array2::<f32>::zeros((100_000, 64)))?;
/// let grads = Array2::<f32>::ones((3, 64));
/// table.scatter_scaled_add(-0.1, &[7, 42, 7], &grads)?; // row 7 twice
///
/// let snapshot = table.read();
/// assert_eq!(snapshot.row(7)?[[0]], -0.2);
/// assert_eq!(snapshot.gather(&[42, 0])?.shape(), &[2, 64]);
/// assert_eq!(snapshot.version(), 1);
/// # Ok::<(), mvtensor::Error>(())
/// ```
///
/// **Costs.** A write of `k` rows copies at most `k` pages of
/// [`rows_per_page`](PagedVariableBuilder::rows_per_page) rows (256 bytes' worth by default,
/// at least one row), at most `k` nodes of page pointers per level of the tree above them,
/// and the tree's root. The tree's shape is chosen for writes of 32 pages: nodes of 8 to 64
/// pointers, as few levels as keep the root short (100,000 rows of 64 f32: one row per page,
/// one level of 64-pointer nodes under a root of 1,563; 10M pages: three levels of 32 under
/// a root of 306), so no write copies a table proportional to the tensor. Dense writes
/// ([`assign_add`](Self::assign_add), [`assign`](Self::assign)) copy every page, as a dense
/// variable's do; reading the whole tensor as one ndarray is an explicit copy
/// ([`PagedTable::to_array`]).
///
/// **Memory.** With no snapshot held, a paged variable owns its current pages, the pages
/// its last few writes replaced while they wait out crossbeam-epoch's grace period (each
/// write pushes the epoch forward, so about three writes' worth), at most `3k + 8` spare
/// pages, `k` being the pages the last write replaced, and at most `3n + 8` spare nodes, `n`
/// being the nodes it replaced. A snapshot ([`PagedSnapshot`] or [`OwnedPagedSnapshot`])
/// keeps its version's pages (those later writes replaced: at most one more table) until it
/// is dropped, and nothing the writes after it made, of this variable or any other: neither
/// pins the epoch while it lives. [`stats`](Self::stats) counts pages.
///
/// **In a store.** A paged variable can be a [`Store`](crate::Store)'s member
/// ([`Store::paged`](crate::Store::paged)): store snapshots show it at the same point of the
/// commit order as every other variable ([`StoreSnapshot::get_paged`](crate::StoreSnapshot::get_paged)),
/// checkpoints write it as one tensor, and [`Store::restore`](crate::Store::restore) sets it
/// in the same commit as the rest.
///
/// **In a critical section.** [`CriticalSectionBuilder::paged`](crate::CriticalSectionBuilder::paged)
/// makes it a resource: an execution scatters rows into it and gathers them through its
/// [`Txn`](crate::Txn) ([`scatter_add`](crate::Txn::scatter_add),
/// [`gather`](crate::Txn::gather)), its writes are staged, and the commit builds one table
/// for the batch, visible together with the batch's other writes. While a section holds
/// the variable, its plain writes take its ticket (first come, first served with the
/// executions), and a direct write from inside an execution is
/// [`Error::Reentrant`](crate::Error::Reentrant).
pub struct PagedVariable<A: Element> {
    pub(crate) inner: Arc<Inner<A>>,
}

pub(crate) struct Inner<A: Element> {
    pub(crate) id: u64,
    pub(crate) layout: Arc<Layout>,
    /// The newest table; only a holder of `lock` stores it.
    pub(crate) head: AtomicPtr<PagedTable<A>>,
    /// Touched only under `lock` (and by `drop`).
    book: *const Book<A>,
    /// Who may touch the book ([`access`]).
    lock: Mutex<()>,
    /// Whether a critical section claims the variable: writers then hold its ticket too.
    queued: AtomicBool,
    queue: TicketQueue,
    claims: Claims,
    combiner: Combiner<A>,
    pages: Arc<AtomicUsize>,
}

// SAFETY: the book is touched by one writer at a time (the holder of `lock`); tables are
// immutable once published; everything else is atomic or immutable.
unsafe impl<A: Element> Send for Inner<A> {}
// SAFETY: as above.
unsafe impl<A: Element> Sync for Inner<A> {}

/// Counts of a paged variable's pages: what [`PagedVariable`]'s memory bound is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PagedStats {
    /// The current version number.
    pub version: u64,
    /// Pages in one version of the tensor.
    pub table_pages: usize,
    /// Pages allocated now: the current version's, those of older versions still held or
    /// waiting out their grace period, and spares.
    pub pages_allocated: usize,
}

impl<A: Element> PagedVariable<A> {
    /// A paged variable holding `init` (version 0), with the default page size.
    ///
    /// # Errors
    /// [`Error::RankMismatch`](crate::Error::RankMismatch) for a 0-d array (it has no rows).
    pub fn new<D: Dimension>(init: Array<A, D>) -> Result<Self> {
        Self::builder(init).build()
    }

    /// A builder, to name the variable or choose its page size.
    pub fn builder<D: Dimension>(init: Array<A, D>) -> PagedVariableBuilder<A, D> {
        PagedVariableBuilder::new(init)
    }

    /// The name used in errors.
    pub fn name(&self) -> &str {
        &self.inner.layout.name
    }

    /// The shape, `[rows, ..]`; it never changes.
    pub fn shape(&self) -> &[usize] {
        &self.inner.layout.shape
    }

    /// The current value: wait-free (a pin, one load and a store to one of this thread's
    /// hold slots), and it never changes. It may be kept across a step: it holds its own
    /// table and nothing else (see [`PagedSnapshot`]).
    pub fn read(&self) -> PagedSnapshot<A> {
        self.inner.read()
    }

    /// The current value, held by a count instead of a hold slot: `Send` and `Sync` (see
    /// [`OwnedPagedSnapshot`]).
    pub fn read_owned(&self) -> OwnedPagedSnapshot<A> {
        self.read().to_owned_snapshot()
    }

    /// The current version number: 0, plus one per (combined) write.
    pub fn version(&self) -> u64 {
        self.read().version()
    }

    /// The rows `indices` of the current value (see [`PagedTable::gather`]).
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`](crate::Error::IndexOutOfRange).
    pub fn gather(&self, indices: &[usize]) -> Result<ndarray::ArrayD<A>> {
        self.read().gather(indices)
    }

    /// Adds `rows[i]` to row `indices[i]` for every `i` (a repeated index receives each of
    /// its rows), copying only the pages touched. Returns the number of the version that
    /// includes it; with no rows, nothing is written and that is the current version.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`](crate::Error::IndexOutOfRange) naming the first index past
    /// the rows; [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) unless `rows` has shape
    /// `[indices.len(), ..]` with the variable's other axes. Nothing is applied then.
    pub fn scatter_add<E: Dimension>(
        &self,
        indices: &[usize],
        rows: &ArrayRef<A, E>,
    ) -> Result<u64> {
        self.scatter(indices, rows, Op::Add)
    }

    /// `row += alpha * rows[i]`: a sparse SGD step is
    /// `table.scatter_scaled_add(-lr, &ids, &grads)`.
    ///
    /// # Errors
    /// As for [`scatter_add`](Self::scatter_add).
    pub fn scatter_scaled_add<E: Dimension>(
        &self,
        alpha: A,
        indices: &[usize],
        rows: &ArrayRef<A, E>,
    ) -> Result<u64> {
        self.scatter(indices, rows, Op::Scaled(alpha))
    }

    /// Sets row `indices[i]` to `rows[i]`; where an index repeats, its last row wins.
    ///
    /// # Errors
    /// As for [`scatter_add`](Self::scatter_add).
    pub fn scatter_update<E: Dimension>(
        &self,
        indices: &[usize],
        rows: &ArrayRef<A, E>,
    ) -> Result<u64> {
        self.scatter(indices, rows, Op::Assign)
    }

    /// Adds a dense delta of the whole shape (copies every page).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`](crate::Error::ShapeMismatch); nothing is applied then.
    pub fn assign_add<E: Dimension>(&self, delta: &ArrayRef<A, E>) -> Result<u64> {
        self.dense(delta, Op::Add)
    }

    /// Subtracts a dense delta of the whole shape (copies every page).
    ///
    /// # Errors
    /// As for [`assign_add`](Self::assign_add).
    pub fn assign_sub<E: Dimension>(&self, delta: &ArrayRef<A, E>) -> Result<u64> {
        self.dense(delta, Op::Sub)
    }

    /// `self += alpha * x`, dense (copies every page).
    ///
    /// # Errors
    /// As for [`assign_add`](Self::assign_add).
    pub fn scaled_add<E: Dimension>(&self, alpha: A, x: &ArrayRef<A, E>) -> Result<u64> {
        self.dense(x, Op::Scaled(alpha))
    }

    /// Replaces the whole value (same shape).
    ///
    /// # Errors
    /// As for [`assign_add`](Self::assign_add).
    pub fn assign<E: Dimension>(&self, value: &ArrayRef<A, E>) -> Result<u64> {
        self.dense(value, Op::Assign)
    }

    /// Page counts (see the memory bound above).
    pub fn stats(&self) -> PagedStats {
        PagedStats {
            version: self.version(),
            table_pages: self.inner.layout.pages,
            // Relaxed: a statistic.
            pages_allocated: self.inner.pages.load(Ordering::Relaxed),
        }
    }

    fn scatter<E: Dimension>(
        &self,
        indices: &[usize],
        rows: &ArrayRef<A, E>,
        op: Op<A>,
    ) -> Result<u64> {
        let layout = &self.inner.layout;
        check_rows(&layout.name, &layout.shape, indices, rows.shape())?;
        if indices.is_empty() && !running::inside() {
            return Ok(self.version()); // no row, no version (as `Variable`'s scatters)
        }
        let data = standard_elements(rows);
        self.submit(Delta {
            shape: rows.shape(),
            data: &data,
            op,
            rows: Some(indices),
        })
    }

    fn dense<E: Dimension>(&self, delta: &ArrayRef<A, E>, op: Op<A>) -> Result<u64> {
        let layout = &self.inner.layout;
        check_shape(&layout.name, &layout.shape, delta.shape())?;
        let data = standard_elements(delta);
        self.submit(Delta::dense(delta.shape(), &data, op))
    }

    /// Combines a checked delta with the writes pending now. A pass that panicked (its
    /// writers get no version) built nothing visible, so the delta is simply submitted again.
    /// A thread inside an execution writes alone: it must not serve others' writes, which
    /// may wait for a ticket ([`access`]).
    fn submit(&self, delta: Delta<'_, A>) -> Result<u64> {
        if running::inside() {
            let _access = self.inner.access()?;
            // SAFETY: we hold the access.
            return Ok(unsafe { self.inner.write(&[delta], None) });
        }
        loop {
            if let Some(version) = self.inner.combiner.submit(delta, &*self.inner) {
                return Ok(version);
            }
        }
    }
}

impl<A: Element> Clone for PagedVariable<A> {
    /// Another handle to the same variable.
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<A: Element> fmt::Debug for PagedVariable<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PagedVariable")
            .field("name", &self.name())
            .field("shape", &self.shape())
            .field("rows_per_page", &self.inner.layout.rows_per_page)
            .finish_non_exhaustive()
    }
}
