//! [`Replicas`]: data-parallel training with synchronous all-reduce, as TensorFlow's
//! `MirroredStrategy`: N worker threads each compute a gradient on their own batch; per step
//! the N gradients are summed and their mean applied once, and every worker goes on with the
//! same parameters.

use std::sync::{Barrier, Mutex};

use ndarray::{ArrayD, IxDyn, NdFloat};

use super::{Gradients, Optimizer};
use crate::error::{Error, Result};
use crate::read_all::read_all;
use crate::sync::lock_std as lock;
use crate::{Element, Variable};

/// A synchronous all-reduce over `workers` threads in front of an [`Optimizer`]. Each worker
/// calls [`step`](Self::step) once per step with its gradients; the call adds them to the
/// step's sums (combined writes, so the adds of N workers cost about one pass), waits for the
/// other workers, the last to arrive applies the mean through the optimizer (one execution),
/// and every call returns once it is applied: a worker that reads the parameters after its
/// call returns sees this step and no later one until every worker has called again.
///
/// [`step_async`](Self::step_async) is the asynchronous mode: each worker's gradient is
/// applied on its own, as soon as it comes (no waiting for the others, no averaging).
///
/// Like any all-reduce, every worker must call `step` every step: a worker that stops (or
/// panics inside its step) leaves the others waiting.
///
/// ```
/// use mvtensor::optim::{Optimizer, Replicas};
/// use mvtensor::Variable;
/// use ndarray::Array1;
///
/// let w = Variable::new(Array1::<f64>::zeros(2));
/// let replicas = Replicas::new(Optimizer::sgd(0.5).param(&w).build()?, 3);
/// std::thread::scope(|s| {
///     for worker in 0..3 {
///         let replicas = &replicas;
///         s.spawn(move || {
///             let grad = Array1::from_elem(2, worker as f64); // 0, 1, 2: mean 1
///             replicas.step((&grad,)).unwrap();
///         });
///     }
/// });
/// assert_eq!(w.read()[0], -0.5);
/// # Ok::<(), mvtensor::Error>(())
/// ```
#[derive(Debug)]
pub struct Replicas<A: Element> {
    optimizer: Optimizer<A>,
    /// The step's gradient sums, one per parameter.
    sums: Vec<Variable<A>>,
    workers: usize,
    barrier: Barrier,
    /// The first error of a worker's gradients in the step being gathered.
    error: Mutex<Option<Error>>,
    /// The outcome of the last step applied: its number, or that error.
    outcome: Mutex<Result<i64>>,
}

impl<A: Element + NdFloat> Replicas<A> {
    /// An all-reduce over `workers` (at least one) in front of `optimizer`.
    pub fn new(optimizer: Optimizer<A>, workers: usize) -> Self {
        let sums = optimizer
            .gradient_shapes()
            .map(|shape| Variable::new(ArrayD::<A>::zeros(IxDyn(shape))))
            .collect();
        let workers = workers.max(1);
        Self {
            optimizer,
            sums,
            workers,
            barrier: Barrier::new(workers),
            error: Mutex::new(None),
            outcome: Mutex::new(Ok(0)),
        }
    }

    /// The optimizer the mean gradients go through.
    pub fn optimizer(&self) -> &Optimizer<A> {
        &self.optimizer
    }

    /// One synchronous step from one worker (see the type's docs). Returns the optimizer's
    /// step number.
    ///
    /// # Errors
    /// If any worker's gradients do not fit
    /// ([`Error::GradientCount`](crate::Error::GradientCount),
    /// [`Error::ShapeMismatch`](crate::Error::ShapeMismatch)), nothing of this step is
    /// applied and every worker gets that error.
    pub fn step(&self, grads: impl Gradients<A>) -> Result<i64> {
        if let Err(e) = self.add(grads) {
            lock(&self.error).get_or_insert(e);
        }
        if self.barrier.wait().is_leader() {
            self.apply();
        }
        // The step is applied (or failed) before anyone leaves. The outcome stays until the
        // next step's `apply`, which needs every worker back at the first barrier, so after
        // it has read this one: a second barrier to reset anything would let a fast worker's
        // next error be wiped (it was: an audit saw failed steps applied and reported `Ok`).
        self.barrier.wait();
        lock(&self.outcome).clone()
    }

    /// The asynchronous mode: applies this worker's gradients at once, on their own.
    ///
    /// # Errors
    /// As for [`Optimizer::step`].
    pub fn step_async(&self, grads: impl Gradients<A>) -> Result<i64> {
        self.optimizer.step(grads)
    }

    /// Adds one worker's gradients to the sums, after checking all of them.
    fn add(&self, grads: impl Gradients<A>) -> Result<()> {
        let grads = grads.collect();
        self.optimizer.check_gradients(&grads)?;
        for ((shape, g), sum) in grads.iter().zip(&self.sums) {
            let g = ndarray::ArrayViewD::from_shape(IxDyn(shape), g).expect("checked above");
            sum.assign_add(&g)?;
        }
        Ok(())
    }

    /// The last worker of a step: applies the mean of the sums, then clears them. No worker
    /// adds to them until every one has passed the second barrier.
    fn apply(&self) {
        let sums = read_all(&self.sums[..]);
        let outcome = match lock(&self.error).take() {
            Some(error) => Err(error),
            None => {
                let n = A::from(self.workers).expect("a worker count");
                let means: Vec<ArrayD<A>> = sums.iter().map(|s| s.mapv(|x| x / n)).collect();
                self.optimizer.step(&means)
            }
        };
        *lock(&self.outcome) = outcome;
        for (sum, seen) in self.sums.iter().zip(&sums) {
            // Zeros, not minus what was read: an infinite gradient would leave NaN behind
            // (inf - inf) in every later step's sum.
            let _ = sum.assign(ArrayD::zeros(seen.raw_dim()));
        }
    }
}
