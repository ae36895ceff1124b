//! A learning-rate schedule: each step's learning rate as a function of its number.
//!
//! The factor is computed inside the step's execution, from the step number that execution
//! gives the step (the count in the optimizer's state, one more than the last committed
//! step's). So with many threads stepping at once every step gets its own number's rate,
//! whichever thread's batch runs it, and a restored checkpoint resumes the schedule where
//! its step count says: the schedule keeps no state of its own.

use std::fmt;
use std::sync::Arc;

use ndarray::NdFloat;

use crate::error::{Error, Result};

/// The factor a step's learning rate is multiplied by, given the step's number (1 for the
/// first): PyTorch's `LambdaLR`.
#[derive(Clone)]
pub(super) struct Schedule<A>(Arc<dyn Fn(i64) -> A + Send + Sync>);

impl<A> Schedule<A> {
    pub(super) fn new(factor: impl Fn(i64) -> A + Send + Sync + 'static) -> Self {
        Schedule(Arc::new(factor))
    }
}

impl<A: NdFloat> Schedule<A> {
    /// The factor for step `t`, unchecked.
    pub(super) fn raw(&self, t: i64) -> A {
        (self.0)(t)
    }

    /// The factor for step `t`.
    ///
    /// # Errors
    /// [`Error::InvalidValue`] naming `state` (the optimizer's state variable) if the factor
    /// is negative or not finite: the step then applies nothing.
    pub(super) fn factor(&self, t: i64, state: &str) -> Result<A> {
        let factor = self.raw(t);
        if factor.is_finite() && factor >= A::zero() {
            return Ok(factor);
        }
        Err(Error::InvalidValue {
            variable: state.to_owned(),
            problem: format!(
                "its optimizer's learning-rate schedule gave {factor:?} for step {t} (a factor \
                 is finite and at least 0)"
            ),
        })
    }
}

impl<A> fmt::Debug for Schedule<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Schedule(..)")
    }
}
