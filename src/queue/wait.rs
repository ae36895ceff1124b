//! The queue's waiting: how long an operation may wait, the enqueue and dequeue loops over
//! the state's lock and condition variables, and the checks and errors they share.

use std::time::{Duration, Instant};

use ndarray::{ArrayD, IxDyn};
use std::sync::{Condvar, MutexGuard, PoisonError};

use super::{State, TensorQueue};
use crate::error::{same_shape, Error, QueueProblem, Result};
use crate::kernel::standard_elements;
use crate::sync::lock_std;
use crate::Element;

/// How long an operation may wait.
#[derive(Clone, Copy)]
pub(super) enum Wait {
    Block,
    Not,
    Until(Instant),
}

impl Wait {
    /// At most `timeout` from now; a timeout too long for an `Instant` (`Duration::MAX`,
    /// as `mpsc::Receiver::recv_timeout` accepts) waits as long as it takes.
    pub(super) fn within(timeout: Duration) -> Self {
        Instant::now()
            .checked_add(timeout)
            .map_or(Wait::Block, Wait::Until)
    }
}

/// How many a dequeue of several takes from a closed queue with fewer left.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Many {
    /// None: it fails (`dequeue_many`).
    Exactly,
    /// What is left, if anything (`dequeue_up_to`).
    UpTo,
}

impl<A: Element> TensorQueue<A> {
    /// The state's lock. Nothing panics while holding it but an allocation failure, which
    /// leaves the state whole, so a poisoned lock is used as it is.
    pub(super) fn lock(&self) -> MutexGuard<'_, State<A>> {
        lock_std(&self.state)
    }

    pub(super) fn put(&self, value: ArrayD<A>, how: Wait) -> Result<()> {
        if !same_shape(&self.shape, value.shape()) {
            return Err(self.error(QueueProblem::Shape {
                expected: self.shape.clone(),
                found: value.shape().to_vec(),
            }));
        }
        let mut state = self.lock();
        if state.closed {
            return Err(self.error(QueueProblem::Closed));
        }
        while state.items.len() >= self.capacity {
            if state.cancelled {
                return Err(self.error(QueueProblem::Closed));
            }
            state.pending += 1;
            let (back, waited) = self.wait(&self.not_full, state, how, QueueProblem::Full);
            state = back;
            state.pending -= 1;
            if waited.is_err() {
                // A dequeue of a closed queue may be waiting for this enqueue to finish.
                self.not_empty.notify_all();
                return waited;
            }
        }
        if state.cancelled {
            return Err(self.error(QueueProblem::Closed));
        }
        state.items.push_back(value);
        // All: a `dequeue_many(n)` waiting for more may be the one woken, and it would keep
        // the wake-up from a `dequeue` that one element serves.
        self.not_empty.notify_all();
        Ok(())
    }

    /// `n` elements (or, [`Many::UpTo`], what is left of a closed queue), stacked.
    pub(super) fn take_stacked(&self, n: usize, how: Wait, many: Many) -> Result<ArrayD<A>> {
        if n > self.capacity {
            return Err(self.error(QueueProblem::TooMany));
        }
        let items = self.take(n, how, many)?;
        let mut shape = vec![items.len()];
        shape.extend_from_slice(&self.shape);
        let mut flat = Vec::with_capacity(shape.iter().product());
        for item in &items {
            // Slices, not an element iterator: copying a large batch element by element
            // takes several times as long.
            flat.extend_from_slice(&standard_elements(item));
        }
        Ok(ArrayD::from_shape_vec(IxDyn(&shape), flat).expect("elements of the queue's shape"))
    }

    pub(super) fn take(&self, n: usize, how: Wait, many: Many) -> Result<Vec<ArrayD<A>>> {
        let mut state = self.lock();
        while state.items.len() < n {
            // Closed: nothing more will come once the enqueues waiting for room are done
            // (without `cancel_pending_enqueues` they still complete: wait for them).
            if state.closed && (state.pending == 0 || state.cancelled) {
                if many == Many::UpTo && !state.items.is_empty() {
                    break;
                }
                return Err(self.error(QueueProblem::Closed));
            }
            let (back, waited) = self.wait(&self.not_empty, state, how, QueueProblem::Empty);
            state = back;
            waited?;
        }
        let n = n.min(state.items.len());
        let taken: Vec<_> = state.items.drain(..n).collect();
        // Room for as many waiting enqueuers as were taken; `notify_all` when several.
        match n {
            0 => {}
            1 => self.not_full.notify_one(),
            _ => self.not_full.notify_all(),
        }
        Ok(taken)
    }

    /// Waits on `cond` until notified, as `how` allows: `now` (the queue is full or empty)
    /// if it may not wait, [`QueueProblem::TimedOut`] once its deadline passed. Gives the
    /// guard back either way.
    pub(super) fn wait<'g>(
        &self,
        cond: &Condvar,
        state: MutexGuard<'g, State<A>>,
        how: Wait,
        now: QueueProblem,
    ) -> (MutexGuard<'g, State<A>>, Result<()>) {
        match how {
            Wait::Block => (
                cond.wait(state).unwrap_or_else(PoisonError::into_inner),
                Ok(()),
            ),
            Wait::Not => (state, Err(self.error(now))),
            Wait::Until(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                let (state, timeout) = cond
                    .wait_timeout(state, left)
                    .unwrap_or_else(PoisonError::into_inner);
                if timeout.timed_out() && Instant::now() >= deadline {
                    (state, Err(self.error(QueueProblem::TimedOut)))
                } else {
                    (state, Ok(()))
                }
            }
        }
    }

    pub(super) fn error(&self, problem: QueueProblem) -> Error {
        Error::Queue {
            queue: self.name.clone(),
            problem,
        }
    }
}

/// Checks that a batch of up to `capacity` elements of `shape` can be an array:
/// `Err(TooLarge)` naming queue `name` if the element count overflows `usize`, or if the
/// batch `[capacity, ..shape]` would take more than `isize::MAX` bytes. Zero-length axes
/// count as 1 there, as ndarray counts them (its arrays' strides must stay in `isize`
/// however long the other axes are, even with no elements).
pub(super) fn check_batch<A>(name: &str, capacity: usize, shape: &[usize]) -> Result<()> {
    let too_large = |why| Error::Queue {
        queue: name.to_owned(),
        problem: QueueProblem::TooLarge {
            shape: shape.to_vec(),
            capacity,
            why,
        },
    };
    if shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .is_none()
    {
        return Err(too_large("the element count overflows usize"));
    }
    let bytes = std::iter::once(capacity)
        .chain(shape.iter().copied())
        .filter(|&d| d != 0)
        .try_fold(std::mem::size_of::<A>().max(1), |n, d| n.checked_mul(d));
    if bytes.is_none_or(|bytes| bytes > isize::MAX as usize) {
        return Err(too_large(
            "a full batch would take more than isize::MAX bytes, counting each zero-length \
             axis as 1",
        ));
    }
    Ok(())
}
