//! [`PagedSlot`]: what a batch does with a paged resource.
//!
//! A paged variable's working copy would be its whole table, so an execution stages its
//! writes instead: each is kept as the delta it is (rows and values, copied), and the commit
//! builds one table from all of them in order, as a combining pass does for plain writers:
//! it copies the pages the batch touches, once. Reads of rows inside the execution
//! ([`gather`](PagedSlot::gather)) are the table the batch began with plus the staged deltas
//! of those rows. A rollback drops the execution's staged deltas.

use std::any::Any;
use std::cell::RefCell;
use std::sync::Arc;

use ndarray::ArrayD;
use smallvec::SmallVec;

use super::slot::AnySlot;
use crate::error::Result;
use crate::kernel::{self, Delta, Op};
use crate::paged::PagedTable;
use crate::record::CommitRecord;
use crate::sync::{epoch, Ordering};
use crate::{Element, PagedVariable};

/// One paged resource's state in a batch.
pub(super) struct PagedSlot<A: Element> {
    pub(super) variable: PagedVariable<A>,
    state: RefCell<State<A>>,
}

struct State<A: Element> {
    /// The head when the batch first touched the slot (null before): it stays the head while
    /// the batch holds the variable's ticket, and the head's count keeps it alive.
    base: *const PagedTable<A>,
    /// The batch's writes, in order.
    staged: Vec<Staged<A>>,
    /// Emptied staged writes, whose buffers the next ones reuse: a steady stream of
    /// executions allocates nothing for them.
    spare: Vec<Staged<A>>,
    /// How many were staged when the running execution began: what a rollback keeps.
    begun: usize,
    /// Whether `install` put a pending table in (for `finish`).
    installed: bool,
}

/// A staged write: an owned [`Delta`].
struct Staged<A> {
    shape: Vec<usize>,
    data: Vec<A>,
    op: Op<A>,
    rows: Option<Vec<usize>>,
}

impl<A: Copy> Staged<A> {
    fn delta(&self) -> Delta<'_, A> {
        Delta {
            shape: &self.shape,
            data: &self.data,
            op: self.op,
            rows: self.rows.as_deref(),
        }
    }
}

// SAFETY: `base` is only followed by the batch flag's holder while it holds the variable's
// ticket (the head's count keeps it alive); the `RefCell` is only touched by the thread
// holding the section's batch flag, whose hand-over (Release/Acquire) orders every access.
unsafe impl<A: Element> Send for PagedSlot<A> {}

impl<A: Element> PagedSlot<A> {
    pub(super) fn new(variable: PagedVariable<A>) -> Self {
        Self {
            variable,
            state: RefCell::new(State {
                base: std::ptr::null(),
                staged: Vec::new(),
                spare: Vec::new(),
                begun: 0,
                installed: false,
            }),
        }
    }

    /// Stages a checked delta (its shape and rows are the caller's to check).
    pub(super) fn stage(&self, delta: Delta<'_, A>) {
        let mut state = self.state.borrow_mut();
        state.load(&self.variable);
        let mut staged = state.spare.pop().unwrap_or_else(|| Staged {
            shape: Vec::new(),
            data: Vec::new(),
            op: delta.op,
            rows: None,
        });
        staged.shape.clear();
        staged.shape.extend_from_slice(delta.shape);
        staged.data.clear();
        staged.data.extend_from_slice(delta.data);
        staged.op = delta.op;
        match (delta.rows, &mut staged.rows) {
            (Some(rows), Some(kept)) => {
                kept.clear();
                kept.extend_from_slice(rows);
            }
            (rows, kept) => *kept = rows.map(<[usize]>::to_vec),
        }
        state.staged.push(staged);
    }

