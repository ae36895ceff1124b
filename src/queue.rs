//! [`TensorQueue`]: a bounded FIFO of tensors between threads, with TensorFlow's `FIFOQueue`
//! semantics: a capacity, blocking, `try_` and timed enqueue and dequeue, `dequeue_many` and
//! `dequeue_up_to` (blocking or timed), and `close` (enqueues then fail; dequeues drain what
//! is left, then fail). A producer holding [`close_on_panic`](TensorQueue::close_on_panic)
//! closes the queue if it panics, so that its consumers are not left waiting.
//!
//! A data pipeline feeding trainers is the use: producer threads enqueue batches, trainer
//! threads dequeue them. Every element has the queue's shape and element type, checked at
//! enqueue (no broadcasting). It is a `std::sync` mutex and two condition variables: a
//! channel crate's close cannot cancel blocked senders selectively or take `n` elements at
//! once, which `close(cancel_pending_enqueues)` and `dequeue_many` need.
//!
//! ```
//! use mvtensor::queue::TensorQueue;
//! use ndarray::Array1;
//!
//! let batches = TensorQueue::<f32>::new("batches", 4, &[3])?;
//! std::thread::scope(|s| {
//!     s.spawn(|| {
//!         for i in 0..10 {
//!             batches.enqueue(Array1::from_elem(3, i as f32)).unwrap(); // waits while full
//!         }
//!         batches.close(false); // no more batches: consumers drain, then stop
//!     });
//!     let mut seen = 0.0;
//!     while let Ok(batch) = batches.dequeue() {
//!         seen += batch[[0]];
//!     }
//!     assert_eq!(seen, 45.0);
//! });
//! # Ok::<(), mvtensor::Error>(())
//! ```

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

use ndarray::{Array, ArrayD, Dimension, IxDyn};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use crate::error::{same_shape, Error, QueueProblem, Result};
use crate::kernel::standard_elements;
use crate::sync::lock_std;
use crate::Element;

/// How long an operation may wait.
#[derive(Clone, Copy)]
enum Wait {
    Block,
    Not,
    Until(Instant),
}

impl Wait {
    /// At most `timeout` from now; a timeout too long for an `Instant` (`Duration::MAX`,
    /// as `mpsc::Receiver::recv_timeout` accepts) waits as long as it takes.
    fn within(timeout: Duration) -> Self {
        Instant::now()
            .checked_add(timeout)
            .map_or(Wait::Block, Wait::Until)
    }
}

/// How many a dequeue of several takes from a closed queue with fewer left.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Many {
    /// None: it fails (`dequeue_many`).
    Exactly,
    /// What is left, if anything (`dequeue_up_to`).
    UpTo,
}

/// A bounded FIFO queue of tensors of one shape; see the [module docs](self).
pub struct TensorQueue<A: Element> {
    name: String,
    capacity: usize,
    shape: Vec<usize>,
    state: Mutex<State<A>>,
    not_full: Condvar,
    not_empty: Condvar,
}

struct State<A> {
    items: VecDeque<ArrayD<A>>,
    closed: bool,
    /// Closed with `cancel_pending_enqueues`: blocked enqueuers give up.
    cancelled: bool,
    /// Enqueues waiting for room.
    pending: usize,
}

