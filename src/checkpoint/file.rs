//! Writing a file so that a crash leaves the old one or the new one, never a mix.
//!
//! (safetensors 0.8 itself writes a sibling temporary file and renames it into place, which
//! already survives a killed process; what it leaves out is the `fsync` of the file before
//! the rename and of the directory after it, without which a power failure can leave the
//! renamed file empty. `tests/checkpoint_crash.rs` kills a saving process at random moments;
//! a save that writes the target in place fails it within a few rounds.)

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use crate::sync::next_id;

/// Writes `path` through `write`, which fills the temporary file it is given: the temporary
/// file lives in `path`'s directory (so the rename stays on one file system), is flushed to
/// disk, renamed over `path`, and the directory is flushed so that the rename itself is
/// durable. On failure the temporary file is removed and `path` is untouched.
pub(super) fn write_atomically(
    path: &Path,
    write: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<(), String> {
    let tmp = temporary(path)?;
    let result = write(&tmp).and_then(|()| {
        File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(|e| format!("flushing {}: {e}", tmp.display()))?;
        fs::rename(&tmp, path).map_err(|e| format!("renaming {} over it: {e}", tmp.display()))
    });
    if result.is_err() {
        let _ = fs::remove_file(&tmp); // best effort: the error that matters is `result`
        return result;
    }
    sync_directory(path)
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
