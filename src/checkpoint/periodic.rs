//! Checkpointing a trainer as it goes: numbered files in a directory, the last few kept.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::checkpoint_error;
use super::file::remove_stale;
use crate::error::{check_setting, Error, Result};
use crate::sync::lock_std as lock;
use crate::{Store, StoreSnapshot, VariableKind};

/// A directory of numbered checkpoints (`checkpoint-<n>.safetensors`), of which the newest
/// `keep` are kept. Call [`save`](Self::save) every N steps, or let
/// [`every`](Self::every) save from a background thread every so often.
///
/// A file's number is its snapshot's timestamp, or one more than the highest number in the
/// directory when that is larger: the commit clock starts again with each process, and a
/// trainer resumed from its last checkpoint must not have its new files sort before its
/// previous run's (keeping the newest would then delete them as they are written). So the
/// highest number is always the newest checkpoint. Clones of one `Checkpoints` share its
/// count; two handles made with [`new`](Self::new) on one directory in one process do not,
/// so do not save through both at once.
///
/// **What an interrupted save leaves is removed.** A save writes a temporary file beside its
/// target (`.checkpoint-<n>.safetensors.<pid>.<k>.tmp`, with the saving process's id) and
/// renames it into place; a process killed mid-save leaves it behind. [`new`](Self::new) and
/// each [`save`](Self::save) remove the ones of processes that are gone (on Linux, where
/// `/proc` says which are running; elsewhere they stay), owned by this process's user, and
/// nothing else: not a save in flight in this or another running process, not other files
/// (another tool's temporary files are not ours to remove). Process ids are this machine's:
/// savers on other machines or in other PID namespaces must not share the directory.
///
/// ```
/// use std::sync::Arc;
/// use mvtensor::{checkpoint::Checkpoints, Store};
/// use ndarray::Array1;
///
/// let dir = std::env::temp_dir().join(format!("mvtensor-ckpt-doc-{}", std::process::id()));
/// let store = Arc::new(Store::new());
/// let w = store.variable("w", Array1::<f32>::zeros(4))?;
/// let checkpoints = Checkpoints::new(&dir, 2)?;
/// for step in 1..=30 {
///     w.assign_add(&Array1::ones(4))?;
///     if step % 10 == 0 {
///         checkpoints.save(&store)?; // the 3rd save removes the 1st file
///     }
/// }
/// let files = checkpoints.list()?;
/// assert_eq!(files.len(), 2);
/// let last = Store::load(files.last().unwrap())?;
/// assert_eq!(last.get::<f32, ndarray::Ix1>("w")?.read()[0], 30.0);
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Checkpoints {
    dir: PathBuf,
    keep: usize,
    /// The lowest number the next file may have: one more than the last one's.
    next: Arc<Mutex<u64>>,
}

const PREFIX: &str = "checkpoint-";
const SUFFIX: &str = ".safetensors";

