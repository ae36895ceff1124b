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
use std::time::Duration;

use ndarray::{Array, ArrayD, Dimension};
use std::sync::{Condvar, Mutex};

use crate::error::Result;
#[cfg(doc)]
use crate::error::{Error, QueueProblem};
use crate::Element;
use wait::{check_batch, Many, Wait};

mod wait;

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
