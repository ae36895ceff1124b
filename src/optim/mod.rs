//! Optimizers over shared parameters: SGD, SGD with momentum, Adam and AdamW, with optional
//! clipping by global norm, each step applied atomically to the whole parameter set in one
//! critical-section execution, computed straight into the working copies
//! ([`Txn::rewrite`](crate::Txn::rewrite): each tensor read once and written once, no copy
//! first); and [`SoftUpdate`], a target network following an online one.
//!
//! An [`Optimizer`] owns its state as one variable of its own (every momentum buffer or
//! Adam moment, and the step count) and one [`CriticalSection`] over the parameters and
//! that state; or, built with [`build_packed`](OptimizerBuilder::build_packed), keeps the
//! state after the tensors of a [`Packed`] set, so that a step writes one version for both.
//! A step from any thread is one execution: steps are serial, in arrival order, and a
//! reader (a `read_all` of the parameters, a store snapshot, a checkpoint) sees every
//! parameter and moment of one step or of the next, never a mix. Steps that arrive together
//! run back to back on one thread and commit once.
//!
//! [`HogwildSgd`] is the other trade-off: no section, each parameter updated by a combined
//! `scaled_add`. Faster under contention and never waiting for another step, but a reader
//! may see one parameter after a step and another before it, and the updates of concurrent
//! steps interleave parameter by parameter (Hogwild's own bet).
//!
//! [`SparseAdam`] is lazy Adam over the rows of a [`PagedVariable`](crate::PagedVariable)
//! (an embedding table): a step updates the rows a batch touched and their moments.
//! [`Replicas`] sums the gradients of N workers and applies their mean once per step, as
//! TensorFlow's `MirroredStrategy`.
//!
//! ```
//! use mvtensor::optim::Optimizer;
//! use mvtensor::Variable;
//! use ndarray::{Array1, Array2};
//!
//! let w = Variable::new(Array2::<f32>::ones((3, 2)));
//! let b = Variable::new(Array1::<f32>::zeros(2));
//! let adam = Optimizer::adamw(1e-3, 0.01).clip_global_norm(1.0).param(&w).param(&b).build()?;
//! std::thread::scope(|s| {
//!     for _ in 0..4 {
//!         s.spawn(|| {
//!             let (gw, gb) = (Array2::from_elem((3, 2), 0.5f32), Array1::from_elem(2, -0.5f32));
//!             adam.step((&gw, &gb)).unwrap(); // the whole set, atomically
//!         });
//!     }
//! });
//! assert_eq!(adam.steps(), 4);
//! assert!(w.read()[[0, 0]] < 1.0 && b.read()[0] > 0.0);
//! # Ok::<(), mvtensor::Error>(())
//! ```

mod builder;
mod gate;
mod grads;
mod hogwild;
mod packed;
mod replicas;
mod rule;
mod schedule;
mod soft;
mod sparse;
mod step_count;
mod valid;

use ndarray::{Dimension, Ix1, NdFloat};

pub use builder::OptimizerBuilder;
pub use grads::{Gradient, Gradients};
pub use hogwild::HogwildSgd;
pub use packed::{Layout, Packed, PackedBuilder, PackedSnapshot};
pub use replicas::Replicas;
pub use rule::Rule;
pub use soft::{SoftUpdate, SoftUpdateBuilder};
pub use sparse::{SparseAdam, SparseAdamBuilder};

use crate::error::{check_setting, check_shape, Error, Result};
use crate::{CriticalSection, Element, Store, Variable};
use grads::Collected;
use rule::{apply, clip_scale, State, Update};
use schedule::Schedule;
use step_count::{decode_step, encode_step, STEP_LEN};
use valid::check_finite;
use valid::{invalid_moments, next_step};

/// Where one gradient of a step goes: a parameter, or one tensor of a [`Packed`] one.
#[derive(Debug)]
struct Part {
    /// The parameter's index.
    param: usize,
    /// Its shape; its elements follow the previous part's in the parameter.
    shape: Vec<usize>,
    /// How errors name it: `<set>.<tensor>` in a packed set, else the parameter's name.
    label: Option<String>,
}