impl Checkpoints {
    /// Checkpoints in `dir` (created if need be), keeping the newest `keep` (at least one).
    /// Removes what interrupted saves of processes that are gone left in `dir` (see
    /// [`Checkpoints`]).
    ///
    /// # Errors
    /// [`Error::Checkpoint`](crate::Error::Checkpoint) if the directory cannot be created
    /// (or `dir` is a file), or naming a stale temporary file that cannot be removed.
    pub fn new(dir: impl AsRef<Path>, keep: usize) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        if dir.exists() && !dir.is_dir() {
            // (create_dir_all said only "File exists")
            return Err(checkpoint_error(&dir, "it is a file, not a directory"));
        }
        std::fs::create_dir_all(&dir).map_err(|e| checkpoint_error(&dir, e.to_string()))?;
        remove_stale(&dir, is_checkpoint)
            .map_err(|(file, e)| checkpoint_error(&file, e.to_string()))?;
        let highest = files(&dir)?.last().and_then(|p| number(p));
        Ok(Self {
            dir,
            keep: keep.max(1),
            next: Arc::new(Mutex::new(highest.map_or(0, |n| n.saturating_add(1)))),
        })
    }

    /// Saves a snapshot of `store` as the next file, then removes all but the newest
    /// `keep`. Returns the new file's path. Writers of the store's variables are never
    /// blocked (a section whose private state the store holds waits while it is copied:
    /// see [`Store::snapshot`]). The file's
    /// permissions are `0o666` less the process's umask ([`StoreSnapshot::save`]).
    ///
    /// First it removes what interrupted saves of processes that are gone left (see
    /// [`Checkpoints`]), so that they do not fill the disk; one it cannot remove is left for
    /// a later save and does not fail this one ([`new`](Self::new) reports it).
    ///
    /// # Errors
    /// [`Error::Checkpoint`](crate::Error::Checkpoint) naming the file that could not be
    /// written or removed; [`Error::Reentrant`](crate::Error::Reentrant) inside an execution
    /// if the store holds private state (see [`Store::snapshot`]).
    pub fn save(&self, store: &Store) -> Result<PathBuf> {
        let saved = self.save_unless(store, |_| false)?;
        Ok(saved.expect("saved unless `unchanged`"))
    }

    /// [`save`](Self::save), unless `unchanged` says the snapshot holds nothing new (then
    /// nothing is written and no number is used: `Ok(None)`).
    fn save_unless(
        &self,
        store: &Store,
        unchanged: impl FnOnce(&StoreSnapshot) -> bool,
    ) -> Result<Option<PathBuf>> {
        // Before the lock: a ticket holder asking here must not wait for a save that waits
        // for its ticket.
        store.check_private_copy()?;
        let (snapshot, n) = {
            // Snapshot and number under one lock: concurrent saves number their files in
            // the order of their snapshots.
            let mut next = lock(&self.next);
            let snapshot = store.complete_snapshot()?;
            if unchanged(&snapshot) {
                return Ok(None);
            }
            let n = snapshot.timestamp().max(*next);
            *next = n.saturating_add(1);
            (snapshot, n)
        };
        let path = self.dir.join(format!("{PREFIX}{n:020}{SUFFIX}"));
        // Best effort (documented on `save`): a stale file is garbage, not this save's failure.
        let _ = remove_stale(&self.dir, is_checkpoint);
        snapshot.save(&path)?;
        let files = self.list()?;
        for old in &files[..files.len().saturating_sub(self.keep)] {
            match std::fs::remove_file(old) {
                // Another save (a clone's, the background one's) removed it first.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                removed => removed.map_err(|e| checkpoint_error(old, e.to_string()))?,
            }
        }
        Ok(Some(path))
    }

    /// The checkpoint files in the directory, oldest (lowest number) first.
    ///
    /// # Errors
    /// [`Error::Checkpoint`](crate::Error::Checkpoint) if the directory cannot be read.
    pub fn list(&self) -> Result<Vec<PathBuf>> {
        files(&self.dir)
    }

    /// Saves `store` every `interval` from a background thread until the returned handle is
    /// stopped or dropped. Saving never blocks the writers of the store's variables (as for
    /// [`save`](Self::save)).
    ///
    /// An interval in which no variable of the store was written saves nothing (counted in
    /// [`Progress::unchanged`]): a paused trainer's newest `keep` files stay distinct
    /// checkpoints instead of becoming copies of its last state. A store that holds private
    /// state, which has no versions to compare, saves every interval. A save that fails (a full
    /// disk, a directory gone for a while) is counted and kept in [`Periodic::progress`],
    /// and the next interval tries again: a trainer that runs for days keeps checkpointing
    /// once the cause is gone.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] for a zero `interval` (a save after a save, as fast as the
    /// disk allows).
    pub fn every(&self, store: Arc<Store>, interval: Duration) -> Result<Periodic> {
        check_setting(
            || format!("checkpoints in {}", self.dir.display()),
            "interval",
            interval,
            !interval.is_zero(),
            "a positive duration",
        )?;
        // A message stops the thread: `true` after one last save (`stop_and_save`).
        let (stop, stopped) = mpsc::channel::<bool>();
        // A handle of its own (the numbering is shared), so that `every` borrows the
        // caller's, which stays theirs for `list` and `save`.
        let checkpoints = self.clone();
        let progress = Arc::new(Mutex::new(Progress::default()));
        let shared = Arc::clone(&progress);
        let thread = thread::Builder::new()
            .name("mvtensor-checkpoints".into())
            .spawn(move || {
                // Each variable's name and version in the last file saved.
                let mut last: Option<Vec<(String, u64)>> = None;
                let mut save = || {
                    let mut cut = None;
                    let saved = checkpoints.save_unless(&store, |snapshot| {
                        let now = snapshot.iter().map(|v| (v.name().to_owned(), v.version()));
                        let now: Vec<_> = now.collect();
                        // Private state has no versions to compare: always saved.
                        let same = last.as_ref() == Some(&now)
                            && snapshot.iter().all(|v| v.kind() != VariableKind::Private);
                        cut = Some(now);
                        same
                    });
                    if let Ok(Some(_)) = saved {
                        last = cut;
                    }
                    lock(&shared).count(saved);
                };
                // Waits for the interval or for a stop (a message, or the sender dropped).
                loop {
                    match stopped.recv_timeout(interval) {
                        Err(RecvTimeoutError::Timeout) => save(),
                        Ok(true) => break save(),
                        Ok(false) | Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
            })
            .expect("spawning the checkpoint thread");
        Ok(Periodic {
            stop: Some(stop),
            thread: Some(thread),
            progress,
        })
    }
}

/// The checkpoint files in `dir`, lowest number first: only names `Checkpoints` writes
/// (another file that looks like one is left alone).
fn files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir).map_err(|e| checkpoint_error(dir, e.to_string()))?;
    let mut files: Vec<(u64, PathBuf)> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter_map(|p| Some((number(&p)?, p)))
        .collect();
    files.sort_unstable_by_key(|&(n, _)| n);
    Ok(files.into_iter().map(|(_, p)| p).collect())
}

