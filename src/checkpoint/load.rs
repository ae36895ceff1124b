//! Reading a checkpoint: into a new store, or restored into a running one in one commit.

use std::collections::HashSet;
use std::path::Path;

use ndarray::{ArrayD, IxDyn};
use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;

use super::{checkpoint_error, LAYOUT, PAGED};
use crate::error::{check_shape, Error, Result};
use crate::{
    CriticalSection, CriticalSectionBuilder, Element, PagedVariable, Store, Txn, Variable,
};

/// What [`Store::restore`] does with a variable that one side has and the other lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Missing {
    /// Refuse: the restore is an error and changes nothing.
    #[default]
    Error,
    /// Go on without it (a tensor of the file the store lacks is ignored; a variable of the
    /// store the file lacks keeps its value).
    Skip,
}

/// Options of [`Store::restore`]. The default refuses both kinds of mismatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Restore {
    /// A tensor of the file with no variable of that name in the store.
    pub missing_in_store: Missing,
    /// A variable of the store with no tensor of that name in the file.
    pub missing_in_file: Missing,
}

impl Restore {
    /// Restores what both have and leaves the rest alone. Lenient about *names* only: a
    /// tensor whose dtype, shape or packed layout does not fit the variable of its name is
    /// still an error, and nothing is applied (a misfit value is never half-restored).
    pub fn lenient() -> Self {
        Self {
            missing_in_store: Missing::Skip,
            missing_in_file: Missing::Skip,
        }
    }

    /// Sets what a tensor of the file with no variable in the store means.
    pub fn missing_in_store(mut self, missing: Missing) -> Self {
        self.missing_in_store = missing;
        self
    }

    /// Sets what a variable of the store with no tensor in the file means.
    pub fn missing_in_file(mut self, missing: Missing) -> Self {
        self.missing_in_file = missing;
        self
    }
}

