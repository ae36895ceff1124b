//! Checkpoints: a store snapshot written as one [safetensors] file while training runs, and
//! read back into a new store or restored into a running one in one commit.
//!
//! * **Saving never blocks a writer.** It writes a [`StoreSnapshot`], a consistent cut that
//!   holds one version per variable and pins nothing: trainers keep writing while the file is
//!   written. [`Store::save`] takes the snapshot and writes it.
//! * **Crash-safe.** The file is written beside the target under a temporary name, flushed to
//!   disk (`fsync`), renamed over the target, and the directory is flushed: a crash at any
//!   point leaves either the previous checkpoint or the new one, never a mix.
//! * **The format is plain safetensors**: each variable is a tensor under its name, with its
//!   dtype (`F32`, `F64`, `I32`, `I64`, `F16`, `BF16`) and shape; the header's
//!   `__metadata__` holds the snapshot's commit timestamp (`mvtensor.timestamp`) and each
//!   variable's version number (`mvtensor.version.<name>`), and each paged variable's rows
//!   per page (`mvtensor.paged.<name>`: the tensor is written whole, and [`Store::load`]
//!   makes it paged again), and each packed set's tensors (`mvtensor.layout.<name>`, as
//!   `w1 [11, 32], b1 [32]; 2510 elements`: a restore into a set that packs others is
//!   refused, even of the same length). Python's `safetensors` package reads it, and
//!   mvtensor reads what it writes.
//! * **Restoring is one commit** ([`Store::restore`]): every variable of the file changes at
//!   once, through the variables' queues like any critical section, so a store snapshot sees
//!   all of the checkpoint or none of it.
//! * **A bad file is an error, never a panic**: truncated, malformed header, offsets out of
//!   range, an unknown dtype, or a tensor that does not fit the store's variable: each is
//!   [`Error::Checkpoint`] naming the file and the problem, and nothing is applied.
//!
//! ```
//! use mvtensor::{checkpoint::Restore, Store};
//! use ndarray::{arr0, Array1};
//!
//! let dir = std::env::temp_dir().join(format!("mvtensor-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let path = dir.join("model.safetensors");
//!
//! let store = Store::new();
//! let w = store.variable("w", Array1::<f32>::zeros(3))?;
//! let step = store.variable("step", arr0(0i64))?;
//! w.assign_add(&Array1::ones(3))?;
//! store.save(&path)?;                       // while trainers write, if you like
//!
//! w.assign_add(&Array1::ones(3))?;
//! store.restore(&path, Restore::default())?; // every variable of the file, in one commit
//! assert_eq!(w.read()[0], 1.0);
//!
//! let copy = Store::load(&path)?;            // or into a new store
//! assert_eq!(copy.get::<i64, ndarray::Ix0>("step")?.get(), 0);
//!
//! // A chosen set of variables: a store of their own (a variable may be in several stores).
//! let weights_only = Store::new();
//! weights_only.register(&w)?;
//! weights_only.save(dir.join("weights.safetensors"))?;
//! assert_eq!(Store::load(dir.join("weights.safetensors"))?.len(), 1);
//! # let _ = step;
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [safetensors]: https://huggingface.co/docs/safetensors

mod file;
mod load;
mod periodic;

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use safetensors::tensor::{Dtype, View};

use crate::error::{Error, Result};
use crate::{DType, Element, Store, StoreSnapshot};

pub use load::{Missing, Restore};
pub use periodic::{Checkpoints, Periodic, Progress};

/// The header entry safetensors keeps its metadata in: no tensor may have this name.
const METADATA: &str = "__metadata__";

/// The metadata key of the snapshot's commit timestamp.
const TIMESTAMP: &str = "mvtensor.timestamp";
/// The metadata key prefix of each variable's version number.
const VERSION: &str = "mvtensor.version.";
/// The metadata key prefix of a paged variable's rows per page.
const PAGED: &str = "mvtensor.paged.";
/// The metadata key prefix of a packed set's tensors, described
/// ([`optim::Packed`](crate::optim::Packed)).
const LAYOUT: &str = "mvtensor.layout.";

