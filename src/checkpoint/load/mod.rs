//! Reading a checkpoint: into a new store, or restored into a running one in one commit.
//!
//! A file is read in two passes over its header. The first ([`parse`]) takes every tensor as
//! the header declares it, untyped (name, dtype, shape, its bytes in the file), checks each
//! shape against its bytes, and counts what the load would allocate against the memory
//! budget ([`Restore::memory_budget`]); nothing is allocated for a value until every tensor
//! has passed. The second converts the tensors that are used, and only those: a restore that
//! skips a tensor the store lacks never types it, so an extra tensor of a dtype mvtensor has
//! no element type for (`BOOL`, `U8`, `F8_E4M3`, common in files written from Python) is
//! ignored like any other; a load, which makes every tensor a variable, refuses it by name.

mod parse;
mod typed;

use std::collections::HashSet;
use std::path::Path;

use super::checkpoint_error;
use crate::error::{Error, Result};
use crate::{CriticalSection, Store};
use parse::{parse, Budget};
use typed::{check_supported, read, stage, Loaded, Staged, Target};

/// What [`Store::restore`] does with a variable that one side has and the other lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Missing {
    /// Refuse: the restore is an error and changes nothing.
    #[default]
    Error,
    /// Go on without it (a tensor of the file the store lacks is ignored, whatever its dtype;
    /// a variable of the store the file lacks keeps its value).
    Skip,
}

/// Options of reading a checkpoint: of [`Store::restore`], and the memory budget of
/// [`Store::load_with`]. The default refuses both kinds of mismatch and has the default
/// memory budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Restore {
    /// A tensor of the file with no variable of that name in the store.
    pub missing_in_store: Missing,
    /// A variable of the store with no tensor of that name in the file.
    pub missing_in_file: Missing,
    /// The most bytes reading the file may allocate for its tensors; `None` for the default
    /// (see [`memory_budget`](Self::memory_budget)).
    pub memory_budget: Option<usize>,
}

impl Restore {
    /// Restores what both have and leaves the rest alone. Lenient about *names* only: a
    /// tensor whose dtype, shape or packed layout does not fit the variable of its name is
    /// still an error, and nothing is applied (a misfit value is never half-restored).
    pub fn lenient() -> Self {
        Self {
            missing_in_store: Missing::Skip,
            missing_in_file: Missing::Skip,
            memory_budget: None,
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

    /// Sets the most bytes that reading the file may allocate for its tensors. Before
    /// anything is allocated, every size in the header is checked against what the file holds,
    /// and what reading it would request from the allocator is counted: each variable's values
    /// (its bytes in the file) and 1.5 KiB of state; for a paged table loaded by
    /// [`Store::load`], its pages beside the values they are built from (the rows, padded to
    /// whole pages, plus 16 bytes of tree a page); for a restore, the values it stages and
    /// a paged variable's new pages. A file over the budget is [`Error::Checkpoint`] naming
    /// the tensor, the bytes it would need and the budget; nothing is loaded or applied. The
    /// file's own bytes, read whole first, are not counted.
    ///
    /// The default is 16 times the file's length plus 256 MiB. An honest file fits: dense
    /// values cost their bytes, and the worst paged table, one-row pages of 2-byte rows, 10
    /// times its bytes. A file cannot make the reader allocate far more than it holds: a
    /// 117-byte header declaring a paged table of 2^33 empty rows in one-row pages (a page
    /// tree of 2^33 entries of at least 8 bytes each: 64 GiB) is refused before any of it
    /// is allocated. Raise it for hundreds of thousands of tiny tensors, whose
    /// variables' state outweighs their header entries; lower it to cap what a file may take.
    pub fn memory_budget(mut self, bytes: usize) -> Self {
        self.memory_budget = Some(bytes);
        self
    }
}

impl Store {
    /// Reads the checkpoint at `path` into a new store: one fixed-shape variable per tensor,
    /// under the tensor's name, at version 0; a tensor saved from a paged variable
    /// (`mvtensor.paged.<name>` in the metadata) becomes a paged variable of the same page
    /// size. Under the default memory budget ([`Restore::memory_budget`]; [`load_with`]
    /// sets another).
    ///
    /// [`load_with`]: Self::load_with
    ///
    /// # Errors
    /// [`Error::Checkpoint`] naming the file and the problem: unreadable, malformed, a tensor
    /// of a dtype mvtensor has no element type for (named, with its dtype), or one that would
    /// take the load over its memory budget.
    pub fn load(path: impl AsRef<Path>) -> Result<Store> {
        Self::load_with(path, Restore::default())
    }

    /// As [`load`](Self::load), under `options`' memory budget
    /// ([`Restore::memory_budget`]); their other settings are a restore's and do not apply.
    ///
    /// # Errors
    /// As for [`load`](Self::load).
    pub fn load_with(path: impl AsRef<Path>, options: Restore) -> Result<Store> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| checkpoint_error(path, e.to_string()))?;
        let values = read_all(&bytes, &file, options)?;
        drop(bytes); // before the variables are made: a file's worth less at the peak
        register_all(values, &file)
    }

