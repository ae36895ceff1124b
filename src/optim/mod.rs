//! Optimizers over shared parameters: SGD, SGD with momentum, Adam and AdamW, with optional
//! clipping by global norm, each step applied atomically to the whole parameter set in one
//! critical-section execution, computed straight into the working copies
//! ([`Txn::rewrite`](crate::Txn::rewrite): each tensor read once and written once, no copy
//! first); and [`SoftUpdate`], a target network following an online one.
//!
//! An [`Optimizer`] owns its state as one variable of its own (every momentum buffer or
//! Adam moment, and the step count) and one [`CriticalSection`] over the parameters and
//! that state.
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

mod grads;
mod hogwild;
mod packed;
mod replicas;
mod soft;

use std::borrow::Cow;

use ndarray::{Dimension, Ix1, NdFloat};
use smallvec::SmallVec;

pub use grads::{Gradient, Gradients};
pub use hogwild::HogwildSgd;
pub use packed::{Layout, Packed, PackedBuilder, PackedSnapshot};
pub use replicas::Replicas;
pub use soft::{SoftUpdate, SoftUpdateBuilder};

use crate::error::{check_shape, Error, Result};
use crate::{CriticalSection, Element, Store, Variable};
use grads::Collected;

/// The update rule of an [`Optimizer`].
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Rule<A> {
    /// `p -= lr * g`.
    Sgd {
        /// Learning rate.
        lr: A,
    },
    /// `v = momentum * v + g; p -= lr * v` (PyTorch's form).
    Momentum {
        /// Learning rate.
        lr: A,
        /// Momentum factor.
        momentum: A,
    },
    /// Adam, with decoupled weight decay when `weight_decay > 0` (AdamW:
    /// `p -= lr * weight_decay * p` before the Adam update).
    Adam {
        /// Learning rate.
        lr: A,
        /// Decay of the first moment.
        beta1: A,
        /// Decay of the second moment.
        beta2: A,
        /// Added to the denominator.
        eps: A,
        /// Decoupled weight decay (0: plain Adam).
        weight_decay: A,
    },
}

impl<A: NdFloat> Rule<A> {
    /// Adam's bias corrections at step `t`, `(1 - beta1^t, 1 - beta2^t)`; `(1, 1)` for the
    /// other rules. Once per step, not per parameter (`powi` is ~80 instructions).
    fn bias_correction(&self, t: i64) -> (A, A) {
        match self {
            Rule::Adam { beta1, beta2, .. } => {
                let exponent = i32::try_from(t).unwrap_or(i32::MAX);
                (
                    A::one() - beta1.powi(exponent),
                    A::one() - beta2.powi(exponent),
                )
            }
            _ => (A::one(), A::one()),
        }
    }

    /// How many state tensors per parameter the rule keeps.
    fn state_per_param(&self) -> usize {
        match self {
            Rule::Sgd { .. } => 0,
            Rule::Momentum { .. } => 1,
            Rule::Adam { .. } => 2,
        }
    }
}

/// Options for an [`Optimizer`]: start with [`Optimizer::sgd`], [`Optimizer::momentum`],
/// [`Optimizer::adam`] or [`Optimizer::adamw`].
#[derive(Debug)]
#[must_use = "call .build() to create the optimizer"]
pub struct OptimizerBuilder<A: Element> {
    rule: Rule<A>,
    clip: Option<A>,
    params: Vec<Variable<A>>,
    parts: Vec<Part>,
    name: Option<String>,
}

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

impl<A: Element + NdFloat> OptimizerBuilder<A> {
    /// Adds a parameter; the gradients of a step come in the order parameters were added.
    pub fn param<D: Dimension>(mut self, param: &Variable<A, D>) -> Self {
        self.parts.push(Part {
            param: self.params.len(),
            shape: param.shape(),
            label: None,
        });
        self.params.push(param.erased().clone());
        self
    }

    /// Adds every tensor of a [`Packed`] set: one parameter (one version a step for all of
    /// them), one gradient per tensor, in the set's order.
    pub fn packed(mut self, set: &Packed<A>) -> Self {
        let param = self.params.len();
        for (i, (_, shape, _)) in set.layout().tensors().enumerate() {
            self.parts.push(Part {
                param,
                shape: shape.to_vec(),
                label: Some(set.layout().label(i)),
            });
        }
        self.params.push(set.variable().erased().clone());
        self
    }

