//! [`Txn`]: what an execution reads and the writes it stages.

use std::any::Any;
use std::sync::Arc;

use ndarray::ArrayD;
use smallvec::SmallVec;

use super::Resource;
use crate::error::{check_shape, Error, Result};
use crate::kernel::{self, Delta, Sign};
use crate::record::{CommitRecord, Record};
use crate::sync::epoch;
use crate::variable::Taker;
use crate::version::{Building, VersionRef};
use crate::{Element, Variable};

/// The view an execution of a [`CriticalSection`](crate::CriticalSection) works through.
///
/// Reads see the resources as they are (nobody else can change them during the execution)
/// plus this execution's own earlier writes. Writes are staged and become visible together
/// when the closure returns `Ok`; if it returns `Err` or panics they are dropped.
///
/// Executions that arrive together share one `Txn`, one after another (see
/// [`CriticalSection::execute`](crate::CriticalSection::execute)): each sees the writes of
/// those before it, exactly as if they had committed one by one, and a failed one is rolled
/// back to where it began.
///
/// Reading a variable outside the section's resource set is allowed (it shows that
/// variable's value when first read, unchanged afterwards in this execution), writing one is
/// [`Error::NotInResourceSet`].
pub struct Txn<'s> {
    section: &'s str,
    resources: &'s [Arc<dyn Resource>],
    /// Inline for up to four variables: most executions allocate no list for them.
    entries: SmallVec<[Box<dyn Entry>; 4]>,
}

/// One variable the execution touched, type-erased so that resources may mix dtypes.
trait Entry: Send {
    fn id(&self) -> u64;
    fn as_any_mut(&mut self) -> &mut dyn Any;
    /// Whether the variable is one of the section's resources.
    fn is_resource(&self) -> bool;
    /// An execution begins: forget the previous one's checkpoint.
    fn begin(&mut self);
    /// Before any install: panics unless the head is still the version the execution built
    /// on (settling a slipped-in free write first), so that a broken invariant stops the
    /// commit before anything is installed.
    fn check(&self, guard: &epoch::Guard);
    /// The execution failed: restore the staged value it began with.
    fn rollback(&mut self);
    /// Publishes the staged value with the shared pending `record`; false if nothing staged.
    fn install(&mut self, record: &Arc<CommitRecord>, guard: &epoch::Guard) -> bool;
    /// After the record committed: retire the replaced version, count the commit.
    fn finish(&mut self, guard: &epoch::Guard);
}

struct TypedEntry<A: Element> {
    variable: Variable<A>,
    resource: bool,
    /// The version the execution read; for a resource, the head until we commit.
    base: VersionRef<A>,
    /// The next version, built in a pooled one, unpublished.
    staged: Option<Building<A>>,
    /// What `staged` was when the current execution first wrote it, for a rollback.
    checkpoint: Option<Option<Building<A>>>,
    installed: Option<VersionRef<A>>,
}

impl<A: Element> TypedEntry<A> {
    /// The value this execution sees: its own staged write, or the base.
    fn current(&self) -> &ArrayD<A> {
        self.staged
            .as_ref()
            .map_or(&self.base.data, |staged| &staged.data)
    }

    /// A pooled version to build the next staged value in.
    fn building(&self) -> Building<A> {
        self.variable.inner.building(self.current(), Taker::Anyone)
    }

    fn stage(&mut self, value: Building<A>) {
        let before = self.staged.replace(value);
        if self.checkpoint.is_none() {
            self.checkpoint = Some(before);
        }
        // A value staged and replaced within one execution goes back to the pool as
        // `before` drops (unless it is the checkpoint).
    }
}

impl<'s> Txn<'s> {
    pub(super) fn new(section: &'s str, resources: &'s [Arc<dyn Resource>]) -> Self {
        Self {
            section,
            resources,
            entries: SmallVec::new(),
        }
    }

    /// The variable's value in this execution: its own staged write, or the current value.
    pub fn read<A: Element>(&mut self, variable: &Variable<A>) -> &ArrayD<A> {
        self.entry(variable).current()
    }

    /// Stages `value` as the variable's new value.
    ///
    /// # Errors
    /// [`Error::NotInResourceSet`]; [`Error::ShapeMismatch`] unless the shapes match (or the
    /// variable has a dynamic shape).
    pub fn assign<A: Element>(&mut self, variable: &Variable<A>, value: ArrayD<A>) -> Result<()> {
        self.check_resource(variable)?;
        variable.check_new_shape(value.shape())?;
        let entry = self.entry(variable);
        let mut next = entry.building();
        next.data = kernel::standard(value);
        entry.stage(next);
        Ok(())
    }

    /// Stages `current + delta`.
    ///
    /// # Errors
    /// [`Error::NotInResourceSet`]; [`Error::ShapeMismatch`] if `delta` does not have exactly
    /// the current shape.
    pub fn assign_add<A: Element>(
        &mut self,
        variable: &Variable<A>,
        delta: &ArrayD<A>,
    ) -> Result<()> {
        self.stage_delta(variable, delta, Sign::Add)
    }

    /// Stages `current - delta`.
    ///
    /// # Errors
    /// As for [`assign_add`](Self::assign_add).
    pub fn assign_sub<A: Element>(
        &mut self,
        variable: &Variable<A>,
        delta: &ArrayD<A>,
    ) -> Result<()> {
        self.stage_delta(variable, delta, Sign::Sub)
    }

