//! What the ranks train: the wine-quality MLP on its real data, and a model whose gradients
//! sum exactly in any order (so that any number of ranks and threads computes the same
//! mean, bit for bit, and a run may move between rank counts and stay identical).

use std::path::Path;
use std::time::Duration;

use mvtensor::checkpoint::{Checkpoints, Restore};
use mvtensor::distributed::{Cluster, Collectives};
use mvtensor::optim::{Optimizer, Replicas};
use mvtensor::{Store, Variable};
use ndarray::{s, Array1, Array2, Ix1, Ix2, IxDyn};

use crate::launch::number;
use crate::wine;

/// This rank's cluster, with the deadline the launching test set (ms) and its kind of
/// all-reduce (`MPI_TEST_COLLECTIVES=polled`; watched if unset).
pub fn cluster() -> Cluster {
    let timeout = Duration::from_millis(number("MPI_TEST_TIMEOUT_MS") as u64);
    let collectives = match std::env::var("MPI_TEST_COLLECTIVES").as_deref() {
        Ok("polled") => Collectives::Polled,
        _ => Collectives::Watched,
    };
    let builder = Cluster::builder().timeout(timeout).collectives(collectives);
    builder.init().expect("MPI")
}

/// The wine MLP's parameters, with Adam over them, all in `store` (the optimizer's state
/// too).
pub struct Wine {
    pub w1: Variable<f32, Ix2>,
    pub b1: Variable<f32, Ix1>,
    pub w2: Variable<f32, Ix2>,
    pub b2: Variable<f32, Ix1>,
    pub data: Array2<f32>,
}

pub fn wine(store: &Store) -> (Wine, Optimizer<f32>) {
    let (w1, b1, w2, b2) = wine::init();
    let model = Wine {
        w1: store.variable("w1", w1).unwrap(),
        b1: store.variable("b1", b1).unwrap(),
        w2: store.variable("w2", w2).unwrap(),
        b2: store.variable("b2", b2).unwrap(),
        data: wine::wines(),
    };
    let adam = Optimizer::adam(3e-3)
        .name("adam")
        .param(&model.w1)
        .param(&model.b1)
        .param(&model.w2)
        .param(&model.b2)
        .build()
        .unwrap();
    adam.register_state(store).unwrap();
    (model, adam)
}

impl Wine {
    /// Worker `worker`'s share of global step `step`'s batch (of [`wine::BATCH`] rows, the
    /// same whatever the worker count), its loss and gradients.
    pub fn grads(&self, step: i64, worker: usize, workers: usize) -> (f32, wine::Grads) {
        let batch = wine::batch(&self.data, step as usize);
        let per = wine::BATCH / workers;
        let shard = batch
            .slice(s![worker * per..(worker + 1) * per, ..])
            .to_owned();
        let (w1, b1, w2, b2) = (
            self.w1.read(),
            self.b1.read(),
            self.w2.read(),
            self.b2.read(),
        );
        wine::loss_and_grads((&w1, &b1, &w2, &b2), &shard)
    }

    /// The mean squared error over every wine.
    pub fn loss(&self) -> f32 {
        let (w1, b1, w2, b2) = (
            self.w1.read(),
            self.b1.read(),
            self.w2.read(),
            self.b2.read(),
        );
        wine::loss_and_grads((&w1, &b1, &w2, &b2), &self.data).0
    }
}

/// Examples per global step of the exact model.
pub const EXAMPLES: usize = 4;

/// A model whose every gradient is a multiple of 2^-8 below 1 in size: the mean of a step's
/// [`EXAMPLES`] over any split between workers (1, 2 or 4) is exact, so the same on every
/// rank count. Adam over it (with its state in `store`).
pub fn exact(store: &Store) -> (Variable<f32, Ix1>, Variable<f32, Ix1>, Optimizer<f32>) {
    let w = store
        .variable("w", Array1::from_shape_fn(64, |i| i as f32 / 64.0))
        .unwrap();
    let b = store.variable("b", Array1::<f32>::zeros(8)).unwrap();
    let adam = Optimizer::adam(1e-2)
        .name("adam")
        .param(&w)
        .param(&b)
        .build()
        .unwrap();
    adam.register_state(store).unwrap();
    (w, b, adam)
}

/// Worker `worker`'s mean gradient of global step `step` (`workers` divides [`EXAMPLES`]).
pub fn exact_grads(step: i64, worker: usize, workers: usize) -> (Array1<f32>, Array1<f32>) {
    let per = EXAMPLES / workers;
    let examples = worker * per..(worker + 1) * per;
    let g = |len: usize, salt: i64| {
        Array1::from_shape_fn(len, |i| {
            let sum: i64 = examples
                .clone()
                .map(|e| (step * 7 + e as i64 * 13 + i as i64 * 5 + salt).rem_euclid(17) - 8)
                .sum();
            sum as f32 / 256.0 / per as f32
        })
    };
    (g(64, 0), g(8, 3))
}

/// Trains `replicas` (over the exact model's `w` and `b`) until the optimizer has taken
/// `until` steps, from `threads` workers per rank; checkpoints every `every` steps (into
/// `checkpoints`, which rank 0 alone holds).
pub fn train_exact(
    replicas: &Replicas<f32>,
    until: i64,
    every: i64,
    store: &Store,
    checkpoints: Option<&Checkpoints>,
) {
    let workers = replicas.total_workers();
    let threads = workers / replicas.ranks();
    let first = replicas.rank() * threads;
    while replicas.optimizer().steps() < until {
        let step = replicas.optimizer().steps() + 1;
        replicas.run(|thread| {
            let (gw, gb) = exact_grads(step, first + thread, workers);
            replicas.step((&gw, &gb)).unwrap()
        });
        if step % every == 0 {
            replicas.save_checkpoint(store, checkpoints).unwrap();
        }
    }
}

/// Rank 0's checkpoints in `dir`: only rank 0 saves, and only it makes a `Checkpoints`
/// (making one cleans up temporary files by this machine's process ids).
pub fn rank0_checkpoints(dir: &Path, keep: usize, rank: usize) -> Option<Checkpoints> {
    (rank == 0).then(|| Checkpoints::new(dir, keep).unwrap())
}

/// Restores the newest of `checkpoints` into `store` (rank 0's: the replicas hand it to the
/// others); returns whether there was one (`false` on the other ranks).
pub fn restore_newest(store: &Store, checkpoints: Option<&Checkpoints>) -> bool {
    let Some(newest) = checkpoints.and_then(|c| c.list().unwrap().pop()) else {
        return false;
    };
    store.restore(&newest, Restore::default()).unwrap();
    true
}

/// Every variable's bits in name order: what ranks and runs compare.
pub fn state_bits(store: &Store) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut names: Vec<String> = store.list().into_iter().map(|v| v.name).collect();
    names.sort();
    for name in names {
        let v = store.get::<f32, IxDyn>(&name).unwrap();
        for x in v.read().iter() {
            bytes.extend_from_slice(&x.to_bits().to_le_bytes());
        }
    }
    bytes
}

/// Writes this rank's [`state_bits`] as `dir/rank<r>.bits`.
pub fn write_bits(dir: &Path, rank: usize, store: &Store) {
    std::fs::write(dir.join(format!("rank{rank}.bits")), state_bits(store)).unwrap();
}