    /// The rows `indices` as this execution sees them: the batch's base table plus every
    /// staged write to them, in order. Costs `O((staged rows + indices) log indices)`: the
    /// positions asked for are sorted by row once, and each staged row looks itself up.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`](crate::Error::IndexOutOfRange).
    pub(super) fn gather(&self, indices: &[usize]) -> Result<ArrayD<A>> {
        let mut state = self.state.borrow_mut();
        state.load(&self.variable);
        // SAFETY: loaded; the head's count keeps it alive while we hold the ticket.
        let base = unsafe { &*state.base };
        let mut out = base.gather(indices)?;
        let width = self.variable.inner.layout.width;
        if width == 0 || state.staged.is_empty() {
            return Ok(out);
        }
        let out_rows = out.as_slice_mut().expect("gather returns a standard array");
        // (row, position in `out`), by row.
        let mut wanted: Vec<(usize, usize)> = indices.iter().copied().zip(0..).collect();
        wanted.sort_unstable();
        let mut apply = |row: usize, values: &[A], op: Op<A>| {
            let first = wanted.partition_point(|&(r, _)| r < row);
            for &(_, at) in wanted[first..].iter().take_while(|&&(r, _)| r == row) {
                kernel::accumulate(&mut out_rows[at * width..][..width], values, op);
            }
        };
        for staged in &state.staged {
            match &staged.rows {
                Some(rows) => {
                    for (&row, values) in rows.iter().zip(staged.data.chunks_exact(width)) {
                        apply(row, values, staged.op);
                    }
                }
                None => {
                    let mut last = None;
                    for &(row, _) in &wanted {
                        // Each distinct row once: `apply` serves its every position.
                        if last.replace(row) != Some(row) {
                            apply(row, &staged.data[row * width..][..width], staged.op);
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// Builds the batch's table and publishes it, committed now or pending with `record`.
    fn write(&self, record: Option<&Arc<CommitRecord>>) -> bool {
        let state = self.state.borrow();
        if state.staged.is_empty() {
            return false;
        }
        let deltas: SmallVec<[_; 8]> = state.staged.iter().map(Staged::delta).collect();
        let inner = &self.variable.inner;
        let _lock = inner.access_with_ticket();
        // SAFETY: we hold the variable's ticket (the batch's) and the book's lock.
        unsafe { inner.write(&deltas, record) };
        true
    }
}

impl<A: Element> State<A> {
    /// Drops the staged writes from `from` on, keeping the buffers of a few (a batch that
    /// staged many, or a large one, gives the rest back to the allocator).
    fn spare_from(&mut self, from: usize) {
        /// Staged writes whose buffers are kept.
        const KEPT: usize = 16;
        /// Elements a kept buffer may hold: a dense write (a restore) is not kept for the
        /// section's life.
        const KEPT_ELEMENTS: usize = 64 * 1024;
        let room = KEPT.saturating_sub(self.spare.len());
        let small = |s: &Staged<A>| s.data.capacity() <= KEPT_ELEMENTS;
        let mut dropped = self.staged.drain(from..).filter(small);
        self.spare.extend(dropped.by_ref().take(room));
    }

    /// Loads the base on the batch's first touch. The batch holds the ticket, so the head is
    /// committed (a section commits before it serves the next ticket, and plain writes
    /// commit as they publish) and stays put.
    fn load(&mut self, variable: &PagedVariable<A>) {
        if self.base.is_null() {
            // Acquire: pairs with the swap (Release) of the last write, whose ticket or lock
            // hand-over ordered it before us anyway.
            self.base = variable.inner.head.load(Ordering::Acquire);
        }
    }
}

impl<A: Element> AnySlot for PagedSlot<A> {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn begin(&self) {
        let mut state = self.state.borrow_mut();
        state.begun = state.staged.len();
    }

    fn rollback(&self) {
        let mut state = self.state.borrow_mut();
        let begun = state.begun;
        state.spare_from(begun);
    }

    fn staged(&self) -> bool {
        !self.state.borrow().staged.is_empty()
    }

    fn check(&self, _guard: &epoch::Guard) {
        let state = self.state.borrow();
        // Relaxed: we hold the ticket; only a broken invariant could have moved the head.
        let head = self.variable.inner.head.load(Ordering::Relaxed);
        assert!(
            std::ptr::eq(head, state.base),
            "a queued variable changed while its tickets were held"
        );
    }

    fn publish(&self, _guard: &epoch::Guard) {
        self.write(None);
    }

    fn install(&self, record: &Arc<CommitRecord>, _guard: &epoch::Guard) {
        if self.write(Some(record)) {
            self.state.borrow_mut().installed = true;
        }
    }

    fn finish(&self, _guard: &epoch::Guard) {
        let mut state = self.state.borrow_mut();
        if std::mem::take(&mut state.installed) {
            let inner = &self.variable.inner;
            let _lock = inner.access_with_ticket();
            // SAFETY: we hold the ticket and the lock; the head is the table `install` put
            // in, and the batch committed its record.
            unsafe { inner.settled() };
        }
    }

    fn clear(&self) {
        let mut state = self.state.borrow_mut();
        state.base = std::ptr::null();
        state.spare_from(0);
        state.begun = 0;
        state.installed = false;
    }
}