    /// Adds every parameter of `params`, in order.
    pub fn params<'v, D: Dimension + 'v>(
        self,
        params: impl IntoIterator<Item = &'v Variable<A, D>>,
    ) -> Self {
        params.into_iter().fold(self, Self::param)
    }

    /// Scales each step's gradients by `max_norm / norm` when their global L2 norm (over
    /// all parameters) exceeds `max_norm`.
    pub fn clip_global_norm(mut self, max_norm: A) -> Self {
        self.clip = Some(max_norm);
        self
    }

    /// Adam's moment decays (0.9 and 0.999 by default; no effect on other rules).
    pub fn betas(mut self, beta1: A, beta2: A) -> Self {
        if let Rule::Adam {
            beta1: b1,
            beta2: b2,
            ..
        } = &mut self.rule
        {
            (*b1, *b2) = (beta1, beta2);
        }
        self
    }

    /// Adam's epsilon (1e-8 by default; no effect on other rules).
    pub fn eps(mut self, eps: A) -> Self {
        if let Rule::Adam { eps: e, .. } = &mut self.rule {
            *e = eps;
        }
        self
    }

    /// Names the optimizer: its section and its state variable (`<name>.state`) are named
    /// after it.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Creates the state (zeros: one block per parameter, see [`Optimizer::register_state`])
    /// and the section.
    ///
    /// # Errors
    /// [`Error::ResourceConflict`] if a parameter belongs to another section that holds it
    /// exclusively.
    pub fn build(self) -> Result<Optimizer<A>> {
        let name = self.name.unwrap_or_else(|| "optimizer".to_owned());
        let per_param = self.rule.state_per_param();
        let shapes: Vec<Vec<usize>> = self.params.iter().map(Variable::shape).collect();
        let mut parts = self.parts;
        for part in parts.iter_mut().filter(|part| part.label.is_none()) {
            // A parameter of a dynamic shape may have changed since it was added: its
            // gradients and state fit the shape it has now, which each step checks.
            part.shape.clone_from(&shapes[part.param]);
        }
        let elements = |part: &Part| part.shape.iter().product::<usize>();
        let len = per_param * parts.iter().map(elements).sum::<usize>();
        let state = Variable::builder(ndarray::Array1::<A>::zeros(len + STEP_LEN))
            .name(format!("{name}.state"))
            .build();
        let section = CriticalSection::builder()
            .name(name)
            .resources(&self.params)
            .resource(&state)
            .build()?;
        Ok(Optimizer {
            rule: self.rule,
            clip: self.clip,
            params: self.params,
            shapes,
            parts,
            state,
            section,
        })
    }
}

/// An optimizer over a set of shared parameters; see the [module docs](self).
#[derive(Debug)]
pub struct Optimizer<A: Element> {
    rule: Rule<A>,
    clip: Option<A>,
    params: Vec<Variable<A>>,
    /// Each parameter's shape when the optimizer was built: what its state blocks fit.
    shapes: Vec<Vec<usize>>,
    /// Where each gradient goes, in order (a parameter's parts are consecutive and cover it
    /// in order).
    parts: Vec<Part>,
    /// Every parameter's momentum buffer, or Adam's two moments, and the step count, in one
    /// variable: one version per step for all of them, not one per tensor.
    state: Variable<A, Ix1>,
    section: CriticalSection,
}

