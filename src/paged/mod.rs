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

mod access;
mod at;
mod book;
mod snapshot;
mod table;
#[cfg(test)]
mod tests;

#[cfg(all(test, mvtensor_loom))]
#[path = "../tests/loom_paged_release.rs"]
mod loom_paged_release;
#[cfg(all(test, mvtensor_loom))]
#[path = "../tests/loom_paged_settle.rs"]
mod loom_paged_settle;

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use ndarray::{Array, ArrayRef, Dimension};

pub(crate) use self::at::TableAt;
use self::book::Book;
pub use self::snapshot::{OwnedPagedSnapshot, PagedSnapshot};
use self::table::Layout;
pub use self::table::PagedTable;
use crate::combine::{Combiner, Publish};
use crate::error::{check_has_rows, check_rows, check_shape, Result};
use crate::help::Helpers;
use crate::kernel::{standard_elements, Delta, Op};
use crate::pool::free_orphans;
use crate::record::CommitRecord;
use crate::running;
use crate::section::Claims;
use crate::sync::{epoch, next_id, AtomicBool, AtomicPtr, AtomicUsize, Mutex, Ordering};
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
/// being the nodes it replaced. An [`OwnedPagedSnapshot`] keeps its version's pages, and
/// (versions are reused oldest first) the pages every later write replaced, until it is
/// dropped: hold it for a checkpoint, not forever. [`stats`](Self::stats) counts pages.
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
        PagedVariableBuilder {
            init,
            name: None,
            rows_per_page: None,
            tree: None,
        }
    }

    /// The name used in errors.
    pub fn name(&self) -> &str {
        &self.inner.layout.name
    }

    /// The shape, `[rows, ..]`; it never changes.
    pub fn shape(&self) -> &[usize] {
        &self.inner.layout.shape
    }

    /// The current value: wait-free (a pin and one load), and it never changes.
    pub fn read(&self) -> PagedSnapshot<A> {
        self.inner.read()
    }

    /// The current value, held by a count instead of a pin (see [`OwnedPagedSnapshot`]).
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
    /// includes it.
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

impl<A: Element> Inner<A> {
    /// The current value (see [`PagedVariable::read`]): the head, or while a section's
    /// commit has it pending, the table before.
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
