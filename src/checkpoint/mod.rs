//! Checkpoints: a store snapshot written as one [safetensors] file while training runs, and
//! read back into a new store or restored into a running one in one commit.
//!
//! * **Saving never blocks a writer.** It writes a [`StoreSnapshot`], a consistent cut that
//!   holds one version per variable and pins nothing: trainers keep writing while the file is
//!   written. [`Store::save`] takes the snapshot and writes it.
//! * **Crash-safe.** The file is written beside the target under a temporary name
//!   (`.<target>.<pid>.<n>.tmp`), flushed to disk (`fsync`), renamed over the target, and the
//!   directory is flushed: a crash at any point leaves either the previous checkpoint or the
//!   new one, never a mix. A process killed mid-save leaves its temporary file; a
//!   [`Checkpoints`] directory removes those of processes that are gone, and nothing else.
//! * **Streamed.** The file is written straight from the snapshot's versions and pages
//!   through a small buffer: a save allocates nothing of a tensor's size, and a paged table
//!   goes out page by page.
//! * **Permissions: the process's umask.** A new file gets the mode `0o666` less the umask
//!   (`0o644` under the usual `0o022`: other users can read it), as any file the process
//!   creates; set the umask (or change the mode afterwards) to share less or more.
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
//! * **A file cannot make the reader allocate more than it justifies**: every size in its
//!   header is checked against what the file holds and against a memory budget before
//!   anything is allocated (16 times the file's length plus 256 MiB by default;
//!   [`Restore::memory_budget`] sets it, [`Store::load_with`] takes it for a load).
//! * **Only the tensors used are typed**: a lenient restore ignores an extra tensor of a
//!   dtype mvtensor has no element type for (`BOOL`, `U8`, `F8_*`); a load, which makes every
//!   tensor a variable, refuses it, naming the tensor and the dtype.
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
mod write;

use std::path::Path;

use safetensors::tensor::Dtype;

use crate::error::{Error, Result};
use crate::{DType, Store, StoreSnapshot};

pub use load::{Missing, Restore};
pub use periodic::{Checkpoints, Periodic, Progress};
pub(crate) use write::write_le;

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
    /// holds what it writes, and the file is written straight from it (no copy of a tensor).
    ///
    /// The new file's permissions are `0o666` less the process's umask (`0o644` under the
    /// usual `0o022`), as for any file the process creates; a file it replaces does not pass
    /// its own on.
    ///
    /// # Errors
    /// [`Error::Checkpoint`] naming the file if it cannot be written, if a variable is
    /// named `__metadata__` (safetensors' header entry), or if the header would pass the
    /// 100 MB safetensors reads (hundreds of thousands of variables); the previous file at
    /// `path`, if any, is then intact.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let plan = self.plan().map_err(|p| checkpoint_error(path, p))?;
        file::write_atomically(path, |out| plan.write(out))
            .map_err(|problem| checkpoint_error(path, problem))
    }

    /// This snapshot as the bytes of a safetensors file (what [`save`](Self::save) writes),
    /// to send elsewhere or keep in memory; [`Store::load_bytes`] reads them back.
    ///
    /// # Errors
    /// [`Error::Checkpoint`] (file `<bytes>`) as for [`save`](Self::save): a variable named
    /// `__metadata__`, or a header over safetensors' 100 MB limit.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let refused = |problem| Error::Checkpoint {
            file: "<bytes>".into(),
            problem,
        };
        let plan = self.plan().map_err(refused)?;
        let len = usize::try_from(plan.len)
            .map_err(|_| refused(format!("{} bytes do not fit in memory", plan.len)))?;
        let mut bytes = Vec::with_capacity(len);
        plan.write(&mut bytes).map_err(refused)?;
        Ok(bytes)
    }
}

impl Store {
    /// Takes a [`snapshot`](Self::snapshot) and [saves](StoreSnapshot::save) it at `path`.
    /// Returns the snapshot's commit timestamp.
    ///
    /// # Errors
    /// As for [`StoreSnapshot::save`]; [`Error::Reentrant`] inside an execution if the store
    /// holds private state (its copy needs tickets: see [`Store::snapshot`]).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<u64> {
        let snapshot = self.complete_snapshot()?;
        snapshot.save(path)?;
        Ok(snapshot.timestamp())
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
