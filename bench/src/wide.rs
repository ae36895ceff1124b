//! The add at its best on this processor, for the floor rows and the locks' in-place updates:
//! in AVX2 where the processor has it, as mvtensor's own loops are (`src/kernel/wide.rs`).
//! A default `x86_64` build vectorizes a plain loop, ndarray's `+=` included, with SSE2
//! (four `f32` at a time): comparing that with mvtensor's eight would count the width of a
//! loop in mvtensor's favour. Same bits either way (no fused multiply-add).

use ndarray::ArrayD;

/// Whether the add runs in AVX2 here (the report says so).
pub fn avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx2");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// `a += d` on plain slices.
#[inline(never)]
pub fn add_in_place(a: &mut [f32], d: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: the processor has AVX2.
        return unsafe { add_in_place_avx2(a, d) };
    }
    add_in_place_plain(a, d);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn add_in_place_avx2(a: &mut [f32], d: &[f32]) {
    add_in_place_plain(a, d);
}

#[inline(always)]
fn add_in_place_plain(a: &mut [f32], d: &[f32]) {
    for (x, &y) in a.iter_mut().zip(d) {
        *x += y;
    }
}

/// `out = a + d` on plain slices.
#[inline(never)]
pub fn add_out_of_place(out: &mut [f32], a: &[f32], d: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: the processor has AVX2.
        return unsafe { add_out_of_place_avx2(out, a, d) };
    }
    add_out_of_place_plain(out, a, d);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn add_out_of_place_avx2(out: &mut [f32], a: &[f32], d: &[f32]) {
    add_out_of_place_plain(out, a, d);
}

#[inline(always)]
fn add_out_of_place_plain(out: &mut [f32], a: &[f32], d: &[f32]) {
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(d) {
        *o = x + y;
    }
}

/// `a + d` into a new vector (an RCU writer's new tensor): no zeroing first, and the loop in
/// AVX2 where the processor has it, as everyone else's.
pub fn add_collect(a: &[f32], d: &[f32]) -> Vec<f32> {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: the processor has AVX2.
        return unsafe { add_collect_avx2(a, d) };
    }
    add_collect_plain(a, d)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn add_collect_avx2(a: &[f32], d: &[f32]) -> Vec<f32> {
    add_collect_plain(a, d)
}

#[inline(always)]
fn add_collect_plain(a: &[f32], d: &[f32]) -> Vec<f32> {
    a.iter().zip(d).map(|(&x, &y)| x + y).collect()
}

/// A lock holder's `*x += d`: on slices when both are in standard layout (the benchmarks'
/// tensors always are), else ndarray's `+=`.
pub fn add_array(x: &mut ArrayD<f32>, d: &ArrayD<f32>) {
    match (x.as_slice_mut(), d.as_slice()) {
        (Some(x), Some(d)) if x.len() == d.len() => add_in_place(x, d),
        _ => *x += d,
    }
}
