//! A used tensor, typed: its dtype's element type, its values as an array of it, and the
//! variable it becomes (a load) or is assigned to (a restore).

use ndarray::{ArrayD, IxDyn};
use safetensors::tensor::Dtype;

use super::parse::{Raw, TREE_PER_PAGE};
use super::{error, misfit};
use crate::error::{check_shape, Error, Result};
use crate::{
    CriticalSectionBuilder, Element, PagedVariable, Private, Store, Txn, Variable, VariableKind,
};

/// Runs `$body` with the type `$A` set to the element type of the dtype `$dtype`, or
/// `$unsupported` with `$other` bound to a dtype mvtensor has no element type for.
macro_rules! with_element {
    ($dtype:expr, $A:ident => $body:expr, $other:ident => $unsupported:expr) => {
        match $dtype {
            ::safetensors::tensor::Dtype::F32 => {
                type $A = f32;
                $body
            }
            ::safetensors::tensor::Dtype::F64 => {
                type $A = f64;
                $body
            }
            ::safetensors::tensor::Dtype::I32 => {
                type $A = i32;
                $body
            }
            ::safetensors::tensor::Dtype::I64 => {
                type $A = i64;
                $body
            }
            #[cfg(feature = "half")]
            ::safetensors::tensor::Dtype::F16 => {
                type $A = half::f16;
                $body
            }
            #[cfg(feature = "half")]
            ::safetensors::tensor::Dtype::BF16 => {
                type $A = half::bf16;
                $body
            }
            $other => $unsupported,
        }
    };
}

/// A tensor whose dtype mvtensor has no element type for, as an error of `file`.
fn unsupported(file: &str, raw: &Raw<'_>, dtype: Dtype) -> Error {
    error(
        file,
        format!(
            "tensor `{}` holds {dtype:?}, which has no mvtensor element type",
            raw.name
        ),
    )
}

/// Refuses a tensor whose dtype mvtensor has no element type for.
pub(super) fn check_supported(file: &str, raw: &Raw<'_>) -> Result<()> {
    with_element!(
        raw.dtype,
        A => {
            debug_assert_eq!(std::mem::size_of::<A>() * 8, raw.dtype.bitsize());
            Ok(())
        },
        other => Err(unsupported(file, raw, other))
    )
}

/// The tensor's bytes as an array of `A` (little-endian, in standard order).
fn array<A: Element>(raw: &Raw<'_>) -> Result<ArrayD<A>> {
    let values = raw
        .data
        .chunks_exact(std::mem::size_of::<A>())
        .map(A::from_le_slice)
        .collect();
    // `parse` checked the shape against the bytes and ndarray's bound.
    ArrayD::from_shape_vec(IxDyn(&raw.shape), values).map_err(|e| Error::InvalidValue {
        variable: raw.name.clone(),
        problem: e.to_string(),
    })
}

/// A tensor of a checkpoint read into its values, to become a variable of a new store.
pub(super) trait Loaded: Send {
    /// Registers it in `store` under its name.
    fn register(self: Box<Self>, store: &Store) -> Result<()>;
}

/// A dense variable's value, or a paged one's and its rows per page.
struct Value<A: Element> {
    name: String,
    value: ArrayD<A>,
    rows_per_page: Option<usize>,
}

impl<A: Element> Loaded for Value<A> {
    fn register(self: Box<Self>, store: &Store) -> Result<()> {
        match self.rows_per_page {
            None => store.variable(&self.name, self.value).map(drop),
            Some(rows) => store.register_paged(
                &PagedVariable::builder(self.value)
                    .name(self.name)
                    .rows_per_page(rows)
                    .build()?,
            ),
        }
    }
}

/// `raw`'s values, to become a variable: a paged one of `rows_per_page` rows a page if the
/// file says it was one, else a dense one.
pub(super) fn read(
    file: &str,
    raw: &Raw<'_>,
    rows_per_page: Option<usize>,
) -> Result<Box<dyn Loaded>> {
    with_element!(
        raw.dtype,
        A => {
            let value = array::<A>(raw).map_err(|e| error(file, e.to_string()))?;
            Ok(Box::new(Value {
                name: raw.name.clone(),
                value,
                rows_per_page,
            }))
        },
        other => Err(unsupported(file, raw, other))
    )
}

