//! [`AnyVariable`]: what an execution's row and delta operations take, a dense variable of
//! any dimension or a paged one.

use ndarray::Dimension;

use crate::{Element, PagedVariable, Variable};

/// A [`Variable`] (of any dimension) or a [`PagedVariable`] (or a reference or `Arc` to
/// one): what [`Txn`](super::Txn)'s row operations (`scatter_add`, `gather`, ...) and delta
/// operations (`assign`, `assign_add`, `assign_sub`, `scaled_add`) take. Sealed:
/// implemented by those only.
pub trait AnyVariable<A: Element>: private::Sealed<A> {}

pub(super) mod private {
    use crate::{Element, PagedVariable, Variable};

    pub trait Sealed<A: Element> {
        /// Which of the two it is.
        fn target(&self) -> Target<'_, A>;
    }

    /// What an [`AnyVariable`](super::AnyVariable) is.
    #[derive(Debug)]
    pub enum Target<'v, A: Element> {
        Dense(&'v Variable<A>),
        Paged(&'v PagedVariable<A>),
    }
}

use private::{Sealed, Target};

impl<A: Element, D: Dimension> Sealed<A> for Variable<A, D> {
    fn target(&self) -> Target<'_, A> {
        Target::Dense(self.erased())
    }
}

impl<A: Element> Sealed<A> for PagedVariable<A> {
    fn target(&self) -> Target<'_, A> {
        Target::Paged(self)
    }
}

impl<A: Element, T: Sealed<A> + ?Sized> Sealed<A> for &T {
    fn target(&self) -> Target<'_, A> {
        (**self).target()
    }
}

impl<A: Element, T: Sealed<A> + ?Sized> Sealed<A> for std::sync::Arc<T> {
    fn target(&self) -> Target<'_, A> {
        (**self).target()
    }
}

impl<A: Element, D: Dimension> AnyVariable<A> for Variable<A, D> {}
impl<A: Element> AnyVariable<A> for PagedVariable<A> {}
impl<A: Element, T: AnyVariable<A> + ?Sized> AnyVariable<A> for &T {}
impl<A: Element, T: AnyVariable<A> + ?Sized> AnyVariable<A> for std::sync::Arc<T> {}