impl Store {
    /// Reads the checkpoint at `path` into a new store: one fixed-shape variable per tensor,
    /// under the tensor's name, at version 0; a tensor saved from a paged variable
    /// (`mvtensor.paged.<name>` in the metadata) becomes a paged variable of the same page
    /// size.
    ///
    /// # Errors
    /// [`Error::Checkpoint`] naming the file and the problem: unreadable, malformed, or a
    /// dtype mvtensor has no element type for.
    pub fn load(path: impl AsRef<Path>) -> Result<Store> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| checkpoint_error(path, e.to_string()))?;
        let file = path.display().to_string();
        let tensors = parse(&bytes, &file)?;
        drop(bytes); // before the variables are made: a file's worth less at the peak
        Self::register_all(tensors, &file)
    }

    /// As [`load`](Self::load), from the bytes of a checkpoint already in memory.
    ///
    /// # Errors
    /// As for [`load`](Self::load), naming the file `<bytes>`.
    pub fn load_bytes(bytes: &[u8]) -> Result<Store> {
        Self::load_from(bytes, "<bytes>")
    }

    fn load_from(bytes: &[u8], file: &str) -> Result<Store> {
        Self::register_all(parse(bytes, file)?, file)
    }

    /// A store of `tensors`, each a variable under its name.
    fn register_all(tensors: Vec<Parsed>, file: &str) -> Result<Store> {
        let store = Store::new();
        for t in tensors {
            let (name, rows) = (t.name, t.rows_per_page);
            dispatch!(t.values, values => load_one(&store, &name, values, rows))
                .map_err(|e| error(file, e.to_string()))?;
        }
        Ok(store)
    }

    /// Sets every variable of the store that the checkpoint at `path` names to the file's
    /// value, **in one commit**: a store snapshot (or `read_all`, or a section) sees all of
    /// the checkpoint or none of it. The commit goes through the variables' queues like a
    /// critical section's (one that shares its resources), so concurrent writers are ordered
    /// before or after it, never interleaved. Returns how many variables were restored.
    ///
    /// The whole file is read and checked before anything is applied.
    ///
    /// # Errors
    /// [`Error::Checkpoint`] naming the file and the problem: unreadable or malformed, a
    /// tensor whose dtype or shape does not fit the variable of its name, or a name missing
    /// on either side where `options` refuse it; [`Error::ResourceConflict`] if a variable
    /// belongs to a section that holds it exclusively (restore through that section instead).
    /// Nothing is applied then.
    pub fn restore(&self, path: impl AsRef<Path>, options: Restore) -> Result<usize> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| checkpoint_error(path, e.to_string()))?;
        let tensors = parse(&bytes, &file)?;
        // The parsed tensors hold every value: the file's bytes would only add a copy of
        // the model to the peak of the commit (a user's review: a restore needed ~2.5
        // times the file in memory on top of the store; ~2 now).
        drop(bytes);
        let in_file: HashSet<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
        if options.missing_in_file == Missing::Error {
            if let Some(info) = self
                .list()
                .into_iter()
                .find(|i| !in_file.contains(&*i.name))
            {
                return Err(error(&file, format!("it has no tensor `{}`", info.name)));
            }
        }
        let mut staged: Vec<Box<dyn Staged>> = Vec::with_capacity(tensors.len());
        for t in tensors {
            if !self.contains(&t.name) {
                match options.missing_in_store {
                    Missing::Error => {
                        return Err(error(
                            &file,
                            format!("the store has no variable `{}`", t.name),
                        ))
                    }
                    Missing::Skip => continue,
                }
            }
            let (name, layout) = (t.name, t.layout);
            let one = dispatch!(t.values, values => stage(self, &name, values, layout.as_deref()));
            staged.push(one.map_err(|e| misfit(&file, e))?);
        }
        let count = staged.len();
        if count == 0 {
            return Ok(0);
        }
        let section = staged
            .iter()
            .fold(
                CriticalSection::builder().name(format!("restore of {file}")),
                |b, s| s.claim(b),
            )
            .exclusive(false)
            .build()?;
        section.execute(|tx| staged.into_iter().try_for_each(|s| s.assign(tx)))?;
        Ok(count)
    }
}

/// Registers `values` in `store` under `name`: a paged variable of `rows_per_page` rows a
/// page if the file says it was one, else a dense one.
fn load_one<A: Element>(
    store: &Store,
    name: &str,
    values: ArrayD<A>,
    rows_per_page: Option<usize>,
) -> Result<()> {
    match rows_per_page {
        None => store.variable(name, values).map(drop),
        Some(rows) => store.register_paged(
            &PagedVariable::builder(values)
                .name(name)
                .rows_per_page(rows)
                .build()?,
        ),
    }
}

/// One tensor of a checkpoint, checked against its variable and ready to assign.
trait Staged: Send {
    fn claim(&self, builder: CriticalSectionBuilder) -> CriticalSectionBuilder;
    fn assign(self: Box<Self>, tx: &Txn<'_>) -> Result<()>;
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

/// A tensor of `file` that does not fit its variable, as the restore's error.
fn misfit(file: &str, e: Error) -> Error {
    let problem = match e {
        // Said as the file's tensor against the variable: "f32 was asked for" named nothing
        // the user asked (a user's review).
        Error::DTypeMismatch {
            variable,
            expected,
            found,
        } => {
            format!("tensor `{variable}` holds {expected}, the variable of that name holds {found}")
        }
        other => other.to_string(),
    };
    error(file, problem)
}

/// The variable `name` of `store`, dense or paged, checked to take `value` (dtype, shape,
/// and the tensors a packed set holds, where both the file and the variable describe them).
fn stage<A: Element>(
    store: &Store,
    name: &str,
    value: ArrayD<A>,
    layout: Option<&str>,
) -> Result<Box<dyn Staged>> {
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
            variable.check_new_shape(value.shape())?;
            Ok(Box::new(Assign { variable, value }))
        }
        Err(Error::KindMismatch { .. }) => {
            let variable = store.get_paged::<A>(name)?;
            check_shape(name, variable.shape(), value.shape())?;
            Ok(Box::new(AssignPaged { variable, value }))
        }
        Err(other) => Err(other),
    }
}