/// Whether `name` is one `Checkpoints` writes: `checkpoint-`, 20 digits, `.safetensors`.
fn is_checkpoint(name: &str) -> bool {
    name.strip_prefix(PREFIX)
        .and_then(|rest| rest.strip_suffix(SUFFIX))
        .is_some_and(|n| n.len() == 20 && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The number in a checkpoint file's name.
fn number(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    name.strip_prefix(PREFIX)?
        .strip_suffix(SUFFIX)?
        .parse()
        .ok()
}

/// The background checkpointer of [`Checkpoints::every`]. Dropping it stops it (and waits
/// for a save in progress); [`stop`](Self::stop) also reports how it went, and
/// [`stop_and_save`](Self::stop_and_save) saves the last writes first.
#[derive(Debug)]
pub struct Periodic {
    stop: Option<mpsc::Sender<bool>>,
    thread: Option<JoinHandle<()>>,
    progress: Arc<Mutex<Progress>>,
}

/// How a background checkpointer is doing ([`Periodic::progress`], [`Periodic::stop`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Progress {
    /// Checkpoints saved.
    pub saved: usize,
    /// Saves that failed (each tried again at the next interval).
    pub failed: usize,
    /// Intervals that saved nothing: no variable was written since the last file.
    pub unchanged: usize,
    /// The newest checkpoint saved.
    pub last_saved: Option<PathBuf>,
    /// The newest failure: an [`Error::Checkpoint`] naming the file. It stays after later
    /// saves succeed; compare `failed` between two looks to see new ones.
    pub last_error: Option<Error>,
}

impl Progress {
    fn count(&mut self, save: Result<Option<PathBuf>>) {
        match save {
            Ok(None) => self.unchanged += 1,
            Ok(Some(path)) => (self.saved, self.last_saved) = (self.saved + 1, Some(path)),
            Err(error) => (self.failed, self.last_error) = (self.failed + 1, Some(error)),
        }
    }
}

impl Periodic {
    /// How it has gone so far: saves made and failed, the newest file and failure.
    pub fn progress(&self) -> Progress {
        lock(&self.progress).clone()
    }

    /// Stops the checkpointer (after a save in progress) and returns how it went. A
    /// trainer that must not lose its checkpoints silently checks `failed`.
    #[must_use = "the progress says whether any save failed"]
    pub fn stop(mut self) -> Progress {
        self.finish(false);
        self.progress()
    }

    /// As [`stop`](Self::stop), after one last save of what was written since the last
    /// file (nothing if nothing was): the end of training, whose last steps an interval
    /// would otherwise miss. Its outcome is in the progress returned.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use mvtensor::checkpoint::Checkpoints;
    /// use mvtensor::{Store, Variable};
    /// use ndarray::Array1;
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = Arc::new(Store::new());
    /// let w = store.variable("w", Array1::<f32>::zeros(3))?;
    /// let background = Checkpoints::new(dir.path(), 2)?.every(Arc::clone(&store), Duration::from_secs(3600))?;
    /// w.assign_add(&Array1::ones(3))?; // the last step, long before the next interval
    /// let done = background.stop_and_save();
    /// let last = Store::load(done.last_saved.expect("saved at the stop"))?;
    /// assert_eq!(last.get::<f32, ndarray::Ix1>("w")?.read()[0], 1.0);
    /// # Ok::<(), mvtensor::Error>(())
    /// ```
    #[must_use = "the progress says whether the last save failed"]
    pub fn stop_and_save(mut self) -> Progress {
        self.finish(true);
        self.progress()
    }

    /// Stops the thread, after one last save if `save`, and waits for it.
    fn finish(&mut self, save: bool) {
        if let Some(stop) = self.stop.take() {
            // A thread that is gone (it panicked) has nothing to stop: `join` says why.
            let _ = stop.send(save);
        }
        if let Some(thread) = self.thread.take() {
            if let Err(panic) = thread.join() {
                std::panic::resume_unwind(panic);
            }
        }
    }
}

impl Drop for Periodic {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.finish(false); // `stop` is how to see the outcome
        }
    }
}
