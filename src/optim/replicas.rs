//! [`Replicas`]: data-parallel training with synchronous all-reduce, as TensorFlow's
//! `MirroredStrategy`: N worker threads each compute a gradient on their own batch; per step
//! the N gradients are summed and their mean applied once, and every worker goes on with the
//! same parameters. The same type spans processes too: with a transport between them
//! (MPI ranks, [`distributed`](crate::distributed)), a process's workers combine first and
//! the process then all-reduces once per step with the others.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Mutex;

use ndarray::{ArrayD, ArrayViewD, IxDyn, NdFloat};

use super::gate::Gate;
use super::{Gradients, Optimizer};
use crate::distributed::Transport;
use crate::error::{Error, Result};
use crate::read_all::read_all;
use crate::sync::lock_std as lock;
use crate::{Element, OwnedSnapshot, Variable};

#[cfg(feature = "mpi")]
mod mpi;
mod processes;

/// A synchronous all-reduce over `workers` threads in front of an [`Optimizer`]. Each worker
/// calls [`step`](Self::step) once per step with its gradients; the call adds them to the
/// step's sums (combined writes, so the adds of N workers cost about one pass), waits for the
/// other workers, the last to arrive applies the mean through the optimizer (one execution),
/// and every call returns once it is applied: a worker that reads the parameters after its
/// call returns sees this step and no later one until every worker has called again.
///
/// [`run`](Self::run) starts the workers (scoped threads, as `strategy.run` does): if one
/// panics or returns while the others still step, their steps fail with
/// [`Error::ReplicasStopped`] instead of waiting for it for ever, and `run` then resumes the
/// panic. Workers started by hand call `step` the same way, but must every one of them call
/// it every step: one that stops or panics leaves the others waiting, as in any all-reduce,
/// unless something calls [`stop`](Self::stop).
///
/// [`step_async`](Self::step_async) is the asynchronous mode: each worker's gradient is
/// applied on its own, as soon as it comes (no waiting for the others, no averaging).
///
/// ```
/// use mvtensor::optim::{Optimizer, Replicas};
/// use mvtensor::Variable;
/// use ndarray::Array1;
///
/// let w = Variable::new(Array1::<f64>::zeros(2));
/// let replicas = Replicas::new(Optimizer::sgd(0.5).param(&w).build()?, 3);
/// let steps = replicas.run(|worker| {
///     let grad = Array1::from_elem(2, worker as f64); // 0, 1, 2: mean 1
///     replicas.step(&grad)
/// });
/// assert_eq!(steps, vec![Ok(1), Ok(1), Ok(1)]); // one step, taken by all three
/// assert_eq!(w.read()[0], -0.5);
/// # Ok::<(), mvtensor::Error>(())
/// ```
#[derive(Debug)]
pub struct Replicas<A: Element> {
    optimizer: Optimizer<A>,
    /// The step's gradient sums, one per parameter.
    sums: Vec<Variable<A>>,
    workers: usize,
    /// Where a step's workers wait for one another: twice a step (see `step`).
    gate: Gate,
    /// The first error of a worker's gradients in the step being gathered.
    error: Mutex<Option<Error>>,
    /// The outcome of the last step applied: its number, or that error.
    outcome: Mutex<Result<i64>>,
    /// Between processes: `None` for threads of this process only.
    transport: Option<Box<dyn Transport<A>>>,
    /// Where the transport puts a step's sums over every process.
    reduced: Mutex<Vec<A>>,
}

impl<A: Element + NdFloat> Replicas<A> {
    /// An all-reduce over `workers` (at least one) in front of `optimizer`.
    pub fn new(optimizer: Optimizer<A>, workers: usize) -> Self {
        Self::with(optimizer, workers, None)
    }

    /// An all-reduce over `workers` threads of this process and, through `transport`, the
    /// workers of the other processes.
    #[cfg(feature = "mpi")]
    fn with_transport(
        optimizer: Optimizer<A>,
        workers: usize,
        transport: Box<dyn Transport<A>>,
    ) -> Self {
        Self::with(optimizer, workers, Some(transport))
    }

