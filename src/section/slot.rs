//! [`Slot`]: what a batch does with one resource of its section — the value it builds on,
//! the working copy its executions write in place, and the borrows handed out of them.
//!
//! A section keeps one slot per resource for its whole life, so that a batch allocates
//! nothing for them (the working copy comes from the variable's pool). Only the thread
//! holding the section's batch flag touches the slots; within that thread, a [`Txn`]
//! hands out shared and mutable borrows of them, checked at run time as `RefCell` does.
//!
//! [`Txn`]: super::Txn

use std::any::Any;
use std::cell::{Cell, UnsafeCell};
use std::sync::Arc;

use ndarray::ArrayD;

use crate::error::{Error, Result};
use crate::kernel::{self, Delta};
use crate::record::{CommitRecord, Record};
use crate::sync::epoch;
use crate::variable::Taker;
use crate::version::{Building, Pinned, Version};
use crate::{Element, Variable};

/// A slot without its element type, so that a section's resources may mix dtypes.
pub(super) trait AnySlot: Send {
    fn as_any(&self) -> &dyn Any;
    /// An execution begins: its writes are what a rollback undoes.
    fn begin(&self);
    /// The execution failed: back to what it began with.
    fn rollback(&self);
    /// Whether the batch has a write to commit here.
    fn staged(&self) -> bool;
    /// Before any install: panics unless the head is still the base (settling a slipped-in
    /// lock-free write first), so that a broken invariant stops the commit before anything
    /// is installed.
    fn check(&self, guard: &epoch::Guard);
    /// Commits the working copy on its own (the batch wrote only here): no shared record.
    fn publish(&self, guard: &epoch::Guard);
    /// Installs the working copy with the batch's pending `record`.
    fn install(&self, record: &Arc<CommitRecord>, guard: &epoch::Guard);
    /// After the record committed: retire the replaced version, trim the pool. `guard` is
    /// the one `install` ran under, pinned since.
    fn finish(&self, guard: &epoch::Guard);
    /// The batch is over (committed or not): back to empty.
    fn clear(&self);
}

/// One resource's state in a batch.
pub(super) struct Slot<A: Element> {
    pub(super) variable: Variable<A>,
    /// 0: free; n > 0: n shared borrows; -1: one mutable borrow.
    borrows: Cell<isize>,
    state: UnsafeCell<State<A>>,
}

struct State<A: Element> {
    /// The head when the batch first touched the slot (null before). While the batch holds
    /// the variable's ticket the head stays this version, and its count keeps it alive.
    base: *const Version<A>,
    /// The working copy: the batch's next value, unpublished.
    staged: Option<Building<A>>,
    /// `Some(before)` once the running execution has written: `staged` as it began.
    checkpoint: Option<Option<Building<A>>>,
    /// The working copy once installed (null before): the head until the batch ends, and
    /// reached under the batch's guard, which stays pinned until `finish` (no count taken:
    /// two atomic operations per version saved).
    installed: *const Version<A>,
}

// SAFETY: the raw `base` and `installed` are only followed by the flag holder while it
// holds the variable's ticket (the head's count keeps them alive); `Cell`/`UnsafeCell` are
// only touched by the thread holding the section's batch flag, whose hand-over
// (Release/Acquire) orders every access. The rest is `Send`.
unsafe impl<A: Element> Send for Slot<A> {}

impl<A: Element> Slot<A> {
    pub(super) fn new(variable: Variable<A>) -> Self {
        Self {
            variable,
            borrows: Cell::new(0),
            state: UnsafeCell::new(State {
                base: std::ptr::null(),
                staged: None,
                checkpoint: None,
                installed: std::ptr::null(),
            }),
        }
    }

    /// The state, to change.
    ///
    /// # Safety
    /// No borrow of the slot may be alive (`borrows == 0`), nor any other reference from
    /// `state`.
    #[allow(clippy::mut_from_ref)] // the run-time borrow count is the check
    unsafe fn state(&self) -> &mut State<A> {
        // SAFETY: the caller's contract.
        unsafe { &mut *self.state.get() }
    }

    /// A shared borrow of the execution's view: the working copy, or the base.
    pub(super) fn read(&self, section: &str) -> Result<(&ArrayD<A>, Borrow<'_>)> {
        let n = self.borrows.get();
        if n < 0 {
            return Err(self.borrowed(section, true));
        }
        if n == 0 {
            // SAFETY: no borrow is alive.
            unsafe { self.state() }.load(&self.variable);
        }
        self.borrows.set(n + 1);
        // SAFETY: shared borrows only read, and no mutable one exists until they are gone.
        let state = unsafe { &*self.state.get() };
        Ok((state.current(), Borrow(&self.borrows)))
    }

