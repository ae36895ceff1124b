//! Writing a file so that a crash leaves the old one or the new one, never a mix, and
//! removing what the saves of processes that are gone left behind.
//!
//! A save writes a temporary file beside the target, `.{target}.{pid}.{n}.tmp` (the saving
//! process's id and a number unique in that process), flushes it to disk, renames it over the
//! target and flushes the directory: without the two flushes a power failure can leave the
//! renamed file empty. `tests/checkpoint_crash.rs` kills a saving process at random moments;
//! a save that writes the target in place fails it within a few rounds. A process killed
//! mid-save leaves its temporary file; [`remove_stale`] removes those of processes that are
//! gone.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::sync::next_id;

/// The file's write buffer: tensors larger than it go to the file straight from memory.
const BUFFER: usize = 256 * 1024;

/// Writes `path` through `write`, which fills the temporary file it is given: the temporary
/// file lives in `path`'s directory (so the rename stays on one file system), is flushed to
/// disk, renamed over `path`, and the directory is flushed so that the rename itself is
/// durable. On failure the temporary file is removed and `path` is untouched.
///
/// The temporary file is created anew (never another save's) with the mode `0o666` less the
/// process's umask, which the rename keeps.
pub(super) fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> Result<(), String>,
) -> Result<(), String> {
    let tmp = temporary(path)?;
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| format!("creating {}: {e}", tmp.display()))?;
    let result = fill(file, &tmp, write).and_then(|()| {
        fs::rename(&tmp, path).map_err(|e| format!("renaming {} over it: {e}", tmp.display()))
    });
    if result.is_err() {
        let _ = fs::remove_file(&tmp); // best effort: the error that matters is `result`
        return result;
    }
    sync_directory(path)
}

/// Writes `file` (at `tmp`) through a buffer and flushes it to disk.
fn fill(
    file: File,
    tmp: &Path,
    write: impl FnOnce(&mut dyn Write) -> Result<(), String>,
) -> Result<(), String> {
    let mut out = BufWriter::with_capacity(BUFFER, file);
    write(&mut out).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let file = out
        .into_inner()
        .map_err(|e| format!("writing {}: {}", tmp.display(), e.error()))?;
    file.sync_all()
        .map_err(|e| format!("flushing {}: {e}", tmp.display()))
}

/// A name in `path`'s directory that no other save uses: the target's name, this process's
/// id and a process-wide unique number.
fn temporary(path: &Path) -> Result<PathBuf, String> {
    let name = path
        .file_name()
        .ok_or_else(|| "the path names no file".to_owned())?
        .to_string_lossy();
    let n = next_id();
    Ok(path.with_file_name(format!(".{name}.{}.{n}.tmp", std::process::id())))
}

/// Removes the temporary files in `dir` that saves of a target `is_target` accepts left
/// behind in processes that are gone: exactly the names [`write_atomically`] makes, owned by
/// this process's user, with another process's id that no running process has. Nothing else
/// is touched: not this process's files (a save of another thread may be writing one), not a
/// running process's, not another user's, not any other name. Where processes cannot be
/// looked up (no `/proc`, or not Linux) every file stays. Returns how many were removed, or
/// the first that could not be.
pub(super) fn remove_stale(
    dir: &Path,
    is_target: impl Fn(&str) -> bool,
) -> Result<usize, (PathBuf, io::Error)> {
    let Some(processes) = Processes::here() else {
        return Ok(0);
    };
    let mut removed = 0;
    for entry in fs::read_dir(dir).map_err(|e| (dir.to_path_buf(), e))? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|name| saver(name, &is_target)) else {
            continue;
        };
        if !processes.gone(pid) || !entry.metadata().is_ok_and(|m| processes.owns(&m)) {
            continue;
        }
        match fs::remove_file(entry.path()) {
            Ok(()) => removed += 1,
            // Another process cleaning the same directory removed it first.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err((entry.path(), e)),
        }
    }
    Ok(removed)
}

/// The id of the process that wrote `name`, if it is a temporary file of a save of a target
/// `is_target` accepts: `.{target}.{pid}.{n}.tmp`, both numbers plain digits.
fn saver(name: &str, is_target: impl Fn(&str) -> bool) -> Option<u32> {
    let rest = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let mut parts = rest.rsplitn(3, '.');
    let (n, pid, target) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(n) || !digits(pid) || !is_target(target) {
        return None;
    }
    pid.parse().ok()
}

/// The processes of this machine, looked up in `/proc`, and this process's user.
#[cfg(target_os = "linux")]
struct Processes {
    own: u32,
    uid: u32,
}

#[cfg(target_os = "linux")]
impl Processes {
    /// `None` where processes cannot be looked up: no `/proc` mounted.
    fn here() -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        // `/proc/self` belongs to this process's user.
        let uid = fs::metadata("/proc/self").ok()?.uid();
        Some(Self {
            own: std::process::id(),
            uid,
        })
    }

    /// Whether no process has the id `pid` (not this one): its `/proc` entry is missing. A
    /// zombie, or an id reused by a new process, counts as running. (Another user's processes
    /// may be hidden from `/proc`; `owns` keeps their files out.)
    fn gone(&self, pid: u32) -> bool {
        let entry = fs::symlink_metadata(format!("/proc/{pid}"));
        pid != self.own && matches!(entry, Err(e) if e.kind() == io::ErrorKind::NotFound)
    }

    /// Whether this process's user owns the file.
    fn owns(&self, metadata: &fs::Metadata) -> bool {
        use std::os::unix::fs::MetadataExt;
        metadata.uid() == self.uid
    }
}

/// Elsewhere processes cannot be looked up: every file stays.
#[cfg(not(target_os = "linux"))]
struct Processes;

#[cfg(not(target_os = "linux"))]
impl Processes {
    fn here() -> Option<Self> {
        None
    }
    fn gone(&self, _pid: u32) -> bool {
        false
    }
    fn owns(&self, _metadata: &fs::Metadata) -> bool {
        false
    }
}

/// Flushes `path`'s directory entry (a no-op where directories cannot be opened as files).
fn sync_directory(path: &Path) -> Result<(), String> {
    if !cfg!(unix) {
        return Ok(());
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| format!("flushing directory {}: {e}", dir.display()))
}
