//! [`HogwildSgd`]: SGD with no section; see the [module docs](super) for the trade-off.

use ndarray::{ArrayViewD, Dimension, IxDyn, NdFloat};

use super::{added_twice, check_finite, Gradients, Packed};
use crate::error::{check_setting, check_shape, Error, Result, RATE};
use crate::{Element, Variable};

/// Hogwild SGD: each parameter updated with a combined `scaled_add`, no section; see the
/// [module docs](crate::optim) for the trade-off.
///
/// A [`Packed`] set is one parameter: a step adds all of its tensors' gradients in one
/// combined write (one version, and concurrent steps' deltas merge into one pass).
///
/// ```
/// use mvtensor::optim::{HogwildSgd, Packed};
/// use ndarray::{Array1, Array2, Ix1};
///
/// let model = Packed::builder()
///     .tensor("w", &Array2::<f32>::zeros((2, 2)))
///     .tensor("b", &Array1::<f32>::zeros(2))
///     .build()?;
/// let sgd = HogwildSgd::new(0.5).packed(&model);
/// std::thread::scope(|s| {
///     for _ in 0..4 {
///         s.spawn(|| sgd.step((&Array2::<f32>::ones((2, 2)), &Array1::<f32>::ones(2))));
///     }
/// });
/// assert_eq!(model.read().get::<Ix1>(1)?[0], -2.0); // four steps of -0.5, none lost
/// # Ok::<(), mvtensor::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct HogwildSgd<A: Element> {
    lr: A,
    params: Vec<Variable<A>>,
    /// Each gradient's parameter and shape, and how errors name it (`None`: the
    /// parameter's name); a packed set's tensors are consecutive.
    parts: Vec<(usize, Vec<usize>, Option<String>)>,
    /// A set added that holds an optimizer's state: every step is refused with this.
    misfit: Option<Error>,
    /// Whether a step checks its gradients for NaN and infinities first.
    error_if_nonfinite: bool,
}

impl<A: Element + NdFloat> HogwildSgd<A> {
    /// With no parameters yet: add them with [`param`](Self::param) or
    /// [`packed`](Self::packed).
    pub fn new(lr: A) -> Self {
        Self {
            lr,
            params: Vec::new(),
            parts: Vec::new(),
            misfit: None,
            error_if_nonfinite: false,
        }
    }

    /// Refuses a step whose gradients hold a NaN or an infinity, with
    /// [`Error::NonFinite`], applying none of them: as
    /// [`OptimizerBuilder::error_if_nonfinite`](super::OptimizerBuilder::error_if_nonfinite),
    /// off by default (it is a pass over the gradients). Without it, a NaN gradient makes
    /// its parameter NaN for good, and every thread's later steps with it.
    ///
    /// ```
    /// use mvtensor::optim::HogwildSgd;
    /// use mvtensor::{Error, Variable};
    /// use ndarray::arr1;
    ///
    /// let (w, b) = (Variable::new(arr1(&[1.0f32, 1.0])), Variable::new(arr1(&[0.0f32])));
    /// let sgd = HogwildSgd::new(0.5).error_if_nonfinite().param(&w).param(&b);
    /// let bad = sgd.step((&arr1(&[1.0, 1.0]), &arr1(&[f32::NAN])));
    /// assert!(matches!(bad, Err(Error::NonFinite { .. })));
    /// assert_eq!(w.read().to_vec(), vec![1.0, 1.0]); // nothing applied, `w` included
    /// # Ok::<(), Error>(())
    /// ```
    #[must_use]
    pub fn error_if_nonfinite(mut self) -> Self {
        self.error_if_nonfinite = true;
        self
    }

    /// Adds a parameter; gradients come in the order parameters were added.
    #[must_use]
    pub fn param<D: Dimension>(mut self, param: &Variable<A, D>) -> Self {
        self.refuse_twice(param.erased());
        self.parts.push((self.params.len(), param.shape(), None));
        self.params.push(param.erased().clone());
        self
    }

    /// Adds every tensor of a packed set: one gradient per tensor, one write per step. A set
    /// built by an optimizer ([`build_packed`](super::OptimizerBuilder::build_packed)) holds
    /// its state, which Hogwild's writes would not cover: every step is then refused.
    #[must_use]
    pub fn packed(mut self, set: &Packed<A>) -> Self {
        if let Err(misfit) = set.layout().check_tensors_only() {
            self.misfit.get_or_insert(misfit);
        }
        self.refuse_twice(set.variable().erased());
        for (i, (_, shape, _)) in set.layout().tensors().enumerate() {
            let label = set.layout().label(i);
            self.parts
                .push((self.params.len(), shape.to_vec(), Some(label)));
        }
        self.params.push(set.variable().erased().clone());
        self
    }

