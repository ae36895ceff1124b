//! Checkpoints kept as a trainer goes: numbered files in a directory
//! ([`Checkpoints`]), the newest few kept, saved by hand or from a background thread.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mvtensor::checkpoint::Checkpoints;
use mvtensor::{Error, Store};
use ndarray::{Array1, Ix1};

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().expect("a scratch directory")
}

/// A trainer resumed from its last checkpoint starts a new process, whose commit clock
/// starts again: its new files must still sort after its previous run's. Named after the
/// clock alone, with `keep` files of a longer run in the directory, each new save would be
/// the lowest number and be deleted as soon as it is written, its path returned.
#[test]
#[cfg_attr(miri, ignore = "file system I/O (miri isolates it)")]
fn a_resumed_trainers_checkpoints_sort_after_its_previous_runs() {
    let dir = scratch();
    let store = Store::new();
    let w = store.variable("w", Array1::<f32>::zeros(2)).unwrap();
    // The previous run's last checkpoint, numbered far beyond this process's clock.
    let previous = dir
        .path()
        .join(format!("checkpoint-{:020}.safetensors", u64::MAX / 2));
    store.snapshot().save(&previous).unwrap();
    // A file that only looks like a checkpoint is neither counted nor removed.
    let stranger = dir.path().join("checkpoint-notes.safetensors");
    std::fs::write(&stranger, b"not ours").unwrap();

    let checkpoints = Checkpoints::new(dir.path(), 2).unwrap();
    let mut saved = Vec::new();
    for step in 1..=3 {
        w.assign_add(&Array1::ones(2)).unwrap();
        saved.push(checkpoints.clone().save(&store).unwrap());
        let files = checkpoints.list().unwrap();
        assert_eq!(files.last(), saved.last(), "the newest save sorts last");
        let newest = Store::load(files.last().unwrap()).unwrap();
        assert_eq!(newest.get::<f32, Ix1>("w").unwrap().read()[0], step as f32);
    }
    // The newest two are kept, the previous run's and the first save removed.
    assert_eq!(checkpoints.list().unwrap(), saved[1..].to_vec());
    assert!(!previous.exists() && stranger.exists());
    // A new handle on the directory counts on from the highest number.
    let later = Checkpoints::new(dir.path(), 2)
        .unwrap()
        .save(&store)
        .unwrap();
    assert_eq!(checkpoints.list().unwrap().last(), Some(&later));
}

/// Saves through clones at once (a trainer's own beside `every`'s) each keep the newest
/// files without failing: two saves may both remove the same old file. (The second got
/// NotFound: an audit's background checkpointer stopped after 11 saves.)
#[test]
#[cfg_attr(miri, ignore = "file system I/O (miri isolates it)")]
fn saves_through_clones_at_once_all_succeed() {
    let dir = scratch();
    let store = Store::new();
    let _w = store.variable("w", Array1::<f32>::zeros(16)).unwrap();
    let checkpoints = Checkpoints::new(dir.path(), 1).unwrap();
    std::thread::scope(|s| {
        for _ in 0..2 {
            let (checkpoints, store) = (checkpoints.clone(), &store);
            s.spawn(move || {
                for _ in 0..150 {
                    checkpoints.save(store).unwrap();
                }
            });
        }
    });
    assert!(!checkpoints.list().unwrap().is_empty());
}

