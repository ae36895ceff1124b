//! [`read_all`]: several variables read at one point of the commit order.
//!
//! A trainer that reads its parameters one `read()` at a time may see the weights of one
//! optimizer step and the bias of the next. `read_all` takes the store snapshot's cut
//! (register in the horizon, tick the clock, pick each variable's newest version committed
//! by then: [`StoreSnapshot`](crate::StoreSnapshot)) over just the variables it is given, and
//! hands back typed, reference-counted snapshots: no lookup by name, no dtype check at run
//! time, no clone of a tensor.

use ndarray::Dimension;

use crate::head::At;
use crate::store::snapshot::{at_one_point, unlinked};
use crate::sync::epoch;
use crate::{Element, OwnedSnapshot, Variable};

/// The current values of several variables, all as of one point of the commit order: never
/// half of a critical-section execution, never a write that committed after another one it
/// misses. Never waits for a writer. Takes a tuple of up to 8 variables of any element types
/// and dimensions, an array or a slice of variables of one type, and returns their
/// [`OwnedSnapshot`]s in the same shape.
///
/// ```
/// use mvtensor::{read_all, CriticalSection, Error, Variable};
/// use ndarray::{arr1, Array1};
///
/// let (w, b, step) = (
///     Variable::new(Array1::<f32>::zeros(3)),
///     Variable::new(Array1::<f32>::zeros(1)),
///     Variable::scalar(0i64),
/// );
/// let sgd = CriticalSection::builder().resources([&w, &b]).resource(&step).build()?;
/// sgd.execute(|tx| {
///     tx.scaled_add(&w, -0.1, &arr1(&[1.0, 2.0, 3.0]))?;
///     tx.scaled_add(&b, -0.1, &arr1(&[1.0]))?;
///     tx.write(&step)?[()] += 1;
///     Ok::<_, Error>(())
/// })?;
/// let (w, b, step) = read_all((&w, &b, &step)); // one step's w, b and count, never mixed
/// assert_eq!((w[0], b[0], step[()]), (-0.1, -0.1, 1));
/// # Ok::<(), Error>(())
/// ```
#[must_use = "a read has no effect"]
pub fn read_all<S: ReadSet>(set: S) -> S::Snapshots {
    at_one_point(|at, guard| set.capture(&private::Cut { at, guard })).1
}

/// What [`read_all`] reads: `&Variable`s in a tuple (up to 8), an array or a slice.
/// Sealed: implemented here for those shapes only.
pub trait ReadSet: private::Sealed {
    /// The snapshots, in the same shape as the set.
    type Snapshots;
    #[doc(hidden)]
    fn capture(&self, cut: &private::Cut<'_>) -> Option<Self::Snapshots>;
}

mod private {
    use crate::sync::epoch;

    pub trait Sealed {}

    /// The clock value of a cut, and the pin it is taken under.
    #[derive(Debug)]
    pub struct Cut<'g> {
        pub(crate) at: u64,
        pub(crate) guard: &'g epoch::Guard,
    }
}

impl<A: Element, D: Dimension> private::Sealed for &Variable<A, D> {}

impl<A: Element, D: Dimension> ReadSet for &Variable<A, D> {
    type Snapshots = OwnedSnapshot<A, D>;
    fn capture(&self, cut: &private::Cut<'_>) -> Option<OwnedSnapshot<A, D>> {
        capture(self, cut.at, cut.guard)
    }
}

fn capture<A: Element, D: Dimension>(
    variable: &Variable<A, D>,
    at: u64,
    guard: &epoch::Guard,
) -> Option<OwnedSnapshot<A, D>> {
    match variable.inner.head.visible_at(at, guard) {
        At::Version(version) => Some(OwnedSnapshot::new(version.to_ref())),
        // A variable the caller holds was created before the clock tick.
        At::NotYetCreated | At::Unlinked => unlinked(variable.name()),
    }
}

impl<A: Element, D: Dimension, const N: usize> private::Sealed for [&Variable<A, D>; N] {}

impl<A: Element, D: Dimension, const N: usize> ReadSet for [&Variable<A, D>; N] {
    type Snapshots = [OwnedSnapshot<A, D>; N];
    fn capture(&self, cut: &private::Cut<'_>) -> Option<Self::Snapshots> {
        let all: Vec<_> = self.iter().map(|v| v.capture(cut)).collect::<Option<_>>()?;
        all.try_into().ok()
    }
}

impl<A: Element, D: Dimension> private::Sealed for &[Variable<A, D>] {}

impl<A: Element, D: Dimension> ReadSet for &[Variable<A, D>] {
    type Snapshots = Vec<OwnedSnapshot<A, D>>;
    fn capture(&self, cut: &private::Cut<'_>) -> Option<Self::Snapshots> {
        self.iter().map(|v| (&v).capture(cut)).collect()
    }
}

macro_rules! tuple {
    ($($name:ident),+) => {
        impl<$($name: ReadSet),+> private::Sealed for ($($name,)+) {}

        impl<$($name: ReadSet),+> ReadSet for ($($name,)+) {
            type Snapshots = ($($name::Snapshots,)+);
            #[allow(non_snake_case)]
            fn capture(&self, cut: &private::Cut<'_>) -> Option<Self::Snapshots> {
                let ($($name,)+) = self;
                Some(($($name.capture(cut)?,)+))
            }
        }
    };
}

tuples_up_to_eight!(tuple);