    /// Stages `f(current)`. Unlike [`Variable::update`], `f` runs exactly once.
    ///
    /// # Errors
    /// As for [`assign`](Self::assign).
    pub fn update<A: Element>(
        &mut self,
        variable: &Variable<A>,
        f: impl FnOnce(&ArrayD<A>) -> ArrayD<A>,
    ) -> Result<()> {
        self.check_resource(variable)?;
        let value = f(self.read(variable));
        variable.check_new_shape(value.shape())?;
        let entry = self.entry(variable);
        let mut next = entry.building();
        next.data = kernel::standard(value);
        entry.stage(next);
        Ok(())
    }

    fn stage_delta<A: Element>(
        &mut self,
        variable: &Variable<A>,
        delta: &ArrayD<A>,
        sign: Sign,
    ) -> Result<()> {
        self.check_resource(variable)?;
        let entry = self.entry(variable);
        check_shape(variable.name(), entry.current().shape(), delta.shape())?;
        let mut next = entry.building();
        kernel::apply(
            entry.current(),
            &[Delta { data: delta, sign }],
            &mut next.data,
        );
        entry.stage(next);
        Ok(())
    }

    fn check_resource<A: Element>(&self, variable: &Variable<A>) -> Result<()> {
        let id = variable.id();
        if self.resources.binary_search_by_key(&id, |r| r.id()).is_ok() {
            Ok(())
        } else {
            Err(Error::NotInResourceSet {
                variable: variable.name().to_owned(),
                section: self.section.to_owned(),
            })
        }
    }

    fn entry<A: Element>(&mut self, variable: &Variable<A>) -> &mut TypedEntry<A> {
        let id = variable.id();
        let index = match self.entries.iter().position(|e| e.id() == id) {
            Some(index) => index,
            None => {
                let guard = epoch::pin();
                // A resource's head is ours until we commit: `current` helps a lock-free write
                // that slipped in before the section claimed the variable, so that we build on
                // it. Any other variable is read as it is now.
                let resource = self.check_resource(variable).is_ok();
                let base = if resource {
                    let current = variable.inner.head.current(&guard);
                    current.settle(&guard); // we hold the ticket
                    current.version
                } else {
                    variable.inner.head.visible(&guard)
                };
                self.entries.push(Box::new(TypedEntry {
                    variable: variable.clone(),
                    resource,
                    base: base.to_ref(),
                    staged: None,
                    checkpoint: None,
                    installed: None,
                }));
                self.entries.len() - 1
            }
        };
        self.entries[index]
            .as_any_mut()
            .downcast_mut::<TypedEntry<A>>()
            .expect("one id, one variable, one element type")
    }

    /// Starts the next execution of a batch: its writes are what a rollback undoes, and it
    /// reads variables outside the section afresh (as it would, run on its own).
    pub(super) fn begin(&mut self) {
        self.entries.retain(|e| e.is_resource()); // the others never stage anything
        self.entries.iter_mut().for_each(|e| e.begin());
    }

    /// Undoes the writes of the execution since [`begin`](Self::begin).
    pub(super) fn rollback(&mut self) {
        self.entries.iter_mut().for_each(|e| e.rollback());
    }

    /// Installs every staged write with one pending record, commits the record (the moment
    /// they all become visible), then retires what they replaced. The caller holds the
    /// tickets of every resource, so the installs cannot lose a race; every head is checked
    /// before the first install all the same, so that not even a broken invariant can leave
    /// half a commit installed.
    pub(super) fn commit(mut self) {
        let guard = epoch::pin();
        self.entries.iter().for_each(|e| e.check(&guard));
        let record = Arc::new(CommitRecord::pending());
        let mut any = false;
        for entry in &mut self.entries {
            any |= entry.install(&record, &guard);
        }
        if !any {
            return;
        }
        record.commit();
        for entry in &mut self.entries {
            entry.finish(&guard);
        }
    }
}

impl<A: Element> Entry for TypedEntry<A> {
    fn id(&self) -> u64 {
        self.variable.id()
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn is_resource(&self) -> bool {
        self.resource
    }

    fn begin(&mut self) {
        self.checkpoint = None;
    }

    fn check(&self, guard: &epoch::Guard) {
        if self.staged.is_none() {
            return;
        }
        let current = self.variable.inner.head.current(guard);
        current.settle(guard); // we hold the ticket: only a slipped-in free write
        assert!(
            std::ptr::eq(current.version.as_ptr(), self.base.as_ptr()),
            "a queued variable changed while its tickets were held"
        );
    }

    fn rollback(&mut self) {
        if let Some(before) = self.checkpoint.take() {
            self.staged = before;
        }
    }

    fn install(&mut self, record: &Arc<CommitRecord>, guard: &epoch::Guard) -> bool {
        let Some(mut new) = self.staged.take() else {
            return false;
        };
        let inner = &self.variable.inner;
        new.number = self.base.number + 1;
        new.record = Record::Shared(Arc::clone(record));
        loop {
            let current = inner.head.current(guard);
            // `check` saw the base settled at the head, and only we may change it now.
            debug_assert!(std::ptr::eq(current.version.as_ptr(), self.base.as_ptr()));
            match inner.head.install(&current, new, guard) {
                Ok(installed) => {
                    self.installed = Some(installed.to_ref());
                    return true;
                }
                // Only the queued mark can have changed (another section claiming or
                // releasing the variable); the version is still ours to replace.
                Err(lost) => new = lost,
            }
        }
    }

    fn finish(&mut self, guard: &epoch::Guard) {
        if let Some(installed) = self.installed.take() {
            installed.release_prev(guard);
            self.variable
                .inner
                .published(installed.number, installed.bytes());
        }
    }
}
