//! Critical sections: ticketed serial commit queues over a set of variables.
//!
//! Each variable has a [ticket queue](crate::ticket). An execution takes a ticket on each of
//! its section's resources *in resource-id order*, waiting to be served on one before taking
//! the next, runs its closure against a private [`Txn`], installs every staged write with one
//! shared pending commit record, commits the record (all writes become visible at once), and
//! only then serves the next tickets. While a variable is claimed by a section its head is
//! marked *queued*, so plain writes to it take a ticket too: an execution never sees its
//! resources change under it.
//!
//! **No deadlock.** Tickets are taken in one global order (variable ids) and each is served
//! before the next is taken; the only other waits are a plain write's single ticket and a
//! section's own queue (taken first, and only by its executions). A thread inside an
//! execution may take no further ticket (`Error::Reentrant`), so no cycle of waits can form.
//!
//! **No starvation.** Tickets are served first come, first served.

mod any_variable;
mod batch;
mod claims;
mod guards;
mod paged_slot;
mod private;
mod rows;
mod slot;
mod txn;
mod whole;

use std::cell::RefCell;
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;

use batch::{Batcher, Job};
use ndarray::Dimension;
use paged_slot::PagedSlot;
use private::PrivateSlot;
use slot::{AnySlot, Slot};

pub use any_variable::AnyVariable;
pub(crate) use claims::Claims;
pub use guards::{TxnMut, TxnRef, TxnRewrite};
pub(crate) use private::Inner as PrivateInner;
pub use private::Private;
pub use txn::Txn;

use crate::error::Error;
use crate::limbo::reclaim_now;
use crate::record::SharedRecords;
use crate::running::{Inside, Running};
use crate::stats::SectionStats;
use crate::sync::next_id;
use crate::ticket::TicketQueue;
use crate::{Element, PagedVariable, Variable};

/// What a section needs from a variable without knowing its element type.
pub(crate) trait Resource: Send + Sync {
    fn id(&self) -> u64;
    fn name(&self) -> &str;
    fn queue(&self) -> &TicketQueue;
    fn claims(&self) -> &Claims;
    /// Whether sections may share it (a variable), or one section holds it alone whatever
    /// the builder says (a [`Private`]).
    fn shareable(&self) -> bool {
        true
    }
    /// Marks (or unmarks) the head so that lock-free writers divert to the queue.
    fn set_queued(&self, queued: bool);
    /// After this thread's `reclaim_now` brought large versions back: trims the pool.
    fn reclaimed(&self);
    /// Before an execution, unpinned: waits while the variable is at its room (a dense
    /// variable's [`make_room`](crate::variable::Inner::make_room)).
    fn make_room(&self) {}
}

/// A critical section: executions over a set of variables run one at a time, in ticket
/// order, and commit all-or-nothing.
///
/// This is TensorFlow's `tf.CriticalSection`, made stronger: executions are served first
/// come, first served; a nested `execute` returns an error instead of deadlocking; two
/// *non-exclusive* sections sharing a variable are still serialised on it (TensorFlow's may
/// interleave and "return 0.0"); and an execution that fails or panics commits nothing and
/// leaves the section usable.
///
/// ```
/// use mvtensor::{CriticalSection, Error, Variable};
/// use ndarray::{arr0, ArrayD};
///
/// let from = Variable::new(arr0(100.0f64).into_dyn());
/// let to = Variable::new(arr0(0.0f64).into_dyn());
/// let bank = CriticalSection::builder().resource(&from).resource(&to).build()?;
///
/// // Move 30 from one account to the other; both writes become visible together.
/// let moved = bank.execute(|tx| {
///     let amount = arr0(30.0).into_dyn();
///     tx.assign_sub(&from, &amount)?;
///     tx.assign_add(&to, &amount)?;
///     Ok::<_, Error>(30.0)
/// })?;
/// assert_eq!(moved, 30.0);
/// assert_eq!((from.read()[[]], to.read()[[]]), (70.0, 30.0));
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone)]
pub struct CriticalSection {
    inner: Arc<SectionInner>,
}

