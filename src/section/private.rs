//! [`Private`]: state that only one section's executions touch, changed in place.
//!
//! An optimizer's moments or a step count are read and written by its step and by nobody
//! else. Kept as a [`Variable`](crate::Variable), each commit makes a new version of them
//! (a copy, a head swap, a retirement) that only serves readers who never come. A `Private`
//! is claimed by one section, exclusively, and its executions change it in place: no version,
//! no commit record, nothing to reclaim.
//!
//! **Access.** Only through a [`Txn`](super::Txn) of the owning section
//! ([`private`](super::Txn::private), [`private_mut`](super::Txn::private_mut)); through any
//! other section's it is [`Error::NotInResourceSet`](crate::Error::NotInResourceSet). There
//! is no read from outside an execution: to look at the state, copy it out in one
//! (`section.execute(|tx| Ok(tx.private(&state)?.to_owned()))`), which orders the look with
//! the section's commits.
//!
//! **All or nothing still holds.** The slot keeps a second array of the state's shape. The
//! first [`private_mut`](super::Txn::private_mut) of an execution copies the value into it;
//! the first [`private_rewrite`](super::Txn::private_rewrite) copies nothing: the value's
//! array becomes the kept one (and the source), the other one the value to fill. A failed or
//! panicking execution copies the kept elements back, so it leaves no trace, as with any
//! resource. An optimizer step, which computes the next state from the last, so changes
//! private state with no copy at all.
//!
//! **Who touches the value.** It sits behind the state's own ticket queue: a section's batch
//! takes that ticket with those of its other resources (in id order) and holds it while its
//! executions run, so whoever touches the value holds the ticket, and the ticket's hand-over
//! (`ticket.rs`) orders one holder's accesses before the next one's.

use std::any::Any;
use std::cell::{Cell, UnsafeCell};
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use ndarray::{Array, ArrayD, Dimension, IxDyn};

use super::claims::Claims;
use super::slot::{AnySlot, Borrow, Source};
use super::Resource;
use crate::error::{Error, Result};
use crate::record::CommitRecord;
use crate::sync::{epoch, next_id};
use crate::ticket::TicketQueue;
use crate::Element;

/// State owned by one [`CriticalSection`](crate::CriticalSection), which its executions
/// change in place (an optimizer's moments, a step count): no version per commit.
///
/// Add it to a section with [`CriticalSectionBuilder::private`](super::CriticalSectionBuilder::private);
/// at most one section holds it at a time (another is refused with
/// [`Error::ResourceConflict`](crate::Error::ResourceConflict) until that section is
/// dropped). Inside an execution, [`Txn::private`](super::Txn::private) and
/// [`Txn::private_mut`](super::Txn::private_mut) lend it, checked like the resources'
/// borrows. A failed or panicking execution leaves it as it was. Cloning the handle shares
/// the state.
///
/// ```
/// use mvtensor::{CriticalSection, Error, Private, Variable};
/// use ndarray::{arr0, arr1};
///
/// let w = Variable::new(arr1(&[1.0f32, 2.0]));
/// let momentum = Private::new("momentum", arr1(&[0.0f32, 0.0]));
/// let steps = Private::new("steps", arr0(0i64));
/// let step = CriticalSection::builder()
///     .resource(&w)
///     .private(&momentum)
///     .private(&steps)
///     .build()?;
/// let grad = arr1(&[0.5f32, -0.5]);
///
/// step.execute(|tx| {
///     let mut m = tx.private_mut(&momentum)?;
///     m.zip_mut_with(&grad, |m, &g| *m = 0.9 * *m + g);
///     tx.write(&w)?.scaled_add(-0.1, &*m);
///     tx.private_mut(&steps)?[[]] += 1;
///     Ok::<_, Error>(())
/// })?;
/// assert_eq!(w.read().as_slice().unwrap(), &[0.95, 2.05]);
/// let count = step.execute(|tx| Ok::<_, Error>(tx.private(&steps)?[[]]))?;
/// assert_eq!(count, 1);
/// # Ok::<(), Error>(())
/// ```
pub struct Private<A: Element, D: Dimension = IxDyn> {
    pub(crate) inner: Arc<Inner<A>>,
    _dim: PhantomData<fn() -> D>,
}

pub(crate) struct Inner<A: Element> {
    id: u64,
    name: String,
    shape: Box<[usize]>,
    /// Elements in `value`, which never changes shape.
    len: usize,
    queue: TicketQueue,
    claims: Claims,
    /// Touched only by the holder of `queue`'s ticket.
    value: UnsafeCell<ArrayD<A>>,
}

