//! [`Packed`]: a model's tensors end to end in one variable, so that a step writes one
//! version for all of them.
//!
//! Every variable an execution writes costs a version: a pooled buffer taken, installed,
//! committed and retired, whatever its size. A small model's parameters are several small
//! tensors that every step writes together, so an optimizer over them pays that per tensor
//! (`docs/benchmarks.md`, workload 7, compares the two with a mutex).
//! Packed, they are one `Variable<A, Ix1>`; a [`Layout`] says where each tensor lies, and
//! views of a snapshot or of a gradient buffer show each one with its own shape. Readers
//! still see one step or the next, never a mix: it is one version.
//!
//! The trade-off: a write to one tensor of the set copies the whole set (the version is
//! one), so pack what is written together, and keep a large embedding table, updated a few
//! rows at a time, in a variable (or a paged one) of its own.
//!
//! A set built by its optimizer
//! ([`OptimizerBuilder::build_packed`](super::OptimizerBuilder::build_packed)) also holds the
//! optimizer's state (moments, step count) after its tensors, so that a step writes one
//! version instead of two: the tensors' elements come first, and views, gradient
//! buffers and [`Layout::elements`] are about them alone.

use std::ops::Range;
use std::sync::Arc;

use ndarray::{ArrayBase, ArrayView, ArrayViewMut, ArrayViewMutD, Data, Dimension, Ix1, IxDyn};

use crate::error::{Error, Result};
use crate::{Element, Snapshot, Variable};

/// Where each tensor of a [`Packed`] set lies in its variable: names, shapes and element
/// ranges, in the order the tensors were added.
///
/// Its views work on any slice of the set's length (its tensors' [`elements`](Self::elements),
/// or the whole variable, [`stored`](Self::stored)): a snapshot of the variable (from
/// [`Packed::read`], [`read_all`](fn@crate::read_all) or a store snapshot) or a gradient
/// buffer of the caller's ([`zeros`](Self::zeros)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The variable's name: errors name `<name>.<tensor>`.
    name: String,
    tensors: Vec<Tensor>,
    elements: usize,
    /// The variable's length: `elements`, and an optimizer's state after them in a set built
    /// by its optimizer.
    stored: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Tensor {
    name: String,
    shape: Vec<usize>,
    start: usize,
}

impl Tensor {
    fn range(&self) -> Range<usize> {
        self.start..self.start + self.shape.iter().product::<usize>()
    }
}

impl Layout {
    /// Its tensors and the variable's length, as checkpoints record them
    /// (`w1 [11, 32], b1 [32]; 2510 elements`): two sets of the same length may pack
    /// different tensors, and a restore of one into the other is refused.
    pub(crate) fn describe(&self) -> String {
        let tensors: Vec<String> = self
            .tensors
            .iter()
            .map(|t| format!("{} {:?}", t.name, t.shape))
            .collect();
        format!("{}; {} elements", tensors.join(", "), self.stored)
    }

    /// The set's name (its variable's).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether the set has no tensor.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// Elements of all the tensors: the variable's length, unless the set also holds its
    /// optimizer's state (see [`stored`](Self::stored)).
    pub fn elements(&self) -> usize {
        self.elements
    }

    /// The variable's length: [`elements`](Self::elements), then the optimizer's state in a
    /// set built by its optimizer
    /// ([`OptimizerBuilder::build_packed`](super::OptimizerBuilder::build_packed)).
    pub fn stored(&self) -> usize {
        self.stored
    }