struct SectionInner {
    id: u64,
    name: Arc<str>,
    /// Sorted by id, without duplicates: the order tickets are taken in.
    resources: Vec<Arc<dyn Resource>>,
    /// `resources`' ids, in the same order.
    ids: Box<[u64]>,
    /// What a batch does with each resource (same order); only the batch flag's holder
    /// touches them.
    slots: FlagHeld<Vec<Box<dyn AnySlot>>>,
    /// Commit records of batches that write several variables, reused.
    records: FlagHeld<RefCell<SharedRecords>>,
    /// Orders the executions of a section without resources.
    own_queue: TicketQueue,
    /// Executions waiting to run in the next batch.
    batcher: Batcher,
}

/// Options for a new [`CriticalSection`]; start with [`CriticalSection::builder`].
#[must_use = "call .build() to create the section"]
pub struct CriticalSectionBuilder {
    name: Option<String>,
    resources: Vec<(Arc<dyn Resource>, Box<dyn AnySlot>)>,
    /// Private states taken without a claim (a restore's one-shot section).
    unclaimed: Vec<u64>,
    exclusive: bool,
}

impl CriticalSectionBuilder {
    /// Names the section; the name appears in errors. Unnamed sections are `section#<id>`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Adds a variable to the section's resource set. Element types may be mixed.
    pub fn resource<A: Element, D: Dimension>(mut self, variable: &Variable<A, D>) -> Self {
        self.resources.push((
            variable.inner.clone(),
            Box::new(Slot::new(variable.erased().clone())),
        ));
        self
    }

    /// Adds a paged variable to the resource set: an execution scatters rows into it and
    /// gathers them ([`Txn::scatter_add`], [`Txn::gather`]), and its commit copies only the
    /// pages the batch touched. While the section lives, plain writes of the variable take
    /// its ticket, as a dense resource's do.
    pub fn paged<A: Element>(mut self, variable: &PagedVariable<A>) -> Self {
        self.resources.push((
            variable.inner.clone(),
            Box::new(PagedSlot::new(variable.clone())),
        ));
        self
    }

    /// Adds state that only this section's executions touch, changed in place with no
    /// version per commit (see [`Private`]). The section holds it exclusively, whatever
    /// [`exclusive`](Self::exclusive) says.
    pub fn private<A: Element, D: Dimension>(mut self, state: &Private<A, D>) -> Self {
        self.resources.push((
            state.inner.clone(),
            Box::new(PrivateSlot::new(state.inner.clone())),
        ));
        self
    }

    /// Adds private state without claiming it: for a one-shot section that sets it between
    /// two executions of its owner (a checkpoint's restore), ordered with them by its ticket.
    pub(crate) fn private_unclaimed<A: Element, D: Dimension>(
        mut self,
        state: &Private<A, D>,
    ) -> Self {
        self.unclaimed.push(state.inner.id());
        self.private(state)
    }

    /// Adds every variable of `variables` (a model's parameters, say) to the resource set.
    pub fn resources<'v, A: Element, D: Dimension + 'v>(
        self,
        variables: impl IntoIterator<Item = &'v Variable<A, D>>,
    ) -> Self {
        variables.into_iter().fold(self, Self::resource)
    }

    /// Whether the section holds its resources exclusively (the default) or may share them
    /// with other non-exclusive sections. Shared resources are still serialised: executions
    /// of all sections that share a variable take turns on its ticket queue.
    pub fn exclusive(mut self, exclusive: bool) -> Self {
        self.exclusive = exclusive;
        self
    }