// SAFETY: `value` is reached only by the holder of `queue`'s ticket (module docs), whose
// hand-over (Release, then Acquire) orders every access; moving the array between threads
// that way needs `A: Send`, which `Element` implies. The rest is `Send + Sync`.
unsafe impl<A: Element> Sync for Inner<A> {}

impl<A: Element, D: Dimension> Private<A, D> {
    /// New state named `name` (errors show the name), holding `value`.
    pub fn new(name: impl Into<String>, value: Array<A, D>) -> Self {
        let value = value.into_dyn();
        // A standard layout, as every value the crate lends (the kernel takes slices).
        let value = if value.is_standard_layout() {
            value
        } else {
            value.as_standard_layout().into_owned()
        };
        Self {
            inner: Arc::new(Inner {
                id: next_id(),
                name: name.into(),
                shape: value.shape().into(),
                len: value.len(),
                queue: TicketQueue::default(),
                claims: Claims::default(),
                value: UnsafeCell::new(value),
            }),
            _dim: PhantomData,
        }
    }

    /// The state's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The state's shape, which never changes (its borrows change elements, not shapes).
    pub fn shape(&self) -> &[usize] {
        &self.inner.shape
    }

    pub(super) fn id(&self) -> u64 {
        self.inner.id
    }

    /// A handle of `inner`, whose rank the caller checked to be `D`'s.
    pub(crate) fn from_inner(inner: Arc<Inner<A>>) -> Self {
        Self {
            inner,
            _dim: PhantomData,
        }
    }
}

impl<A: Element, D: Dimension> Clone for Private<A, D> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            _dim: PhantomData,
        }
    }
}

impl<A: Element, D: Dimension> fmt::Debug for Private<A, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Private")
            .field("name", &self.name())
            .field("dtype", &A::DTYPE)
            .field("shape", &self.shape())
            .finish()
    }
}

impl<A: Element> Inner<A> {
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The state's ticket queue: whoever holds a ticket may touch the value.
    pub(crate) fn queue(&self) -> &TicketQueue {
        &self.queue
    }

    /// A copy of the value.
    ///
    /// # Safety
    /// The caller holds a ticket of [`queue`](Self::queue).
    pub(crate) unsafe fn copy(&self) -> ArrayD<A> {
        // SAFETY: the caller's contract: nobody else touches the value meanwhile.
        unsafe { &*self.value.get() }.clone()
    }

    /// `value`'s elements (this state's value), in order.
    fn elements<'v>(&self, value: &'v ArrayD<A>) -> &'v [A] {
        debug_assert_eq!(value.as_slice().map(<[A]>::len), Some(self.len));
        // SAFETY: the value is in standard layout and keeps its shape for life (made so in
        // `new`; its borrows are views, which cannot change its layout), so its `len`
        // elements are contiguous from its first; the slice borrows it.
        unsafe { std::slice::from_raw_parts(value.as_ptr(), self.len) }
    }

    /// `value`'s elements, to change.
    fn elements_mut<'v>(&self, value: &'v mut ArrayD<A>) -> &'v mut [A] {
        debug_assert_eq!(value.as_slice().map(<[A]>::len), Some(self.len));
        // SAFETY: as in `elements`, borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(value.as_mut_ptr(), self.len) }
    }
}

impl<A: Element> Resource for Inner<A> {
    fn id(&self) -> u64 {
        self.id
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn queue(&self) -> &TicketQueue {
        &self.queue
    }
    fn claims(&self) -> &Claims {
        &self.claims
    }
    fn shareable(&self) -> bool {
        false
    }
    /// No plain writer exists to divert.
    fn set_queued(&self, _: bool) {}
    /// No pool to trim.
    fn reclaimed(&self) {}
}

/// What a batch does with one private state: lends it, and undoes an execution's writes.
pub(super) struct PrivateSlot<A: Element> {
    state: Arc<Inner<A>>,
    /// 0: free; n > 0: n shared borrows; -1: one mutable borrow.
    borrows: Cell<isize>,
    /// Whether the running execution has written: `before` then holds what it began with.
    written: Cell<bool>,
    /// The value as the running execution began, once it writes: a copy (`write`), or the
    /// very array the value was (`rewrite`, which lends the other one to fill). Kept between
    /// executions; `None` until the first write.
    before: UnsafeCell<Option<ArrayD<A>>>,
}

// SAFETY: only the thread holding the section's batch flag touches the slot (the section's
// `FlagHeld`), and the value behind `state` only while that thread holds the state's ticket;
// the flag's and the ticket's hand-overs order the accesses. The arrays are `Send`.
unsafe impl<A: Element> Send for PrivateSlot<A> {}

impl<A: Element> PrivateSlot<A> {
    pub(super) fn new(state: Arc<Inner<A>>) -> Self {
        Self {
            state,
            borrows: Cell::new(0),
            written: Cell::new(false),
            before: UnsafeCell::new(None),
        }
    }