/// An optimizer over a set of shared parameters; see the [module docs](self).
#[derive(Debug)]
pub struct Optimizer<A: Element> {
    rule: Rule<A>,
    /// Each step's learning rate is the rule's times this factor of the step's number.
    schedule: Option<Schedule<A>>,
    clip: Option<A>,
    /// Refuse steps whose gradients are not all finite ([`Error::NonFinite`]).
    error_if_nonfinite: bool,
    params: Vec<Variable<A>>,
    /// Each parameter's shape when the optimizer was built: what its state blocks fit.
    shapes: Vec<Vec<usize>>,
    /// Where each gradient goes, in order (a parameter's parts are consecutive and cover it
    /// in order).
    parts: Vec<Part>,
    /// Every parameter's momentum buffer, or Adam's two moments, and the step count, in one
    /// variable: one version per step for all of them, not one per tensor. Its own, or a
    /// packed set's ([`OptimizerBuilder::build_packed`]).
    state: Variable<A, Ix1>,
    /// Where the state lives in a packed set's variable: the set's parameter index and its
    /// tensors' elements, which come first. `None`: in a variable of its own.
    state_in: Option<(usize, usize)>,
    section: CriticalSection,
}

impl<A: Element + NdFloat> Optimizer<A> {
    fn builder(rule: Rule<A>) -> OptimizerBuilder<A> {
        OptimizerBuilder {
            rule,
            schedule: None,
            clip: None,
            error_if_nonfinite: false,
            params: Vec::new(),
            parts: Vec::new(),
            name: None,
            misfit: None,
        }
    }

    /// Plain SGD.
    pub fn sgd(lr: A) -> OptimizerBuilder<A> {
        Self::builder(Rule::Sgd { lr })
    }

    /// SGD with momentum.
    pub fn momentum(lr: A, momentum: A) -> OptimizerBuilder<A> {
        Self::builder(Rule::Momentum { lr, momentum })
    }

    /// Adam (betas 0.9 and 0.999, eps 1e-8).
    pub fn adam(lr: A) -> OptimizerBuilder<A> {
        Self::adamw(lr, A::zero())
    }

    /// AdamW: Adam with decoupled weight decay.
    pub fn adamw(lr: A, weight_decay: A) -> OptimizerBuilder<A> {
        let f = |x: f64| A::from(x).expect("a float");
        Self::builder(Rule::Adam {
            lr,
            beta1: f(0.9),
            beta2: f(0.999),
            eps: f(1e-8),
            weight_decay,
        })
    }

    /// The optimizer's name: its section's ([`OptimizerBuilder::name`], or one made up).
    pub fn name(&self) -> &str {
        self.section.name()
    }

    /// The number of steps applied so far (0 if the state holds no valid count: one restored
    /// from elsewhere, on which [`step`](Self::step) fails).
    pub fn steps(&self) -> i64 {
        let state = self.state.read();
        let state = state.as_slice().expect("versions are in standard layout");
        decode_step(&state[state.len() - STEP_LEN..]).unwrap_or(0)
    }

    /// The learning rate of the next step: the rule's, times its
    /// [schedule](OptimizerBuilder::schedule)'s factor for step [`steps`](Self::steps)` + 1`.
    /// For logging: with steps running on other threads, the next one may have begun.
    pub fn learning_rate(&self) -> A {
        let rule = match &self.schedule {
            Some(schedule) => self.rule.with_lr_times(schedule.raw(self.steps() + 1)),
            None => self.rule,
        };
        rule.lr()
    }

    /// Registers the optimizer's state in `store`, so that store snapshots and checkpoints
    /// carry it: `<optimizer>.state`, one 1-d tensor holding every parameter's state in the
    /// order parameters were added, then the step count. Each parameter (each tensor of a
    /// [`Packed`] set) has a block of its element count times the rule's state tensors
    /// (momentum: the buffer; Adam: the first moment, then the second; plain SGD: none),
    /// each in the parameter's standard (row-major) order. The last two elements are the
    /// steps so far, `lo + hi * 2^24` (both whole numbers below 2^24, so that an `f32` holds
    /// them exactly).
    ///
    /// An optimizer built with [`build_packed`](OptimizerBuilder::build_packed) keeps it
    /// after the set's tensors instead, in the set's variable: registering that variable
    /// registers the state, and this registers it unless that very variable is registered
    /// already (so, unlike a state of its own, twice is not an error; registering the set's
    /// variable after this is).
    ///
    /// One variable for all of it, not one per tensor, because every step writes all of
    /// it: each variable an execution writes costs a version (a pooled buffer, an install,
    /// a commit and a retirement), so one variable for the moments and the step count costs
    /// one version a step instead of one per tensor and moment.
    ///
    /// # Errors
    /// [`Error::NameTaken`] if the name is in use (by another variable, for a state kept in
    /// a packed set; or by another optimizer's state: unnamed, every optimizer's is
    /// `optimizer.state`, so give each its own [`name`](OptimizerBuilder::name)).
    pub fn register_state(&self, store: &Store) -> Result<()> {
        match store.register(&self.state) {
            // The state lives in a packed set whose variable is registered already.
            Err(Error::NameTaken { .. })
                if self.state_in.is_some()
                    && store
                        .get::<A, Ix1>(self.state.name())
                        .is_ok_and(|v| v.inner.id == self.state.inner.id) =>
            {
                Ok(())
            }
            done => done,
        }
    }