    /// Claims the resources and creates the section.
    ///
    /// # Errors
    /// [`Error::ResourceConflict`] if a resource is already claimed by a section and either
    /// claim is exclusive (a [`Private`]'s always is). Nothing is claimed then.
    pub fn build(self) -> Result<CriticalSection, Error> {
        let id = next_id();
        let name: Arc<str> = match self.name {
            Some(name) => name.into(),
            None => format!("section#{id}").into(),
        };
        let mut both = self.resources;
        both.sort_by_key(|(r, _)| r.id());
        both.dedup_by_key(|(r, _)| r.id());
        let (resources, slots): (Vec<_>, Vec<_>) = both.into_iter().unzip();

        for (i, resource) in resources.iter().enumerate() {
            if self.unclaimed.contains(&resource.id()) {
                continue;
            }
            let request = claims::Request {
                section: id,
                section_name: &name,
                exclusive: self.exclusive || !resource.shareable(),
            };
            let claimed = resource
                .claims()
                .claim(resource.name(), request, || resource.set_queued(true));
            if let Err(conflict) = claimed {
                release(&resources[..i], id);
                return Err(conflict);
            }
        }
        Ok(CriticalSection {
            inner: Arc::new(SectionInner {
                id,
                name,
                ids: resources.iter().map(|r| r.id()).collect(),
                resources,
                slots: FlagHeld(slots),
                records: FlagHeld(RefCell::default()),
                own_queue: TicketQueue::default(),
                batcher: Batcher::default(),
            }),
        })
    }
}

impl fmt::Debug for CriticalSectionBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CriticalSectionBuilder")
            .field("name", &self.name)
            .field(
                "resources",
                &self
                    .resources
                    .iter()
                    .map(|(r, _)| r.name())
                    .collect::<Vec<_>>(),
            )
            .field("exclusive", &self.exclusive)
            .finish()
    }
}

/// What only the holder of a section's batch flag touches.
struct FlagHeld<T>(T);

// SAFETY: only the thread holding the batch flag reaches the contents (`get`), and the flag's
// hand-over (Release when let go, Acquire when taken) orders one holder's accesses before
// the next one's; moving the contents between threads that way needs `T: Send`.
unsafe impl<T: Send> Sync for FlagHeld<T> {}

impl<T> FlagHeld<T> {
    /// # Safety
    /// The caller holds the section's batch flag.
    unsafe fn get(&self) -> &T {
        &self.0
    }
}

fn release(resources: &[Arc<dyn Resource>], section: u64) {
    for resource in resources {
        resource
            .claims()
            .release(section, || resource.set_queued(false));
    }
}

impl Drop for SectionInner {
    fn drop(&mut self) {
        release(&self.resources, self.id);
    }
}

impl CriticalSection {
    /// A builder: add resources, choose exclusivity, name it.
    pub fn builder() -> CriticalSectionBuilder {
        CriticalSectionBuilder {
            name: None,
            resources: Vec::new(),
            unclaimed: Vec::new(),
            exclusive: true,
        }
    }

    /// The section's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// How many executions ran, in how many batches.
    pub fn stats(&self) -> SectionStats {
        self.inner.batcher.counters.read()
    }