    fn with(
        optimizer: Optimizer<A>,
        workers: usize,
        transport: Option<Box<dyn Transport<A>>>,
    ) -> Self {
        let sums = optimizer
            .gradient_shapes()
            .map(|shape| Variable::new(ArrayD::<A>::zeros(IxDyn(shape))))
            .collect();
        let workers = workers.max(1);
        Self {
            optimizer,
            sums,
            workers,
            gate: Gate::new(workers),
            error: Mutex::new(None),
            outcome: Mutex::new(Ok(0)),
            transport,
            reduced: Mutex::new(Vec::new()),
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
    /// applied and every worker gets that error. [`Error::ReplicasStopped`] if the
    /// replicas were stopped before every worker came (nothing of the step is applied then
    /// either), or had been.
    pub fn step(&self, grads: impl Gradients<A>) -> Result<i64> {
        if let Err(e) = self.add(grads) {
            lock(&self.error).get_or_insert(e);
        }
        match self.gate.wait() {
            Ok(true) => {
                // The others wait for this worker at the second wait: a panic here (a
                // schedule's closure, inside the step) must still let them go, stopped.
                if let Err(panic) = catch_unwind(AssertUnwindSafe(|| self.apply())) {
                    *lock(&self.outcome) = Err(self.stopped());
                    self.gate.break_open();
                    self.gate.wait_whole();
                    resume_unwind(panic);
                }
            }
            Ok(false) => {}
            Err(_) => return Err(self.stopped()),
        }
        // The step is applied (or failed) before anyone leaves. The outcome stays until the
        // next step's `apply`, which needs every worker back at the first wait, so after it
        // has read this one: a second wait to reset anything would let a fast worker's next
        // error be wiped (it was: an audit saw failed steps applied and reported `Ok`). Every
        // worker is past the first wait, so the second completes even if the gate breaks
        // meanwhile: a step applied is never reported as stopped.
        self.gate.wait_whole();
        lock(&self.outcome).clone()
    }

    /// Runs `work(i)` for every worker `i` in `0..workers`, each on a scoped thread of its
    /// own, and returns what each returned, in worker order. `work` calls
    /// [`step`](Self::step) (or anything else) as a worker started by hand would.
    ///
    /// A worker that panics, or returns while others still step, stops the replicas: the
    /// others' steps return [`Error::ReplicasStopped`] (propagate it with `?` and they
    /// return too). After every worker has returned, `run` resumes the first panic, if any.
    /// It starts and ends clean: the stop, and the gradients of a step that never completed,
    /// are forgotten, so that another `run` (or steps by hand) can follow.
    ///
    /// `run` owns every worker's seat: no other thread may call `step` while it runs (it
    /// would take a worker's place in a step).
    ///
    /// ```
    /// use mvtensor::optim::{Optimizer, Replicas};
    /// use mvtensor::{Error, Variable};
    /// use ndarray::Array1;
    ///
    /// let w = Variable::new(Array1::<f32>::zeros(3));
    /// let replicas = Replicas::new(Optimizer::sgd(0.1).param(&w).build()?, 2);
    /// // Worker 1 gives up after 5 steps (its data ran out); worker 0 wanted 10.
    /// let done = replicas.run(|worker| -> Result<i64, Error> {
    ///     let grad = Array1::<f32>::ones(3);
    ///     let steps = if worker == 0 { 10 } else { 5 };
    ///     let mut last = 0;
    ///     for _ in 0..steps {
    ///         last = replicas.step(&grad)?;
    ///     }
    ///     Ok(last)
    /// });
    /// assert_eq!(done[1], Ok(5));
    /// assert!(matches!(done[0], Err(Error::ReplicasStopped { .. }))); // not a hang
    /// assert_eq!(replicas.optimizer().steps(), 5);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn run<R: Send>(&self, work: impl Fn(usize) -> R + Sync) -> Vec<R> {
        self.restart();
        // Breaks the gate when its worker's `work` ends, returned or unwinding.
        struct Leave<'g>(&'g Gate);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                self.0.break_open();
            }
        }
        let ended = std::thread::scope(|s| {
            let threads: Vec<_> = (0..self.workers)
                .map(|i| {
                    let work = &work;
                    s.spawn(move || {
                        let _leave = Leave(&self.gate);
                        work(i)
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join()).collect::<Vec<_>>()
        });
        self.restart();
        let mut results = Vec::with_capacity(ended.len());
        for end in ended {
            match end {
                Ok(result) => results.push(result),
                Err(panic) => resume_unwind(panic),
            }
        }
        results
    }

    /// Stops the replicas: every worker waiting in [`step`](Self::step), and every later
    /// step, returns [`Error::ReplicasStopped`]; a step that every worker has already
    /// reached still completes. For workers started by hand (a watchdog, a worker's error
    /// path): [`run`](Self::run) does it when a worker ends.
    pub fn stop(&self) {
        self.gate.break_open();
    }

    /// Whether the replicas are stopped ([`stop`](Self::stop), or a worker of
    /// [`run`](Self::run) that ended).
    pub fn is_stopped(&self) -> bool {
        self.gate.is_broken()
    }

    fn stopped(&self) -> Error {
        Error::ReplicasStopped {
            optimizer: self.optimizer.name().to_owned(),
        }
    }

    /// A whole gate, zero sums and no error: the start and the end of a [`run`](Self::run),
    /// with no worker at the gate (`run` owns every seat).
    fn restart(&self) {
        self.gate.mend();
        lock(&self.error).take();
        for sum in &self.sums {
            let _ = sum.assign(ArrayD::zeros(IxDyn(&sum.shape())));
        }
    }

    /// The asynchronous mode: applies this worker's gradients at once, on their own
    /// (through [`Optimizer::step`]), and returns the optimizer's step number.
    ///
    /// Unlike [`step`](Self::step) there is no barrier: a worker never waits for the others,
    /// so none waits for the slowest. The price: each gradient is applied unaveraged, as a
    /// step of its own (N workers take N steps where `step` takes one, with their mean), and
    /// may have been computed against parameters that other workers' steps have changed
    /// since. The optimizer's section serialises the steps, so each call gets a step number
    /// of its own, and a reader sees the parameters of one step or the next, never a mix.
    /// It takes no part in the synchronous steps' gate: any number of threads may call it,
    /// [`stop`](Self::stop) does not stop it, and a worker of [`run`](Self::run) that
    /// panics stops only the others' `step`s (`run` still waits for every worker).
    ///
    /// ```
    /// use mvtensor::optim::{Optimizer, Replicas};
    /// use mvtensor::Variable;
    /// use ndarray::Array1;
    ///
    /// let w = Variable::new(Array1::<f64>::zeros(2));
    /// let replicas = Replicas::new(Optimizer::sgd(0.5).param(&w).build()?, 3);
    /// let steps = replicas.run(|worker| {
    ///     let grad = Array1::from_elem(2, worker as f64); // 0, 1, 2
    ///     replicas.step_async(&grad) // no waiting for the other workers
    /// });
    /// // Three steps, one per worker, in the order they came: each number once.
    /// let mut steps = steps.into_iter().collect::<Result<Vec<i64>, _>>()?;
    /// steps.sort();
    /// assert_eq!(steps, [1, 2, 3]);
    /// assert_eq!(w.read()[0], -1.5); // 0.5 * (0 + 1 + 2): every gradient, not their mean
    /// # Ok::<(), mvtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// As for [`Optimizer::step`]: bad gradients fail this worker's call alone, and nothing
    /// of it is applied.
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
    /// adds to them until every one has passed the second wait.
    fn apply(&self) {
        let sums = read_all(&self.sums[..]);
        let error = lock(&self.error).take();
        let shapes: Vec<IxDyn> = sums.iter().map(|s| s.raw_dim()).collect();
        let outcome = match (&self.transport, error) {
            (Some(transport), error) => self.apply_reduced(&**transport, sums, error),
            (None, Some(error)) => Err(error),
            (None, None) => {
                let n = A::from(self.workers).expect("a worker count");
                let means: Vec<ArrayD<A>> = sums.iter().map(|s| s.mapv(|x| x / n)).collect();
                self.optimizer.step(&means)
            }
        };
        *lock(&self.outcome) = outcome;
        for (sum, shape) in self.sums.iter().zip(shapes) {
            // Zeros, not minus what was read: an infinite gradient would leave NaN behind
            // (inf - inf) in every later step's sum.
            let _ = sum.assign(ArrayD::zeros(shape));
        }
    }

    /// [`apply`](Self::apply) across processes: every process's sums are all-reduced (even
    /// this one's failed step takes part, so that the others do not wait for it), and every
    /// process applies the same mean, or fails the step if any process's gradients failed.
    fn apply_reduced(
        &self,
        transport: &dyn Transport<A>,
        sums: Vec<OwnedSnapshot<A>>,
        error: Option<Error>,
    ) -> Result<i64> {
        let step = self.optimizer.steps() + 1;
        let mut out = lock(&self.reduced);
        let failed = transport.all_reduce(step, sums, error.is_some(), &mut out)?;
        if let Some(error) = error {
            return Err(error);
        }
        if !failed.is_empty() {
            return Err(Error::Distributed {
                rank: transport.process(),
                problem: crate::distributed::Problem::PeerStepFailed {
                    step,
                    ranks: failed,
                },
            });
        }
        let n = A::from(transport.workers()).expect("a worker count");
        out.iter_mut().for_each(|x| *x /= n);
        let mut rest = &out[..];
        let mut means = Vec::with_capacity(self.sums.len());
        for shape in self.optimizer.gradient_shapes() {
            let (mine, after) = rest.split_at(shape.iter().product());
            rest = after;
            means.push(ArrayViewD::from_shape(IxDyn(shape), mine).expect("the sums' shapes"));
        }
        self.optimizer.step(&means)
    }
}