    /// Applies one step with `grads`, one per parameter in the order they were added (one
    /// per tensor of a [`Packed`] set), to every parameter at once (one execution). Returns
    /// the step's number (1 for the first).
    ///
    /// # Errors
    /// [`Error::GradientCount`] if there are not as many gradients as parameters;
    /// [`Error::ShapeMismatch`] naming the parameter whose gradient has another shape;
    /// [`Error::Reentrant`] from inside another execution; [`Error::NonFinite`] if the
    /// optimizer refuses non-finite gradients
    /// ([`error_if_nonfinite`](OptimizerBuilder::error_if_nonfinite)); [`Error::InvalidValue`]
    /// naming the state variable if the state is not one a step can use (restored from
    /// elsewhere or assigned): its step count is not one the optimizer writes, or the step
    /// from it is not finite because a momentum buffer or moment holds a NaN or an infinity,
    /// or a second moment is negative. The sweep checks that every update it computes is
    /// finite (one product and one comparison an element, no pass of its own), and scans
    /// the moments only where one is not. Nothing is applied then.
    pub fn step(&self, grads: impl Gradients<A>) -> Result<i64> {
        let grads = grads.collect();
        self.check_gradients(&grads)?;
        if self.error_if_nonfinite {
            self.check_finite(&grads)?;
        }
        let scale = self.clip.map_or(A::one(), |max| clip_scale(&grads, max));
        let per_param = self.rule.state_per_param();
        self.section.execute(|tx| {
            // Every tensor is rewritten, not written: read once and written once, with no
            // copy first.
            let mut state = tx.rewrite(&self.state)?;
            let (state_before, state_after) = state.split();
            let (state_before, state_after) = (standard(state_before), standard_mut(state_after));
            // In a packed set the set's tensors come first, and the step writes them from
            // this same working copy (one version for both).
            let (set, at) = self.state_in.unzip();
            let (set_before, state_before) = state_before.split_at(at.unwrap_or(0));
            let (set_after, state_after) = state_after.split_at_mut(at.unwrap_or(0));
            let mut set_values = Some((set_before, set_after));
            let at = state_before.len() - STEP_LEN; // the state's shape is fixed
            let (mut state_before, step_before) = state_before.split_at(at);
            let (mut state_after, step_after) = state_after.split_at_mut(at);
            let steps = decode_step(step_before).ok_or_else(|| Error::InvalidValue {
                variable: self.state.name().to_owned(),
                problem: format!(
                    "its last two elements {step_before:?} are not a step count (whole \
                     numbers in 0..2^24)"
                ),
            })?;
            // The corrections do not depend on the learning rate (the schedule's factor).
            let (t, bias) = next_step(&self.rule, steps, self.state.name())?;
            encode_step(t, step_after);
            let rule = match &self.schedule {
                // A bad factor fails the execution, which discards its working copies
                // (the count written above included).
                Some(schedule) => self
                    .rule
                    .with_lr_times(schedule.factor(t, self.state.name())?),
                None => self.rule,
            };
            let mut parts = self.parts.iter().zip(&grads).peekable();
            for (i, param) in self.params.iter().enumerate() {
                let mut p;
                let (mut before, mut after) = match set_values.take_if(|_| set == Some(i)) {
                    Some(values) => values,
                    None => {
                        p = tx.rewrite(param)?;
                        let (before, after) = p.split();
                        // The state fits the shape at build time (a parameter built with a
                        // dynamic shape may have changed since). A misfit fails the
                        // execution, which rolls back every write before it.
                        check_shape(param.name(), &self.shapes[i], before.shape())?;
                        (standard(before), standard_mut(after))
                    }
                };
                while let Some((part, (_, g))) = parts.next_if(|(part, _)| part.param == i) {
                    let len = g.len(); // the part's, checked before the execution
                    let (p_before, rest) = before.split_at(len);
                    before = rest;
                    let (p_after, rest) = std::mem::take(&mut after).split_at_mut(len);
                    after = rest;
                    // This part's state block: at most two tensors, no allocation per step.
                    let mut state = State::default();
                    for k in 0..per_param {
                        let (block, rest) = state_before.split_at(len);
                        state.before[k] = block;
                        state_before = rest;
                        let (block, rest) = std::mem::take(&mut state_after).split_at_mut(len);
                        state.after[k] = block;
                        state_after = rest;
                    }
                    let read = state.before;
                    let finite = apply(Update {
                        rule,
                        corrections: bias,
                        scale,
                        values: (p_before, p_after),
                        state,
                        g,
                    });
                    if !finite {
                        // Fails the execution if the state is why: every write of the step
                        // is discarded.
                        if let Some(e) = self.invalid_state(&rule, part, read) {
                            return Err(e);
                        }
                    }
                }
            }
            Ok(t)
        })
    }

