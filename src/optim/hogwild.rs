//! [`HogwildSgd`]: SGD with no section; see the [module docs](super) for the trade-off.

use ndarray::{ArrayViewD, Dimension, IxDyn, NdFloat};

use super::Gradients;
use crate::error::{Error, Result};
use crate::{Element, Variable};

/// Hogwild SGD: each parameter updated with a combined `scaled_add`, no section; see the
/// [module docs](crate::optim) for the trade-off.
#[derive(Debug, Clone)]
pub struct HogwildSgd<A: Element> {
    lr: A,
    params: Vec<Variable<A>>,
}

impl<A: Element + NdFloat> HogwildSgd<A> {
    /// With no parameters yet: add them with [`param`](Self::param).
    pub fn new(lr: A) -> Self {
        Self {
            lr,
            params: Vec::new(),
        }
    }

    /// Adds a parameter; gradients come in the order parameters were added.
    #[must_use]
    pub fn param<D: Dimension>(mut self, param: &Variable<A, D>) -> Self {
        self.params.push(param.erased().clone());
        self
    }

    /// `p -= lr * g` for every parameter, one combined write each.
    ///
    /// # Errors
    /// [`Error::GradientCount`]; [`Error::ShapeMismatch`] naming the parameter (the ones
    /// before it are updated: Hogwild steps are not atomic).
    pub fn step(&self, grads: impl Gradients<A>) -> Result<()> {
        let grads = grads.collect();
        if grads.len() != self.params.len() {
            return Err(Error::GradientCount {
                expected: self.params.len(),
                found: grads.len(),
            });
        }
        for (p, (shape, g)) in self.params.iter().zip(&grads) {
            let g = ArrayViewD::from_shape(IxDyn(shape), g).map_err(|_| Error::ShapeMismatch {
                variable: p.name().to_owned(),
                expected: p.shape(),
                found: shape.to_vec(),
            })?;
            p.scaled_add(-self.lr, &g)?;
        }
        Ok(())
    }
}
