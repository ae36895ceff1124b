//! [`Txn`]: what an execution reads and writes, and the borrows it hands out.

use std::any::Any;
use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

use ndarray::Dimension;
use smallvec::SmallVec;

use super::guards::{RefInner, TxnMut, TxnRef, TxnRewrite};
use super::private::{Private, PrivateSlot};
use super::slot::{AnySlot, Init, Slot};
use super::Resource;
use crate::error::{Error, Result};
use crate::record::SharedRecords;
use crate::sync::epoch;
use crate::version::VersionRef;
use crate::{Element, Variable};

/// The view an execution of a [`CriticalSection`](crate::CriticalSection) works through.
///
/// Reads see the resources as they are (nobody else can change them during the execution)
/// plus this execution's own writes. The first write to a resource copies it into a
/// private *working copy* (a pooled version: no allocation in steady state), which later
/// writes change in place ([`rewrite`](Self::rewrite) lends one unfilled instead, to compute
/// from the value it replaces in one sweep); the working copies become the new versions, all at once, when
/// the closure returns `Ok`. If it returns `Err` or panics they are dropped.
///
/// Borrows follow `RefCell`'s rules, per variable and checked at run time: any number of
/// [`read`](Self::read)s, or one [`write`](Self::write), of each variable at a time, so an
/// optimizer step can hold its parameters and moments mutably together while it reads the
/// others. A conflicting borrow is [`Error::Borrowed`], never a panic.
///
/// ```
/// use mvtensor::{CriticalSection, Error, Variable};
/// use ndarray::{arr1, Zip};
///
/// let w = Variable::new(arr1(&[1.0f32, 2.0]));
/// let m = Variable::new(arr1(&[0.0f32, 0.0]));
/// let step = CriticalSection::builder().resources([&w, &m]).build()?;
/// let grad = arr1(&[0.5f32, -0.5]);
///
/// // Momentum SGD, in place: m = 0.9 m + g; w -= 0.1 m.
/// step.execute(|tx| {
///     let (mut w, mut m) = (tx.write(&w)?, tx.write(&m)?);
///     Zip::from(&mut *w).and(&mut *m).and(&grad).for_each(|w, m, &g| {
///         *m = 0.9 * *m + g;
///         *w -= 0.1 * *m;
///     });
///     Ok::<_, Error>(())
/// })?;
/// assert_eq!(w.read().as_slice().unwrap(), &[0.95, 2.05]);
/// # Ok::<(), Error>(())
/// ```
///
/// **Only the `Txn` sees the execution's writes.** [`Variable::read`] inside the closure
/// returns the committed value, from before this execution (and before the batch it runs
/// in): read the section's resources through the `Txn`.
///
/// Executions that arrive together share one `Txn`, one after another (see
/// [`CriticalSection::execute`](crate::CriticalSection::execute)): each sees the writes of
/// those before it, exactly as if they had committed one by one, and a failed one is rolled
/// back to where it began.
///
/// **Paged resources** ([`PagedVariable`](crate::PagedVariable)) are written by rows
/// ([`scatter_add`](Self::scatter_add) and its kin) or whole ([`assign`](Self::assign),
/// [`assign_add`](Self::assign_add), [`assign_sub`](Self::assign_sub),
/// [`scaled_add`](Self::scaled_add)) and read by rows ([`gather`](Self::gather)): their
/// writes are staged and the commit copies the pages they touch, once per batch. A paged
/// table is never lent whole as an array inside an execution (`read`, `write`, `rewrite` and
/// `update` take a [`Variable`]): that would be a copy of the table per execution.
///
/// Reading a variable outside the section's resource set is allowed (it shows that
/// variable's value when first read, unchanged afterwards in this execution), writing one is
/// [`Error::NotInResourceSet`].
pub struct Txn<'s> {
    section: &'s str,
    /// Sorted by id, as `slots`.
    resources: &'s [Arc<dyn Resource>],
    /// Their ids, in the same order: the lookup of every `read` and `write` searches these
    /// (a plain slice: no virtual call per probe).
    ids: &'s [u64],
    slots: &'s [Box<dyn AnySlot>],
    /// The section's shared commit records, for a commit of several variables.
    records: &'s RefCell<SharedRecords>,
    /// Variables outside the resource set, as this execution first read them.
    outside: RefCell<SmallVec<[Seen; 2]>>,
}

/// A variable outside the resource set: its id, and the `VersionRef<A>` first read.
type Seen = (u64, Box<dyn Any>);