    /// As [`load`](Self::load), from the bytes of a checkpoint already in memory.
    ///
    /// # Errors
    /// As for [`load`](Self::load), naming the file `<bytes>`.
    pub fn load_bytes(bytes: &[u8]) -> Result<Store> {
        Self::load_bytes_with(bytes, Restore::default())
    }

    /// As [`load_with`](Self::load_with), from the bytes of a checkpoint already in memory.
    ///
    /// # Errors
    /// As for [`load`](Self::load), naming the file `<bytes>`.
    pub fn load_bytes_with(bytes: &[u8], options: Restore) -> Result<Store> {
        register_all(read_all(bytes, "<bytes>", options)?, "<bytes>")
    }

    /// Sets every variable of the store that the checkpoint at `path` names to the file's
    /// value, **in one commit**: a store snapshot (or `read_all`, or a section) sees all of
    /// the checkpoint or none of it. The commit goes through the variables' queues like a
    /// critical section's (one that shares its resources), so concurrent writers are ordered
    /// before or after it, never interleaved. Returns how many variables were restored.
    ///
    /// The whole file is read and checked before anything is applied; only the tensors that
    /// are restored are typed and converted (a skipped one may have any dtype).
    ///
    /// # Errors
    /// [`Error::Checkpoint`] naming the file and the problem: unreadable or malformed, a
    /// tensor whose dtype or shape does not fit the variable of its name, a name missing
    /// on either side where `options` refuse it, or a file over the memory budget
    /// ([`Restore::memory_budget`]); [`Error::ResourceConflict`] if a variable belongs to a
    /// section that holds it exclusively (restore through that section instead). Nothing is
    /// applied then. (Private state, always held exclusively, is restored all the same: the
    /// commit takes its ticket, so it lands between two executions of its section.)
    pub fn restore(&self, path: impl AsRef<Path>, options: Restore) -> Result<usize> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| checkpoint_error(path, e.to_string()))?;
        let staged = self.stage_all(&bytes, &file, options)?;
        // The staged values are the file's tensors: its bytes would only add a copy of the
        // model to the peak of the commit.
        drop(bytes);
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

    /// The tensors of `bytes` that `options` restore, each checked against its variable and
    /// counted against the budget before any is converted, then with their values.
    fn stage_all(
        &self,
        bytes: &[u8],
        file: &str,
        options: Restore,
    ) -> Result<Vec<Box<dyn Staged>>> {
        let parsed = parse(bytes, file)?;
        if options.missing_in_file == Missing::Error {
            let in_file: HashSet<&str> = parsed.tensors.iter().map(|t| t.name.as_str()).collect();
            if let Some(info) = self
                .list()
                .into_iter()
                .find(|i| !in_file.contains(&*i.name))
            {
                return Err(error(file, format!("it has no tensor `{}`", info.name)));
            }
        }
        let mut budget = Budget::new(file, options.memory_budget, bytes.len());
        let mut targets: Vec<(Box<dyn Target>, _)> = Vec::with_capacity(parsed.tensors.len());
        for raw in &parsed.tensors {
            if !self.contains(&raw.name) {
                match options.missing_in_store {
                    Missing::Error => {
                        return Err(error(
                            file,
                            format!("the store has no variable `{}`", raw.name),
                        ))
                    }
                    Missing::Skip => continue, // never typed: any dtype will do
                }
            }
            let layout = parsed.layout(raw);
            let target = stage(self, file, raw, layout)?;
            budget.charge(&raw.name, target.bytes_needed(raw), "its new value")?;
            targets.push((target, raw));
        }
        targets
            .into_iter()
            .map(|(target, raw)| target.read(raw).map_err(|e| misfit(file, e)))
            .collect()
    }
}

/// Every tensor of `bytes` read into its values, once every one is checked (dtype, shape,
/// rows per page) and counted against the budget.
fn read_all(bytes: &[u8], file: &str, options: Restore) -> Result<Vec<Box<dyn Loaded>>> {
    let parsed = parse(bytes, file)?;
    let mut budget = Budget::new(file, options.memory_budget, bytes.len());
    let mut paged = Vec::with_capacity(parsed.tensors.len());
    for raw in &parsed.tensors {
        check_supported(file, raw)?;
        let rows_per_page = parsed.rows_per_page(raw, file)?;
        budget.charge_load(raw, rows_per_page)?;
        paged.push(rows_per_page);
    }
    parsed
        .tensors
        .iter()
        .zip(paged)
        .map(|(raw, rows_per_page)| read(file, raw, rows_per_page))
        .collect()
}

/// A store of `values`, each a variable under its name.
fn register_all(values: Vec<Box<dyn Loaded>>, file: &str) -> Result<Store> {
    let store = Store::new();
    for value in values {
        value
            .register(&store)
            .map_err(|e| error(file, e.to_string()))?;
    }
    Ok(store)
}

/// A tensor of `file` that does not fit its variable, as the restore's error.
fn misfit(file: &str, e: Error) -> Error {
    let problem = match e {
        // Said as the file's tensor against the variable of its name: a restore asks for no
        // dtype, so `DTypeMismatch`'s own wording ("f32 was asked for") would name nothing
        // the caller asked.
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

fn error(file: &str, problem: impl Into<String>) -> Error {
    Error::Checkpoint {
        file: file.to_owned(),
        problem: problem.into(),
    }
}
