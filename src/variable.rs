//! [`Variable`]: a shared, versioned tensor.

use std::fmt;
use std::sync::Arc;

use ndarray::ArrayD;

use crate::combine::{Combiner, Publish};
use crate::error::{check_shape, same_shape, Error, Result};
use crate::head::Head;
use crate::kernel::{self, Delta, Sign};
use crate::limbo::{self, reclaim_now};
use crate::pool::Home;
use crate::record::Record;
use crate::running::{self, Inside, Running};
use crate::section::{Claims, Resource};
use crate::stats::Stats;
use crate::sync::{epoch, next_id};
use crate::ticket::TicketQueue;
use crate::version::{Building, Pinned, Version};
use crate::{Element, OwnedSnapshot, Snapshot};

/// A shared tensor whose value is an immutable, versioned snapshot.
///
/// `Variable` is a cheap handle (`Clone` is one reference-count increment) and is
/// `Send + Sync`: give every thread its own clone. All clones are the same variable.
///
/// * **Reads** ([`read`](Self::read)) are wait-free and return a [`Snapshot`] that never
///   changes, whatever writers do meanwhile.
/// * **Writes** build a new version and publish it with one compare-and-swap; nobody ever
///   mutates a published tensor. Every write returns the number of the version it created:
///   the first value is version 0 and each commit adds one.
/// * **Shapes** are fixed at creation: a write of another shape is
///   [`Error::ShapeMismatch`], and nothing broadcasts. A variable built with
///   [`VariableBuilder::dynamic_shape`] lets [`assign`](Self::assign) and
///   [`update`](Self::update) change the shape; deltas must still match the current one.
///
/// ```
/// use mvtensor::Variable;
/// use ndarray::{arr1, ArrayD};
///
/// let v = Variable::new(arr1(&[1.0f32, 2.0]).into_dyn());
/// let before = v.read();                       // wait-free, never changes
/// let ver = v.assign_add(&arr1(&[10.0, 10.0]).into_dyn())?;
/// assert_eq!(ver, 1);
/// assert_eq!(before.as_slice().unwrap(), &[1.0, 2.0]);
/// assert_eq!(v.read().as_slice().unwrap(), &[11.0, 12.0]);
/// # Ok::<(), mvtensor::Error>(())
/// ```
pub struct Variable<A: Element> {
    pub(crate) inner: Arc<Inner<A>>,
}

pub(crate) struct Inner<A: Element> {
    pub(crate) id: u64,
    pub(crate) name: Arc<str>,
    /// The creation shape, enforced on every write unless `dynamic_shape`.
    shape: Vec<usize>,
    dynamic_shape: bool,
    pub(crate) head: Head<A>,
    /// Counters and buffer pool, shared with every version.
    pub(crate) home: Arc<Home<A>>,
    /// Serialises writes while the variable belongs to a critical section.
    queue: TicketQueue,
    /// The sections that hold the variable.
    claims: Claims,
    /// Concurrent `assign_add`/`assign_sub` calls meet here and share one pass.
    combiner: Combiner<A>,
}

/// Options for a new [`Variable`]; start with [`Variable::builder`].
#[derive(Debug)]
#[must_use = "call .build() to create the variable"]
pub struct VariableBuilder<A: Element> {
    init: ArrayD<A>,
    name: Option<String>,
    dynamic_shape: bool,
}

impl<A: Element> VariableBuilder<A> {
    /// Names the variable; the name appears in every error about it. Unnamed variables are
    /// called `var#<id>`. (A [`Store`](crate::Store) names its variables itself.)
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Lets [`Variable::assign`] and [`Variable::update`] replace the value with one of
    /// another shape. Deltas (`assign_add`, `assign_sub`) must still match the current shape.
    pub fn dynamic_shape(mut self) -> Self {
        self.dynamic_shape = true;
        self
    }

    /// Creates the variable; its initial value is version 0.
    pub fn build(self) -> Variable<A> {
        let id = next_id();
        let name: Arc<str> = match self.name {
            Some(name) => name.into(),
            None => format!("var#{id}").into(),
        };
        let home = Arc::new(Home::default());
        let init = kernel::standard(self.init);
        let shape = init.shape().to_vec();
        let mut first = Version::allocate(init, &home);
        first.record = Record::committed_now();
        Variable {
            inner: Arc::new(Inner {
                id,
                name,
                shape,
                dynamic_shape: self.dynamic_shape,
                head: Head::new(first),
                home,
                queue: TicketQueue::default(),
                claims: Claims::default(),
                combiner: Combiner::default(),
            }),
        }
    }
}

