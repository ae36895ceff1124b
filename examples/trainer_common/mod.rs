//! What `trainer.rs` and `trainer_mutex.rs` share: the data, the model's arithmetic and the
//! evaluation. Only how the parameters are shared differs between the two files.
//!
//! The data: two interleaved spirals (2,000 points in the plane, two classes), generated
//! with a fixed seed, a classic problem a linear model cannot solve. The model: a multilayer
//! perceptron, 2 -> 64 (tanh) -> 2 (softmax), trained by minibatch SGD on cross-entropy.

#![allow(dead_code)] // each example uses part of it

use ndarray::{Array1, Array2, ArrayRef1, ArrayRef2, Axis};

pub const HIDDEN: usize = 64;
pub const THREADS: usize = 4;
pub const STEPS_PER_THREAD: usize = 5000;
pub const BATCH: usize = 32;
pub const LR: f32 = 0.5;

/// Inputs (n x 2) and labels (0 or 1) of the two-spirals problem.
pub struct Data {
    pub x: Array2<f32>,
    pub y: Vec<usize>,
}

pub fn spirals(n: usize) -> Data {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut noise = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let mut x = Array2::zeros((n, 2));
    let y = (0..n).map(|i| i % 2).collect::<Vec<_>>();
    for i in 0..n {
        let t = (i / 2) as f32 / (n / 2) as f32 * 2.0 * std::f32::consts::PI;
        let sign = if y[i] == 0 { 1.0 } else { -1.0 };
        x[[i, 0]] = sign * t * t.cos() / 4.0 + 0.05 * noise();
        x[[i, 1]] = sign * t * t.sin() / 4.0 + 0.05 * noise();
    }
    Data { x, y }
}

/// Initial parameters: small deterministic values (w1, b1, w2, b2).
pub fn init() -> (Array2<f32>, Array1<f32>, Array2<f32>, Array1<f32>) {
    let w = |r: usize, c: usize, k: f32| {
        Array2::from_shape_fn((r, c), |(i, j)| {
            ((i * 31 + j * 17) % 13) as f32 / 13.0 * k - k / 2.0
        })
    };
    (
        w(2, HIDDEN, 2.0),
        Array1::zeros(HIDDEN),
        w(HIDDEN, 2, 0.5),
        Array1::zeros(2),
    )
}

/// The gradients of one minibatch: (dw1, db1, dw2, db2), averaged over the batch.
pub struct Grads {
    pub w1: Array2<f32>,
    pub b1: Array1<f32>,
    pub w2: Array2<f32>,
    pub b2: Array1<f32>,
}

/// Forward and backward pass over rows `rows` of the data.
pub fn gradients(
    (w1, b1, w2, b2): (
        &ArrayRef2<f32>,
        &ArrayRef1<f32>,
        &ArrayRef2<f32>,
        &ArrayRef1<f32>,
    ),
    data: &Data,
    rows: &[usize],
) -> Grads {
    let x = data.x.select(Axis(0), rows);
    let h = (x.dot(w1) + b1).mapv(f32::tanh);
    let mut p = softmax(h.dot(w2) + b2);
    for (k, &row) in rows.iter().enumerate() {
        p[[k, data.y[row]]] -= 1.0; // d(loss)/d(logits) = p - onehot(y)
    }
    p /= rows.len() as f32;
    let dh = p.dot(&w2.t()) * h.mapv(|h| 1.0 - h * h);
    Grads {
        w1: x.t().dot(&dh),
        b1: dh.sum_axis(Axis(0)),
        w2: h.t().dot(&p),
        b2: p.sum_axis(Axis(0)),
    }
}

fn softmax(mut z: Array2<f32>) -> Array2<f32> {
    for mut row in z.rows_mut() {
        let max = row.fold(f32::MIN, |m, &v| m.max(v));
        row.mapv_inplace(|v| (v - max).exp());
        let sum = row.sum();
        row /= sum;
    }
    z
}

/// The share of points classified right.
pub fn accuracy(
    (w1, b1, w2, b2): (
        &ArrayRef2<f32>,
        &ArrayRef1<f32>,
        &ArrayRef2<f32>,
        &ArrayRef1<f32>,
    ),
    data: &Data,
) -> f32 {
    let logits = (data.x.dot(w1) + b1).mapv(f32::tanh).dot(w2) + b2;
    let right = (0..data.y.len())
        .filter(|&i| (logits[[i, 1]] > logits[[i, 0]]) == (data.y[i] == 1))
        .count();
    right as f32 / data.y.len() as f32
}

/// The minibatch of step `step` of thread `thread`: a fixed pseudo-random pick of rows.
pub fn batch(thread: usize, step: usize, n: usize) -> Vec<usize> {
    let mut h = (thread * 1_000_003 + step) as u64 * 0x9e37_79b9_7f4a_7c15;
    (0..BATCH)
        .map(|_| {
            h ^= h >> 29;
            h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
            (h % n as u64) as usize
        })
        .collect()
}
