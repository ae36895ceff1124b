//! [`Variable`]: a shared, versioned tensor.

use std::fmt;
use std::sync::Arc;

use ndarray::ArrayD;

use crate::combine::{Combiner, Op, Publish};
use crate::error::{check_shape, Error, Result};
use crate::head::Head;
use crate::kernel::{self, Delta, Sign};
use crate::record::{CommitRecord, Record};
use crate::running::{self, Inside, Running};
use crate::section::{Claims, Resource};
use crate::stats::Stats;
use crate::sync::{epoch, next_id};
use crate::ticket::TicketQueue;
use crate::version::{reclaim_retired, Home, Pinned, Version};
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
        let first = Version::new(
            init,
            0,
            Record::Own(CommitRecord::committed_now()),
            Arc::clone(&home),
        );
        Variable {
            inner: Arc::new(Inner {
                id,
                name,
                shape,
                dynamic_shape: self.dynamic_shape,
                head: Head::new(Arc::new(first)),
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
        self.inner.home.counters.read()
    }

    /// Replaces the value. Returns the new version number.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] if `value` has another shape (unless the variable has a
    /// dynamic shape).
    pub fn assign(&self, value: ArrayD<A>) -> Result<u64> {
        let value = kernel::standard(value);
        self.check_new_shape(value.shape())?;
        self.write_now(Some(value), |_, value| Ok(take(value)))
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
        self.write_now(None, |cur, _| {
            let next = kernel::standard(f(&cur.data));
            self.check_new_shape(next.shape())?;
            Ok(next)
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
        let (old, _) = self.write(&guard, None, |cur, _| {
            let next = kernel::standard(f(&cur.data));
            self.check_new_shape(next.shape())?;
            Ok(next)
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
        self.write_now(Some(value), |cur, value| {
            if cur.number != expected {
                return Err(Error::VersionConflict {
                    variable: self.name().to_owned(),
                    expected,
                    actual: cur.number,
                });
            }
            Ok(take(value))
        })
    }

    fn apply_delta(&self, delta: &ArrayD<A>, sign: Sign) -> Result<u64> {
        // A dynamic shape is checked against the version the pass builds on, one delta at a
        // time; and a thread inside an execution must not wait for another's queue ticket.
        if self.inner.dynamic_shape || running::inside() {
            return self.apply_delta_alone(delta, sign);
        }
        check_shape(self.name(), &self.inner.shape, delta.shape())?;
        let mut op = Op::new(delta, sign);
        let combined = self.inner.combiner.submit(&mut op, self);
        reclaim_retired(); // what this thread's passes (if it combined) replaced
        match combined {
            Some(version) => Ok(version),
            None => self.apply_delta_alone(delta, sign),
        }
    }

    fn apply_delta_alone(&self, delta: &ArrayD<A>, sign: Sign) -> Result<u64> {
        self.write_now(None, |cur, _| {
            check_shape(self.name(), cur.data.shape(), delta.shape())?;
            let out = self.inner.home.buffer(cur.data.len());
            Ok(kernel::apply(
                &cur.data,
                &[Delta { data: delta, sign }],
                out,
            ))
        })
    }

    pub(crate) fn check_new_shape(&self, found: &[usize]) -> Result<()> {
        if self.inner.dynamic_shape {
            Ok(())
        } else {
            check_shape(self.name(), &self.inner.shape, found)
        }
    }

    /// [`write`](Self::write) under a pin of its own; once unpinned, this thread frees the
    /// version it replaced if no reader holds it (see [`reclaim_retired`]). Returns the new
    /// version number.
    fn write_now(
        &self,
        spare: Option<ArrayD<A>>,
        make: impl FnMut(&Version<A>, &mut Option<ArrayD<A>>) -> Result<ArrayD<A>>,
    ) -> Result<u64> {
        let written = self.write(&epoch::pin(), spare, make).map(|(_, new)| new);
        reclaim_retired();
        written
    }

    /// The write loop: build a value from the current version, publish it with one
    /// compare-and-swap, commit it. Returns the replaced version and the new version number.
    ///
    /// A free variable's writers are lock-free: a lost CAS means another write committed. A
    /// queued variable's writers first take its ticket (FIFO), so they run one at a time.
    ///
    /// `make` may run several times. `spare` starts as the caller's ready-made value (if
    /// any) and gets the tensor of each lost attempt back, so `assign` never clones.
    fn write<'g>(
        &self,
        guard: &'g epoch::Guard,
        mut spare: Option<ArrayD<A>>,
        mut make: impl FnMut(&Version<A>, &mut Option<ArrayD<A>>) -> Result<ArrayD<A>>,
    ) -> Result<(Pinned<'g, A>, u64)> {
        let inner = &*self.inner;
        let mut ticket = None;
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
            let data = make(current.version.get(), &mut spare)?;
            let new = Arc::new(Version::new(
                data,
                current.version.number + 1,
                Record::Own(CommitRecord::pending()),
                Arc::clone(&inner.home),
            ));
            match inner.head.install(&current, new, guard) {
                Ok(installed) => {
                    installed.record.commit();
                    installed.release_prev(guard);
                    inner.home.counters.committed();
                    return Ok((current.version, installed.number)); // then the ticket goes
                }
                Err(lost) => {
                    inner.home.counters.cas_retried();
                    spare = Arc::into_inner(lost).map(Version::into_data);
                }
            }
        }
    }
}

/// A combining pass publishes through the variable's normal write path.
impl<A: Element> Publish<A> for Variable<A> {
    fn publish(&self, deltas: &[Delta<'_, A>]) -> Option<u64> {
        // No `write_now`: the caller reclaims after letting go of the combiner flag
        // (`apply_delta`), so that waiters do not wait for it.
        let (_, version) = self
            .write(&epoch::pin(), None, |cur, _| {
                let out = self.inner.home.buffer(cur.data.len());
                Ok(kernel::apply(&cur.data, deltas, out))
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

/// The value handed to `write` by `assign`-like callers: present on every attempt, because a
/// lost attempt's version was never shared and gives its tensor back.
fn take<A>(spare: &mut Option<ArrayD<A>>) -> ArrayD<A> {
    spare
        .take()
        .expect("write() returns the tensor of every lost attempt")
}