/// One tensor of a file, typed.
struct Parsed {
    name: String,
    values: Values,
    /// A paged variable's rows per page (the file's `mvtensor.paged.<name>`).
    rows_per_page: Option<usize>,
    /// A packed set's tensors, described (the file's `mvtensor.layout.<name>`).
    layout: Option<String>,
}

/// A tensor's values, as the element type its dtype names.
enum Values {
    F32(ArrayD<f32>),
    F64(ArrayD<f64>),
    I32(ArrayD<i32>),
    I64(ArrayD<i64>),
    #[cfg(feature = "half")]
    F16(ArrayD<half::f16>),
    #[cfg(feature = "half")]
    BF16(ArrayD<half::bf16>),
}

/// Runs `$body` with `$v` bound to the typed array inside a [`Values`].
macro_rules! dispatch {
    ($values:expr, $v:ident => $body:expr) => {
        match $values {
            Values::F32($v) => $body,
            Values::F64($v) => $body,
            Values::I32($v) => $body,
            Values::I64($v) => $body,
            #[cfg(feature = "half")]
            Values::F16($v) => $body,
            #[cfg(feature = "half")]
            Values::BF16($v) => $body,
        }
    };
}
use dispatch;

/// Every tensor of a checkpoint's bytes, checked (header, offsets, dtypes) before any is
/// returned.
fn parse(bytes: &[u8], file: &str) -> Result<Vec<Parsed>> {
    let tensors = SafeTensors::deserialize(bytes).map_err(|e| error(file, e.to_string()))?;
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| error(file, e.to_string()))?;
    let metadata = header.metadata().clone().unwrap_or_default();
    let mut parsed = tensors
        .iter()
        .map(|(name, view)| {
            let values =
                values(&view).map_err(|problem| error(file, format!("`{name}`: {problem}")))?;
            let rows_per_page = match metadata.get(&format!("{PAGED}{name}")) {
                None => None,
                Some(rows) => Some(rows.parse().map_err(|_| {
                    error(
                        file,
                        format!("`{PAGED}{name}` is `{rows}`, not a number of rows"),
                    )
                })?),
            };
            Ok(Parsed {
                name: name.to_owned(),
                values,
                rows_per_page,
                layout: metadata.get(&format!("{LAYOUT}{name}")).cloned(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    parsed.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(parsed)
}

fn values(view: &TensorView<'_>) -> std::result::Result<Values, String> {
    Ok(match view.dtype() {
        Dtype::F32 => Values::F32(array(view)?),
        Dtype::F64 => Values::F64(array(view)?),
        Dtype::I32 => Values::I32(array(view)?),
        Dtype::I64 => Values::I64(array(view)?),
        #[cfg(feature = "half")]
        Dtype::F16 => Values::F16(array(view)?),
        #[cfg(feature = "half")]
        Dtype::BF16 => Values::BF16(array(view)?),
        other => return Err(format!("dtype {other:?} has no mvtensor element type")),
    })
}

/// The tensor's bytes as an array of `A` (little-endian, in standard order).
fn array<A: Element>(view: &TensorView<'_>) -> std::result::Result<ArrayD<A>, String> {
    let size = std::mem::size_of::<A>();
    let data = view.data();
    if data.len() % size != 0 {
        return Err(format!(
            "{} bytes is not a whole number of {size}-byte elements",
            data.len()
        ));
    }
    let values = data.chunks_exact(size).map(A::from_le_slice).collect();
    ArrayD::from_shape_vec(IxDyn(view.shape()), values).map_err(|e| e.to_string())
}

fn error(file: &str, problem: impl Into<String>) -> Error {
    Error::Checkpoint {
        file: file.to_owned(),
        problem: problem.into(),
    }
}
