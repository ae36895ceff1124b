//! Row operations inside an execution, on dense and paged resources alike: what a sparse
//! step (embeddings, a sparse linear model) does in a section.

use ndarray::{ArrayD, ArrayRef, Axis, Dimension};

use super::any_variable::private::Target;
use super::any_variable::AnyVariable;
use super::paged_slot::PagedSlot;
use super::slot::Init;
use super::Txn;
use crate::error::{check_has_rows, check_indices, check_rows, check_shape, Result};
use crate::kernel::{standard_elements, Delta, Op};
use crate::{Element, PagedVariable};

impl Txn<'_> {
    /// Adds `rows[i]` to row `indices[i]` (a repeated index receives each of its rows), as
    /// [`Variable::scatter_add`](crate::Variable::scatter_add) and
    /// [`PagedVariable::scatter_add`] do. On a dense variable it changes the working copy; on
    /// a paged one it is staged, and the commit copies only the pages the batch touched.
    ///
    /// ```
    /// use mvtensor::{CriticalSection, Error, PagedVariable, Variable};
    /// use ndarray::{arr0, Array2};
    ///
    /// // An embedding table and a step counter, updated together.
    /// let table = PagedVariable::new(Array2::<f32>::zeros((1000, 8)))?;
    /// let steps = Variable::new(arr0(0i64));
    /// let step = CriticalSection::builder().paged(&table).resource(&steps).build()?;
    /// step.execute(|tx| {
    ///     tx.scatter_scaled_add(&table, -0.5, &[3, 7], &Array2::ones((2, 8)))?;
    ///     tx.assign_add(&steps, &arr0(1))?;
    ///     assert_eq!(tx.gather(&table, &[3])?[[0, 0]], -0.5); // the execution sees its writes
    ///     Ok::<_, Error>(())
    /// })?;
    /// assert_eq!((table.read().row(7)?[[0]], steps.read()[[]]), (-0.5, 1));
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::NotInResourceSet`](crate::Error::NotInResourceSet);
    /// [`Error::IndexOutOfRange`](crate::Error::IndexOutOfRange) naming the first index past
    /// the rows, [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) unless `rows` has
    /// shape `[indices.len(), ..]` with the variable's other axes,
    /// [`Error::RankMismatch`](crate::Error::RankMismatch) for a 0-d variable: nothing is
    /// staged then; [`Error::Borrowed`](crate::Error::Borrowed) on a dense variable this
    /// execution holds a borrow of.
    pub fn scatter_add<A: Element, E: Dimension>(
        &self,
        variable: &impl AnyVariable<A>,
        indices: &[usize],
        rows: &ArrayRef<A, E>,
    ) -> Result<()> {
        self.scatter(variable.target(), indices, rows, Op::Add)
    }

    /// `row += alpha * rows[i]` for every `i`: a sparse SGD step.
    ///
    /// # Errors
    /// As for [`scatter_add`](Self::scatter_add).
    pub fn scatter_scaled_add<A: Element, E: Dimension>(
        &self,
        variable: &impl AnyVariable<A>,
        alpha: A,
        indices: &[usize],
        rows: &ArrayRef<A, E>,
    ) -> Result<()> {
        self.scatter(variable.target(), indices, rows, Op::Scaled(alpha))
    }

    /// Sets row `indices[i]` to `rows[i]`; where an index repeats, its last row wins.
    ///
    /// # Errors
    /// As for [`scatter_add`](Self::scatter_add).
    pub fn scatter_update<A: Element, E: Dimension>(
        &self,
        variable: &impl AnyVariable<A>,
        indices: &[usize],
        rows: &ArrayRef<A, E>,
    ) -> Result<()> {
        self.scatter(variable.target(), indices, rows, Op::Assign)
    }

    /// The rows `indices` (shape `[indices.len(), ..]`) as this execution sees them: with
    /// its own writes, and those of the executions before it in its batch. A variable outside
    /// the resource set is read as it is now (a paged one afresh at each call).
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`](crate::Error::IndexOutOfRange);
    /// [`Error::RankMismatch`](crate::Error::RankMismatch) for a 0-d variable;
    /// [`Error::Borrowed`](crate::Error::Borrowed) while this execution holds a `write` of a
    /// dense one.
    pub fn gather<A: Element>(
        &self,
        variable: &impl AnyVariable<A>,
        indices: &[usize],
    ) -> Result<ArrayD<A>> {
        match variable.target() {
            Target::Dense(variable) => {
                let value = self.read(variable)?;
                check_has_rows(variable.name(), value.shape())?;
                check_indices(variable.name(), value.shape()[0], indices)?;
                Ok(value.select(Axis(0), indices))
            }
            Target::Paged(variable) => {
                match self.slot_as::<PagedSlot<A>>(variable.inner.id, variable.name()) {
                    Ok(slot) => slot.gather(indices),
                    Err(_) => variable.gather(indices),
                }
            }
        }
    }

    /// Stages `value` as the paged variable's whole new value (what
    /// [`Store::restore`](crate::Store::restore) and [`assign`](Self::assign) do).
    ///
    /// # Errors
    /// [`Error::NotInResourceSet`](crate::Error::NotInResourceSet),
    /// [`Error::ShapeMismatch`](crate::Error::ShapeMismatch): nothing is staged then.
    pub(crate) fn assign_paged<A: Element, E: Dimension>(
        &self,
        variable: &PagedVariable<A>,
        value: &ArrayRef<A, E>,
    ) -> Result<()> {
        let data = standard_elements(value);
        self.stage_paged(variable, Delta::dense(value.shape(), &data, Op::Assign))
    }

    /// Applies a checked-on-arrival delta: to a dense variable's working copy (its slot
    /// checks the shape or rows), or staged for a paged one once its shape or rows fit.
    pub(super) fn write_delta<A: Element>(
        &self,
        target: Target<'_, A>,
        delta: Delta<'_, A>,
    ) -> Result<()> {
        match target {
            Target::Dense(variable) => {
                let slot = self.slot(variable)?;
                if delta.rows.is_some_and(<[usize]>::is_empty) {
                    // No row: checked against what the execution sees, and no working copy
                    // (a copy of the whole tensor, committed as a version, for nothing).
                    let (now, _borrow) = slot.read(self.section())?;
                    return delta.check(variable.name(), now.shape());
                }
                slot.write(self.section(), Init::Delta(delta)).map(drop)
            }
            Target::Paged(variable) => self.stage_paged(variable, delta),
        }
    }

    /// Stages a delta of a paged variable, once its shape (a dense delta) or its rows fit.
    fn stage_paged<A: Element>(
        &self,
        variable: &PagedVariable<A>,
        delta: Delta<'_, A>,
    ) -> Result<()> {
        let layout = &variable.inner.layout;
        let slot = self.slot_as::<PagedSlot<A>>(variable.inner.id, &layout.name)?;
        match delta.rows {
            Some(indices) => check_rows(&layout.name, &layout.shape, indices, delta.shape)?,
            None => check_shape(&layout.name, &layout.shape, delta.shape)?,
        }
        if delta.rows.is_some_and(<[usize]>::is_empty) {
            return Ok(()); // no row: nothing to stage (as the plain scatters)
        }
        slot.stage(delta);
        Ok(())
    }

    fn scatter<A: Element, E: Dimension>(
        &self,
        target: Target<'_, A>,
        indices: &[usize],
        rows: &ArrayRef<A, E>,
        op: Op<A>,
    ) -> Result<()> {
        let data = standard_elements(rows);
        let delta = Delta {
            shape: rows.shape(),
            data: &data,
            op,
            rows: Some(indices),
        };
        self.write_delta(target, delta)
    }
}
