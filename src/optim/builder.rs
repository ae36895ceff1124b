//! [`OptimizerBuilder`]: an optimizer's rule, options and parameters.

use ndarray::{Dimension, Ix1, NdFloat};

use super::rule::Rule;
use super::schedule::Schedule;
use super::step_count::STEP_LEN;
use super::{added_twice, Optimizer, Packed, PackedBuilder, Part};
use crate::error::{check_setting, Result};
use crate::{CriticalSection, Element, Variable};

/// Options for an [`Optimizer`]: start with [`Optimizer::sgd`], [`Optimizer::momentum`],
/// [`Optimizer::adam`] or [`Optimizer::adamw`].
#[derive(Debug)]
#[must_use = "call .build() to create the optimizer"]
pub struct OptimizerBuilder<A: Element> {
    pub(super) rule: Rule<A>,
    pub(super) schedule: Option<Schedule<A>>,
    pub(super) clip: Option<A>,
    pub(super) error_if_nonfinite: bool,
    pub(super) params: Vec<Variable<A>>,
    pub(super) parts: Vec<Part>,
    pub(super) name: Option<String>,
    /// A set added with [`packed`](Self::packed) that holds another optimizer's state.
    pub(super) misfit: Option<crate::Error>,
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
    /// them), one gradient per tensor, in the set's order. A set built by another optimizer
    /// ([`build_packed`](Self::build_packed)) holds that one's state: [`build`](Self::build)
    /// then refuses it.
    pub fn packed(mut self, set: &Packed<A>) -> Self {
        if let Err(misfit) = set.layout().check_tensors_only() {
            self.misfit.get_or_insert(misfit);
        }
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

    /// Refuses a step whose gradients hold a NaN or an infinity: [`Optimizer::step`] returns
    /// [`Error::NonFinite`](crate::Error::NonFinite) naming the first such gradient, and
    /// nothing is applied (the step count does not move), so the trainer can skip the
    /// batch and go on. Without it (the default, as in PyTorch) such a step is applied: a
    /// NaN reaches the parameters and, for Adam and momentum, stays in the moments, so that
    /// every later step is refused with [`Error::InvalidValue`](crate::Error::InvalidValue)
    /// naming the state (a step from it would write NaN); clipping does not stop it (the
    /// norm is NaN). Costs one pass over the gradients a step.
    ///
    /// ```
    /// use mvtensor::{optim::Optimizer, Error, Variable};
    /// use ndarray::arr1;
    ///
    /// let w = Variable::new(arr1(&[1.0f32, 1.0]));
    /// let adam = Optimizer::adam(0.1).error_if_nonfinite().param(&w).build()?;
    /// let bad = adam.step((&arr1(&[f32::NAN, 1.0]),));
    /// assert!(matches!(bad, Err(Error::NonFinite { .. })));
    /// assert_eq!((adam.steps(), w.read().to_vec()), (0, vec![1.0, 1.0]));
    /// adam.step((&arr1(&[1.0, 1.0]),))?; // the next batch
    /// # Ok::<(), Error>(())
    /// ```
    pub fn error_if_nonfinite(mut self) -> Self {
        self.error_if_nonfinite = true;
        self
    }

    /// A learning-rate schedule: step `t` (1 for the first) uses the learning rate times
    /// `factor(t)` (PyTorch's `LambdaLR`; AdamW's decay scales with it). The factor is
    /// computed inside the step's execution from the number that execution gives the step,
    /// so concurrent steps each get their own number's rate, whichever thread runs them, and
    /// a restored checkpoint resumes the schedule at its step count. Keep it cheap and pure:
    /// it runs while the section is held, on whichever thread runs the step. A factor that is
    /// negative or not finite fails that step with
    /// [`Error::InvalidValue`](crate::Error::InvalidValue), which applies nothing.
    ///
    /// Linear warm-up over 100 steps, then cosine decay to zero at step 10,000:
    ///
    /// ```
    /// use mvtensor::optim::Optimizer;
    /// use mvtensor::Variable;
    /// use ndarray::Array1;
    ///
    /// let w = Variable::new(Array1::<f32>::zeros(4));
    /// let adam = Optimizer::adam(1e-3)
    ///     .schedule(|step| {
    ///         let (t, warmup, total) = (step as f32, 100.0, 10_000.0);
    ///         if t < warmup {
    ///             t / warmup
    ///         } else {
    ///             let done = ((t - warmup) / (total - warmup)).min(1.0);
    ///             0.5 * (1.0 + (std::f32::consts::PI * done).cos())
    ///         }
    ///     })
    ///     .param(&w)
    ///     .build()?;
    /// let close = |a: f32, b: f32| (a - b).abs() < 1e-9;
    /// assert!(close(adam.learning_rate(), 1e-5)); // the next step, the first: 1/100 of 1e-3
    /// adam.step([Array1::from_elem(4, 0.5f32)].as_slice())?;
    /// assert!(close(adam.learning_rate(), 2e-5));
    /// # Ok::<(), mvtensor::Error>(())
    /// ```
    pub fn schedule(mut self, factor: impl Fn(i64) -> A + Send + Sync + 'static) -> Self {
        self.schedule = Some(Schedule::new(factor));
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
    /// after it (with [`build_packed`](Self::build_packed) the state is in the set, which
    /// keeps its own name).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Creates the state (zeros: one block per parameter, see [`Optimizer::register_state`])
    /// and the section.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`](crate::Error::InvalidSetting) naming the first setting out
    /// of range (PyTorch's ranges: the learning rate, momentum, epsilon and weight decay
    /// finite and at least 0, Adam's betas at least 0 and below 1, a clipping norm at least
    /// 0), a parameter (or packed set) added twice, or no parameter at all, checked before
    /// anything is built;
    /// [`Error::ResourceConflict`](crate::Error::ResourceConflict) if a parameter belongs to
    /// another section that holds it exclusively (the optimizer's own section shares its
    /// variables, so that [`Store::restore`](crate::Store::restore) can set them between
    /// steps: a trainer resumes from its checkpoint);
    /// [`Error::InvalidSetting`](crate::Error::InvalidSetting) naming a set added with
    /// [`packed`](Self::packed) that holds the state of the optimizer that built it.
    pub fn build(mut self) -> Result<Optimizer<A>> {
        let name = self.checked_name()?;
        if self.params.is_empty() {
            // Every step would do nothing: an error, as PyTorch's "empty parameter list".
            return Err(crate::Error::InvalidSetting {
                owner: format!("optimizer `{name}`"),
                setting: "params",
                value: "none".to_owned(),
                expected: "at least one parameter (`param`, `params` or `packed`)",
            });
        }
        let (shapes, len) = self.state_shape();
        let state = Variable::builder(ndarray::Array1::<A>::zeros(len))
            .name(format!("{name}.state"))
            .build();
        self.finish(name, shapes, state, None)
    }

    /// Builds `set` with this optimizer's state stored after its tensors, in the same
    /// variable, and the optimizer over it (after any parameter added before): a step then
    /// writes one version for the set and the state instead of two (Adam over a small
    /// model: one version's install, commit and retirement less a step). The set's
    /// [`Layout::stored`](super::Layout::stored) is its variable's length; its views,
    /// gradient buffers and [`Layout::elements`](super::Layout::elements) are about its
    /// tensors alone.
    ///
    /// The set belongs to this optimizer: another optimizer over it, or a
    /// [`HogwildSgd`](super::HogwildSgd), is refused with
    /// [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) naming the set (their writes
    /// would not cover the state); a target network follows it with
    /// [`SoftUpdateBuilder::packed`](super::SoftUpdateBuilder::packed), which blends the
    /// tensors alone. Registering the set's variable in a store registers the state with it
    /// (and [`Optimizer::register_state`] does just that), so a checkpoint holds both: it
    /// restores into a set built the same way (the same tensors and rule), and the weights
    /// alone are its first [`Layout::elements`](super::Layout::elements).
    ///
    /// ```
    /// use mvtensor::optim::{Optimizer, Packed};
    /// use ndarray::{Array1, Array2, Ix2};
    ///
    /// let (model, adam) = Optimizer::adam(1e-2f32).build_packed(
    ///     Packed::builder()
    ///         .name("mlp")
    ///         .tensor("w", &Array2::<f32>::ones((3, 2)))
    ///         .tensor("b", &Array1::<f32>::zeros(2)),
    /// )?;
    /// adam.step((&Array2::from_elem((3, 2), 0.5f32), &Array1::from_elem(2, -0.5f32)))?;
    /// assert_eq!(adam.steps(), 1);
    /// assert!(model.read().get::<Ix2>(0)?[[0, 0]] < 1.0);
    /// // The tensors (8 elements), then both moments of each (16) and the step count (2).
    /// assert_eq!((model.layout().elements(), model.layout().stored()), (8, 26));
    /// # Ok::<(), mvtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// As for [`PackedBuilder::build`](super::PackedBuilder::build) and [`build`](Self::build).
    pub fn build_packed(mut self, set: PackedBuilder<A>) -> Result<(Packed<A>, Optimizer<A>)> {
        let name = self.checked_name()?;
        // The set's tensors, as `packed` adds them, to size the state.
        let sizing = set.layout_only()?;
        let param = self.params.len();
        self.parts
            .extend(sizing.tensors().enumerate().map(|(i, (_, shape, _))| Part {
                param,
                shape: shape.to_vec(),
                label: Some(sizing.label(i)),
            }));
        let (mut shapes, len) = self.state_shape();
        let elements = sizing.elements();
        let set = set.build_with_tail(sizing, len);
        self.params.push(set.variable().erased().clone());
        shapes.push(set.variable().shape());
        let state = set.variable().clone();
        let optimizer = self.finish(name, shapes, state, Some((param, elements)))?;
        Ok((set, optimizer))
    }

    /// The optimizer's name, once its settings are checked and no parameter was added twice
    /// (before anything is built).
    fn checked_name(&self) -> Result<String> {
        let name = self.name.clone().unwrap_or_else(|| "optimizer".to_owned());
        let owner = format!("optimizer `{name}`");
        self.rule.check(&owner)?;
        if let Some(max) = self.clip {
            // Infinity never clips; a negative norm would turn every gradient around.
            let expected = "at least 0 (infinity: never clips)";
            check_setting(
                || owner.clone(),
                "clip_global_norm",
                max,
                max >= A::zero(),
                expected,
            )?;
        }
        for (i, param) in self.params.iter().enumerate() {
            if let Some(twice) = added_twice(|| owner.clone(), &self.params[..i], param) {
                return Err(twice);
            }
        }
        Ok(name)
    }

    /// Each parameter's shape now, and the state's length; fits the parts of plain
    /// parameters to their shapes.
    fn state_shape(&mut self) -> (Vec<Vec<usize>>, usize) {
        let shapes: Vec<Vec<usize>> = self.params.iter().map(Variable::shape).collect();
        for part in self.parts.iter_mut().filter(|part| part.label.is_none()) {
            // A parameter of a dynamic shape may have changed since it was added: its
            // gradients and state fit the shape it has now, which each step checks.
            part.shape.clone_from(&shapes[part.param]);
        }
        let elements = |part: &Part| part.shape.iter().product::<usize>();
        let len = self.rule.state_per_param() * self.parts.iter().map(elements).sum::<usize>();
        (shapes, len + STEP_LEN)
    }

    fn finish(
        self,
        name: String,
        shapes: Vec<Vec<usize>>,
        state: Variable<A, Ix1>,
        state_in: Option<(usize, usize)>,
    ) -> Result<Optimizer<A>> {
        if let Some(misfit) = self.misfit {
            return Err(misfit);
        }
        let mut section = CriticalSection::builder()
            .name(name)
            // Shared, not exclusive: `Store::restore` writes the parameters and the state
            // through a section of its own, which an exclusive claim refused (a trainer
            // could not resume from its checkpoint). Sections that share a variable still
            // take turns on it, so a restore lands between two steps.
            .exclusive(false)
            .resources(&self.params);
        if state_in.is_none() {
            section = section.resource(&state);
        }
        Ok(Optimizer {
            rule: self.rule,
            schedule: self.schedule,
            clip: self.clip,
            error_if_nonfinite: self.error_if_nonfinite,
            params: self.params,
            shapes,
            parts: self.parts,
            state,
            state_in,
            section: section.build()?,
        })
    }
}
