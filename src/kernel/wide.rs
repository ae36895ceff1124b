//! The element loops in AVX2, chosen at run time.
//!
//! A build for plain `x86_64` vectorizes the loops with SSE2, four `f32` at a time. Most
//! processors a trainer runs on have AVX2 (eight), and a write of a tensor that sits in L1 is
//! bound by those instructions, not by memory (AVX2 nearly halves it; in L2 and beyond the
//! cache bounds both). So each loop is compiled twice, and the processor's answer (which std
//! caches: one load a call) picks one.
//!
//! Only the width changes. No FMA: a fused multiply-add rounds once, so a scaled add would
//! differ in its last bit from the SSE2 loop's and from the same arithmetic written with
//! ndarray. Either loop gives the same bits.

use super::{accumulate_plain, zip_into_plain, Op};
use crate::Element;

/// Whether this processor has AVX2 (cached by std after the first look).
#[inline(always)]
pub(crate) fn avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

/// [`accumulate`](super::accumulate) in AVX2.
///
/// # Safety
/// The processor has AVX2 ([`avx2`]).
#[target_feature(enable = "avx2")]
pub(super) unsafe fn accumulate<A: Element>(out: &mut [A], delta: &[A], op: Op<A>) {
    accumulate_plain(out, delta, op);
}

/// [`zip_into`](super::zip_into) in AVX2.
///
/// # Safety
/// The processor has AVX2 ([`avx2`]).
#[target_feature(enable = "avx2")]
pub(super) unsafe fn zip_into<A: Element>(out: &mut [A], a: &[A], b: &[A], op: Op<A>) {
    zip_into_plain(out, a, b, op);
}
