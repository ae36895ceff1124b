//! A crash at any point of a save leaves a whole checkpoint on disk. A child process saves
//! checkpoints in a loop (save `i` holds the value `i` everywhere); the parent kills it at a
//! random moment once a first save is on disk, then loads what is there: it must be one whole
//! save, never a mix or a torn file. In a [`Checkpoints`] directory, what the killed saves
//! left behind does not pile up.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use mvtensor::checkpoint::Checkpoints;
use mvtensor::Store;
use ndarray::{Array1, Ix1};

const CHILD: &str = "MVTENSOR_CHECKPOINT_CRASH_CHILD";
const NUMBERED: &str = "MVTENSOR_CHECKPOINT_CRASH_NUMBERED";
const TENSORS: usize = 4;
const LEN: usize = 64 * 1024; // 256 KiB of f32 each: a save takes a while

#[test]
#[cfg_attr(miri, ignore = "spawns processes")]
fn a_crash_during_a_save_leaves_a_whole_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    let mut seed = std::process::id() as u64 | 1;
    for round in 0..12 {
        let child = saver("checkpoint_crash::saves_forever", CHILD, &path);
        kill_after_a_save(child, &mut seed, round);
        assert_whole(&path, round);
    }
}

/// Killed saves in a [`Checkpoints`] directory leave at most the last one's temporary file:
/// each new process's `Checkpoints::new` removes those of the processes before it, and the
/// parent's removes the last, so that a model's worth of disk per killed save never piles up.
#[test]
#[cfg(target_os = "linux")]
#[cfg_attr(miri, ignore = "spawns processes")]
fn killed_saves_leave_no_pile_of_temporary_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut seed = std::process::id() as u64 | 1;
    let temporaries = || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".tmp")
            })
            .count()
    };
    // Rounds until three kills have landed mid-save (about one in four does).
    let (mut left, mut rounds) = (0, 0);
    while left < 3 && rounds < 64 {
        let child = saver(
            "checkpoint_crash::saves_numbered_forever",
            NUMBERED,
            dir.path(),
        );
        kill_after_a_save(child, &mut seed, rounds);
        let now = temporaries();
        assert!(now <= 1, "round {rounds}: {now} temporary files");
        (left, rounds) = (left + now, rounds + 1);
    }
    assert!(left >= 3, "{rounds} kills, only {left} mid-save");
    let checkpoints = Checkpoints::new(dir.path(), 2).unwrap();
    assert_eq!(temporaries(), 0, "the last killed save's file is removed");
    let files = checkpoints.list().unwrap();
    assert_whole(files.last().unwrap(), rounds);
}

/// Runs the ignored test `child` of this binary in a process of its own, with `var` set to
/// `path`.
fn saver(child: &str, var: &str, path: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            child,
            "--nocapture",
            "--test-threads=1",
        ])
        .env(var, path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits until `child` has a first save on disk (it prints after each), then kills it at a
/// random moment: usually in the middle of a later save.
fn kill_after_a_save(mut child: Child, seed: &mut u64, round: usize) {
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.find_map(|l| l.unwrap().strip_prefix("saved ").map(str::to_owned));
    assert!(first.is_some(), "round {round}: the child saved nothing");
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    std::thread::sleep(Duration::from_micros(*seed % 20_000));
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The file at `path` is one whole save: every tensor holds one value throughout.
fn assert_whole(path: &Path, round: usize) {
    let store = Store::load(path).unwrap_or_else(|e| panic!("round {round}: {e}"));
    let values: Vec<f32> = (0..TENSORS)
        .map(|t| {
            let v = store.get::<f32, Ix1>(&format!("t{t}")).unwrap();
            let r = v.read();
            assert_eq!(r.len(), LEN);
            assert!(r.iter().all(|&x| x == r[0]), "round {round}: a torn tensor");
            r[0]
        })
        .collect();
    assert!(
        values.iter().all(|&v| v == values[0]),
        "round {round}: a mix of saves {values:?}"
    );
}

/// The child: saves `i` everywhere, for i = 0, 1, 2, ..., until killed.
#[test]
#[ignore = "the child process of a_crash_during_a_save_leaves_a_whole_checkpoint"]
fn saves_forever() {
    let path = std::env::var_os(CHILD).expect("run by the crash test");
    save_forever(|store| {
        store.save(&path).unwrap();
    });
}

/// The child of the numbered test: the same, through a `Checkpoints` directory.
#[test]
#[ignore = "the child process of killed_saves_leave_no_pile_of_temporary_files"]
fn saves_numbered_forever() {
    let dir = std::env::var_os(NUMBERED).expect("run by the crash test");
    let checkpoints = Checkpoints::new(dir, 2).unwrap();
    save_forever(|store| drop(checkpoints.save(store).unwrap()));
}

fn save_forever(mut save: impl FnMut(&Store)) {
    let store = Store::new();
    let tensors: Vec<_> = (0..TENSORS)
        .map(|t| {
            store
                .variable(&format!("t{t}"), Array1::<f32>::zeros(LEN))
                .unwrap()
        })
        .collect();
    for i in 0u32.. {
        for t in &tensors {
            t.assign(Array1::from_elem(LEN, i as f32)).unwrap();
        }
        save(&store);
        println!("saved {i}");
    }
}
