//! Writes to a variable: whole values, deltas (combined), read-modify-write, compare-and-set.
//!
//! Every public write takes any ndarray: deltas as `&ArrayRef<A, E>` (so `&Array2`,
//! `&ArrayView`, `&ArcArray` and snapshots all coerce, and nothing is copied), whole values
//! as an owned `Array<A, E>` (moved in). The write loop itself works on the dynamic-dimensional
//! handle, so it is compiled once per element type, not once per dimension.

use ndarray::{Array, ArrayRef, Dimension};

use crate::combine::Publish;
use crate::dim;
use crate::error::{Error, Result};
use crate::help::Helpers;
use crate::kernel::{self, standard_elements, Delta, Op};
use crate::limbo::reclaim_now;
use crate::running::{self, Inside, Running};
use crate::sync::epoch;
use crate::ticket::Ticket;
use crate::version::{Building, Pinned, Version};
use crate::{Element, Snapshot, Variable};

impl<A: Element, D: Dimension> Variable<A, D> {
    /// Replaces the value. Returns the new version number.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] if `value` has another shape (unless the variable has a
    /// dynamic shape; then [`Error::RankMismatch`] if its rank is fixed and `value`'s differs).
    pub fn assign<E: Dimension>(&self, value: Array<A, E>) -> Result<u64> {
        let value = kernel::standard(value.into_dyn());
        self.inner.check_new_shape(value.shape())?;
        let mut value = Some(value);
        self.erased().write_now(Make::Ours, |_, next| {
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
    /// wait. [`Stats`](crate::Stats) shows the batches.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] if `delta` does not have exactly the variable's shape.
    pub fn assign_add<E: Dimension>(&self, delta: &ArrayRef<A, E>) -> Result<u64> {
        self.erased().apply_delta(Delta::dense(
            delta.shape(),
            &standard_elements(delta),
            Op::Add,
        ))
    }

    /// Subtracts `delta` elementwise. Returns the number of a version that includes it.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] if `delta` does not have exactly the variable's shape.
    pub fn assign_sub<E: Dimension>(&self, delta: &ArrayRef<A, E>) -> Result<u64> {
        self.erased().apply_delta(Delta::dense(
            delta.shape(),
            &standard_elements(delta),
            Op::Sub,
        ))
    }

    /// `value += alpha * x` elementwise (ndarray's `scaled_add`, same argument order): an
    /// SGD step is `w.scaled_add(-lr, &grad)`, with no temporary array. Combined with
    /// concurrent `assign_add`s like them, and the same arithmetic as ndarray's, element by
    /// element (`w + alpha * x`, no fused multiply-add). Returns the number of the version
    /// that includes it.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] if `x` does not have exactly the variable's shape.
    pub fn scaled_add<E: Dimension>(&self, alpha: A, x: &ArrayRef<A, E>) -> Result<u64> {
        self.erased().apply_delta(Delta::dense(
            x.shape(),
            &standard_elements(x),
            Op::Scaled(alpha),
        ))
    }

    /// Replaces the value with `f(current)`, read-copy-update style. Returns the new version.
    ///
    /// `f` may run **more than once**: if another writer commits between reading the current
    /// value and publishing, `f` runs again on the newer value. Keep it free of side effects.
    /// To add a delta, use [`assign_add`](Self::assign_add) or
    /// [`scaled_add`](Self::scaled_add) instead: concurrent ones are combined into one pass,
    /// where concurrent updates redo theirs, several times the CPU per write under
    /// contention.
    ///
    /// `f` may take as long as it likes: it runs unpinned (the version it reads is kept by a
    /// count), so it holds back no other version's reuse, by any thread. (On a variable a
    /// critical section holds, the section's executions and other writers of the variable
    /// wait for it: the write holds the variable's ticket while `f` runs.)
    ///
    /// A write to this same variable from inside `f` returns [`Error::Reentrant`]: it would
    /// commit first, and make the update lose and run `f` again, forever.
    ///
    /// `f` gets the current value as ndarray's `&ArrayRef`, whose operators take another
    /// `&ArrayRef`: an owned array `a` goes in as `&*a` (`x * &a` does not compile).
    ///
    /// ```
    /// use mvtensor::Variable;
    /// use ndarray::{arr1, Array1};
    ///
    /// let v = Variable::new(arr1(&[1.0f32, 2.0]));
    /// let scale = Array1::from(vec![10.0f32, 100.0]);
    /// v.update(|x| x * &*scale)?;
    /// assert_eq!(v.read().as_slice(), Some(&[10.0, 200.0][..]));
    /// # Ok::<(), mvtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] if `f` returns another shape (unless dynamic); nothing is
    /// written then.
    pub fn update<E: Dimension>(
        &self,
        f: impl FnMut(&ArrayRef<A, D>) -> Array<A, E>,
    ) -> Result<u64> {
        self.erased().write_now(Make::Callers, self.replace_with(f))
    }

    /// Like [`update`](Self::update), but returns a snapshot of the version it replaced.
    /// Linearizable: the returned snapshot is exactly the value `f` turned into the new one,
    /// so N threads incrementing a counter see every value exactly once. (For a scalar,
    /// [`fetch_add`](Self::fetch_add) does it without an array per call.)
    ///
    /// `f` may run more than once (see [`update`](Self::update)).
    ///
    /// ```
    /// use mvtensor::Variable;
    /// use ndarray::arr1;
    ///
    /// let v = Variable::new(arr1(&[1, 2]));
    /// let old = v.fetch_update(|c| c * 10)?;
    /// assert_eq!(old.as_slice(), Some(&[1, 2][..]));
    /// assert_eq!(v.read().as_slice(), Some(&[10, 20][..]));
    /// # Ok::<(), mvtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] as for [`update`](Self::update).
    pub fn fetch_update<E: Dimension>(
        &self,
        f: impl FnMut(&ArrayRef<A, D>) -> Array<A, E>,
    ) -> Result<Snapshot<A, D>> {
        self.erased().fetch_write(self.replace_with(f))
    }

    /// What `update` and `fetch_update` build: `f(current)`, run marked as this variable's
    /// update closure (a write to the variable from inside it is refused), in standard
    /// layout and of a shape the variable takes.
    fn replace_with<'s, E: Dimension>(
        &'s self,
        mut f: impl FnMut(&ArrayRef<A, D>) -> Array<A, E> + 's,
    ) -> impl FnMut(&Version<A>, &mut Building<A>) -> Result<()> + 's {
        move |cur, next| {
            let value = running::updating(self.inner.id, || dim::with_typed(&cur.data, &mut f));
            let value = kernel::standard(value.into_dyn());
            self.inner.check_new_shape(value.shape())?;
            next.data = value;
            Ok(())
        }
    }

    /// Replaces the value only if the current version number is `expected`. Returns the new
    /// version number (`expected + 1`).
    ///
    /// # Errors
    /// [`Error::VersionConflict`] if the variable is at another version;
    /// [`Error::ShapeMismatch`] as for [`assign`](Self::assign).
    pub fn compare_and_set<E: Dimension>(&self, expected: u64, value: Array<A, E>) -> Result<u64> {
        let value = kernel::standard(value.into_dyn());
        self.inner.check_new_shape(value.shape())?;
        let mut value = Some(value);
        self.erased().write_now(Make::Ours, |cur, next| {
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
}

/// The write path proper, on the dynamic-dimensional handle.
impl<A: Element> Variable<A> {
    /// Applies a delta (dense or rows), combined with concurrent ones.
    pub(super) fn apply_delta(&self, delta: Delta<'_, A>) -> Result<u64> {
        // Several writes of a large variable under way: its pool keeps a third spare.
        let _writing = self.inner.large().then(|| self.inner.home.writers.enter());
        // A dynamic shape is checked against the version the pass builds on, one delta at a
        // time; and a thread inside an execution must not wait for another's queue ticket.
        if self.inner.dynamic_shape || running::inside() {
            return self.apply_delta_alone(delta);
        }
        delta.check(self.name(), &self.inner.shape)?;
        let combined = self.inner.combiner.submit(delta, self);
        // What this thread's passes (if it combined) replaced.
        if reclaim_now() {
            self.inner.reclaimed();
        }
        match combined {
            Some(version) => Ok(version),
            None => self.apply_delta_alone(delta),
        }
    }

    fn apply_delta_alone(&self, delta: Delta<'_, A>) -> Result<u64> {
        self.write_now(Make::Ours, |cur, next| {
            delta.check(self.name(), cur.data.shape())?;
            kernel::apply(&cur.data, &[delta], &mut next.data);
            Ok(())
        })
    }

    /// [`write`](Self::write) under a pin of its own, or [`write_counted`] (unpinned while
    /// `make` runs) for a large variable or where `make` runs the caller's code
    /// ([`Make::Callers`]); once unpinned, this thread hands the version it replaced back to
    /// the pool if it is large and no reader holds it (see [`reclaim_now`]). Returns the new
    /// version number.
    ///
    /// [`write_counted`]: Self::write_counted
    pub(super) fn write_now(
        &self,
        whose: Make,
        make: impl FnMut(&Version<A>, &mut Building<A>) -> Result<()>,
    ) -> Result<u64> {
        self.inner.make_room();
        let counted = matches!(whose, Make::Callers) || self.inner.writes_counted();
        let written = self.write_either(counted, Taker::Anyone, make);
        if reclaim_now() {
            self.inner.reclaimed();
        }
        written
    }

    /// [`write_counted`](Self::write_counted) (`make` is an `update` closure, run unpinned),
    /// returning a snapshot of the version it replaced, kept by the write's count of it.
    pub(super) fn fetch_write<D: Dimension>(
        &self,
        make: impl FnMut(&Version<A>, &mut Building<A>) -> Result<()>,
    ) -> Result<Snapshot<A, D>> {
        self.inner.make_room();
        let (old, _) = self.write_counted_from(Taker::Anyone, make)?;
        Ok(Snapshot::counted(old))
    }

    /// [`write`](Self::write) to a variable a critical section holds now: its ticket is
    /// waited for *before* pinning. The execution ahead may run its closure for as long as
    /// it likes, and a writer waiting pinned would hold back every version retired
    /// meanwhile, by any thread, and slow every other writer that needs its versions back
    /// (`tests/long_closures.rs`).
    /// Out of line: the free variable's path pays only the look at the head's mark. (A
    /// pinned write, for writes that run no closure of the caller's: a counted one keeps the
    /// ticket itself, `write_counted`.)
    #[cold]
    #[inline(never)]
    pub(super) fn write_queued(
        &self,
        taker: Taker,
        make: impl FnMut(&Version<A>, &mut Building<A>) -> Result<()>,
    ) -> Result<u64> {
        let ticket = self.take_ticket(taker)?;
        self.write(&epoch::pin(), Some(ticket), taker, make)
            .map(|(_, new)| new)
    }

    /// Marks this thread inside a queued variable's update while the write holds the
    /// variable's ticket: `make` (an `update` closure) must not wait for another ticket.
    pub(super) fn inside_queued_update(
        &self,
        ticket: &Option<Ticket<'_>>,
    ) -> Result<Option<Running<'_>>> {
        ticket
            .as_ref()
            .map(|_| {
                Running::enter(Inside::QueuedUpdate, &self.inner.name, || {
                    format!("an update of `{}`", self.name()) // not reached: checked before
                })
            })
            .transpose()
    }

    /// Waits for the variable's ticket, unless this thread would wait for itself
    /// ([`Error::Reentrant`], at once): inside an execution, or inside this variable's own
    /// `update` closure (a writer `taker`'s check, as [`write`](Self::write) makes it).
    #[cold]
    #[inline(never)]
    pub(super) fn take_ticket(&self, taker: Taker) -> Result<Ticket<'_>> {
        if let Taker::Anyone = taker {
            running::check_not_updating(self.inner.id, &self.inner.name)?;
        }
        running::check_outside(|| {
            format!(
                "a direct write to `{}`, which a critical section holds",
                self.name()
            )
        })?;
        Ok(self.inner.queue.enter())
    }

    /// The write loop: build the next value from the current version in a pooled version,
    /// publish it with one compare-and-swap. Returns the replaced version and the new version
    /// number.
    ///
    /// A free variable's writers are lock-free: a lost CAS means another write committed. A
    /// queued variable's writers first take its ticket (FIFO), so they run one at a time:
    /// `ticket` is the one the caller took before pinning ([`write_queued`]), if any.
    ///
    /// [`write_queued`]: Self::write_queued
    ///
    /// `make` may run several times, on the same `Building` (what it left there from a lost
    /// attempt is still there).
    // Inlined into each caller (two call the same instance: `write_now`, and
    // `write_queued`): out of line it costs a scalar `fetch_add` a call's worth of
    // instructions.
    #[inline(always)]
    pub(super) fn write<'s, 'g>(
        &'s self,
        guard: &'g epoch::Guard,
        mut ticket: Option<Ticket<'s>>,
        taker: Taker,
        mut make: impl FnMut(&Version<A>, &mut Building<A>) -> Result<()>,
    ) -> Result<(Pinned<'g, A>, u64)> {
        let inner = &*self.inner;
        if let Taker::Anyone = taker {
            running::check_not_updating(inner.id, &inner.name)?;
        }
        let mut next = None;
        loop {
            let current = inner.head.current(guard);
            if current.queued() && ticket.is_none() {
                // Queued since the caller's look (`write_queued`): waits pinned, for the
                // tickets taken before ours (a section that claimed the variable between
                // the look and the pin, and whoever queued meanwhile). Rare: the window is
                // a few instructions.
                ticket = Some(self.take_ticket(taker)?);
                continue; // reload: the previous ticket holder has committed
            }
            current.settle(guard); // free, or we hold the ticket: see `Current::settle`
            let _inside = self.inside_queued_update(&ticket)?;
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

/// Whose code a write's `make` runs, and so whether it may run pinned.
#[derive(Clone, Copy)]
pub(super) enum Make {
    /// Ours: a copy, an add, a value moved in; short, so a small variable's write runs it
    /// pinned.
    Ours,
    /// The caller's: an `update` closure, which may take as long as it likes; run unpinned
    /// (pinned, it held back every version any thread retired meanwhile).
    Callers,
}

/// Who takes a version from the pool, and so from which of its lists.
#[derive(Clone, Copy)]
pub(crate) enum Taker {
    /// Any writer: the shared lists, two swaps.
    Anyone,
    /// The holder of the variable's combiner flag: its own list, no RMW.
    FlagHolder,
}

/// A combining pass publishes through the variable's normal write path.
impl<A: Element> Publish<A> for Variable<A> {
    fn publish(&self, deltas: &[Delta<'_, A>], helpers: &Helpers, wake: &dyn Fn()) -> Option<u64> {
        // No `write_now`: the caller reclaims after letting go of the combiner flag
        // (`apply_delta`), so that waiters do not wait for it.
        // `publish` runs with the combiner flag held: the pass takes from the flag's list.
        let version = self
            .write_either(self.inner.large(), Taker::FlagHolder, |cur, next| {
                kernel::apply_helped(&cur.data, deltas, &mut next.data, helpers, wake);
                Ok(())
            })
            .ok()?;
        self.inner.home.counters.combined(deltas.len());
        Some(version)
    }
}

impl<A: Element> Variable<A> {
    /// A write that builds the next value in place from the current one (same shape, so
    /// nothing to check): returns what `make` returned for the attempt that won, and the new
    /// version number.
    pub(super) fn write_value<R>(
        &self,
        mut make: impl FnMut(&ndarray::ArrayD<A>, &mut ndarray::ArrayD<A>) -> R,
    ) -> Result<(R, u64)> {
        let mut made = None;
        let version = self.write_now(Make::Ours, |cur, next| {
            made = Some(make(&cur.data, &mut next.data));
            Ok(())
        })?;
        Ok((made.expect("a committed write ran `make`"), version))
    }
}
