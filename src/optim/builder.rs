//! [`OptimizerBuilder`]: an optimizer's rule, options and parameters.

use ndarray::{Dimension, NdFloat};

use super::rule::Rule;
use super::step_count::STEP_LEN;
use super::{Optimizer, Packed, Part};
use crate::error::Result;
use crate::{CriticalSection, Element, Variable};

/// Options for an [`Optimizer`]: start with [`Optimizer::sgd`], [`Optimizer::momentum`],
/// [`Optimizer::adam`] or [`Optimizer::adamw`].
#[derive(Debug)]
#[must_use = "call .build() to create the optimizer"]
pub struct OptimizerBuilder<A: Element> {
    pub(super) rule: Rule<A>,
    pub(super) clip: Option<A>,
    pub(super) params: Vec<Variable<A>>,
    pub(super) parts: Vec<Part>,
    pub(super) name: Option<String>,
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
    /// [`Error::ResourceConflict`](crate::Error::ResourceConflict) if a parameter belongs to another section that holds it
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