    /// A shared borrow of the state.
    pub(super) fn read(&self, section: &str) -> Result<(&ArrayD<A>, Borrow<'_>)> {
        let n = self.borrows.get();
        if n < 0 {
            return Err(self.borrowed(section, true));
        }
        self.borrows.set(n + 1);
        // SAFETY: the batch holds the state's ticket while its executions run (module docs);
        // shared borrows only read, and no mutable one exists until they are gone.
        let value = unsafe { &*self.state.value.get() };
        Ok((value, Borrow::new(&self.borrows)))
    }

    /// The mutable borrow of the state; the execution's first one copies it aside first.
    #[allow(clippy::mut_from_ref)] // the run-time borrow count is the check
    pub(super) fn write(&self, section: &str) -> Result<(&mut ArrayD<A>, Borrow<'_>)> {
        let n = self.borrows.get();
        if n != 0 {
            return Err(self.borrowed(section, n < 0));
        }
        // SAFETY: as in `read`, and no borrow of the state or of `before` is alive.
        let (value, before) = unsafe { (&mut *self.state.value.get(), &mut *self.before.get()) };
        if !self.written.replace(true) {
            match before {
                Some(before) => {
                    let elements = self.state.elements(value);
                    self.state.elements_mut(before).copy_from_slice(elements);
                }
                // The slot's first write: the buffer is made, once.
                None => *before = Some(value.clone()),
            }
        }
        self.borrows.set(-1);
        Ok((value, Borrow::new(&self.borrows)))
    }

    /// The state's value beside an array to fill with its next one, with no copy: the
    /// execution's first such borrow lends the value itself as the source (kept aside for a
    /// rollback) and the slot's buffer, whose elements are stale, as the target. A later one
    /// in the same execution reads a copy of what the first wrote.
    #[allow(clippy::mut_from_ref)] // the run-time borrow count is the check
    pub(super) fn rewrite(
        &self,
        section: &str,
    ) -> Result<(Source<'_, A>, &mut ArrayD<A>, Borrow<'_>)> {
        let n = self.borrows.get();
        if n != 0 {
            return Err(self.borrowed(section, n < 0));
        }
        // SAFETY: as in `write`.
        let (value, before) = unsafe { (&mut *self.state.value.get(), &mut *self.before.get()) };
        let source = if self.written.replace(true) {
            Source::Copied(value.clone())
        } else {
            let before = before.get_or_insert_with(|| value.clone());
            std::mem::swap(value, before);
            Source::Kept(before)
        };
        self.borrows.set(-1);
        Ok((source, value, Borrow::new(&self.borrows)))
    }

    fn borrowed(&self, section: &str, mutably: bool) -> Error {
        Error::Borrowed {
            variable: self.state.name.clone(),
            section: section.to_owned(),
            mutably,
        }
    }
}

impl<A: Element> AnySlot for PrivateSlot<A> {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn begin(&self) {
        self.borrows.set(0); // a leaked guard's borrow ends with its execution
        self.written.set(false);
    }
    fn rollback(&self) {
        self.borrows.set(0); // a leaked guard's borrow ends with its execution
        if self.written.replace(false) {
            // SAFETY: the batch holds the state's ticket, and the execution's borrows are gone
            // (they borrow its `Txn`, which the rollback takes mutably; a leaked one can no
            // longer be used).
            let (value, before) = unsafe { (&mut *self.state.value.get(), &*self.before.get()) };
            let before = before
                .as_ref()
                .expect("made by the execution's first write");
            self.state
                .elements_mut(value)
                .copy_from_slice(self.state.elements(before));
        }
    }
    /// Nothing to install: the writes are in place.
    fn staged(&self) -> bool {
        false
    }
    fn check(&self, _: &epoch::Guard) {}
    fn publish(&self, _: &epoch::Guard) {}
    fn install(&self, _: &Arc<CommitRecord>, _: &epoch::Guard) {}
    fn finish(&self, _: &epoch::Guard) {}
    fn clear(&self) {
        self.borrows.set(0);
        self.written.set(false);
    }
}
