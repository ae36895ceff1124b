//! Scalars: 0-d variables (`Variable<A, Ix0>`) for step counters, learning rates, metrics.
//!
//! A scalar write builds its value in a pooled 0-d version like any write, so it allocates
//! nothing: no `arr0` per call, no closure returning an array.

use ndarray::{arr0, Ix0};

use crate::{Element, Result, Variable};

impl<A: Element> Variable<A, Ix0> {
    /// A 0-d variable holding `value` as version 0.
    ///
    /// ```
    /// use mvtensor::Variable;
    ///
    /// let step = Variable::scalar(0i64);
    /// std::thread::scope(|s| {
    ///     for _ in 0..4 {
    ///         s.spawn(|| {
    ///             for _ in 0..100 {
    ///                 step.fetch_add(1)?;
    ///             }
    ///             Ok::<(), mvtensor::Error>(())
    ///         });
    ///     }
    /// });
    /// assert_eq!(step.get(), 400);
    /// ```
    pub fn scalar(value: A) -> Self {
        Self::new(arr0(value))
    }

    /// The current value, wait-free.
    #[must_use = "a read has no effect"]
    pub fn get(&self) -> A {
        *self.read().first().expect("a 0-d array holds one value")
    }

    /// Sets the value. Returns the new version number.
    ///
    /// # Errors
    /// [`Error::Reentrant`](crate::Error::Reentrant) from inside an execution of a critical
    /// section that holds the variable (write it through the `Txn`).
    pub fn set(&self, value: A) -> Result<u64> {
        self.write_scalar(|_| value).map(|(_, version)| version)
    }

    /// Adds `delta` (wrapping for integers) and returns the value it replaced: linearizable,
    /// so threads sharing a counter each see a different value.
    ///
    /// # Errors
    /// As for [`set`](Self::set).
    pub fn fetch_add(&self, delta: A) -> Result<A> {
        self.write_scalar(|old| A::add(old, delta))
            .map(|(old, _)| old)
    }

    /// Writes `f(old)` into a pooled 0-d version; returns `old` and the new version number.
    fn write_scalar(&self, mut f: impl FnMut(A) -> A) -> Result<(A, u64)> {
        self.erased().write_value(|cur, next| {
            let old = *cur.first().expect("a 0-d array holds one value");
            *next.first_mut().expect("a 0-d array holds one value") = f(old);
            old
        })
    }
}