impl<A: Element> Variable<A> {
    /// A fixed-shape, unnamed variable holding `init` as version 0.
    pub fn new(init: ArrayD<A>) -> Self {
        Self::builder(init).build()
    }

    /// Options for a new variable: a name, a dynamic shape.
    pub fn builder(init: ArrayD<A>) -> VariableBuilder<A> {
        VariableBuilder {
            init,
            name: None,
            dynamic_shape: false,
        }
    }

    /// The current value, wait-free.
    ///
    /// One epoch pin and one acquire load of the head: no lock, no retry, no write to memory
    /// shared with other threads, and never a wait for a writer (a write that is still
    /// committing is simply not visible yet). The snapshot pins this thread's epoch while it
    /// lives: keep it short, or use [`read_owned`](Self::read_owned).
    pub fn read(&self) -> Snapshot<A> {
        let guard = epoch::pin();
        let version = self.inner.head.visible(&guard).as_ptr();
        // SAFETY: the version was reachable while `guard` is pinned, and `guard` moves into
        // the snapshot, so the version outlives it.
        Snapshot::new(unsafe { Pinned::new(version) }, guard)
    }

    /// The current value as a reference-counted snapshot that does not pin the epoch:
    /// `Send`, `'static`, and free to live as long as you like.
    pub fn read_owned(&self) -> OwnedSnapshot<A> {
        self.read().to_owned_snapshot()
    }

    /// The current version number (0 at creation, +1 per commit).
    pub fn version(&self) -> u64 {
        self.read().version()
    }

    /// The current shape.
    pub fn shape(&self) -> Vec<usize> {
        self.read().shape().to_vec()
    }

    /// The variable's name, as used in error messages.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// A process-wide unique id; critical sections acquire resources in id order.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// What the write path has done so far (commits, retries, combining, live versions).
    pub fn stats(&self) -> Stats {
        self.inner.home.counters.read(self.version())
    }

    /// Replaces the value. Returns the new version number.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] if `value` has another shape (unless the variable has a
    /// dynamic shape).
    pub fn assign(&self, value: ArrayD<A>) -> Result<u64> {
        let value = kernel::standard(value);
        self.check_new_shape(value.shape())?;
        let mut value = Some(value);
        self.write_now(|_, next| {
            // A lost attempt's version keeps the value: only the first attempt moves it in.
            if let Some(value) = value.take() {
                next.data = value;
            }
            Ok(())
        })
    }

    /// Adds `delta` elementwise. Returns the number of the version that includes it.
    ///
    /// Concurrent calls are *combined*: one thread applies every pending delta in a single
    /// pass and publishes one version for all of them, so k concurrent updates cost one copy
    /// of the tensor, not k (and nobody's work is thrown away by a lost compare-and-swap).
    /// The caller may therefore wait while another thread applies its delta; readers never
    /// wait. [`Stats`] shows the batches.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] if `delta` does not have exactly the variable's shape.
    pub fn assign_add(&self, delta: &ArrayD<A>) -> Result<u64> {
        self.apply_delta(delta, Sign::Add)
    }

    /// Subtracts `delta` elementwise. Returns the number of a version that includes it.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] if `delta` does not have exactly the variable's shape.
    pub fn assign_sub(&self, delta: &ArrayD<A>) -> Result<u64> {
        self.apply_delta(delta, Sign::Sub)
    }

    /// Replaces the value with `f(current)`, read-copy-update style. Returns the new version.
    ///
    /// `f` may run **more than once**: if another writer commits between reading the current
    /// value and publishing, `f` runs again on the newer value. Keep it free of side effects.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] if `f` returns another shape (unless dynamic); nothing is
    /// written then.
    pub fn update(&self, mut f: impl FnMut(&ArrayD<A>) -> ArrayD<A>) -> Result<u64> {
        self.write_now(|cur, next| {
            let value = kernel::standard(f(&cur.data));
            self.check_new_shape(value.shape())?;
            next.data = value;
            Ok(())
        })
    }