impl<'s> Txn<'s> {
    pub(super) fn new(
        section: &'s str,
        resources: &'s [Arc<dyn Resource>],
        ids: &'s [u64],
        slots: &'s [Box<dyn AnySlot>],
        records: &'s RefCell<SharedRecords>,
    ) -> Self {
        debug_assert!(resources.iter().map(|r| r.id()).eq(ids.iter().copied()));
        Self {
            section,
            resources,
            ids,
            slots,
            records,
            outside: RefCell::default(),
        }
    }

    /// The variable's value in this execution: its working copy, or the committed value.
    ///
    /// # Errors
    /// [`Error::Borrowed`] while this execution holds a [`write`](Self::write) of it.
    pub fn read<A: Element, D: Dimension>(
        &self,
        variable: &Variable<A, D>,
    ) -> Result<TxnRef<'_, A, D>> {
        let variable = variable.erased();
        let inner = match self.slot(variable) {
            Ok(slot) => {
                let (data, borrow) = slot.read(self.section)?;
                RefInner::Resource(data, borrow)
            }
            Err(_) => RefInner::Outside(self.outside(variable)),
        };
        Ok(TxnRef::new(inner))
    }

    /// The variable's working copy, to change in place; the first write of an execution
    /// copies the value it sees into it.
    ///
    /// # Errors
    /// [`Error::NotInResourceSet`]; [`Error::Borrowed`] while this execution holds another
    /// borrow of it.
    pub fn write<A: Element, D: Dimension>(
        &self,
        variable: &Variable<A, D>,
    ) -> Result<TxnMut<'_, A, D>> {
        self.write_with(variable, Init::Copy)
    }

    /// The variable's value beside a fresh working copy for its next value, to compute one
    /// from the other in one sweep: what an optimizer does (`p' = p - lr * g`). Unlike
    /// [`write`](Self::write), nothing is copied first, so a tensor is read once and written
    /// once (a `write` then an update in place streams it three times).
    ///
    /// The working copy's elements are **unspecified** (stale values of this variable's
    /// earlier versions) until you write them: write every one. A second `rewrite` of the
    /// variable in one execution reads what the first one wrote.
    ///
    /// ```
    /// use mvtensor::{CriticalSection, Variable};
    /// use ndarray::{array, Zip};
    ///
    /// let w = Variable::new(array![1.0f32, 2.0, 3.0]);
    /// let section = CriticalSection::builder().resource(&w).build()?;
    /// let grad = array![0.5f32, 0.5, 0.5];
    /// section.execute(|tx| {
    ///     let mut w = tx.rewrite(&w)?;
    ///     let (old, new) = w.split();
    ///     Zip::from(new).and(old).and(&grad).for_each(|n, &o, &g| *n = o - 0.1 * g);
    ///     Ok(())
    /// })?;
    /// assert_eq!(*w.read(), array![0.95f32, 1.95, 2.95]);
    /// # Ok::<(), mvtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::NotInResourceSet`]; [`Error::Borrowed`] while this execution holds another
    /// borrow of it.
    pub fn rewrite<A: Element, D: Dimension>(
        &self,
        variable: &Variable<A, D>,
    ) -> Result<TxnRewrite<'_, A, D>> {
        let slot = self.slot(variable.erased())?;
        let (source, data, borrow) = slot.rewrite(self.section)?;
        Ok(TxnRewrite::new(source, data, borrow))
    }

    /// The section's private state, to read (see [`Private`]).
    ///
    /// # Errors
    /// [`Error::NotInResourceSet`] if another section holds it (or none);
    /// [`Error::Borrowed`] while this execution holds a [`private_mut`](Self::private_mut)
    /// of it.
    pub fn private<A: Element, D: Dimension>(
        &self,
        state: &Private<A, D>,
    ) -> Result<TxnRef<'_, A, D>> {
        let slot: &PrivateSlot<A> = self.slot_as(state.id(), state.name())?;
        let (data, borrow) = slot.read(self.section)?;
        Ok(TxnRef::new(RefInner::Resource(data, borrow)))
    }

    /// The section's private state, to change in place (see [`Private`]). The first such
    /// borrow of an execution copies the state aside, for a rollback should it fail.
    ///
    /// # Errors
    /// [`Error::NotInResourceSet`] if another section holds it (or none);
    /// [`Error::Borrowed`] while this execution holds another borrow of it.
    pub fn private_mut<A: Element, D: Dimension>(
        &self,
        state: &Private<A, D>,
    ) -> Result<TxnMut<'_, A, D>> {
        let slot: &PrivateSlot<A> = self.slot_as(state.id(), state.name())?;
        let (data, borrow) = slot.write(self.section)?;
        Ok(TxnMut::new(data, borrow))
    }

    /// The section's private state beside an array for its next value, to compute one from
    /// the other in one sweep, as [`rewrite`](Self::rewrite) does for a variable (an
    /// optimizer's moments: `m' = b m + (1 - b) g`). Nothing is copied: the array lent to fill
    /// is one the state keeps for this, so its elements are **unspecified** (an older value)
    /// until you write them: write every one. A second such borrow in one execution reads
    /// what the first wrote.
    ///
    /// # Errors
    /// [`Error::NotInResourceSet`] if another section holds it (or none);
    /// [`Error::Borrowed`] while this execution holds another borrow of it.
    pub fn private_rewrite<A: Element, D: Dimension>(
        &self,
        state: &Private<A, D>,
    ) -> Result<TxnRewrite<'_, A, D>> {
        let slot: &PrivateSlot<A> = self.slot_as(state.id(), state.name())?;
        let (source, data, borrow) = slot.rewrite(self.section)?;
        Ok(TxnRewrite::new(source, data, borrow))
    }

    fn write_with<A: Element, D: Dimension>(
        &self,
        variable: &Variable<A, D>,
        init: Init<'_, A>,
    ) -> Result<TxnMut<'_, A, D>> {
        let (data, borrow) = self.slot(variable.erased())?.write(self.section, init)?;
        Ok(TxnMut::new(data, borrow))
    }

    /// The variable's slot, if it is one of the section's resources.
    pub(super) fn slot<A: Element>(&self, variable: &Variable<A>) -> Result<&'s Slot<A>> {
        self.slot_as(variable.id(), variable.name())
    }

    /// The slot of resource `id` (named `name` in the error if it is not one), as `S`.
    pub(super) fn slot_as<S: 'static>(&self, id: u64, name: &str) -> Result<&'s S> {
        match self.ids.binary_search(&id) {
            Ok(i) => Ok(self.slots[i]
                .as_any()
                .downcast_ref::<S>()
                .expect("one id, one variable, one element type")),
            Err(_) => Err(Error::NotInResourceSet {
                variable: name.to_owned(),
                section: self.section.to_owned(),
            }),
        }
    }

    /// The section's name, for errors.
    pub(super) fn section(&self) -> &'s str {
        self.section
    }

    /// A variable outside the resource set, as this execution first read it.
    fn outside<A: Element>(&self, variable: &Variable<A>) -> VersionRef<A> {
        let id = variable.id();
        let mut outside = self.outside.borrow_mut();
        if let Some((_, seen)) = outside.iter().find(|(seen, _)| *seen == id) {
            return seen
                .downcast_ref::<VersionRef<A>>()
                .expect("one id, one variable, one element type")
                .clone();
        }
        let now = variable.inner.head.visible(&epoch::pin()).to_ref();
        outside.push((id, Box::new(now.clone())));
        now
    }

    /// Starts the next execution of a batch: its writes are what a rollback undoes, and it
    /// reads variables outside the section afresh (as it would, run on its own).
    pub(super) fn begin(&mut self) {
        self.outside.get_mut().clear();
        self.slots.iter().for_each(|s| s.begin());
    }

    /// Undoes the writes of the execution since [`begin`](Self::begin).
    pub(super) fn rollback(&mut self) {
        self.slots.iter().for_each(|s| s.rollback());
    }

    /// Makes every working copy the variable's new version, all at once. The caller holds
    /// the tickets of every resource, so nothing can race the installs; every head is checked
    /// before the first install all the same, so that not even a broken invariant can leave
    /// half a commit installed. A batch that wrote one variable publishes it as a plain write
    /// does (committed as it is installed); several share one pending record, committed once
    /// all are installed.
    pub(super) fn commit(self) {
        let mut staged = self.slots.iter().filter(|s| s.staged());
        let Some(first) = staged.next() else {
            // Nothing to install (every write was private state, or none): no pin.
            return;
        };
        // One pin from the first check to the last release: `finish` releases what `install`
        // replaced, under the pin it was installed in.
        let guard = &epoch::pin();
        if staged.next().is_none() {
            first.check(guard);
            first.publish(guard);
            return;
        }
        let staged = || self.slots.iter().filter(|s| s.staged());
        staged().for_each(|s| s.check(guard));
        let record = self.records.borrow_mut().pending();
        staged().for_each(|s| s.install(&record, guard));
        record.commit();
        self.slots.iter().for_each(|s| s.finish(guard));
    }
}

impl Drop for Txn<'_> {
    /// The batch is over, committed or not (a panic): the slots are empty for the next one.
    fn drop(&mut self) {
        self.slots.iter().for_each(|s| s.clear());
    }
}

impl fmt::Debug for Txn<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Txn")
            .field("section", &self.section)
            .field(
                "resources",
                &self.resources.iter().map(|r| r.name()).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}
