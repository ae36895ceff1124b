//! Typed dimensions over untyped versions.
//!
//! Versions always hold an `ArrayD` (one representation for the store's mixed registry, the
//! sections' slots and the kernel). A handle such as `Variable<f32, Ix2>` only promises the
//! rank: the variable checks it on every write that could change it, so that a view of any
//! of its versions as `D` cannot fail. What a typed handle adds per read is building that
//! view (its shape, with standard strides: a version is always in standard layout); a
//! dynamic-dimensional one (`IxDyn`, the default) builds nothing and shows the version's
//! own array.

use ndarray::{ArrayD, ArrayRef, ArrayView, ArrayViewMut, Dimension, IxDyn};

/// Whether `D` is `IxDyn`, the dimension versions are stored with. `Dimension` is sealed,
/// and `IxDyn` is the one implementation without a static rank.
pub(crate) fn is_dyn<D: Dimension>() -> bool {
    D::NDIM.is_none()
}

/// The rank every value of a `D` handle has: `None` for `IxDyn`.
pub(crate) fn rank<D: Dimension>() -> Option<usize> {
    D::NDIM
}

/// `shape` as a `D`, whose rank the caller knows it has.
fn typed<D: Dimension>(shape: &[usize]) -> D {
    let mut dim = D::zeros(shape.len());
    dim.slice_mut().copy_from_slice(shape);
    dim
}

/// `data` as a view of dimension `D`.
///
/// The caller knows the rank fits: it is checked when a typed handle is made and on every
/// write that could change it (`Variable::check_new_shape`).
pub(crate) fn view<A, D: Dimension>(data: &ArrayD<A>) -> ArrayView<'_, A, D> {
    // Versions are in standard layout: the typed shape over the same elements. (ndarray's
    // `view().into_dimensionality()` clones the dynamic shape and strides and converts
    // both, which costs several times an untyped read.)
    let dim = typed::<D>(data.shape());
    if let Some(elements) = data.as_slice() {
        // SAFETY: `elements` is `data` in standard layout (`as_slice` checked it), so `dim`
        // (its shape) with standard strides covers exactly its elements; the view borrows
        // `data`.
        return unsafe { ArrayView::from_shape_ptr(dim, elements.as_ptr()) };
    }
    data.view()
        .into_dimensionality()
        .expect("a typed handle's rank is checked on every write")
}

/// How a [`TxnMut`](crate::TxnMut) shows a working copy as `&mut ArrayRef<A, D>`: always a
/// view of it, `IxDyn` included. `&mut ArrayRef` reaches ndarray's layout methods
/// (`invert_axis`, `swap_axes`, `collapse_axis`, `slice_collapse`): on a view they change the
/// view, never the working copy, which stays in standard layout with its variable's shape, as
/// every version must (the kernel and readers take it as a slice). Showing an `IxDyn` working
/// copy itself would save building the view (a small part of a tiny execution) but let safe
/// code publish a version in another layout or
/// shape (`tests/txn.rs::layout_methods_on_a_working_copy_change_only_the_view`).
pub(crate) struct ShownMut<'a, A, D: Dimension>(ArrayViewMut<'a, A, D>);

impl<'a, A, D: Dimension> ShownMut<'a, A, D> {
    pub(crate) fn new(data: &'a mut ArrayD<A>) -> Self {
        if is_dyn::<D>() {
            // The array's own shape and strides, copied (no layout check, no conversion).
            return Self(
                data.view_mut()
                    .into_dimensionality()
                    .expect("IxDyn to IxDyn"),
            );
        }
        let dim = typed::<D>(data.shape());
        if let Some(elements) = data.as_slice_mut() {
            // SAFETY: as in `view`, and the view borrows `data` mutably.
            return Self(unsafe { ArrayViewMut::from_shape_ptr(dim, elements.as_mut_ptr()) });
        }
        Self(
            data.view_mut()
                .into_dimensionality()
                .expect("a typed handle's rank is checked on every write"),
        )
    }

    pub(crate) fn get(&self) -> &ArrayRef<A, D> {
        &self.0
    }

    pub(crate) fn get_mut(&mut self) -> &mut ArrayRef<A, D> {
        &mut self.0
    }
}

/// How a snapshot shows a version's tensor as `&ArrayRef<A, D>`.
pub(crate) enum Shown<A: 'static, D: Dimension> {
    /// `D` is `IxDyn`: the version's own array is shown, nothing is built.
    Dyn,
    /// A typed view of the version's array. The `'static` is a lie told to the type system:
    /// the view borrows the version, which its holder keeps alive, and it never leaves the
    /// holder (only `&ArrayRef` borrows of it do, bounded by the holder's own borrow).
    Typed(ArrayView<'static, A, D>),
}

impl<A: 'static, D: Dimension> Shown<A, D> {
    /// # Safety
    /// `data` outlives the returned value (its holder keeps the version alive).
    pub(crate) unsafe fn new(data: &ArrayD<A>) -> Self {
        if is_dyn::<D>() {
            return Self::Dyn;
        }
        let view = view::<A, D>(data);
        // SAFETY: the caller's contract; the view stays private to its holder.
        Self::Typed(unsafe {
            std::mem::transmute::<ArrayView<'_, A, D>, ArrayView<'static, A, D>>(view)
        })
    }

    /// The tensor as `D`; `data` is the version's array this was made from.
    pub(crate) fn get<'a>(&'a self, data: &'a ArrayD<A>) -> &'a ArrayRef<A, D> {
        match self {
            // SAFETY: `Dyn` is only made when `D` is `IxDyn` (`new`).
            Self::Dyn => unsafe { same_dyn(data) },
            Self::Typed(view) => view,
        }
    }
}

/// Calls `f` with `data` as `D`: the array itself for `IxDyn`, else a view built for it.
pub(crate) fn with_typed<A, D: Dimension, R>(
    data: &ArrayD<A>,
    f: impl FnOnce(&ArrayRef<A, D>) -> R,
) -> R {
    if is_dyn::<D>() {
        // SAFETY: `D` is `IxDyn`, just checked.
        f(unsafe { same_dyn(data) })
    } else {
        f(&view::<A, D>(data))
    }
}

/// `data` as `&ArrayRef<A, D>`, with no view built.
///
/// # Safety
/// `D` is `IxDyn` ([`is_dyn`]), so that the two types are one type.
unsafe fn same_dyn<A, D: Dimension>(data: &ArrayD<A>) -> &ArrayRef<A, D> {
    let dynamic: &ArrayRef<A, IxDyn> = data;
    // SAFETY: the caller's contract; the cast keeps the pointer's slice metadata.
    unsafe { &*(std::ptr::from_ref(dynamic) as *const ArrayRef<A, D>) }
}