    /// Like [`update`](Self::update), but returns a snapshot of the version it replaced.
    /// Linearizable: the returned snapshot is exactly the value `f` turned into the new one,
    /// so N threads incrementing a counter see every value exactly once.
    ///
    /// `f` may run more than once (see [`update`](Self::update)).
    ///
    /// ```
    /// use mvtensor::Variable;
    /// use ndarray::{arr0, ArrayD};
    ///
    /// let counter = Variable::new(arr0(0i64).into_dyn());
    /// let old = counter.fetch_update(|c| c + 1)?;
    /// assert_eq!(old.first(), Some(&0));
    /// assert_eq!(counter.read().first(), Some(&1));
    /// # Ok::<(), mvtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] as for [`update`](Self::update).
    pub fn fetch_update(&self, mut f: impl FnMut(&ArrayD<A>) -> ArrayD<A>) -> Result<Snapshot<A>> {
        let guard = epoch::pin();
        let (old, _) = self.write(&guard, Taker::Anyone, |cur, next| {
            let value = kernel::standard(f(&cur.data));
            self.check_new_shape(value.shape())?;
            next.data = value;
            Ok(())
        })?;
        let old = old.as_ptr();
        // SAFETY: `old` was the head while `guard` was pinned; `guard` moves into the snapshot.
        Ok(Snapshot::new(unsafe { Pinned::new(old) }, guard))
    }

    /// Replaces the value only if the current version number is `expected`. Returns the new
    /// version number (`expected + 1`).
    ///
    /// # Errors
    /// [`Error::VersionConflict`] if the variable is at another version;
    /// [`Error::ShapeMismatch`] as for [`assign`](Self::assign).
    pub fn compare_and_set(&self, expected: u64, value: ArrayD<A>) -> Result<u64> {
        let value = kernel::standard(value);
        self.check_new_shape(value.shape())?;
        let mut value = Some(value);
        self.write_now(|cur, next| {
            if cur.number != expected {
                return Err(Error::VersionConflict {
                    variable: self.name().to_owned(),
                    expected,
                    actual: cur.number,
                });
            }
            if let Some(value) = value.take() {
                next.data = value;
            }
            Ok(())
        })
    }

    fn apply_delta(&self, delta: &ArrayD<A>, sign: Sign) -> Result<u64> {
        // A dynamic shape is checked against the version the pass builds on, one delta at a
        // time; and a thread inside an execution must not wait for another's queue ticket.
        if self.inner.dynamic_shape || running::inside() {
            return self.apply_delta_alone(delta, sign);
        }
        check_shape(self.name(), &self.inner.shape, delta.shape())?;
        let combined = self
            .inner
            .combiner
            .submit(Delta { data: delta, sign }, self);
        reclaim_now(); // what this thread's passes (if it combined) replaced
        match combined {
            Some(version) => Ok(version),
            None => self.apply_delta_alone(delta, sign),
        }
    }

    fn apply_delta_alone(&self, delta: &ArrayD<A>, sign: Sign) -> Result<u64> {
        self.write_now(|cur, next| {
            check_shape(self.name(), cur.data.shape(), delta.shape())?;
            kernel::apply(&cur.data, &[Delta { data: delta, sign }], &mut next.data);
            Ok(())
        })
    }

    pub(crate) fn check_new_shape(&self, found: &[usize]) -> Result<()> {
        if self.inner.dynamic_shape {
            Ok(())
        } else {
            check_shape(self.name(), &self.inner.shape, found)
        }
    }

    /// [`write`](Self::write) under a pin of its own; once unpinned, this thread hands the
    /// version it replaced back to the pool if it is large and no reader holds it (see
    /// [`reclaim_now`]). Returns the new version number.
    fn write_now(
        &self,
        make: impl FnMut(&Version<A>, &mut Building<A>) -> Result<()>,
    ) -> Result<u64> {
        let written = self
            .write(&epoch::pin(), Taker::Anyone, make)
            .map(|(_, new)| new);
        reclaim_now();
        written
    }