/// The variable a tensor of a checkpoint is restored into, checked to take it; its values
/// are not read yet.
pub(super) trait Target: Send {
    /// Bytes the restore allocates for it: the values, and a paged table's new pages.
    fn bytes_needed(&self, raw: &Raw<'_>) -> Option<usize>;
    /// Reads the tensor's values (as the variable's element type, checked by [`stage`]).
    fn read(self: Box<Self>, raw: &Raw<'_>) -> Result<Box<dyn Staged>>;
}

/// One tensor of a checkpoint with its values, ready to assign.
pub(super) trait Staged: Send {
    fn claim(&self, builder: CriticalSectionBuilder) -> CriticalSectionBuilder;
    fn assign(self: Box<Self>, tx: &Txn<'_>) -> Result<()>;
}

/// A variable of the store, dense or paged.
enum Checked<A: Element> {
    Dense(Variable<A>),
    Paged(PagedVariable<A>),
    Private(Private<A>),
}

impl<A: Element> Target for Checked<A> {
    fn bytes_needed(&self, raw: &Raw<'_>) -> Option<usize> {
        match self {
            Self::Dense(_) | Self::Private(_) => Some(raw.data.len()),
            Self::Paged(variable) => {
                let layout = &variable.inner.layout;
                // The commit's new table: every page replaced.
                let page = layout.page_len.checked_mul(std::mem::size_of::<A>())?;
                let each = page.checked_add(TREE_PER_PAGE)?;
                raw.data.len().checked_add(layout.pages.checked_mul(each)?)
            }
        }
    }
    fn read(self: Box<Self>, raw: &Raw<'_>) -> Result<Box<dyn Staged>> {
        let value = array(raw)?;
        Ok(match *self {
            Self::Dense(variable) => Box::new(Assign { variable, value }),
            Self::Paged(variable) => Box::new(AssignPaged { variable, value }),
            Self::Private(state) => Box::new(AssignPrivate { state, value }),
        })
    }
}

struct Assign<A: Element> {
    variable: Variable<A>,
    value: ArrayD<A>,
}

impl<A: Element> Staged for Assign<A> {
    fn claim(&self, builder: CriticalSectionBuilder) -> CriticalSectionBuilder {
        builder.resource(&self.variable)
    }
    fn assign(self: Box<Self>, tx: &Txn<'_>) -> Result<()> {
        tx.assign(&self.variable, self.value)
    }
}

/// A paged variable's new value: staged in the section as one dense assignment.
struct AssignPaged<A: Element> {
    variable: PagedVariable<A>,
    value: ArrayD<A>,
}

impl<A: Element> Staged for AssignPaged<A> {
    fn claim(&self, builder: CriticalSectionBuilder) -> CriticalSectionBuilder {
        builder.paged(&self.variable)
    }
    fn assign(self: Box<Self>, tx: &Txn<'_>) -> Result<()> {
        tx.assign_paged(&self.variable, &self.value)
    }
}

/// Private state's new value: set in place by the restore's execution, which takes the
/// state's ticket (so it lands between two executions of its section) without claiming it.
struct AssignPrivate<A: Element> {
    state: Private<A>,
    value: ArrayD<A>,
}

impl<A: Element> Staged for AssignPrivate<A> {
    fn claim(&self, builder: CriticalSectionBuilder) -> CriticalSectionBuilder {
        builder.private_unclaimed(&self.state)
    }
    fn assign(self: Box<Self>, tx: &Txn<'_>) -> Result<()> {
        tx.private_mut(&self.state)?.assign(&self.value);
        Ok(())
    }
}

/// The variable `raw` of `file` names in `store`, dense or paged, checked to take it (dtype,
/// shape, and the tensors a packed set holds, where both the file and the variable describe
/// them); its values are not read yet.
pub(super) fn stage(
    store: &Store,
    file: &str,
    raw: &Raw<'_>,
    layout: Option<&str>,
) -> Result<Box<dyn Target>> {
    with_element!(
        raw.dtype,
        A => stage_typed::<A>(store, raw, layout).map_err(|e| misfit(file, e)),
        other => Err(unsupported(file, raw, other))
    )
}

fn stage_typed<A: Element>(
    store: &Store,
    raw: &Raw<'_>,
    layout: Option<&str>,
) -> Result<Box<dyn Target>> {
    let name = &*raw.name;
    match store.get::<A, IxDyn>(name) {
        Ok(variable) => {
            // Before the shape: of another length or not, the layouts say what differs.
            if let (Some(file), Some(ours)) = (layout, variable.inner.layout.as_deref()) {
                if file != ours {
                    return Err(Error::InvalidValue {
                        variable: name.to_owned(),
                        problem: format!(
                            "the file's tensor packs {file}, the variable packs {ours}: \
                             another model's layout"
                        ),
                    });
                }
            }
            variable.check_new_shape(&raw.shape)?;
            Ok(Box::new(Checked::Dense(variable)))
        }
        Err(Error::KindMismatch {
            found: VariableKind::Private,
            ..
        }) => {
            let state = store.get_private::<A, IxDyn>(name)?;
            check_shape(name, state.shape(), &raw.shape)?;
            Ok(Box::new(Checked::Private(state)))
        }
        Err(Error::KindMismatch { .. }) => {
            let variable = store.get_paged::<A>(name)?;
            check_shape(name, variable.shape(), &raw.shape)?;
            Ok(Box::new(Checked::Paged(variable)))
        }
        Err(other) => Err(other),
    }
}
