//! A section's private state in a store: registered by name, copied into store snapshots (so
//! into checkpoints) while its ticket is held, so that the copy is a cut with the rest.
//!
//! Private state has no versions to look back through, so a snapshot cannot find its value
//! as of a clock value after the fact. Instead the snapshot takes the ticket of every private
//! state of the store (in id order, as every holder of tickets does, so no cycle of waits can
//! form), copies each value, ticks the clock and captures the variables, and only then lets
//! the tickets go. An execution that changed the state finished before the copy, and its
//! commit read the clock before the tick: it is in the snapshot, on every variable. One that
//! runs after reads the clock after the tick: it is in none. This is the one place a store
//! snapshot waits: for the running batch of a section whose private state it copies
//! (DESIGN.md, "Section-private state").
//!
//! A thread inside ticket-holding work (an execution, or a queued variable's `update`
//! closure) may not wait for a ticket: there a store snapshot leaves private state out, and
//! a checkpoint of a store that has any is [`Error::Reentrant`](crate::Error::Reentrant).

use std::sync::Arc;

use ndarray::Dimension;

use super::snapshot::Captured;
use super::{At, Entry, ErasedVariable, Store, StoreSnapshot, VariableInfo};
use crate::error::{Error, Result};
use crate::running;
use crate::section::PrivateInner;
use crate::sync::epoch;
use crate::ticket::TicketQueue;
use crate::{DType, Element, Private, Variable, VariableKind};

/// What a store snapshot does with a private state, without its element type.
pub(crate) trait ErasedPrivate: Send + Sync {
    fn id(&self) -> u64;
    fn queue(&self) -> &TicketQueue;
    /// The value, captured as a dense tensor of the snapshot.
    ///
    /// # Safety
    /// The caller holds a ticket of [`queue`](Self::queue).
    unsafe fn capture(&self) -> Captured;
}

impl<A: Element> ErasedPrivate for PrivateInner<A> {
    fn id(&self) -> u64 {
        PrivateInner::id(self)
    }
    fn queue(&self) -> &TicketQueue {
        PrivateInner::queue(self)
    }
    unsafe fn capture(&self) -> Captured {
        // SAFETY: the caller's contract.
        let copy = unsafe { self.copy() };
        // A version of a variable of its own: what a snapshot's entries and a checkpoint's
        // writer read.
        let holder = Variable::new(copy);
        let version = holder.inner.head.visible(&epoch::pin()).to_ref();
        Captured {
            kind: VariableKind::Private,
            ..Captured::new(version)
        }
    }
}

impl<A: Element> ErasedVariable for PrivateInner<A> {
    fn kind(&self) -> VariableKind {
        VariableKind::Private
    }
    fn dtype(&self) -> DType {
        A::DTYPE
    }
    fn info(&self) -> VariableInfo {
        VariableInfo {
            name: self.name().to_owned(),
            dtype: A::DTYPE,
            shape: self.shape().to_vec(),
            version: 0,
            kind: VariableKind::Private,
        }
    }
    /// Never asked: a snapshot captures private state under its ticket (`private`).
    fn version_at(&self, _: u64, _: &epoch::Guard) -> At {
        At::NotYetCreated
    }
    fn private(&self) -> Option<&dyn ErasedPrivate> {
        Some(self)
    }
}

impl Store {
    /// Creates private state named `name` holding `value` and registers it: store snapshots
    /// and checkpoints copy it, as a cut with the variables, and a restore sets it (see
    /// [`Private`]; add it to its section with
    /// [`CriticalSectionBuilder::private`](crate::CriticalSectionBuilder::private)). A store
    /// made from a checkpoint ([`Store::load`]) holds it as a variable.
    ///
    /// # Errors
    /// [`Error::NameTaken`](crate::Error::NameTaken) if the store already has an entry of
    /// that name.
    pub fn private<A: Element, D: Dimension>(
        &self,
        name: &str,
        value: ndarray::Array<A, D>,
    ) -> Result<Private<A, D>> {
        let state = Private::new(name, value);
        self.register_private(&state)?;
        Ok(state)
    }

    /// The private state named `name`, through a handle of dimension `D`.
    ///
    /// # Errors
    /// [`Error::NotFound`](crate::Error::NotFound) if there is none;
    /// [`Error::DTypeMismatch`](crate::Error::DTypeMismatch) if it holds another element
    /// type than `A`; [`Error::RankMismatch`](crate::Error::RankMismatch) if `D` has a
    /// static rank and the state another one; [`Error::KindMismatch`](crate::Error::KindMismatch)
    /// if it is a variable.
    pub fn get_private<A: Element, D: Dimension>(&self, name: &str) -> Result<Private<A, D>> {
        let inner = self.typed::<A, PrivateInner<A>>(name, VariableKind::Private)?;
        if let Some(rank) = crate::dim::rank::<D>() {
            if rank != inner.shape().len() {
                return Err(Error::RankMismatch {
                    variable: name.to_owned(),
                    expected: Some(inner.shape().len()),
                    found: Some(rank),
                });
            }
        }
        Ok(Private::from_inner(inner))
    }

    /// Registers existing private state under its own name.
    ///
    /// # Errors
    /// [`Error::NameTaken`](crate::Error::NameTaken) if the store already has an entry of
    /// that name.
    pub fn register_private<A: Element, D: Dimension>(&self, state: &Private<A, D>) -> Result<()> {
        self.insert(
            state.name(),
            Entry {
                any: state.inner.clone(),
                erased: state.inner.clone(),
            },
        )
    }
}

impl Store {
    /// A snapshot for a checkpoint: with every private state, or [`Error::Reentrant`] if the
    /// store has some and this thread holds tickets (it would leave them out).
    pub(crate) fn complete_snapshot(&self) -> Result<StoreSnapshot> {
        self.check_private_copy()?;
        Ok(StoreSnapshot::take(&self.registry.load()))
    }

    /// [`Error::Reentrant`] if the store holds private state and this thread holds tickets:
    /// a snapshot here would leave the state out. Callers that take a lock before the
    /// snapshot ask first, so that a ticket holder never waits for that lock.
    pub(crate) fn check_private_copy(&self) -> Result<()> {
        if privates(self.registry.load().iter()).is_empty() {
            return Ok(());
        }
        running::check_outside(|| "a checkpoint of a store with private state".into())
    }
}

/// The private states among `entries`, in id order (the order tickets are taken in).
pub(crate) fn privates<'r>(
    entries: impl Iterator<Item = (&'r Arc<str>, &'r Entry)>,
) -> Vec<(&'r Arc<str>, &'r dyn ErasedPrivate)> {
    let mut found: Vec<_> = entries
        .filter_map(|(name, entry)| Some((name, entry.erased.private()?)))
        .collect();
    found.sort_by_key(|(_, state)| state.id());
    found
}