/// The background checkpointer outlives failed saves: with its directory gone, saves fail,
/// are counted and keep the error; once the directory is back it saves again (a failure
/// that ended its thread would go unseen until `stop`). A writer keeps writing,
/// so that every interval has something new to save.
#[test]
#[cfg_attr(miri, ignore = "file system I/O (miri isolates it)")]
fn a_background_checkpointer_goes_on_after_failed_saves() {
    let scratch = scratch();
    let dir = scratch.path().join("checkpoints");
    let store = Arc::new(Store::new());
    let w = store.variable("w", Array1::<f32>::zeros(8)).unwrap();
    let background = Checkpoints::new(&dir, 2)
        .unwrap()
        .every(Arc::clone(&store), Duration::from_millis(1))
        .unwrap();
    let writes = std::cell::Cell::new(0.0f32);
    let progress = || {
        w.assign_add(&Array1::ones(8)).unwrap();
        writes.set(writes.get() + 1.0);
        background.progress()
    };
    wait_for("two saves", || progress().saved >= 2);

    remove_while_saving(&dir);
    wait_for("two failed saves", || progress().failed >= 2);
    let failing = progress();
    assert!(
        matches!(&failing.last_error, Some(Error::Checkpoint { file, .. }) if file.contains("checkpoints")),
        "{failing:?}"
    );

    std::fs::create_dir_all(&dir).unwrap();
    let back = writes.get();
    wait_for("two saves after the failures", || {
        progress().saved >= failing.saved + 2
    });
    let last = background.stop();
    assert!(last.failed >= failing.failed && last.saved >= failing.saved + 2);
    assert!(
        last.last_error.is_some(),
        "the newest failure stays after later saves"
    );
    let newest = last.last_saved.expect("a save after the failures");
    let saved = Store::load(&newest).unwrap();
    let value = saved.get::<f32, Ix1>("w").unwrap().read()[0];
    assert!(
        back <= value && value <= writes.get(),
        "{back} <= {value} <= {}",
        writes.get()
    );
    let files = Checkpoints::new(&dir, 2).unwrap().list().unwrap();
    assert_eq!(
        files.last(),
        Some(&newest),
        "the newest two are kept: {files:?}"
    );
    assert_eq!(files.len(), 2);
}

/// An interval with no write saves nothing, so that a paused trainer's newest files stay
/// distinct checkpoints (they became copies of one state, pushing the older ones out); the
/// next write is saved. A zero interval is refused.
#[test]
#[cfg_attr(miri, ignore = "file system I/O (miri isolates it)")]
fn a_background_checkpointer_saves_only_what_changed() {
    let dir = scratch();
    let store = Arc::new(Store::new());
    let w = store.variable("w", Array1::<f32>::zeros(4)).unwrap();
    let checkpoints = Checkpoints::new(dir.path(), 3).unwrap();
    let zero = checkpoints
        .clone()
        .every(Arc::clone(&store), Duration::ZERO);
    assert!(
        matches!(
            &zero,
            Err(Error::InvalidSetting {
                setting: "interval",
                ..
            })
        ),
        "{zero:?}"
    );
    let background = checkpoints
        .clone()
        .every(Arc::clone(&store), Duration::from_millis(1))
        .unwrap();
    wait_for("the first save", || background.progress().saved >= 1);
    wait_for("idle intervals", || background.progress().unchanged >= 5);
    assert_eq!(background.progress().saved, 1, "nothing changed");
    assert_eq!(checkpoints.list().unwrap().len(), 1);

    w.assign_add(&Array1::ones(4)).unwrap();
    wait_for("the write's save", || background.progress().saved >= 2);
    let last = background.stop();
    assert_eq!(last.saved, 2);
    let newest = Store::load(last.last_saved.unwrap()).unwrap();
    assert_eq!(newest.get::<f32, Ix1>("w").unwrap().read()[0], 1.0);
}

/// Removes `dir` while the checkpointer may be writing a file in it (which makes the
/// removal fail as not empty): tries again until it is gone.
fn remove_while_saving(dir: &Path) {
    wait_for("the directory to be removed", || {
        std::fs::remove_dir_all(dir).is_ok() && !dir.exists()
    });
}

/// Polls `done` until it holds: what the checkpointer's thread does is seen only through
/// its progress and files. Fails after a minute instead of hanging.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "waited a minute for {what}"
        );
        std::thread::yield_now();
    }
}

/// A directory that is a file is an error that says so (it said "File exists").
#[test]
#[cfg_attr(miri, ignore = "file system I/O (miri isolates it)")]
fn checkpoints_in_a_file_say_it_is_a_file() {
    let dir = scratch();
    let file = dir.path().join("not-a-directory");
    std::fs::write(&file, b"x").unwrap();
    let err = Checkpoints::new(&file, 2).unwrap_err();
    assert!(
        matches!(&err, Error::Checkpoint { problem, .. } if problem.contains("not a directory")),
        "{err}"
    );
}

