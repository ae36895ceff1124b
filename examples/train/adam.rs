//! The Mutex twin's Adam: one step of one tensor on plain slices, with mvtensor's default
//! betas and epsilon and `train.rs`'s learning rate, in the same eight-wide loop as
//! mvtensor's optimizer (AVX2 where the processor has it), so that the lock's holder runs
//! the fastest update it can and the comparison measures the sharing, not the arithmetic.
//! The benchmarks' lock variants (`bench/`) use it too.

#![allow(dead_code)] // each includer uses part of it

use ndarray::{ArrayD, ArrayRef, IxDyn};

pub const B1: f32 = 0.9;
pub const B2: f32 = 0.999;
pub const LR: f32 = 1e-3;
pub const EPS: f32 = 1e-8;

/// Adam's bias corrections at step `t`, computed once per step, as mvtensor's optimizer
/// computes them: the bits of `1.0 - B1.powi(t)`, but without `powi`'s squaring into the
/// subnormal range, where each multiplication takes a microcode assist.
pub fn bias_correction(t: i64) -> (f32, f32) {
    let t = t.clamp(0, i64::from(i32::MAX)) as u32;
    (one_minus_power(B1, t), one_minus_power(B2, t))
}

/// `1 - beta^n` with the multiplications of `powi` (compiler-builtins'), stopping once
/// `beta^n` can no longer change the difference (`src/optim/rule.rs` says why it is exact).
fn one_minus_power(beta: f32, mut n: u32) -> f32 {
    let (mut base, mut power) = (beta, 1.0f32);
    loop {
        power *= if n & 1 != 0 { base } else { 1.0 };
        n >>= 1;
        if n == 0 {
            return 1.0 - power;
        }
        base *= base;
        if base <= f32::EPSILON / 4.0 {
            return 1.0;
        }
    }
}

/// One Adam step of one tensor, in place (the same expression for every variant), with the
/// step's [`bias_correction`], on the tensors' elements as slices: the fastest way a lock's
/// holder can run it.
pub fn adam(
    p: &mut ArrayRef<f32, IxDyn>,
    m: &mut ArrayRef<f32, IxDyn>,
    v: &mut ArrayRef<f32, IxDyn>,
    g: &ArrayD<f32>,
    (c1, c2): (f32, f32),
) {
    let standard = "the model's tensors are in standard layout";
    let (p, m, v) = (
        p.as_slice_mut().expect(standard),
        m.as_slice_mut().expect(standard),
        v.as_slice_mut().expect(standard),
    );
    // A gradient computed through a transposed product may come in another layout: copied
    // then, as `optim::Optimizer` does.
    let g = g.as_standard_layout();
    let g = g.as_slice().expect(standard);
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the processor has AVX2.
        return unsafe { adam_avx2(p, m, v, g, (c1, c2)) };
    }
    adam_slices(p, m, v, g, (c1, c2));
}

/// [`adam_slices`] in AVX2, as mvtensor's optimizer runs it where the processor has it
/// (`src/kernel/wide.rs`): the lock's holder gets the same eight-wide divisions and square
/// roots, and the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn adam_avx2(p: &mut [f32], m: &mut [f32], v: &mut [f32], g: &[f32], c: (f32, f32)) {
    adam_slices(p, m, v, g, c);
}

#[inline(always)]
fn adam_slices(p: &mut [f32], m: &mut [f32], v: &mut [f32], g: &[f32], (c1, c2): (f32, f32)) {
    for (((p, m), v), &g) in p.iter_mut().zip(m.iter_mut()).zip(v.iter_mut()).zip(g) {
        *m = B1 * *m + (1.0 - B1) * g;
        *v = B2 * *v + (1.0 - B2) * g * g;
        *p -= LR * (*m / c1) / ((*v / c2).sqrt() + EPS);
    }
}
