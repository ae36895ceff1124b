//! Workload 8: checkpointing while training. Four trainer threads update a model
//! of ten tensors (1-4 MiB each, 22 MiB in all), one tensor per step, while a checkpointer
//! saves the whole model to disk every 100 ms. What matters is what the checkpoints cost the
//! trainers: their step latency with and without a checkpointer.
//!
//! mvtensor: the tensors are variables of one `Store`; a step is `assign_add`; a checkpoint
//! is `Store::save` (a consistent snapshot, written while the trainers go on). The mutex
//! variant: one `parking_lot::Mutex<ArrayD>` per tensor, updated in place; a consistent
//! checkpoint locks every tensor, clones them all, unlocks, then writes the clones (the same
//! safetensors file, the same fsync and rename).
//!
//! Each file is checked after the run: every tensor holds one value throughout (a tensor of
//! ones was added whole, or not at all).

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mvtensor::{Store, Variable};
use ndarray::{ArrayD, IxDyn};
use safetensors::tensor::{Dtype, View};
use safetensors::SafeTensors;

use super::wide::add_array;

/// Tensor sizes in f32 elements: 1, 2 and 4 MiB.
pub const TENSORS: [usize; 10] = [
    1 << 18,
    1 << 19,
    1 << 20,
    1 << 18,
    1 << 19,
    1 << 20,
    1 << 18,
    1 << 19,
    1 << 20,
    1 << 18,
];
pub const TRAINERS: usize = 4;
pub const INTERVAL: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CheckpointVariant {
    Mvtensor,
    Mutex,
}

impl CheckpointVariant {
    pub const ALL: [CheckpointVariant; 2] = [CheckpointVariant::Mvtensor, CheckpointVariant::Mutex];
    pub fn name(self) -> &'static str {
        match self {
            CheckpointVariant::Mvtensor => "mvtensor",
            CheckpointVariant::Mutex => "parking_lot Mutex per tensor",
        }
    }
}

/// What one run measured (or several, [`merge`](Self::merge)d).
#[derive(Debug, Clone)]
pub struct CheckpointRun {
    /// Trainer step latency, nanoseconds.
    pub steps: Histogram<u64>,
    /// Checkpoints written, and the wall time each took (lock-and-clone included).
    pub saves: Vec<Duration>,
    /// Trainer steps done in all.
    pub updates: u64,
}

impl Default for CheckpointRun {
    /// Nothing measured yet.
    fn default() -> Self {
        Self {
            steps: Histogram::new(3).expect("histogram"),
            saves: Vec::new(),
            updates: 0,
        }
    }
}

impl CheckpointRun {
    /// Adds `other`'s steps, saves and updates to these.
    pub fn merge(&mut self, other: CheckpointRun) {
        self.steps.add(other.steps).expect("same bounds");
        self.saves.extend(other.saves);
        self.updates += other.updates;
    }
}

/// Runs `variant` for `duration`, checkpointing into `dir` every [`INTERVAL`] if
/// `checkpoint`.
pub fn run(
    variant: CheckpointVariant,
    checkpoint: bool,
    duration: Duration,
    dir: &Path,
) -> CheckpointRun {
    let path = dir.join(format!("{variant:?}.safetensors"));
    let _ = std::fs::remove_file(&path);
    let run = match variant {
        CheckpointVariant::Mvtensor => run_mvtensor(checkpoint, duration, &path),
        CheckpointVariant::Mutex => run_mutex(checkpoint, duration, &path),
    };
    if checkpoint {
        check_file(&path);
    }
    run
}

fn deltas() -> Vec<ArrayD<f32>> {
    TENSORS.iter().map(|&n| ArrayD::ones(IxDyn(&[n]))).collect()
}

/// The trainers and the checkpointer, over any model: `step(t)` updates tensor `t`,
/// `save()` writes one checkpoint.
fn drive(
    checkpoint: bool,
    duration: Duration,
    step: impl Fn(usize) + Sync,
    save: impl Fn() + Sync,
) -> CheckpointRun {
    let stop = AtomicBool::new(false);
    let updates = AtomicU64::new(0);
    let start = Barrier::new(TRAINERS + 2);
    let (steps, saves) = thread::scope(|s| {
        let trainers: Vec<_> = (0..TRAINERS)
            .map(|id| {
                let (stop, start, step, updates) = (&stop, &start, &step, &updates);
                s.spawn(move || {
                    let mut h = Histogram::<u64>::new(3).expect("histogram");
                    start.wait();
                    let mut i = id;
                    // Relaxed: a stop flag; nothing is published through it.
                    while !stop.load(Ordering::Relaxed) {
                        let t0 = Instant::now();
                        step(i % TENSORS.len());
                        h.record(t0.elapsed().as_nanos() as u64).expect("in range");
                        i += TRAINERS;
                    }
                    // Relaxed: a total read after the join, which orders every add.
                    updates.fetch_add(h.len(), Ordering::Relaxed);
                    h
                })
            })
            .collect();
        let saver = s.spawn(|| {
            let mut saves = Vec::new();
            start.wait();
            let mut next = Instant::now() + INTERVAL;
            // Relaxed (both loads): a stop flag; the saves come back through the join.
            while checkpoint && !stop.load(Ordering::Relaxed) {
                thread::sleep(next.saturating_duration_since(Instant::now()));
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let t0 = Instant::now();
                save();
                saves.push(t0.elapsed());
                next += INTERVAL;
            }
            saves
        });
        start.wait();
        thread::sleep(duration);
        // Relaxed: a stop flag; the joins below order what the threads did.
        stop.store(true, Ordering::Relaxed);
        let mut steps = Histogram::<u64>::new(3).expect("histogram");
        for t in trainers {
            steps.add(t.join().expect("trainer")).expect("same bounds");
        }
        (steps, saver.join().expect("checkpointer"))
    });
    CheckpointRun {
        steps,
        saves,
        updates: updates.into_inner(),
    }
}