    /// The position of the tensor named `name`.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.tensors.iter().position(|t| t.name == name)
    }

    /// Tensor `i`'s name, shape and range of elements in the set, if there is one.
    pub fn tensor(&self, i: usize) -> Option<(&str, &[usize], Range<usize>)> {
        let t = self.tensors.get(i)?;
        Some((t.name.as_str(), t.shape.as_slice(), t.range()))
    }

    /// Each tensor's name, shape and range of elements, in order.
    pub fn tensors(&self) -> impl ExactSizeIterator<Item = (&str, &[usize], Range<usize>)> {
        self.tensors
            .iter()
            .map(|t| (t.name.as_str(), t.shape.as_slice(), t.range()))
    }

    /// A buffer of zeros as long as the set, for gradients computed in place: split it with
    /// [`split_mut`](Self::split_mut) and hand the views to a step (a slice or `&Vec` of
    /// views is [`Gradients`](super::Gradients)).
    pub fn zeros<A: Element>(&self) -> ndarray::Array1<A> {
        ndarray::Array1::from_elem(self.elements, A::default())
    }

    /// Tensor `i` of `flat` (the set's elements, or the whole variable) as an array of
    /// dimension `D`.
    ///
    /// # Errors
    /// [`Error::NoSuchTensor`] if there is no tensor `i`; [`Error::ShapeMismatch`] if
    /// `flat` is neither [`elements`](Self::elements) nor [`stored`](Self::stored) long;
    /// [`Error::RankMismatch`] if `D` is not the tensor's rank (`IxDyn` fits any).
    pub fn view<'a, D: Dimension, A>(
        &self,
        i: usize,
        flat: &'a [A],
    ) -> Result<ArrayView<'a, A, D>> {
        let (tensor, dim) = self.fit::<D>(i, flat.len())?;
        Ok(ArrayView::from_shape(dim, &flat[tensor.range()]).expect("the range is the shape's"))
    }

    /// Tensor `i` of `flat` as a mutable array of dimension `D`: where a gradient is
    /// computed. Errors as for [`view`](Self::view).
    pub fn view_mut<'a, D: Dimension, A>(
        &self,
        i: usize,
        flat: &'a mut [A],
    ) -> Result<ArrayViewMut<'a, A, D>> {
        let (tensor, dim) = self.fit::<D>(i, flat.len())?;
        let range = tensor.range();
        Ok(ArrayViewMut::from_shape(dim, &mut flat[range]).expect("the range is the shape's"))
    }

    /// Every tensor of `flat` at once, mutable, in order (with `IxDyn` shapes: convert one
    /// with `into_dimensionality`).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] if `flat` is neither [`elements`](Self::elements) nor
    /// [`stored`](Self::stored) long.
    pub fn split_mut<'a, A>(&self, mut flat: &'a mut [A]) -> Result<Vec<ArrayViewMutD<'a, A>>> {
        self.check_len(flat.len())?;
        let mut views = Vec::with_capacity(self.tensors.len());
        for tensor in &self.tensors {
            let (this, rest) = std::mem::take(&mut flat).split_at_mut(tensor.range().len());
            let view = ArrayViewMut::from_shape(IxDyn(&tensor.shape), this);
            views.push(view.expect("the range is the shape's"));
            flat = rest;
        }
        Ok(views)
    }

    /// `Ok` if the variable holds the tensors alone; else the error a second optimizer (or
    /// Hogwild SGD) over the set gets: the set holds the state of the optimizer that built it
    /// ([`OptimizerBuilder::build_packed`](super::OptimizerBuilder::build_packed)), which
    /// another one's steps would overwrite.
    pub(crate) fn check_tensors_only(&self) -> Result<()> {
        if self.stored == self.elements {
            return Ok(());
        }
        // Said as what it is: a shape mismatch of [elements] against [stored] would name a
        // shape the user never saw.
        Err(Error::InvalidSetting {
            owner: format!("packed set `{}`", self.name),
            setting: "optimizer",
            value: format!(
                "another one (the set's variable holds its {} elements and, after them, \
                 the state of the optimizer that built it: {} in all)",
                self.elements, self.stored
            ),
            expected: "only the optimizer that built it (`build_packed`)",
        })
    }

    /// `<set>.<tensor>`: how errors and the optimizer name tensor `i`.
    pub(crate) fn label(&self, i: usize) -> String {
        format!("{}.{}", self.name, self.tensors[i].name)
    }

    fn check_len(&self, len: usize) -> Result<()> {
        if len == self.elements || len == self.stored {
            return Ok(());
        }
        Err(Error::ShapeMismatch {
            variable: self.name.clone(),
            expected: vec![self.elements],
            found: vec![len],
        })
    }

    /// Tensor `i` and its shape as a `D`, for a slice of `len` elements.
    fn fit<D: Dimension>(&self, i: usize, len: usize) -> Result<(&Tensor, D)> {
        let tensor = self.tensors.get(i).ok_or_else(|| Error::NoSuchTensor {
            set: self.name.clone(),
            index: i,
            tensors: self.tensors.len(),
        })?;
        self.check_len(len)?;
        let dim = D::from_dimension(&IxDyn(&tensor.shape)).ok_or_else(|| Error::RankMismatch {
            variable: self.label(i),
            expected: Some(tensor.shape.len()),
            found: D::NDIM,
        })?;
        Ok((tensor, dim))
    }
}