    /// Runs `f` inside the section and commits its writes atomically.
    ///
    /// The call waits its turn (first come, first served), runs `f` with a [`Txn`] that
    /// reads the resources as they are (no one else can change them now) and stages writes,
    /// then makes every staged write visible at once and lets the next execution in. Readers
    /// never wait for any of this.
    ///
    /// If `f` returns `Err` or panics, nothing of it is committed, the error (or panic)
    /// reaches this caller only, and the section stays usable.
    ///
    /// **Batches.** Executions that arrive while another runs are run together by one
    /// thread, in arrival order, and committed at once (`docs/design.md`, "Batches": it is
    /// what keeps tiny executions from queueing behind the scheduler). So `f` may run on
    /// another thread than the caller's, which is why it and its result must be `Send`; each
    /// execution still sees exactly the writes of those before it (and reads variables
    /// outside the section afresh), and a variable's version number grows by one per batch,
    /// not per execution. A panic in `f` reaches this caller, but the panic hook (the message
    /// on stderr) runs on the thread that ran the batch. First come, first served holds
    /// between batches and between the tickets of batches and plain writes; a plain write
    /// that arrives while a batch is forming may be served before it (never more than once:
    /// nobody starves).
    ///
    /// **Long closures are fine for memory.** `f` runs unpinned: the resources' versions it
    /// reads are kept by their tickets, so however long it computes, the versions other
    /// threads retire meanwhile are reused (it delays only the callers queued behind it).
    ///
    /// **Reading a resource inside `f`.** Read it through the [`Txn`]: `Variable::read` of a
    /// resource inside `f` shows the committed value, from before this execution (see
    /// [`Txn`]), and a direct write to it is [`Error::Reentrant`].
    ///
    /// # Errors
    /// `f`'s own error; or [`Error::Reentrant`] (converted into `E`) at once if this thread
    /// is already inside an execution of any section.
    ///
    /// # Panics
    /// If `f` panics, the panic is resumed in this caller once its batch is over (nothing of
    /// `f` is committed; the executions batched with it commit as usual). Nothing else in
    /// `execute` panics, short of a bug in mvtensor (a batch that fails outside any closure
    /// commits nothing, and each of its callers is told with a panic; its jobs' writes to
    /// [`Private`] state, made in place, stay).
    pub fn execute<R, E, F>(&self, f: F) -> Result<R, E>
    where
        F: FnOnce(&mut Txn<'_>) -> Result<R, E> + Send,
        R: Send,
        E: From<Error> + Send,
    {
        let inner = &*self.inner;
        // An execution pins to load its variables and to commit, so with more executing
        // threads than cores the descheduled ones hold reclamation back, as compare-and-swap
        // writers do, and without a bound their variables grow without end
        // (`tests/cas_memory.rs`). Before this thread is marked inside: a thread inside an
        // execution does not wait for room (it holds tickets), and a nested `execute` is
        // refused just below.
        for resource in &inner.resources {
            resource.make_room();
        }
        let _running = Running::enter(Inside::Execution, &inner.name, || {
            format!("execute on section `{}`", inner.name)
        })?;
        let mut f = Some(f);
        let mut outcome = None;
        {
            let mut run = |txn: &mut Txn<'_>| {
                let f = f.take().expect("a batch runs each job once");
                // Caught so that it reaches this caller only: the batch rolls this job back
                // and goes on with the others.
                let result = panic::catch_unwind(AssertUnwindSafe(|| f(txn)));
                let kept = matches!(result, Ok(Ok(_)));
                outcome = Some(result);
                kept
            };
            inner.submit(Job::new(&mut run));
        }
        if reclaim_now() {
            // A large version this thread's batch replaced came back: trim its pool again.
            for resource in &inner.resources {
                resource.reclaimed();
            }
        }
        match outcome.expect("a committed batch ran every job it took") {
            Ok(result) => result,
            Err(panic) => panic::resume_unwind(panic),
        }
    }
}

impl SectionInner {
    /// Takes a ticket on every resource in id order, each served before the next is taken.
    /// The tickets are kept by the returned guard, which stores nothing per resource: a batch
    /// over many variables (an optimizer's parameters and moments) allocates nothing.
    fn enter(&self) -> BatchTickets<'_> {
        if self.resources.is_empty() {
            self.own_queue.enter().keep();
        }
        for resource in &self.resources {
            resource.queue().enter().keep();
        }
        BatchTickets(self)
    }
}

/// The tickets a batch holds on its section's queues; dropping it (also on unwind) serves
/// the next ticket of each.
struct BatchTickets<'s>(&'s SectionInner);

impl Drop for BatchTickets<'_> {
    fn drop(&mut self) {
        let section = self.0;
        if section.resources.is_empty() {
            // SAFETY: `enter` kept the section's own ticket.
            unsafe { section.own_queue.leave() };
        }
        for resource in &section.resources {
            // SAFETY: `enter` kept a ticket on every resource.
            unsafe { resource.queue().leave() };
        }
    }
}

impl fmt::Debug for CriticalSection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CriticalSection")
            .field("name", &self.name())
            .field(
                "resources",
                &self
                    .inner
                    .resources
                    .iter()
                    .map(|r| r.name())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}