    /// The write loop: build the next value from the current version in a pooled version,
    /// publish it with one compare-and-swap. Returns the replaced version and the new version
    /// number.
    ///
    /// A free variable's writers are lock-free: a lost CAS means another write committed. A
    /// queued variable's writers first take its ticket (FIFO), so they run one at a time.
    ///
    /// `make` may run several times, on the same `Building` (what it left there from a lost
    /// attempt is still there).
    fn write<'g>(
        &self,
        guard: &'g epoch::Guard,
        taker: Taker,
        mut make: impl FnMut(&Version<A>, &mut Building<A>) -> Result<()>,
    ) -> Result<(Pinned<'g, A>, u64)> {
        let inner = &*self.inner;
        let mut ticket = None;
        let mut next = None;
        loop {
            let current = inner.head.current(guard);
            if current.queued() && ticket.is_none() {
                running::check_outside(|| {
                    format!(
                        "a direct write to `{}`, which a critical section holds",
                        self.name()
                    )
                })?;
                ticket = Some(inner.queue.enter());
                continue; // reload: the previous ticket holder has committed
            }
            current.settle(guard); // free, or we hold the ticket: see `Current::settle`
                                   // Holding the ticket, `make` (an `update` closure) must not wait for another.
            let _inside = match ticket {
                Some(_) => Some(Running::enter(
                    Inside::QueuedUpdate(Arc::clone(&inner.name)),
                    || format!("an update of `{}`", self.name()), // not reached: checked above
                )?),
                None => None,
            };
            let mut building = match next.take() {
                Some(building) => building,
                None => inner.building(&current.version.data, taker),
            };
            make(current.version.get(), &mut building)?;
            building.number = current.version.number + 1;
            match inner.head.publish(&current, building, guard) {
                Ok(installed) => {
                    inner.published(installed.number, installed.bytes());
                    return Ok((current.version, installed.number)); // then the ticket goes
                }
                Err(lost) => {
                    inner.home.counters.cas_retried();
                    next = Some(lost);
                }
            }
        }
    }
}

/// Who takes a version from the pool, and so from which of its lists.
#[derive(Clone, Copy)]
pub(crate) enum Taker {
    /// Any writer: the shared lists, two swaps.
    Anyone,
    /// The holder of the variable's combiner flag: its own list, no RMW.
    FlagHolder,
}

impl<A: Element> Inner<A> {
    /// After a commit: frees pooled versions beyond what a steady writer needs (the pool
    /// grows while reclamation is held up, and shrinks back here). After every write of a
    /// large version, every 64th of a small one (a walk of the pool costs more than they do).
    pub(crate) fn published(&self, number: u64, bytes: usize) {
        if bytes >= limbo::BATCH_BYTES || number.is_multiple_of(64) {
            self.home.trim(limbo::spares(bytes));
        }
    }

    /// A version to build the next value in: a pooled one, or a new one, shaped like `like`
    /// (its values are whatever they were: every writer overwrites them all).
    pub(crate) fn building(&self, like: &ArrayD<A>, taker: Taker) -> Building<A> {
        let taken = match taker {
            Taker::Anyone => self.home.take(),
            Taker::FlagHolder => {
                let keep = limbo::spares(like.len() * std::mem::size_of::<A>());
                // SAFETY: `Taker::FlagHolder` is only passed by the combining pass, which
                // holds the combiner flag (see `Publish for Variable`).
                unsafe { self.home.take_held(keep) }
            }
        };
        let Some(mut building) = taken else {
            return Version::allocate(ArrayD::default(like.raw_dim()), &self.home);
        };
        if !same_shape(building.data.shape(), like.shape()) {
            // A pooled version of an older shape (dynamic-shape variables).
            self.home
                .counters
                .buffer_allocated(like.len() * std::mem::size_of::<A>());
            building.data = ArrayD::default(like.raw_dim());
        }
        building
    }
}

/// A combining pass publishes through the variable's normal write path.
impl<A: Element> Publish<A> for Variable<A> {
    fn publish(&self, deltas: &[Delta<'_, A>]) -> Option<u64> {
        // No `write_now`: the caller reclaims after letting go of the combiner flag
        // (`apply_delta`), so that waiters do not wait for it.
        // `publish` runs with the combiner flag held: the pass takes from the flag's list.
        let (_, version) = self
            .write(&epoch::pin(), Taker::FlagHolder, |cur, next| {
                kernel::apply(&cur.data, deltas, &mut next.data);
                Ok(())
            })
            .ok()?;
        self.inner.home.counters.combined(deltas.len());
        Some(version)
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
    fn set_queued(&self, queued: bool) {
        self.head.set_queued(queued);
    }
}

impl<A: Element> Drop for Inner<A> {
    /// The variable is gone: its pool frees what it holds, and versions still held elsewhere
    /// (snapshots, limbo) are freed once they come back.
    fn drop(&mut self) {
        self.home.close();
    }
}

impl<A: Element> Clone for Variable<A> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<A: Element> fmt::Debug for Variable<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let current = self.read();
        f.debug_struct("Variable")
            .field("name", &self.name())
            .field("dtype", &A::DTYPE)
            .field("shape", &current.shape())
            .field("version", &current.version())
            .finish()
    }
}
