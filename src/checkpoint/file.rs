//! Writing a file so that a crash leaves the old one or the new one, never a mix.
//!
//! A save writes a temporary file beside the target, `.{target}.{pid}.{n}.tmp` (the saving
//! process's id and a number unique in that process), flushes it to disk, renames it over the
//! target and flushes the directory: without the two flushes a power failure can leave the
//! renamed file empty. `tests/checkpoint_crash.rs` kills a saving process at random moments;
//! a save that writes the target in place fails it within a few rounds.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
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