/// Several tensors (a model's parameters, typically) stored end to end in one 1-d variable;
/// the [trainer guide](crate::docs::trainer_guide) says when to pack.
///
/// Read it with [`read`](Self::read) and take each tensor as a view; hand it to an
/// [`Optimizer`](super::Optimizer) with [`packed`](super::OptimizerBuilder::packed), which
/// then takes one gradient per tensor, or let the optimizer build it with its state inside
/// ([`build_packed`](super::OptimizerBuilder::build_packed): one version a step); register
/// [`variable`](Self::variable) in a [`Store`](crate::Store) to checkpoint it (as one 1-d
/// tensor: the layout is the program's).
///
/// ```
/// use mvtensor::optim::{Optimizer, Packed};
/// use ndarray::{Array1, Array2, Ix1, Ix2};
///
/// let model = Packed::builder()
///     .name("mlp")
///     .tensor("w", &Array2::<f32>::ones((3, 2)))
///     .tensor("b", &Array1::<f32>::zeros(2))
///     .build()?;
/// let sgd = Optimizer::sgd(0.5).packed(&model).build()?;
///
/// let params = model.read(); // one version: `w` and `b` of the same step
/// let (w, b) = (params.get::<Ix2>(0)?, params.get::<Ix1>(1)?);
/// let (gw, gb) = (w.mapv(|x| x * 2.0), b.mapv(|_| 1.0));
/// drop(params);
/// sgd.step((&gw, &gb))?; // one gradient per tensor, one version written
///
/// let params = model.read();
/// assert_eq!(params.get::<Ix2>(0)?[[0, 0]], 0.0);
/// assert_eq!(params.get::<Ix1>(1)?[1], -0.5);
/// # Ok::<(), mvtensor::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Packed<A: Element> {
    variable: Variable<A, Ix1>,
    layout: Arc<Layout>,
}

impl<A: Element> Packed<A> {
    /// An empty set: add tensors with [`PackedBuilder::tensor`].
    pub fn builder() -> PackedBuilder<A> {
        PackedBuilder {
            name: None,
            tensors: Vec::new(),
            data: Vec::new(),
        }
    }

    /// The variable holding every tensor: for a [`Store`](crate::Store), a
    /// [`CriticalSection`](crate::CriticalSection) or [`read_all`](fn@crate::read_all).
    pub fn variable(&self) -> &Variable<A, Ix1> {
        &self.variable
    }

    /// Where each tensor lies.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// A wait-free snapshot of every tensor (one version of the variable).
    pub fn read(&self) -> PackedSnapshot<A> {
        PackedSnapshot {
            snapshot: self.variable.read(),
            layout: Arc::clone(&self.layout),
        }
    }
}

