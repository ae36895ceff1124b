//! What an optimizer step takes as gradients: one array per parameter, of any ndarray type
//! and dimension, in a tuple (up to 8), a slice or a `&Vec`; a lone parameter's gradient
//! also on its own (`step(&g)`).

use std::borrow::Cow;

use ndarray::{ArrayBase, ArrayRef, Data, Dimension};
use smallvec::SmallVec;

use crate::kernel::standard_elements;
use crate::Element;

/// One gradient: any array or view (`&Array2`, `&ArrayView1`, `&ArcArray`, a snapshot's
/// `&ArrayRef`).
pub trait Gradient<A: Clone>: private::Sealed {
    #[doc(hidden)]
    fn parts(&self) -> (&[usize], Cow<'_, [A]>);
}

/// The gradients of one step, one per parameter in the optimizer's order: a tuple of up to
/// 8 [`Gradient`]s, or a slice or `&Vec` of arrays or views of one type; for an optimizer
/// of one parameter, its gradient alone (`&Array2`, a view, a snapshot's `&ArrayRef`).
///
/// ```
/// use mvtensor::optim::Optimizer;
/// use mvtensor::Variable;
/// use ndarray::{Array1, Array2, ArrayD, IxDyn};
///
/// let w = Variable::new(Array2::<f32>::zeros((2, 3)));
/// let b = Variable::new(Array1::<f32>::zeros(3));
/// let sgd = Optimizer::sgd(0.1).param(&w).param(&b).build()?;
/// let (gw, gb) = (Array2::<f32>::ones((2, 3)), Array1::<f32>::ones(3));
/// sgd.step((&gw, &gb))?; // a tuple: any array types
/// sgd.step((&gw.view(), &gb))?; // views too
/// let all = vec![gw.into_dyn(), gb.into_dyn()];
/// sgd.step(&all)?; // a `&Vec` (or a slice) of arrays of one type
/// sgd.step(&all[..])?;
/// assert_eq!(sgd.steps(), 4);
///
/// let lone = Variable::new(ArrayD::<f32>::zeros(IxDyn(&[4])));
/// let one = Optimizer::sgd(0.1).param(&lone).build()?;
/// one.step(&ArrayD::<f32>::ones(IxDyn(&[4])))?; // one parameter: its gradient alone
/// # Ok::<(), mvtensor::Error>(())
/// ```
pub trait Gradients<A: Clone>: private::Sealed {
    #[doc(hidden)]
    fn collect(&self) -> Collected<'_, A>;
}

/// Each gradient's shape and elements. Inline up to 8 (a tuple's most): a step allocates
/// nothing for them.
#[doc(hidden)]
pub type Collected<'a, A> = SmallVec<[(&'a [usize], Cow<'a, [A]>); 8]>;

mod private {
    pub trait Sealed {}
}

impl<A: Element, S: Data<Elem = A>, E: Dimension> private::Sealed for &ArrayBase<S, E> {}
impl<A: Element, S: Data<Elem = A>, E: Dimension> Gradient<A> for &ArrayBase<S, E> {
    fn parts(&self) -> (&[usize], Cow<'_, [A]>) {
        (self.shape(), standard_elements(self))
    }
}

impl<A: Element, E: Dimension> private::Sealed for &ArrayRef<A, E> {}
impl<A: Element, E: Dimension> Gradient<A> for &ArrayRef<A, E> {
    fn parts(&self) -> (&[usize], Cow<'_, [A]>) {
        (self.shape(), standard_elements(self))
    }
}

/// One parameter's gradient alone, as the 1-tuple `(g,)`: so that `step(&g)` compiles
/// without the caller having to think of a 1-tuple.
impl<A: Element, S: Data<Elem = A>, E: Dimension> Gradients<A> for &ArrayBase<S, E> {
    fn collect(&self) -> Collected<'_, A> {
        smallvec::smallvec![self.parts()]
    }
}

impl<A: Element, E: Dimension> Gradients<A> for &ArrayRef<A, E> {
    fn collect(&self) -> Collected<'_, A> {
        smallvec::smallvec![self.parts()]
    }
}

impl<A: Element, S: Data<Elem = A>, D: Dimension> private::Sealed for &[ArrayBase<S, D>] {}
impl<A: Element, S: Data<Elem = A>, D: Dimension> Gradients<A> for &[ArrayBase<S, D>] {
    fn collect(&self) -> Collected<'_, A> {
        self.iter()
            .map(|g| (g.shape(), standard_elements(g)))
            .collect()
    }
}

impl<A: Element, S: Data<Elem = A>, D: Dimension> private::Sealed for &Vec<ArrayBase<S, D>> {}
impl<A: Element, S: Data<Elem = A>, D: Dimension> Gradients<A> for &Vec<ArrayBase<S, D>> {
    fn collect(&self) -> Collected<'_, A> {
        self.iter()
            .map(|g| (g.shape(), standard_elements(g)))
            .collect()
    }
}

macro_rules! tuple {
    ($($name:ident),+) => {
        impl<$($name),+> private::Sealed for ($($name,)+) {}

        impl<A: Clone, $($name: Gradient<A>),+> Gradients<A> for ($($name,)+) {
            #[allow(non_snake_case)]
            fn collect(&self) -> Collected<'_, A> {
                let ($($name,)+) = self;
                smallvec::smallvec![$($name.parts()),+]
            }
        }
    };
}

tuples_up_to_eight!(tuple);