    /// How errors about its settings name it.
    fn owner(&self) -> String {
        match self.params.first() {
            Some(first) => format!("Hogwild SGD over `{}`", first.name()),
            None => "Hogwild SGD".to_owned(),
        }
    }

    /// Makes every step refuse a parameter added a second time.
    fn refuse_twice(&mut self, param: &Variable<A>) {
        if let Some(twice) = added_twice(|| self.owner(), &self.params, param) {
            self.misfit.get_or_insert(twice);
        }
    }

    /// The learning rate [`step`](Self::step) uses: the one given to [`new`](Self::new).
    pub fn lr(&self) -> A {
        self.lr
    }

    /// `p -= lr * g` for every parameter, one combined write each.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] if the rate given to [`new`](Self::new) is negative or not
    /// finite, a parameter was added twice, or a packed set holds the state of the optimizer
    /// that built it; [`Error::GradientCount`]; [`Error::ShapeMismatch`] naming the
    /// parameter (or the tensor of a packed set) whose gradient does not fit; [`Error::NonFinite`] if
    /// asked ([`error_if_nonfinite`](Self::error_if_nonfinite)). Every gradient is checked
    /// before any is applied, so nothing is applied then; a parameter whose own shape
    /// changed since it was added fails its write alone (the ones before it are updated:
    /// Hogwild steps are not atomic).
    pub fn step(&self, grads: impl Gradients<A>) -> Result<()> {
        self.step_with_lr(self.lr, grads)
    }

    /// [`step`](Self::step) with this step's own learning rate instead of [`lr`](Self::lr):
    /// for a rate that decays with progress, as word2vec's Hogwild threads each compute
    /// theirs from how far they are (`lr0 * (1 - done / total)`). A Hogwild step has no
    /// number (there is no section to hand one out), so the caller says what the rate is;
    /// concurrent steps may each pass a different one, and each is applied with its own.
    ///
    /// ```
    /// use mvtensor::optim::HogwildSgd;
    /// use mvtensor::Variable;
    /// use ndarray::Array1;
    ///
    /// let w = Variable::new(Array1::<f32>::zeros(2));
    /// let sgd = HogwildSgd::new(0.5).param(&w);
    /// let total = 4;
    /// for done in 0..total {
    ///     let lr = sgd.lr() * (1.0 - done as f32 / total as f32); // 0.5, 0.375, 0.25, 0.125
    ///     sgd.step_with_lr(lr, (&Array1::<f32>::ones(2),))?;
    /// }
    /// assert_eq!(w.read()[0], -1.25);
    /// # Ok::<(), mvtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`step`](Self::step), and [`Error::InvalidSetting`] (naming the first parameter)
    /// if `lr` is negative or not finite; nothing is applied then.
    pub fn step_with_lr(&self, lr: A, grads: impl Gradients<A>) -> Result<()> {
        if let Some(misfit) = &self.misfit {
            return Err(misfit.clone());
        }
        check_setting(
            || self.owner(),
            "lr",
            lr,
            lr.is_finite() && lr >= A::zero(),
            RATE,
        )?;
        let grads = grads.collect();
        if grads.len() != self.parts.len() {
            return Err(Error::GradientCount {
                expected: self.parts.len(),
                found: grads.len(),
            });
        }
        let name = |param: usize, label: &Option<String>| {
            label
                .as_deref()
                .unwrap_or(self.params[param].name())
                .to_owned()
        };
        for ((param, shape, label), (found, _)) in self.parts.iter().zip(&grads) {
            check_shape(&name(*param, label), shape, found)?;
        }
        if self.error_if_nonfinite {
            check_finite("Hogwild SGD", grads.iter().map(|(_, g)| &**g), |i| {
                let (param, _, label) = &self.parts[i];
                name(*param, label)
            })?;
        }
        let mut grads = self.parts.iter().zip(&grads).peekable();
        let mut flat = Vec::new();
        for (i, param) in self.params.iter().enumerate() {
            let mut mine = std::iter::from_fn(|| grads.next_if(|((param, ..), _)| *param == i));
            let Some(((_, shape, label), (_, g))) = mine.next() else {
                continue; // a packed set of no tensors
            };
            if label.is_none() {
                let g = ArrayViewD::from_shape(IxDyn(shape), g).expect("checked above");
                param.scaled_add(-lr, &g)?;
                continue;
            }
            // A packed set: its tensors' gradients end to end, one write.
            flat.clear();
            flat.extend_from_slice(g);
            mine.for_each(|(_, (_, g))| flat.extend_from_slice(g));
            let g = ArrayViewD::from_shape(IxDyn(&[flat.len()]), &flat).expect("1-d");
            param.scaled_add(-lr, &g)?;
        }
        Ok(())
    }
}