impl StoreSnapshot {
    /// Writes this snapshot as one safetensors file at `path`, crash-safe (see the
    /// [module docs](crate::checkpoint)). Writers are never blocked: the snapshot already
    /// holds what it writes.
    ///
    /// # Errors
    /// [`Error::Checkpoint`] naming the file if it cannot be written, or if a variable is
    /// named `__metadata__` (safetensors' header entry); the previous file at `path`, if
    /// any, is then intact.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let (tensors, metadata) = self.tensors().map_err(|p| checkpoint_error(path, p))?;
        file::write_atomically(path, |tmp| {
            safetensors::serialize_to_file(tensors, Some(metadata), tmp).map_err(|e| e.to_string())
        })
        .map_err(|problem| checkpoint_error(path, problem))
    }

    /// This snapshot as the bytes of a safetensors file (what [`save`](Self::save) writes),
    /// to send elsewhere or keep in memory; [`Store::load_bytes`] reads them back.
    ///
    /// # Errors
    /// [`Error::Checkpoint`] (file `<bytes>`) if safetensors refuses the header (over its
    /// 100 MB limit: hundreds of thousands of variables).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let refused = |problem| Error::Checkpoint {
            file: "<bytes>".into(),
            problem,
        };
        let (tensors, metadata) = self.tensors().map_err(refused)?;
        safetensors::serialize(tensors, Some(metadata)).map_err(|e| refused(e.to_string()))
    }

    /// Every variable as a tensor to write, and the file's metadata; refused if a variable
    /// has the name of the header's metadata entry, which no reader could tell apart (the
    /// file would be written, and unreadable).
    fn tensors(&self) -> std::result::Result<Contents<'_>, String> {
        if self.entries().iter().any(|(name, _)| &**name == METADATA) {
            return Err(format!(
                "a variable is named `{METADATA}`, which safetensors reserves for the \
                 header's metadata: rename it to save"
            ));
        }
        let mut metadata = HashMap::new();
        metadata.insert(TIMESTAMP.to_owned(), self.timestamp().to_string());
        let tensors = self
            .entries()
            .iter()
            .map(|(name, captured)| {
                metadata.insert(format!("{VERSION}{name}"), captured.number.to_string());
                if let Some(rows) = captured.rows_per_page {
                    metadata.insert(format!("{PAGED}{name}"), rows.to_string());
                }
                if let Some(layout) = &captured.layout {
                    metadata.insert(format!("{LAYOUT}{name}"), layout.to_string());
                }
                let tensor = Tensor {
                    dtype: dtype_out(captured.dtype),
                    shape: &captured.shape,
                    data: (captured.bytes)(captured),
                };
                (name.to_string(), tensor)
            })
            .collect();
        Ok((tensors, metadata))
    }
}

impl Store {
    /// Takes a [`snapshot`](Self::snapshot) and [saves](StoreSnapshot::save) it at `path`.
    /// Returns the snapshot's commit timestamp.
    ///
    /// # Errors
    /// As for [`StoreSnapshot::save`].
    pub fn save(&self, path: impl AsRef<Path>) -> Result<u64> {
        let snapshot = self.snapshot();
        snapshot.save(path)?;
        Ok(snapshot.timestamp())
    }
}

/// What a file holds: its tensors by name, and the header's metadata.
type Contents<'a> = (Vec<(String, Tensor<'a>)>, HashMap<String, String>);

/// One tensor to write: borrowed bytes where the machine is little-endian.
struct Tensor<'a> {
    dtype: Dtype,
    shape: &'a [usize],
    data: Cow<'a, [u8]>,
}

impl View for Tensor<'_> {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// `values` as little-endian bytes: the same memory on a little-endian machine, a copy
/// otherwise.
pub(crate) fn le_bytes<A: Element>(values: &[A]) -> Cow<'_, [u8]> {
    if cfg!(target_endian = "little") {
        // SAFETY: every `Element` (f32, f64, i32, i64, half's f16 and bf16, the trait is
        // sealed) is a plain number without padding, so its memory is initialised bytes;
        // the slice covers exactly the values' memory and borrows it for as long.
        Cow::Borrowed(unsafe {
            std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
        })
    } else {
        let mut out = Vec::with_capacity(std::mem::size_of_val(values));
        values.iter().for_each(|v| v.extend_le(&mut out));
        Cow::Owned(out)
    }
}

fn dtype_out(dtype: DType) -> Dtype {
    match dtype {
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::I32 => Dtype::I32,
        DType::I64 => Dtype::I64,
        #[cfg(feature = "half")]
        DType::F16 => Dtype::F16,
        #[cfg(feature = "half")]
        DType::BF16 => Dtype::BF16,
    }
}

fn checkpoint_error(path: &Path, problem: impl Into<String>) -> Error {
    Error::Checkpoint {
        file: path.display().to_string(),
        problem: problem.into(),
    }
}
