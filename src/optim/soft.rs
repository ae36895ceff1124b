//! [`SoftUpdate`]: a target network that follows an online one, `target <- tau * online +
//! (1 - tau) * target` (Polyak averaging, as in DDPG/SAC critics), over a set of variables.

use ndarray::{Dimension, NdFloat, Zip};

use crate::error::{check_shape, Result};
use crate::read_all::read_all;
use crate::{CriticalSection, Element, Variable};

/// Soft updates of a set of target variables from their online twins. Each
/// [`apply`](Self::apply) reads the online set at one point of the commit order
/// ([`read_all`]: never half of an online step, and never waiting for the trainers) and writes
/// every target in one execution: a reader of the targets sees all of one soft update or
/// none of it.
///
/// ```
/// use mvtensor::optim::SoftUpdate;
/// use mvtensor::Variable;
/// use ndarray::Array1;
///
/// let online = Variable::new(Array1::from_elem(2, 1.0f32));
/// let target = Variable::new(Array1::<f32>::zeros(2));
/// let polyak = SoftUpdate::new().pair(&target, &online).build()?;
/// polyak.apply(0.1)?;
/// assert_eq!(target.read()[0], 0.1);
/// # Ok::<(), mvtensor::Error>(())
/// ```
#[derive(Debug)]
pub struct SoftUpdate<A: Element> {
    targets: Vec<Variable<A>>,
    online: Vec<Variable<A>>,
    section: CriticalSection,
}

/// The pairs of a [`SoftUpdate`]; from [`SoftUpdate::new`].
#[derive(Debug, Default)]
#[must_use = "call .build() to create the soft update"]
pub struct SoftUpdateBuilder<A: Element> {
    targets: Vec<Variable<A>>,
    online: Vec<Variable<A>>,
}

impl<A: Element + NdFloat> SoftUpdate<A> {
    /// No pairs yet: add them with [`pair`](SoftUpdateBuilder::pair).
    #[allow(clippy::new_ret_no_self)] // a builder, as `CriticalSection::builder`
    pub fn new() -> SoftUpdateBuilder<A> {
        SoftUpdateBuilder {
            targets: Vec::new(),
            online: Vec::new(),
        }
    }

    /// `target = tau * online + (1 - tau) * target` for every pair, atomically over the
    /// targets.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) naming a target whose online
    /// twin has another shape (nothing is applied); [`Error::Reentrant`](crate::Error::Reentrant)
    /// from inside another execution.
    pub fn apply(&self, tau: A) -> Result<()> {
        let online = read_all(&self.online[..]);
        self.section.execute(|tx| {
            for (target, online) in self.targets.iter().zip(&online) {
                let mut t = tx.rewrite(target)?;
                let (before, after) = t.split();
                check_shape(target.name(), before.shape(), online.shape())?; // rolls back if not
                Zip::from(after)
                    .and(before)
                    .and(&**online)
                    .for_each(|t, &before, &o| *t = tau * o + (A::one() - tau) * before);
            }
            Ok(())
        })
    }
}

impl<A: Element + NdFloat> SoftUpdateBuilder<A> {
    /// Adds a target and the online variable it follows.
    pub fn pair<D: Dimension>(mut self, target: &Variable<A, D>, online: &Variable<A, D>) -> Self {
        self.targets.push(target.erased().clone());
        self.online.push(online.erased().clone());
        self
    }

    /// Creates the section over the targets.
    ///
    /// # Errors
    /// [`Error::ResourceConflict`](crate::Error::ResourceConflict) if a target belongs to
    /// another section that holds it exclusively.
    pub fn build(self) -> Result<SoftUpdate<A>> {
        let section = CriticalSection::builder()
            .name("soft update")
            .resources(&self.targets)
            .build()?;
        Ok(SoftUpdate {
            targets: self.targets,
            online: self.online,
            section,
        })
    }
}
