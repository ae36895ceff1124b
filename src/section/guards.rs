//! What a [`Txn`](super::Txn) lends: [`TxnRef`] and [`TxnMut`], checked like `RefCell`'s
//! borrows (the count lives in the variable's slot).

use std::fmt;
use std::ops::{Deref, DerefMut};

use ndarray::{ArrayD, ArrayRef, Dimension, IxDyn};

use super::slot::{Borrow, Source};
use crate::dim::{Shown, ShownMut};
use crate::version::VersionRef;
use crate::Element;

/// A shared borrow of a variable's value inside an execution: the execution's own working
/// copy, or the committed value. Derefs to the array (`&ArrayRef<A, D>`).
#[must_use]
pub struct TxnRef<'t, A: Element, D: Dimension = IxDyn> {
    // Declared first: it borrows what `inner` keeps alive.
    pub(super) shown: Shown<A, D>,
    pub(super) inner: RefInner<'t, A>,
}

pub(super) enum RefInner<'t, A: Element> {
    Resource(&'t ArrayD<A>, #[allow(dead_code)] Borrow<'t>),
    Outside(VersionRef<A>),
}

/// The mutable borrow of a resource's working copy inside an execution. Derefs to the
/// array (`&mut ArrayRef<A, D>`, as `&mut *array_view_mut` would), so every in-place ndarray
/// operation works on it (`+=`, `scaled_add`, `zip_mut_with`, `Zip`, `view_mut`). It is a
/// view of the working copy: layout methods (`invert_axis`, `collapse_axis`, ..) change how
/// this borrow shows the elements, never the working copy's own shape or layout.
#[must_use]
pub struct TxnMut<'t, A: Element, D: Dimension = IxDyn> {
    pub(super) shown: ShownMut<'t, A, D>,
    pub(super) _borrow: Borrow<'t>,
}

/// A variable's value in an execution beside a fresh working copy for its next value:
/// see [`Txn::rewrite`](super::Txn::rewrite). The working copy's elements are unspecified
/// until written: write every one.
#[must_use]
pub struct TxnRewrite<'t, A: Element, D: Dimension = IxDyn> {
    // Declared first: it borrows what `source` keeps alive.
    pub(super) shown: Shown<A, D>,
    pub(super) target: ShownMut<'t, A, D>,
    pub(super) source: Source<'t, A>,
    pub(super) _borrow: Borrow<'t>,
}

impl<'t, A: Element, D: Dimension> TxnRef<'t, A, D> {
    /// Lends what `inner` holds (a resource's borrowed array, or an outside version).
    pub(super) fn new(inner: RefInner<'t, A>) -> Self {
        // SAFETY: the array lives as long as `inner` (a borrow of a slot's array, or a count
        // of the version), which the `TxnRef` holds; moving `inner` moves no array.
        let shown = unsafe { Shown::new(inner.data()) };
        Self { shown, inner }
    }
}

impl<'t, A: Element, D: Dimension> TxnMut<'t, A, D> {
    /// Lends `data` mutably, for as long as `borrow` counts it.
    pub(super) fn new(data: &'t mut ArrayD<A>, borrow: Borrow<'t>) -> Self {
        Self {
            shown: ShownMut::new(data),
            _borrow: borrow,
        }
    }
}

impl<'t, A: Element, D: Dimension> TxnRewrite<'t, A, D> {
    /// Lends `source` beside `target`, its next value to fill, for as long as `borrow` counts
    /// them.
    pub(super) fn new(
        source: Source<'t, A>,
        target: &'t mut ArrayD<A>,
        borrow: Borrow<'t>,
    ) -> Self {
        // SAFETY: the source's array lives as long as the borrow: kept unchanged by its slot
        // until the execution ends, or owned by `source`, which the `TxnRewrite` holds.
        let shown = unsafe { Shown::new(source.data()) };
        Self {
            shown,
            target: ShownMut::new(target),
            source,
            _borrow: borrow,
        }
    }
}

impl<A: Element, D: Dimension> TxnRewrite<'_, A, D> {
    /// The value the execution saw before this write.
    pub fn source(&self) -> &ArrayRef<A, D> {
        self.shown.get(self.source.data())
    }

    /// The working copy: the variable's next value, once every element is written.
    pub fn target(&mut self) -> &mut ArrayRef<A, D> {
        self.target.get_mut()
    }

    /// Both at once, to compute one from the other.
    pub fn split(&mut self) -> (&ArrayRef<A, D>, &mut ArrayRef<A, D>) {
        (self.shown.get(self.source.data()), self.target.get_mut())
    }
}

impl<A: Element, D: Dimension> fmt::Debug for TxnRewrite<'_, A, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TxnRewrite")
            .field("source", &self.source())
            .finish_non_exhaustive()
    }
}

impl<A: Element> RefInner<'_, A> {
    pub(super) fn data(&self) -> &ArrayD<A> {
        match self {
            RefInner::Resource(data, _) => data,
            RefInner::Outside(version) => &version.data,
        }
    }
}

impl<A: Element, D: Dimension> Deref for TxnRef<'_, A, D> {
    type Target = ArrayRef<A, D>;
    fn deref(&self) -> &ArrayRef<A, D> {
        self.shown.get(self.inner.data())
    }
}

impl<A: Element, D: Dimension> Deref for TxnMut<'_, A, D> {
    type Target = ArrayRef<A, D>;
    fn deref(&self) -> &ArrayRef<A, D> {
        self.shown.get()
    }
}

impl<A: Element, D: Dimension> DerefMut for TxnMut<'_, A, D> {
    fn deref_mut(&mut self) -> &mut ArrayRef<A, D> {
        self.shown.get_mut()
    }
}

impl<A: Element, D: Dimension> fmt::Debug for TxnRef<'_, A, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.inner.data(), f)
    }
}

impl<A: Element, D: Dimension> fmt::Debug for TxnMut<'_, A, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.shown.get(), f)
    }
}
