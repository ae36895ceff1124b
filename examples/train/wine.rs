//! The wine-quality model of `examples/train.rs`, shared with `trainer.rs`, the MPI trainer
//! and its tests, and workload 9 of the benchmarks (`bench/`): the
//! data (the 1,599 red wines of the UCI wine-quality data, as `linfa-datasets` ships them:
//! 11 standardised measurements and the quality score per row) and an MLP's loss and
//! gradients (11 -> 32 tanh -> 1, mean squared error).

#![allow(dead_code)] // each includer uses part of it

use ndarray::{s, Array1, Array2, ArrayRef1, ArrayRef2, Axis};

pub const FEATURES: usize = 11;
pub const HIDDEN: usize = 32;
pub const BATCH: usize = 32;

/// Every wine, one row each: `[n, 12]`, the 11 features standardised, then the quality.
pub fn wines() -> Array2<f32> {
    let data = linfa_datasets::winequality();
    let n = data.records.shape()[0];
    let mut rows = Array2::<f32>::zeros((n, FEATURES + 1));
    for (i, &x) in data.records.iter().enumerate() {
        rows[[i / FEATURES, i % FEATURES]] = x as f32; // row-major
    }
    for (i, &t) in data.targets.iter().enumerate() {
        rows[[i, FEATURES]] = t as f32;
    }
    for j in 0..FEATURES {
        let col = rows.column(j);
        let (mean, std) = (col.mean().unwrap_or(0.0), col.std(0.0).max(1e-6));
        rows.column_mut(j).mapv_inplace(|x| (x - mean) / std);
    }
    rows
}

/// The initial parameters (w1, b1, w2, b2): small deterministic values, b2 near the mean
/// quality.
pub fn init() -> (Array2<f32>, Array1<f32>, Array2<f32>, Array1<f32>) {
    let w = |r: usize, c: usize, k: f32| {
        Array2::from_shape_fn((r, c), |(i, j)| {
            ((i * 17 + j * 31) % 23) as f32 / 23.0 * k - k / 2.0
        })
    };
    (
        w(FEATURES, HIDDEN, 0.6),
        Array1::zeros(HIDDEN),
        w(HIDDEN, 1, 0.4),
        Array1::from_elem(1, 5.6),
    )
}

/// Parameters as borrowed arrays, in the order of [`init`].
pub type Params<'a> = (
    &'a ArrayRef2<f32>,
    &'a ArrayRef1<f32>,
    &'a ArrayRef2<f32>,
    &'a ArrayRef1<f32>,
);

/// Gradients, in the order of [`init`].
pub type Grads = (Array2<f32>, Array1<f32>, Array2<f32>, Array1<f32>);

/// The mean squared error over `rows` (of [`wines`]) and its gradients.
pub fn loss_and_grads((w1, b1, w2, b2): Params<'_>, rows: &Array2<f32>) -> (f32, Grads) {
    let x = rows.slice(s![.., ..FEATURES]);
    let t = rows.slice(s![.., FEATURES..]);
    let h = (x.dot(w1) + b1).mapv(f32::tanh);
    let diff = h.dot(w2) + b2 - t;
    let loss = diff.mapv(|d| d * d).mean().unwrap_or(0.0);
    let dy = diff * (2.0 / rows.nrows() as f32);
    let dh = dy.dot(&w2.t()) * h.mapv(|h| 1.0 - h * h);
    let grads = (
        x.t().dot(&dh),
        dh.sum_axis(Axis(0)),
        h.t().dot(&dy),
        dy.sum_axis(Axis(0)),
    );
    (loss, grads)
}

/// The rows of minibatch number `step`: a fixed pseudo-random pick.
pub fn batch(data: &Array2<f32>, step: usize) -> Array2<f32> {
    let n = data.nrows() as u64;
    let mut h = (step as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let rows: Vec<usize> = (0..BATCH)
        .map(|_| {
            h ^= h >> 29;
            h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
            (h % n) as usize
        })
        .collect();
    data.select(Axis(0), &rows)
}