/// Options for a [`Packed`] set, from [`Packed::builder`].
#[derive(Debug)]
#[must_use = "call .build() to create the set"]
pub struct PackedBuilder<A> {
    name: Option<String>,
    tensors: Vec<Tensor>,
    data: Vec<A>,
}

impl<A: Element> PackedBuilder<A> {
    /// Names the set's variable (`"packed"` by default).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Adds a tensor with its initial value (copied in standard, row-major order).
    pub fn tensor<S: Data<Elem = A>, D: Dimension>(
        mut self,
        name: impl Into<String>,
        init: &ArrayBase<S, D>,
    ) -> Self {
        self.tensors.push(Tensor {
            name: name.into(),
            shape: init.shape().to_vec(),
            start: self.data.len(),
        });
        self.data.extend(init.iter().cloned());
        self
    }

    /// Creates the variable.
    ///
    /// # Errors
    /// [`Error::NameTaken`] if two tensors have the same name.
    pub fn build(self) -> Result<Packed<A>> {
        let layout = self.layout_only()?;
        Ok(self.build_with_tail(layout, 0))
    }

    /// Creates the variable of `layout` (this builder's, checked) with `tail` more elements
    /// (zeros) after the tensors: an optimizer's state.
    pub(super) fn build_with_tail(mut self, mut layout: Layout, tail: usize) -> Packed<A> {
        layout.stored += tail;
        self.data.resize(layout.stored, A::default());
        let variable = Variable::builder(ndarray::Array1::from_vec(self.data))
            .name(layout.name.clone())
            .layout(layout.describe())
            .build();
        Packed {
            variable,
            layout: Arc::new(layout),
        }
    }

    /// The set's layout (its variable holding the tensors alone).
    ///
    /// # Errors
    /// As for [`build`](Self::build).
    pub(super) fn layout_only(&self) -> Result<Layout> {
        let name = self.name.clone().unwrap_or_else(|| "packed".to_owned());
        for (i, tensor) in self.tensors.iter().enumerate() {
            if self.tensors[..i].iter().any(|t| t.name == tensor.name) {
                return Err(Error::NameTaken {
                    name: format!("{name}.{}", tensor.name),
                    dtype: A::DTYPE,
                    shape: tensor.shape.clone(),
                });
            }
        }
        Ok(Layout {
            name,
            tensors: self.tensors.clone(),
            elements: self.data.len(),
            stored: self.data.len(),
        })
    }
}

/// A wait-free view of one version of a [`Packed`] set, from [`Packed::read`]. Like
/// [`Snapshot`], it stays as it is whatever writers do, and it cannot cross threads.
#[derive(Debug)]
#[must_use = "a snapshot only keeps its version until it is dropped"]
pub struct PackedSnapshot<A: Element> {
    snapshot: Snapshot<A, Ix1>,
    layout: Arc<Layout>,
}

impl<A: Element> PackedSnapshot<A> {
    /// Tensor `i` (in the order added) as an array of dimension `D`.
    ///
    /// # Errors
    /// As for [`Layout::view`]: [`Error::NoSuchTensor`] or [`Error::RankMismatch`] (the
    /// variable keeps the set's length: a write of another is refused).
    pub fn get<D: Dimension>(&self, i: usize) -> Result<ArrayView<'_, A, D>> {
        self.layout
            .view(i, self.snapshot.as_slice().unwrap_or_default())
    }

    /// The tensor named `name`; errors as for [`get`](Self::get), and
    /// [`Error::NotFound`] if no tensor has that name.
    pub fn by_name<D: Dimension>(&self, name: &str) -> Result<ArrayView<'_, A, D>> {
        let i = self.layout.position(name).ok_or_else(|| Error::NotFound {
            name: format!("{}.{name}", self.layout.name),
        })?;
        self.get(i)
    }

    /// The snapshot of the whole variable (its version, timestamp, every element).
    pub fn snapshot(&self) -> &Snapshot<A, Ix1> {
        &self.snapshot
    }

    /// The set's layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
}