    /// A mutable borrow of the working copy, made (from the pool) on the execution's first
    /// write and filled as `init` says.
    #[allow(clippy::mut_from_ref)] // the run-time borrow count is the check
    pub(super) fn write(
        &self,
        section: &str,
        init: Init<'_, A>,
    ) -> Result<(&mut ArrayD<A>, Borrow<'_>)> {
        let n = self.borrows.get();
        if n != 0 {
            return Err(self.borrowed(section, n < 0));
        }
        // SAFETY: no borrow is alive.
        let state = unsafe { self.state() };
        state.load(&self.variable);
        if let Init::Delta(delta) = init {
            delta.check(self.variable.name(), state.current().shape())?;
        }
        if state.checkpoint.is_none() {
            // The execution's first write: fill a pooled version from what it sees, and keep
            // what was staged before (by earlier executions of the batch) for a rollback.
            let current = state.current();
            let mut next = self.variable.inner.building(current, Taker::Anyone);
            match init {
                Init::Copy => kernel::copy(current, &mut next.data),
                Init::Overwrite => {}
                Init::Delta(delta) => kernel::apply(current, &[delta], &mut next.data),
            }
            state.checkpoint = Some(state.staged.replace(next));
        } else if let Init::Delta(delta) = init {
            let staged = state.staged.as_mut().expect("written in this execution");
            kernel::apply_in_place(&mut staged.data, delta);
        }
        self.borrows.set(-1);
        let staged = &mut state.staged.as_mut().expect("staged above").data;
        Ok((staged, Borrow(&self.borrows)))
    }

    /// A mutable borrow of a fresh working copy, beside the value it replaces: for an
    /// execution that computes every element of the next value from the current one in one
    /// sweep, with no copy first. The working copy's elements are unspecified (a pooled
    /// buffer's stale values) until the caller writes them.
    #[allow(clippy::mut_from_ref)] // the run-time borrow count is the check
    pub(super) fn rewrite(
        &self,
        section: &str,
    ) -> Result<(Source<'_, A>, &mut ArrayD<A>, Borrow<'_>)> {
        let n = self.borrows.get();
        if n != 0 {
            return Err(self.borrowed(section, n < 0));
        }
        // SAFETY: no borrow is alive.
        let state = unsafe { self.state() };
        state.load(&self.variable);
        let next = self.variable.inner.building(state.current(), Taker::Anyone);
        let source = match state.checkpoint {
            // Already written in this execution: that copy is the source, and the borrow
            // owns it (back to the pool when the borrow ends).
            Some(_) => Source::Replaced(state.staged.replace(next).expect("written")),
            // The execution's first write: as in `write`, what was staged before is kept
            // for a rollback, and stays unchanged until the execution ends.
            None => {
                state.checkpoint = Some(state.staged.replace(next));
                match &state.checkpoint {
                    Some(Some(before)) => Source::Kept(&before.data),
                    // SAFETY: loaded, and the head's count keeps it alive while we hold the
                    // ticket.
                    _ => Source::Kept(unsafe { &(*state.base).data }),
                }
            }
        };
        self.borrows.set(-1);
        let staged = &mut state.staged.as_mut().expect("staged above").data;
        Ok((source, staged, Borrow(&self.borrows)))
    }

    fn borrowed(&self, section: &str, mutably: bool) -> Error {
        Error::Borrowed {
            variable: self.variable.name().to_owned(),
            section: section.to_owned(),
            mutably,
        }
    }
}

impl<A: Element> State<A> {
    /// Loads the base on the batch's first touch. The caller holds the variable's ticket, so
    /// only a lock-free write that slipped in before the section claimed it can be pending:
    /// settle it, and build on it.
    ///
    /// Pinned only for this: the base stays the head until this batch commits (nobody else
    /// may replace it while we hold the ticket), and the head's count keeps it alive, so the
    /// execution's closure runs unpinned and holds back no other version's reuse.
    fn load(&mut self, variable: &Variable<A>) {
        if self.base.is_null() {
            let guard = &epoch::pin();
            let current = variable.inner.head.current(guard);
            current.settle(guard);
            self.base = current.version.as_ptr();
        }
    }

    /// What the running execution sees.
    fn current(&self) -> &ArrayD<A> {
        match &self.staged {
            Some(staged) => &staged.data,
            // SAFETY: loaded, and the head's count keeps it alive while we hold the ticket.
            None => unsafe { &(*self.base).data },
        }
    }
}

impl<A: Element> AnySlot for Slot<A> {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn begin(&self) {
        self.borrows.set(0); // a leaked guard's borrow ends with its execution
                             // SAFETY: between executions no borrow is alive.
        unsafe { self.state() }.checkpoint = None; // the previous one's writes are kept
    }

