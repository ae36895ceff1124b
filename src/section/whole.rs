//! Whole-value writes inside an execution (`assign`, `assign_add`, `assign_sub`,
//! `scaled_add`, `update`), on dense and paged resources alike: what an optimizer step or a
//! decay does in a section. Row writes are in `rows.rs`.

use ndarray::{Array, ArrayRef, Dimension};

use super::any_variable::private::Target;
use super::any_variable::AnyVariable;
use super::slot::Init;
use super::Txn;
use crate::error::{same_shape, Result};
use crate::kernel::{self, standard_elements, Delta, Op};
use crate::{Element, Variable};

impl Txn<'_> {
    /// Sets the variable's value to `value` (copied into the working copy, or moved in if
    /// a dynamic-shape variable changes shape). On a [`PagedVariable`](crate::PagedVariable)
    /// it is staged, and the commit writes every page.
    ///
    /// # Errors
    /// [`Error::NotInResourceSet`](crate::Error::NotInResourceSet);
    /// [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) unless the shapes match (or the
    /// variable has a dynamic shape); [`Error::Borrowed`](crate::Error::Borrowed) on a dense
    /// variable this execution holds a borrow of.
    pub fn assign<A: Element, E: Dimension>(
        &self,
        variable: &impl AnyVariable<A>,
        value: Array<A, E>,
    ) -> Result<()> {
        let variable = match variable.target() {
            Target::Dense(variable) => variable,
            Target::Paged(variable) => return self.assign_paged(variable, &value),
        };
        let slot = self.slot(variable)?;
        variable.check_new_shape(value.shape())?;
        let (data, _borrow) = slot.write(self.section(), Init::Overwrite)?;
        if same_shape(data.shape(), value.shape()) {
            kernel::copy(&value.into_dyn(), data); // one pass, whatever `value`'s layout
        } else {
            *data = kernel::standard(value.into_dyn());
        }
        Ok(())
    }

    /// Adds `delta` to the working copy (in one sweep with the copy, on the first write).
    /// On a [`PagedVariable`](crate::PagedVariable) it is staged, and the commit copies
    /// every page with the add.
    ///
    /// ```
    /// use mvtensor::{CriticalSection, Error, PagedVariable, Variable};
    /// use ndarray::{arr0, Array2};
    ///
    /// // A whole-table decay and a step counter, together (a dense write of a paged table).
    /// let table = PagedVariable::new(Array2::<f32>::ones((100, 4)))?;
    /// let steps = Variable::new(arr0(0i64));
    /// let step = CriticalSection::builder().paged(&table).resource(&steps).build()?;
    /// step.execute(|tx| {
    ///     tx.scaled_add(&table, -0.5, &table.read().to_array())?;
    ///     tx.assign_add(&steps, &arr0(1))
    /// })?;
    /// assert_eq!((table.read().row(99)?[[0]], steps.read()[[]]), (0.5, 1));
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::NotInResourceSet`](crate::Error::NotInResourceSet);
    /// [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) if `delta` does not have exactly
    /// the current shape; [`Error::Borrowed`](crate::Error::Borrowed) on a dense variable this
    /// execution holds a borrow of.
    pub fn assign_add<A: Element, E: Dimension>(
        &self,
        variable: &impl AnyVariable<A>,
        delta: &ArrayRef<A, E>,
    ) -> Result<()> {
        self.add(variable.target(), delta, Op::Add)
    }

    /// Subtracts `delta` from the working copy.
    ///
    /// # Errors
    /// As for [`assign_add`](Self::assign_add).
    pub fn assign_sub<A: Element, E: Dimension>(
        &self,
        variable: &impl AnyVariable<A>,
        delta: &ArrayRef<A, E>,
    ) -> Result<()> {
        self.add(variable.target(), delta, Op::Sub)
    }

    /// `current += alpha * x` (ndarray's `scaled_add`, same argument order and arithmetic),
    /// in one sweep with the copy on the first write, in place after.
    ///
    /// # Errors
    /// As for [`assign_add`](Self::assign_add).
    pub fn scaled_add<A: Element, E: Dimension>(
        &self,
        variable: &impl AnyVariable<A>,
        alpha: A,
        x: &ArrayRef<A, E>,
    ) -> Result<()> {
        self.add(variable.target(), x, Op::Scaled(alpha))
    }

    /// Sets the value to `f(current)`. Unlike [`Variable::update`], `f` runs exactly once.
    ///
    /// # Errors
    /// As for [`assign`](Self::assign).
    pub fn update<A: Element, D: Dimension, E: Dimension>(
        &self,
        variable: &Variable<A, D>,
        f: impl FnOnce(&ArrayRef<A, D>) -> Array<A, E>,
    ) -> Result<()> {
        self.slot(variable.erased())?;
        let value = f(&*self.read(variable)?);
        self.assign(variable, value)
    }

    fn add<A: Element, E: Dimension>(
        &self,
        target: Target<'_, A>,
        delta: &ArrayRef<A, E>,
        op: Op<A>,
    ) -> Result<()> {
        let data = standard_elements(delta);
        self.write_delta(target, Delta::dense(delta.shape(), &data, op))
    }
}