fn run_mvtensor(checkpoint: bool, duration: Duration, path: &Path) -> CheckpointRun {
    let store = Store::new();
    let vars: Vec<Variable<f32>> = TENSORS
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            store
                .variable(&format!("t{i}"), ArrayD::zeros(IxDyn(&[n])))
                .expect("new name")
        })
        .collect();
    let deltas = deltas();
    let run = drive(
        checkpoint,
        duration,
        |t| {
            vars[t].assign_add(&deltas[t]).expect("same shape");
        },
        || {
            store.save(path).expect("checkpoint written");
        },
    );
    check_final(
        "mvtensor",
        vars.iter().map(|v| v.read().to_owned()),
        run.updates,
    );
    run
}

fn run_mutex(checkpoint: bool, duration: Duration, path: &Path) -> CheckpointRun {
    let tensors: Vec<parking_lot::Mutex<ArrayD<f32>>> = TENSORS
        .iter()
        .map(|&n| parking_lot::Mutex::new(ArrayD::zeros(IxDyn(&[n]))))
        .collect();
    let deltas = deltas();
    let run = drive(
        checkpoint,
        duration,
        |t| add_array(&mut tensors[t].lock(), &deltas[t]),
        || {
            // A consistent cut: every lock held at once, in order, while cloning.
            let guards: Vec<_> = tensors.iter().map(|m| m.lock()).collect();
            let copies: Vec<ArrayD<f32>> = guards.iter().map(|g| (**g).clone()).collect();
            drop(guards);
            write_plain(path, &copies);
        },
    );
    check_final(
        "mutex",
        tensors.into_iter().map(|m| m.into_inner()),
        run.updates,
    );
    run
}

/// The mutex variant's file: the same format and the same durability as `Store::save`.
fn write_plain(path: &Path, copies: &[ArrayD<f32>]) {
    let tmp = path.with_extension("tmp");
    let views = copies
        .iter()
        .enumerate()
        .map(|(i, a)| (format!("t{i}"), Plain(a)));
    safetensors::serialize_to_file(views, None, &tmp).expect("written");
    File::open(&tmp)
        .and_then(|f| f.sync_all())
        .expect("flushed");
    std::fs::rename(&tmp, path).expect("renamed");
    File::open(path.parent().expect("a directory"))
        .and_then(|d| d.sync_all())
        .expect("directory flushed");
}

struct Plain<'a>(&'a ArrayD<f32>);

impl View for Plain<'_> {
    fn dtype(&self) -> Dtype {
        Dtype::F32
    }
    fn shape(&self) -> &[usize] {
        self.0.shape()
    }
    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        let values = self.0.as_slice().expect("standard layout");
        if cfg!(target_endian = "little") {
            // SAFETY: f32 has no padding; the bytes are exactly the slice's memory, borrowed
            // for as long. (No copy, as mvtensor's own save: the comparison stays fair.)
            unsafe {
                std::slice::from_raw_parts(
                    values.as_ptr().cast::<u8>(),
                    std::mem::size_of_val(values),
                )
            }
            .into()
        } else {
            values
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<u8>>()
                .into()
        }
    }
    fn data_len(&self) -> usize {
        self.0.len() * 4
    }
}

/// Every update landed exactly once: each tensor holds one value throughout (the number of
/// ones added to it), and the values add up to the updates the trainers counted.
fn check_final(variant: &str, tensors: impl Iterator<Item = ArrayD<f32>>, updates: u64) {
    let mut total = 0u64;
    for (t, a) in tensors.enumerate() {
        let first = a.first().copied().unwrap_or(0.0);
        assert!(
            a.iter().all(|&x| x == first),
            "{variant}: tensor {t} is torn"
        );
        total += first as u64;
    }
    assert_eq!(total, updates, "{variant}: LOST OR EXTRA UPDATE");
}

/// Every tensor of the file holds one value throughout: no update was torn.
fn check_file(path: &Path) {
    let bytes = std::fs::read(path).expect("a checkpoint was written");
    let file = SafeTensors::deserialize(&bytes).expect("a valid file");
    let mut seen = HashMap::new();
    for (name, view) in file.iter() {
        let data = view.data();
        let first = &data[..4];
        assert!(
            data.chunks_exact(4).all(|c| c == first),
            "`{name}` is torn in {}",
            path.display()
        );
        seen.insert(
            name.to_owned(),
            f32::from_le_bytes(first.try_into().expect("4 bytes")),
        );
    }
    assert_eq!(
        seen.len(),
        TENSORS.len(),
        "every tensor is in {}",
        path.display()
    );
}