impl<A: Element> TensorQueue<A> {
    /// The state's lock. Nothing panics while holding it but an allocation failure, which
    /// leaves the state whole, so a poisoned lock is used as it is.
    fn lock(&self) -> MutexGuard<'_, State<A>> {
        lock_std(&self.state)
    }

    /// An open, empty queue named `name` (for errors) holding at most `capacity` elements of
    /// `shape`; a capacity of 0 is taken as 1 (a queue that could hold nothing would block
    /// every enqueue forever).
    ///
    /// # Errors
    /// [`Error::Queue`] with [`QueueProblem::TooLarge`] if no batch of the queue could be an
    /// array: the element count of `shape` overflows `usize`, or a batch of `capacity`
    /// elements (what a full [`dequeue_many`](Self::dequeue_many) returns) would take more
    /// than `isize::MAX` bytes. Checked here, where nothing is allocated, so that no later
    /// dequeue can fail (or panic) for it.
    pub fn new(name: impl Into<String>, capacity: usize, shape: &[usize]) -> Result<Self> {
        let (name, capacity) = (name.into(), capacity.max(1));
        check_batch::<A>(&name, capacity, shape)?;
        Ok(Self {
            name,
            capacity,
            shape: shape.to_vec(),
            state: Mutex::new(State {
                items: VecDeque::new(),
                closed: false,
                cancelled: false,
                pending: 0,
            }),
            not_full: Condvar::new(),
            not_empty: Condvar::new(),
        })
    }

    /// Adds `value` at the back, waiting while the queue is full.
    ///
    /// # Errors
    /// [`Error::Queue`] with [`QueueProblem::Shape`] unless `value` has the queue's shape;
    /// with [`QueueProblem::Closed`] if the queue is (or, while waiting, gets) closed with
    /// `cancel_pending_enqueues`, or was closed before the call.
    pub fn enqueue<D: Dimension>(&self, value: Array<A, D>) -> Result<()> {
        self.put(value.into_dyn(), Wait::Block)
    }

    /// As [`enqueue`](Self::enqueue), waiting at most `timeout` for room.
    ///
    /// # Errors
    /// As for `enqueue`, and [`QueueProblem::TimedOut`].
    pub fn enqueue_timeout<D: Dimension>(
        &self,
        value: Array<A, D>,
        timeout: Duration,
    ) -> Result<()> {
        self.put(value.into_dyn(), Wait::within(timeout))
    }

    /// Adds `value` only if there is room now.
    ///
    /// # Errors
    /// As for `enqueue`, and [`QueueProblem::Full`].
    pub fn try_enqueue<D: Dimension>(&self, value: Array<A, D>) -> Result<()> {
        self.put(value.into_dyn(), Wait::Not)
    }

    /// Takes the front element, waiting while the queue is empty and open.
    ///
    /// # Errors
    /// [`Error::Queue`] with [`QueueProblem::Closed`] once the queue is closed and empty,
    /// and no enqueue it lets finish (closed without `cancel_pending_enqueues`) still waits.
    pub fn dequeue(&self) -> Result<ArrayD<A>> {
        self.take(1, Wait::Block, Many::Exactly)
            .map(|mut v| v.pop().expect("one taken"))
    }

    /// As [`dequeue`](Self::dequeue), waiting at most `timeout`.
    ///
    /// # Errors
    /// As for `dequeue`, and [`QueueProblem::TimedOut`].
    pub fn dequeue_timeout(&self, timeout: Duration) -> Result<ArrayD<A>> {
        self.take(1, Wait::within(timeout), Many::Exactly)
            .map(|mut v| v.pop().expect("one taken"))
    }

    /// Takes the front element only if there is one now.
    ///
    /// # Errors
    /// [`QueueProblem::Empty`], or [`QueueProblem::Closed`] once closed and empty.
    pub fn try_dequeue(&self) -> Result<ArrayD<A>> {
        self.take(1, Wait::Not, Many::Exactly)
            .map(|mut v| v.pop().expect("one taken"))
    }

    /// Takes `n` elements at once (no other dequeue interleaves), stacked along a new first
    /// axis: shape `[n, ..the queue's shape]`. Waits until `n` are there; `n = 0` returns an
    /// empty batch at once, open or closed (TensorFlow's rule: it fails only with fewer than
    /// `n` left).
    ///
    /// # Errors
    /// [`QueueProblem::Closed`] if the queue is closed with fewer than `n` left (they stay
    /// for smaller dequeues, or [`dequeue_up_to`](Self::dequeue_up_to)); [`QueueProblem::TooMany`]
    /// if `n` exceeds the capacity (it could never be served).
    pub fn dequeue_many(&self, n: usize) -> Result<ArrayD<A>> {
        self.take_stacked(n, Wait::Block, Many::Exactly)
    }

    /// As [`dequeue_many`](Self::dequeue_many), waiting at most `timeout`: a consumer that
    /// must notice a producer that stopped without closing the queue.
    ///
    /// # Errors
    /// As for `dequeue_many`, and [`QueueProblem::TimedOut`] (nothing is taken then).
    pub fn dequeue_many_timeout(&self, n: usize, timeout: Duration) -> Result<ArrayD<A>> {
        self.take_stacked(n, Wait::within(timeout), Many::Exactly)
    }

    /// TensorFlow's `dequeue_up_to`: as [`dequeue_many`](Self::dequeue_many) while the queue
    /// is open, but once it is closed, what is left (fewer than `n`, at least one) is
    /// returned instead of an error: the last, smaller batch of an epoch. Shape
    /// `[taken, ..the queue's shape]`.
    ///
    /// ```
    /// use mvtensor::queue::TensorQueue;
    /// use ndarray::Array1;
    ///
    /// let q = TensorQueue::<f32>::new("samples", 8, &[2])?;
    /// for i in 0..5 {
    ///     q.enqueue(Array1::from_elem(2, i as f32))?;
    /// }
    /// q.close(false);
    /// assert_eq!(q.dequeue_up_to(4)?.shape(), &[4, 2]);
    /// assert_eq!(q.dequeue_up_to(4)?.shape(), &[1, 2]); // the rest
    /// assert!(q.dequeue_up_to(4).is_err()); // closed and empty
    /// # Ok::<(), mvtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`QueueProblem::Closed`] once the queue is closed and empty; [`QueueProblem::TooMany`]
    /// as for `dequeue_many`.
    pub fn dequeue_up_to(&self, n: usize) -> Result<ArrayD<A>> {
        self.take_stacked(n, Wait::Block, Many::UpTo)
    }

    /// As [`dequeue_up_to`](Self::dequeue_up_to), waiting at most `timeout`.
    ///
    /// # Errors
    /// As for `dequeue_up_to`, and [`QueueProblem::TimedOut`] (nothing is taken then).
    pub fn dequeue_up_to_timeout(&self, n: usize, timeout: Duration) -> Result<ArrayD<A>> {
        self.take_stacked(n, Wait::within(timeout), Many::UpTo)
    }

    /// A guard that closes the queue, cancelling pending enqueues, if it is dropped while
    /// its thread panics: a producer that holds one cannot leave its consumers waiting for
    /// ever (they drain what is there, then get [`QueueProblem::Closed`]). Dropped
    /// otherwise, it does nothing: with several producers, the last one closes the queue.
    ///
    /// ```
    /// use mvtensor::queue::TensorQueue;
    /// use ndarray::Array1;
    ///
    /// let q = TensorQueue::<f32>::new("batches", 2, &[1])?;
    /// let producer = std::thread::scope(|s| {
    ///     let producer = s.spawn(|| {
    ///         let _closes = q.close_on_panic();
    ///         q.enqueue(Array1::zeros(1)).unwrap();
    ///         panic!("the data loader failed");
    ///     });
    ///     while q.dequeue().is_ok() {} // ends: the queue closed with the panic
    ///     producer.join()
    /// });
    /// assert!(producer.is_err() && q.is_closed());
    /// # Ok::<(), mvtensor::Error>(())
    /// ```
    pub fn close_on_panic(&self) -> CloseOnPanic<'_, A> {
        CloseOnPanic { queue: self }
    }

    /// Closes the queue: every later enqueue fails, dequeues take what is left and then
    /// fail. With `cancel_pending_enqueues`, enqueues waiting for room fail too; without,
    /// they still complete as room frees up.
    pub fn close(&self, cancel_pending_enqueues: bool) {
        let mut state = self.lock();
        state.closed = true;
        state.cancelled |= cancel_pending_enqueues;
        self.not_full.notify_all();
        self.not_empty.notify_all();
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// The number of elements in the queue now.
    pub fn len(&self) -> usize {
        self.lock().items.len()
    }

    /// The number of enqueues waiting for room now (a producer's back-pressure).
    pub fn pending_enqueues(&self) -> usize {
        self.lock().pending
    }

    /// Whether the queue is empty now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The shape of every element.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn put(&self, value: ArrayD<A>, how: Wait) -> Result<()> {
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
    fn take_stacked(&self, n: usize, how: Wait, many: Many) -> Result<ArrayD<A>> {
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

    fn take(&self, n: usize, how: Wait, many: Many) -> Result<Vec<ArrayD<A>>> {
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
    fn wait<'g>(
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

    fn error(&self, problem: QueueProblem) -> Error {
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
fn check_batch<A>(name: &str, capacity: usize, shape: &[usize]) -> Result<()> {
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

/// Closes its queue if dropped while its thread panics: [`TensorQueue::close_on_panic`].
#[must_use = "the guard closes the queue only while it is held"]
pub struct CloseOnPanic<'q, A: Element> {
    queue: &'q TensorQueue<A>,
}

impl<A: Element> Drop for CloseOnPanic<'_, A> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.queue.close(true);
        }
    }
}

impl<A: Element> fmt::Debug for CloseOnPanic<'_, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CloseOnPanic")
            .field("queue", &self.queue.name)
            .finish()
    }
}

impl<A: Element> fmt::Debug for TensorQueue<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("TensorQueue")
            .field("name", &self.name)
            .field("len", &state.items.len())
            .field("capacity", &self.capacity)
            .field("shape", &self.shape)
            .field("closed", &state.closed)
            .finish()
    }
}