/// `stop_and_save` saves what was written since the last file before stopping (the last
/// steps of a run, which the next interval would have saved), and nothing when nothing was
/// written; `stop` saves nothing more.
#[test]
#[cfg_attr(miri, ignore = "file system I/O (miri isolates it)")]
fn stop_and_save_saves_the_last_writes_once() {
    let dir = scratch();
    let store = Arc::new(Store::new());
    let w = store.variable("w", Array1::<f32>::zeros(2)).unwrap();
    let checkpoints = Checkpoints::new(dir.path(), 5).unwrap();
    let hour = Duration::from_secs(3600);
    let background = checkpoints.clone().every(Arc::clone(&store), hour).unwrap();
    w.assign_add(&Array1::ones(2)).unwrap();
    let done = background.stop_and_save();
    assert_eq!((done.saved, done.failed), (1, 0));
    let last = Store::load(done.last_saved.unwrap()).unwrap();
    assert_eq!(last.get::<f32, Ix1>("w").unwrap().read()[0], 1.0);

    let background = checkpoints.clone().every(Arc::clone(&store), hour).unwrap();
    assert_eq!(background.stop().saved, 0, "stop saves nothing more");

    let background = checkpoints
        .clone()
        .every(Arc::clone(&store), Duration::from_millis(1))
        .unwrap();
    wait_for("the first save", || background.progress().saved >= 1);
    let done = background.stop_and_save();
    assert_eq!(
        done.saved, 1,
        "nothing written since: nothing saved at the stop"
    );
    assert_eq!(checkpoints.list().unwrap().len(), 2);
}

/// What interrupted saves of processes that are gone left is removed, and nothing else: a
/// temporary file of a dead process's save goes at `new` and at the next `save`; one of this
/// process (a save in flight on another thread), one of a running process, temporary files of
/// other targets or tools, and other names stay.
#[test]
#[cfg(target_os = "linux")]
#[cfg_attr(miri, ignore = "file system I/O and processes (miri isolates them)")]
fn stale_temporary_files_of_dead_processes_are_removed() {
    let dir = scratch();
    let dead = dead_pid();
    let (own, running) = (std::process::id(), std::os::unix::process::parent_id());
    let target = |n: u64| format!("checkpoint-{n:020}.safetensors");
    let stale = |n: u64| format!(".{}.{dead}.{n}.tmp", target(n));
    let kept = [
        format!(".{}.{own}.4.tmp", target(8)),
        format!(".{}.{running}.5.tmp", target(9)),
        format!(".model.safetensors.{dead}.1.tmp"),
        format!(".checkpoint-7.safetensors.{dead}.1.tmp"),
        format!(".{}.{dead}.x.tmp", target(7)),
        format!("{}.{dead}.1.tmp", target(7)),
        ".tmpAbC123".to_owned(),
        "notes.txt".to_owned(),
    ];
    for name in kept.iter().cloned().chain([stale(7)]) {
        std::fs::write(dir.path().join(name), b"half a checkpoint").unwrap();
    }
    let names = || {
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|name| !(name.starts_with("checkpoint-") && name.ends_with(".safetensors")))
            .collect();
        names.sort();
        names
    };
    let mut expected = kept.to_vec();
    expected.sort();

    let checkpoints = Checkpoints::new(dir.path(), 2).unwrap();
    assert_eq!(
        names(),
        expected,
        "`new` removed exactly the dead process's file"
    );
    std::fs::write(dir.path().join(stale(11)), b"half a checkpoint").unwrap();
    let store = Store::new();
    store.variable("w", Array1::<f32>::ones(2)).unwrap();
    let saved = checkpoints.save(&store).unwrap();
    assert_eq!(
        names(),
        expected,
        "`save` removed exactly the dead process's file"
    );
    assert_eq!(checkpoints.list().unwrap(), vec![saved]);
}

/// An id no process can have: `pid_max`, one past the largest id the kernel hands out, so
/// that no process started meanwhile can take it.
#[cfg(target_os = "linux")]
fn dead_pid() -> u32 {
    let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap();
    let pid: u32 = pid_max.trim().parse().unwrap();
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    pid
}
