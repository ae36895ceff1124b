//! [`SoftUpdate`]: a target network that follows an online one, `target <- tau * online +
//! (1 - tau) * target` (Polyak averaging, as in DDPG/SAC critics), over a set of variables.

use ndarray::{Dimension, NdFloat, Zip};

use super::{standard, standard_mut, Packed};
use crate::error::{check_setting, check_shape, Error, Result};
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
    /// Per pair, for packed sets: the tensors' elements, blended; the rest of the target
    /// (an optimizer's state) is kept as it is.
    tensors: Vec<Option<usize>>,
    section: CriticalSection,
}

/// The pairs of a [`SoftUpdate`]; from [`SoftUpdate::new`].
#[derive(Debug, Default)]
#[must_use = "call .build() to create the soft update"]
pub struct SoftUpdateBuilder<A: Element> {
    targets: Vec<Variable<A>>,
    online: Vec<Variable<A>>,
    tensors: Vec<Option<usize>>,
    /// A pair of packed sets whose tensors differ: `build` refuses it.
    misfit: Option<Error>,
}

impl<A: Element + NdFloat> SoftUpdate<A> {
    /// No pairs yet: add them with [`pair`](SoftUpdateBuilder::pair).
    #[allow(clippy::new_ret_no_self)] // a builder, as `CriticalSection::builder`
    pub fn new() -> SoftUpdateBuilder<A> {
        SoftUpdateBuilder {
            targets: Vec::new(),
            online: Vec::new(),
            tensors: Vec::new(),
            misfit: None,
        }
    }

    /// `target = tau * online + (1 - tau) * target` for every pair, atomically over the
    /// targets.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`](crate::Error::InvalidSetting) if `tau` is not in `[0, 1]`
    /// (NaN included): nothing is applied;
    /// [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) naming a target whose online
    /// twin has another shape (nothing is applied); [`Error::Reentrant`](crate::Error::Reentrant)
    /// from inside another execution.
    pub fn apply(&self, tau: A) -> Result<()> {
        let owner = || match self.targets.first() {
            Some(first) => format!("soft update of `{}`", first.name()),
            None => "soft update".to_owned(),
        };
        let blends = tau >= A::zero() && tau <= A::one();
        check_setting(owner, "tau", tau, blends, "in [0, 1]")?;
        let online = read_all(&self.online[..]);
        self.section.execute(|tx| {
            let pairs = self.targets.iter().zip(&online).zip(&self.tensors);
            for ((target, online), &tensors) in pairs {
                let mut t = tx.rewrite(target)?;
                let (before, after) = t.split();
                let blend =
                    |t: &mut A, &before: &A, &o: &A| *t = tau * o + (A::one() - tau) * before;
                let Some(n) = tensors else {
                    check_shape(target.name(), before.shape(), online.shape())?; // rolls back
                    Zip::from(after).and(before).and(&**online).for_each(blend);
                    continue;
                };
                // Packed sets of the same tensors (checked at build; their variables' shapes
                // are fixed): the tensors blended, the target's state after them kept.
                let (before, after) = (standard(before), standard_mut(after));
                let online = &standard(online)[..n];
                let (after, kept) = after.split_at_mut(n);
                after
                    .iter_mut()
                    .zip(&before[..n])
                    .zip(online)
                    .for_each(|((t, b), o)| blend(t, b, o));
                kept.copy_from_slice(&before[n..]);
            }
            Ok(())
        })
    }
}

impl<A: Element + NdFloat> SoftUpdateBuilder<A> {
    /// Adds a target and the online variable it follows. [`build`](Self::build) refuses a
    /// pair whose shapes differ now (a variable with a dynamic shape that changes later
    /// fails that [`apply`](SoftUpdate::apply) instead).
    pub fn pair<D: Dimension>(mut self, target: &Variable<A, D>, online: &Variable<A, D>) -> Self {
        let (expected, found) = (online.shape(), target.shape());
        if expected != found {
            self.misfit.get_or_insert(Error::ShapeMismatch {
                variable: target.name().to_owned(),
                expected,
                found,
            });
        }
        self.targets.push(target.erased().clone());
        self.online.push(online.erased().clone());
        self.tensors.push(None);
        self
    }

    /// Adds a target set and the online set it follows: their tensors are blended, and
    /// either may hold an optimizer's state after them
    /// ([`build_packed`](super::OptimizerBuilder::build_packed)), which is not (the
    /// target's is kept as it is). [`build`](Self::build) refuses sets whose tensors differ.
    pub fn packed(mut self, target: &Packed<A>, online: &Packed<A>) -> Self {
        let (t, o) = (target.layout(), online.layout());
        // The first tensor whose shape differs, or the sets' lengths if one has more tensors.
        let differs = (0..t.len().min(o.len())).find_map(|i| {
            let (shape, want) = (t.tensor(i)?.1, o.tensor(i)?.1);
            (shape != want).then(|| (t.label(i), want.to_vec(), shape.to_vec()))
        });
        let misfit = differs.or_else(|| {
            (t.len() != o.len())
                .then(|| (t.name().to_owned(), vec![o.elements()], vec![t.elements()]))
        });
        if let Some((variable, expected, found)) = misfit {
            self.misfit.get_or_insert(Error::ShapeMismatch {
                variable,
                expected,
                found,
            });
        }
        self.targets.push(target.variable().erased().clone());
        self.online.push(online.variable().erased().clone());
        self.tensors.push(Some(target.layout().elements()));
        self
    }

    /// Creates the section over the targets.
    ///
    /// # Errors
    /// [`Error::ResourceConflict`](crate::Error::ResourceConflict) if a target belongs to
    /// another section that holds it exclusively; [`Error::ShapeMismatch`] naming a target
    /// set whose tensors are not the online set's.
    pub fn build(self) -> Result<SoftUpdate<A>> {
        if let Some(misfit) = self.misfit {
            return Err(misfit);
        }
        let section = CriticalSection::builder()
            .name("soft update")
            // Shared, as an optimizer's: a checkpoint's restore must be able to set the
            // targets.
            .exclusive(false)
            .resources(&self.targets)
            .build()?;
        Ok(SoftUpdate {
            targets: self.targets,
            online: self.online,
            tensors: self.tensors,
            section,
        })
    }
}