    /// Checks the count and the shapes of a step's gradients.
    pub(super) fn check_gradients(&self, grads: &Collected<'_, A>) -> Result<()> {
        if grads.len() != self.parts.len() {
            return Err(Error::GradientCount {
                expected: self.parts.len(),
                found: grads.len(),
            });
        }
        for (part, (shape, _)) in self.parts.iter().zip(grads) {
            check_shape(self.label(part), &part.shape, shape)?;
        }
        Ok(())
    }

    /// [`invalid_moments`] of `part`'s state blocks as a step read them (out of the step's
    /// line: only a step with an update that is not finite gets here).
    #[cold]
    #[inline(never)]
    fn invalid_state(&self, rule: &Rule<A>, part: &Part, read: [&[A]; 2]) -> Option<Error> {
        let of = format!("`{}`", self.label(part));
        invalid_moments(rule, self.state.name(), &of, read)
    }

    /// How errors name a gradient's parameter: `<set>.<tensor>` in a packed set.
    fn label<'p>(&'p self, part: &'p Part) -> &'p str {
        part.label
            .as_deref()
            .unwrap_or(self.params[part.param].name())
    }

    /// `Err(NonFinite)` naming the first gradient with a NaN or an infinity.
    fn check_finite(&self, grads: &Collected<'_, A>) -> Result<()> {
        let grads = grads.iter().map(|(_, g)| &**g);
        check_finite(self.section.name(), grads, |i| {
            self.label(&self.parts[i]).to_owned()
        })
    }

    /// The shape of each gradient a step takes, in order.
    pub(super) fn gradient_shapes(&self) -> impl Iterator<Item = &[usize]> {
        self.parts.iter().map(|part| part.shape.as_slice())
    }
}

/// A version's elements (versions and working copies are always in standard layout).
fn standard<A, D: Dimension>(array: &ndarray::ArrayRef<A, D>) -> &[A] {
    array.as_slice().expect("versions are in standard layout")
}

/// A working copy's elements.
fn standard_mut<A, D: Dimension>(array: &mut ndarray::ArrayRef<A, D>) -> &mut [A] {
    array
        .as_slice_mut()
        .expect("working copies are in standard layout")
}

/// The error for `param` added to `owner` a second time (PyTorch refuses it too): each step
/// would apply two gradients to one variable, and Adam keep two states for it.
fn added_twice<A: Element>(
    owner: impl FnOnce() -> String,
    params: &[Variable<A>],
    param: &Variable<A>,
) -> Option<Error> {
    /// Prints as it is (a `String`'s `Debug` would quote it).
    struct Words(String);
    impl std::fmt::Debug for Words {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }
    let twice = params.iter().any(|p| p.inner.id == param.inner.id);
    let value = Words(format!("`{}` twice", param.name()));
    check_setting(owner, "params", value, !twice, "each parameter once").err()
}