    fn rollback(&self) {
        self.borrows.set(0); // a leaked guard's borrow ends with its execution
                             // SAFETY: as above.
        let state = unsafe { self.state() };
        if let Some(before) = state.checkpoint.take() {
            state.staged = before; // the discarded copy goes back to the pool
        }
    }

    fn staged(&self) -> bool {
        // SAFETY: between executions: only read.
        unsafe { &*self.state.get() }.staged.is_some()
    }

    fn check(&self, guard: &epoch::Guard) {
        // SAFETY: between executions.
        let state = unsafe { &*self.state.get() };
        let current = self.variable.inner.head.current(guard);
        current.settle(guard); // we hold the ticket: only a slipped-in free write
        assert!(
            std::ptr::eq(current.version.as_ptr(), state.base),
            "a queued variable changed while its tickets were held"
        );
    }

    fn publish(&self, guard: &epoch::Guard) {
        // SAFETY: between executions.
        let state = unsafe { self.state() };
        let Some(mut new) = state.staged.take() else {
            return;
        };
        let inner = &self.variable.inner;
        // SAFETY: loaded, kept alive by the head.
        new.number = unsafe { (*state.base).number } + 1;
        loop {
            let current = inner.head.current(guard);
            debug_assert!(std::ptr::eq(current.version.as_ptr(), state.base));
            match inner.head.publish(&current, new, guard) {
                Ok(installed) => {
                    inner.published(installed.number, installed.bytes());
                    return;
                }
                // Only the queued mark can have changed (another section claiming or
                // releasing the variable); the version is still ours to replace.
                Err(lost) => new = lost,
            }
        }
    }

    fn install(&self, record: &Arc<CommitRecord>, guard: &epoch::Guard) {
        // SAFETY: between executions.
        let state = unsafe { self.state() };
        let Some(mut new) = state.staged.take() else {
            return;
        };
        let inner = &self.variable.inner;
        // SAFETY: loaded, kept alive by the head.
        new.number = unsafe { (*state.base).number } + 1;
        new.record = Record::Shared(Arc::clone(record));
        loop {
            let current = inner.head.current(guard);
            debug_assert!(std::ptr::eq(current.version.as_ptr(), state.base));
            match inner.head.install(&current, new, guard) {
                Ok(installed) => {
                    state.installed = installed.as_ptr();
                    return;
                }
                // As in `publish`.
                Err(lost) => new = lost,
            }
        }
    }

    fn finish(&self, guard: &epoch::Guard) {
        // SAFETY: between executions.
        let state = unsafe { self.state() };
        let installed = std::mem::replace(&mut state.installed, std::ptr::null());
        if !installed.is_null() {
            // SAFETY: installed under the batch's guard, which the caller still pins (the
            // `AnySlot::finish` contract); and it is still the head (we hold the ticket).
            let installed = unsafe { Pinned::new(installed) };
            installed.release_prev(guard);
            self.variable
                .inner
                .published(installed.number, installed.bytes());
        }
    }

    fn clear(&self) {
        self.borrows.set(0);
        // SAFETY: the batch is over: nothing borrows the slot.
        let state = unsafe { self.state() };
        state.base = std::ptr::null();
        state.staged = None;
        state.checkpoint = None;
        state.installed = std::ptr::null();
    }
}

/// How an execution's first write to a slot fills its working copy.
pub(super) enum Init<'d, A> {
    /// With a copy of what the execution sees: the caller changes some elements.
    Copy,
    /// Not at all: the caller overwrites every element.
    Overwrite,
    /// With `current ± delta`, in one sweep (a later write adds the delta in place).
    Delta(Delta<'d, A>),
}

/// What a [`Slot::rewrite`] computes from.
pub(super) enum Source<'s, A: Element> {
    /// The value before the execution's first write: unchanged until the execution ends.
    Kept(&'s ArrayD<A>),
    /// The execution's own earlier working copy, which the new one replaces.
    Replaced(Building<A>),
    /// A copy of what the execution wrote before (private state rewritten twice).
    Copied(ArrayD<A>),
}

impl<A: Element> Source<'_, A> {
    pub(super) fn data(&self) -> &ArrayD<A> {
        match self {
            Source::Kept(data) => data,
            Source::Replaced(building) => &building.data,
            Source::Copied(data) => data,
        }
    }
}

/// A borrow of a slot (shared or mutable); ends when dropped.
pub(super) struct Borrow<'s>(&'s Cell<isize>);

impl<'s> Borrow<'s> {
    /// A borrow counted in `borrows` (already counted: the drop gives it back).
    pub(super) fn new(borrows: &'s Cell<isize>) -> Self {
        Self(borrows)
    }
}

impl Drop for Borrow<'_> {
    fn drop(&mut self) {
        let n = self.0.get();
        self.0.set(if n < 0 { 0 } else { n - 1 });
    }
}