impl<A: Element + NdFloat> Optimizer<A> {
    fn builder(rule: Rule<A>) -> OptimizerBuilder<A> {
        OptimizerBuilder {
            rule,
            clip: None,
            params: Vec::new(),
            parts: Vec::new(),
            name: None,
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

    /// The number of steps applied so far (0 if the state holds no valid count: one restored
    /// from elsewhere, on which [`step`](Self::step) fails).
    pub fn steps(&self) -> i64 {
        let state = self.state.read();
        let state = state.as_slice().expect("versions are in standard layout");
        decode_step(&state[state.len() - STEP_LEN..]).unwrap_or(0)
    }

    /// Registers the optimizer's state in `store`, so that store snapshots and checkpoints
    /// carry it: `<optimizer>.state`, one 1-d tensor holding every parameter's state in the
    /// order parameters were added, then the step count. Each parameter (each tensor of a
    /// [`Packed`] set) has a block of its element count times the rule's state tensors
    /// (momentum: the buffer; Adam: the first moment, then the second; plain SGD: none),
    /// each in the parameter's standard (row-major) order. The last two elements are the steps so far, `lo + hi * 2^24`
    /// (both whole numbers below 2^24, so that an `f32` holds them exactly).
    ///
    /// One variable for all of it, not one per tensor, because every step writes all of
    /// it: each variable an execution writes costs a version (a pooled buffer, an install,
    /// a commit and a retirement: ~1,000 instructions), and Adam over four tensors wrote
    /// thirteen. The step count had a
    /// variable of its own until it was measured: ~150 ns of a ~1.9 µs step.
    ///
    /// # Errors
    /// [`Error::NameTaken`] if the name is in use.
    pub fn register_state(&self, store: &Store) -> Result<()> {
        store.register(&self.state)
    }

    /// Applies one step with `grads`, one per parameter in the order they were added (one
    /// per tensor of a [`Packed`] set), to every parameter at once (one execution). Returns
    /// the step's number (1 for the first).
    ///
    /// # Errors
    /// [`Error::GradientCount`] if there are not as many gradients as parameters;
    /// [`Error::ShapeMismatch`] naming the parameter whose gradient has another shape;
    /// [`Error::Reentrant`] from inside another execution. Nothing is applied then.
    pub fn step(&self, grads: impl Gradients<A>) -> Result<i64> {
        let grads = grads.collect();
        self.check_gradients(&grads)?;
        let scale = self.clip.map_or(A::one(), |max| clip_scale(&grads, max));
        let per_param = self.rule.state_per_param();
        self.section.execute(|tx| {
            // Every tensor is rewritten, not written: read once and written once, with no
            // copy first.
            let mut state = tx.rewrite(&self.state)?;
            let (state_before, state_after) = state.split();
            let (state_before, state_after) = (standard(state_before), standard_mut(state_after));
            let at = state_before.len() - STEP_LEN; // the state's shape is fixed
            let (mut state_before, step_before) = state_before.split_at(at);
            let (mut state_after, step_after) = state_after.split_at_mut(at);
            let t = decode_step(step_before).ok_or_else(|| Error::InvalidValue {
                variable: self.state.name().to_owned(),
                problem: format!(
                    "its last two elements {step_before:?} are not a step count (whole \
                     numbers in 0..2^24)"
                ),
            })? + 1;
            encode_step(t, step_after);
            let bias = self.rule.bias_correction(t);
            let mut parts = self.parts.iter().zip(&grads).peekable();
            for (i, param) in self.params.iter().enumerate() {
                let mut p = tx.rewrite(param)?;
                let (before, after) = p.split();
                // The state fits the shape at build time (a parameter built with a dynamic
                // shape may have changed since). A misfit fails the execution, which rolls
                // back every write before it.
                check_shape(param.name(), &self.shapes[i], before.shape())?;
                let (mut before, mut after) = (standard(before), standard_mut(after));
                while let Some((_, (_, g))) = parts.next_if(|(part, _)| part.param == i) {
                    let len = g.len(); // the part's, checked before the execution
                    let (p_before, rest) = before.split_at(len);
                    before = rest;
                    let (p_after, rest) = std::mem::take(&mut after).split_at_mut(len);
                    after = rest;
                    // This part's state block: at most two tensors, no allocation per step.
                    let mut state = State::default();
                    for _ in 0..per_param {
                        let (block, rest) = state_before.split_at(len);
                        state.before.push(block);
                        state_before = rest;
                        let (block, rest) = std::mem::take(&mut state_after).split_at_mut(len);
                        state.after.push(block);
                        state_after = rest;
                    }
                    apply(Update {
                        rule: self.rule,
                        corrections: bias,
                        scale,
                        values: (p_before, p_after),
                        state,
                        g,
                    });
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
            let label = || {
                part.label
                    .as_deref()
                    .unwrap_or(self.params[part.param].name())
            };
            check_shape(label(), &part.shape, shape)?;
        }
        Ok(())
    }

    /// The shape of each gradient a step takes, in order.
    pub(super) fn gradient_shapes(&self) -> impl Iterator<Item = &[usize]> {
        self.parts.iter().map(|part| part.shape.as_slice())
    }
}

/// `max / norm` when the global L2 norm of `grads` exceeds `max`, else 1.
fn clip_scale<A: NdFloat>(grads: &[(&[usize], Cow<'_, [A]>)], max: A) -> A {
    let norm = grads
        .iter()
        .flat_map(|(_, g)| g.iter())
        .fold(A::zero(), |acc, &x| acc + x * x)
        .sqrt();
    if norm > max {
        max / norm
    } else {
        A::one()
    }
}

/// Elements at the end of the state that hold the step count.
const STEP_LEN: usize = 2;
/// `lo + hi * STEP_RADIX`: each a whole number an `f32` holds exactly.
const STEP_RADIX: i64 = 1 << 24;

/// The step count from the state's last [`STEP_LEN`] elements; `None` unless both are
/// whole numbers in `0..STEP_RADIX` (a restored state could hold anything).
fn decode_step<A: NdFloat>(parts: &[A]) -> Option<i64> {
    let whole = |x: A| {
        let n = x.to_i64().filter(|n| (0..STEP_RADIX).contains(n))?;
        (A::from(n) == Some(x)).then_some(n) // not NaN, not a fraction
    };
    Some(whole(parts[0])? + whole(parts[1])? * STEP_RADIX)
}

/// Writes the step count `t` into the state's last [`STEP_LEN`] elements.
fn encode_step<A: NdFloat>(t: i64, parts: &mut [A]) {
    let float = |x: i64| A::from(x).expect("a whole number below 2^24 is a float");
    parts[0] = float(t % STEP_RADIX);
    parts[1] = float(t / STEP_RADIX);
}

/// A parameter's state tensors (none, the momentum buffer, or m and v) before a step, and
/// where the step writes them.
#[derive(Default)]
struct State<'a, A> {
    before: SmallVec<[&'a [A]; 2]>,
    after: SmallVec<[&'a mut [A]; 2]>,
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

/// One parameter's update: from its value and state before the step into where the step
/// writes them (every element), with the gradient times `scale` and the step's bias
/// corrections (`Rule::bias_correction`).
struct Update<'a, A> {
    rule: Rule<A>,
    corrections: (A, A),
    scale: A,
    /// The parameter before the step, and where the step writes it.
    values: (&'a [A], &'a mut [A]),
    state: State<'a, A>,
    g: &'a [A],
}

/// Applies `update`, in AVX2 where the processor has it (the same bits:
/// [`wide`](crate::kernel::wide)); Adam's divisions and square roots then go eight `f32` at
/// a time.
fn apply<A: NdFloat>(update: Update<'_, A>) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if crate::kernel::avx2() {
        // SAFETY: the processor has AVX2.
        return unsafe { apply_avx2(update) };
    }
    apply_plain(update);
}

/// [`apply`] in AVX2.
///
/// # Safety
/// The processor has AVX2.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[target_feature(enable = "avx2")]
unsafe fn apply_avx2<A: NdFloat>(update: Update<'_, A>) {
    apply_plain(update);
}

/// [`apply`], compiled for whichever instructions its caller may use.
#[inline(always)]
fn apply_plain<A: NdFloat>(update: Update<'_, A>) {
    let Update {
        rule,
        corrections: (c1, c2),
        scale,
        values: (p, p_out),
        state,
        g,
    } = update;
    match (rule, &state.before[..], state.after) {
        (Rule::Sgd { lr }, [], _) => {
            let k = lr * scale;
            for ((out, &p), &g) in p_out.iter_mut().zip(p).zip(g) {
                *out = p - k * g;
            }
        }
        (Rule::Momentum { lr, momentum }, [v], mut after) => {
            let [v_out] = &mut after[..] else {
                unreachable!("as many state tensors after as before")
            };
            let (p, v) = (p.iter().zip(*v), p_out.iter_mut().zip(v_out.iter_mut()));
            for (((&p, &v), (p_out, v_out)), &g) in p.zip(v).zip(g) {
                *v_out = momentum * v + scale * g;
                *p_out = p - lr * *v_out;
            }
        }
        (
            Rule::Adam {
                lr,
                beta1,
                beta2,
                eps,
                weight_decay,
            },
            [m, v],
            mut after,
        ) => {
            let [m_out, v_out] = &mut after[..] else {
                unreachable!("as many state tensors after as before")
            };
            let decay = A::one() - lr * weight_decay;
            let before = p.iter().zip(m.iter()).zip(v.iter());
            let after = p_out.iter_mut().zip(m_out.iter_mut()).zip(v_out.iter_mut());
            for ((((&p, &m), &v), ((p_out, m_out), v_out)), &g) in before.zip(after).zip(g) {
                let g = scale * g;
                let m = beta1 * m + (A::one() - beta1) * g;
                let v = beta2 * v + (A::one() - beta2) * g * g;
                (*m_out, *v_out) = (m, v);
                *p_out = p * decay - lr * (m / c1) / ((v / c2).sqrt() + eps);
            }
        }
        _ => unreachable!("each rule is built with its own number of state tensors"),
    }
}

#[cfg(all(test, not(mvtensor_loom)))]
mod tests {
    use super::*;

    /// The step count survives the state's floats exactly, past what one `f32` holds.
    #[test]
    fn the_step_count_is_exact_in_f32_and_f64() {
        for t in [
            0,
            1,
            (1 << 24) - 1,
            1 << 24,
            (1 << 24) + 1,
            (1 << 40) + 12_345,
        ] {
            let mut narrow = [0.0f32; STEP_LEN];
            encode_step(t, &mut narrow);
            assert_eq!(decode_step(&narrow), Some(t), "{narrow:?}");
            let mut wide = [0.0f64; STEP_LEN];
            encode_step(t, &mut wide);
            assert_eq!(decode_step(&wide), Some(t), "{wide:?}");
        }
    }

    /// Every rule's step in AVX2 gives the bits of the baseline loop's (same operations,
    /// no fused multiply-add), tails included. Without AVX2 there is nothing to compare.
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    #[test]
    fn every_rule_gives_the_same_bits_in_avx2() {
        if !crate::kernel::avx2() {
            eprintln!("no AVX2 here: nothing to compare");
            return;
        }
        let n = 37;
        let value = |i: usize, k: f32| ((i as f32 * 0.61 + k).sin() * 3.0) / 7.0;
        let (p, m, g): (Vec<f32>, Vec<f32>, Vec<f32>) = (
            (0..n).map(|i| value(i, 0.1)).collect(),
            (0..n).map(|i| value(i, 1.1)).collect(),
            (0..n).map(|i| value(i, 2.1)).collect(),
        );
        let v: Vec<f32> = m.iter().map(|x| x * x).collect();
        let rules = [
            Rule::Sgd { lr: 0.03 },
            Rule::Momentum {
                lr: 0.03,
                momentum: 0.9,
            },
            Rule::Adam {
                lr: 1e-3,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.01,
            },
        ];
        for (rule, states) in rules.into_iter().zip([0, 1, 2]) {
            let step = |wide: bool| {
                let (mut p_out, mut m_out, mut v_out) =
                    (vec![0.0f32; n], vec![0.0; n], vec![0.0; n]);
                let state = State {
                    before: [&m[..], &v[..]][..states].iter().copied().collect(),
                    after: [&mut m_out[..], &mut v_out[..]]
                        .into_iter()
                        .take(states)
                        .collect(),
                };
                let update = Update {
                    rule,
                    corrections: (0.1, 0.001),
                    scale: 0.5,
                    values: (&p[..], &mut p_out[..]),
                    state,
                    g: &g,
                };
                if wide {
                    // SAFETY: the processor has AVX2 (checked above).
                    unsafe { apply_avx2(update) };
                } else {
                    apply_plain(update);
                }
                [p_out, m_out, v_out]
                    .concat()
                    .iter()
                    .map(|x| x.to_bits())
                    .collect::<Vec<_>>()
            };
            assert_eq!(step(false), step(true), "{rule:?}");
        }
    }

    /// Anything but two whole numbers in range is no count (no overflow, no NaN).
    #[test]
    fn a_garbage_step_count_decodes_to_none() {
        let bad = [
            [f32::NAN, 0.0],
            [0.0, f32::INFINITY],
            [-1.0, 0.0],
            [0.5, 0.0],
            [0.0, 1e15],
            [16_777_216.0, 0.0],
        ];
        for parts in bad {
            assert_eq!(decode_step(&parts), None, "{parts:?}");
        }
        assert_eq!(decode_step(&[f64::MAX, f64::MAX]), None);
    }
}
