//! Row operations: the first axis of a variable is its rows (an embedding table, the weights
//! of a sparse linear model), and a sparse update names the rows it changes.
//!
//! Row deltas are combined with concurrent writes of the same variable, dense or sparse, and
//! applied in arrival order. A variable is still one dense version here, so a row update
//! copies the whole tensor, as any write does; paged variables
//! ([`PagedVariable`](crate::PagedVariable)) copy only the pages they touch.

use ndarray::{Array, ArrayRef, Axis, Dimension, RemoveAxis};

use crate::error::{check_has_rows, check_indices, Result};
use crate::kernel::{standard_elements, Delta, Op};
use crate::running;
use crate::{Element, Variable};

impl<A: Element, D: Dimension> Variable<A, D> {
    /// Adds `rows[i]` to row `indices[i]`, for every `i` (TensorFlow's `scatter_add`): a
    /// repeated index receives each of its rows. `rows` has shape `[indices.len(), ..]`, the
    /// rest being the variable's other axes. Returns the number of the version that includes
    /// it; with no rows, nothing is written and that is the current version.
    ///
    /// ```
    /// use mvtensor::Variable;
    /// use ndarray::{arr2, Array2};
    ///
    /// let table = Variable::new(Array2::<f32>::zeros((4, 2)));
    /// table.scatter_add(&[3, 0, 3], &arr2(&[[1.0, 1.0], [2.0, 2.0], [5.0, 5.0]]))?;
    /// assert_eq!(*table.read(), arr2(&[[2.0, 2.0], [0.0, 0.0], [0.0, 0.0], [6.0, 6.0]]));
    /// assert_eq!(table.gather(&[3])?, arr2(&[[6.0, 6.0]]));
    /// # Ok::<(), mvtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`](crate::Error::IndexOutOfRange) naming the first index past
    /// the first axis; [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) if `rows` does
    /// not have the shape above; [`Error::RankMismatch`](crate::Error::RankMismatch) for a 0-d
    /// variable. Nothing is applied then.
    pub fn scatter_add<E: Dimension>(
        &self,
        indices: &[usize],
        rows: &ArrayRef<A, E>,
    ) -> Result<u64> {
        self.scatter(indices, rows, Op::Add)
    }

    /// Like [`scatter_add`](Self::scatter_add), times `alpha`: `row += alpha * rows[i]` (a
    /// sparse SGD step is `table.scatter_scaled_add(-lr, &ids, &grads)`).
    ///
    /// # Errors
    /// As for [`scatter_add`](Self::scatter_add).
    pub fn scatter_scaled_add<E: Dimension>(
        &self,
        alpha: A,
        indices: &[usize],
        rows: &ArrayRef<A, E>,
    ) -> Result<u64> {
        self.scatter(indices, rows, Op::Scaled(alpha))
    }

    /// Sets row `indices[i]` to `rows[i]`, for every `i`; where an index repeats, its last row
    /// wins.
    ///
    /// # Errors
    /// As for [`scatter_add`](Self::scatter_add).
    pub fn scatter_update<E: Dimension>(
        &self,
        indices: &[usize],
        rows: &ArrayRef<A, E>,
    ) -> Result<u64> {
        self.scatter(indices, rows, Op::Assign)
    }

    fn scatter<E: Dimension>(
        &self,
        indices: &[usize],
        rows: &ArrayRef<A, E>,
        op: Op<A>,
    ) -> Result<u64> {
        let data = standard_elements(rows);
        let delta = Delta {
            shape: rows.shape(),
            data: &data,
            op,
            rows: Some(indices),
        };
        if indices.is_empty() && !running::inside() {
            // No row: checked as any write, and no version. (An empty batch, at the end of
            // an epoch or after filtering, would otherwise copy the whole tensor and make a
            // version that a background checkpointer saves as a change.) Inside an
            // execution or an update closure it goes the usual way, which may refuse it.
            let now = self.read();
            delta.check(self.name(), now.shape())?;
            return Ok(now.version());
        }
        self.erased().apply_delta(delta)
    }
}

impl<A: Element, D: RemoveAxis> Variable<A, D> {
    /// The rows `indices` of the current value, in that order (repeats included), as one
    /// array whose first axis has `indices.len()` rows. Wait-free, like [`read`](Self::read).
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`](crate::Error::IndexOutOfRange);
    /// [`Error::RankMismatch`](crate::Error::RankMismatch) for a 0-d variable.
    pub fn gather(&self, indices: &[usize]) -> Result<Array<A, D>> {
        let snapshot = self.read();
        check_has_rows(self.name(), snapshot.shape())?;
        check_indices(self.name(), snapshot.shape()[0], indices)?;
        Ok(snapshot.select(Axis(0), indices))
    }
}
