//! The dense pass behind `assign_add`/`assign_sub`/`scaled_add`: `base ± d1 + a2 * d2 ...` in
//! one sweep.
//!
//! Memory bandwidth is the limit for dense updates, so the pass reads the base and each
//! delta once and writes the result once, chunk by chunk (a chunk stays in L1 while every
//! delta is added to it). Combining k deltas therefore costs k + 2 tensor-sized transfers,
//! where k separate updates would cost 3k.
//!
//! The pass runs on the calling thread only. It used to split large tensors across rayon's
//! global pool, which deadlocked when the pool's own threads were writers waiting for the pass
//! (the pass waited for the pool, the pool for the pass): whatever runs a pass must never wait
//! for a thread that may be waiting for it (`docs/design.md`, §9, "Who waits for whom").

use ndarray::{ArrayD, ArrayRef, IxDyn};
use smallvec::SmallVec;

use crate::Element;

/// How a delta is applied: added, subtracted, or added times a factor (`scaled_add`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op<A> {
    Add,
    Sub,
    Scaled(A),
}

impl<A: Element> Op<A> {
    /// `out ⊕ d` for this op, as a function of the two elements.
    #[inline(always)]
    fn apply(self, out: A, d: A) -> A {
        match self {
            Op::Add => A::add(out, d),
            Op::Sub => A::sub(out, d),
            Op::Scaled(alpha) => A::add(out, A::mul(alpha, d)),
        }
    }
}

/// One delta of a pass; its shape was checked against the variable's.
#[derive(Debug)]
pub(crate) struct Delta<'a, A> {
    pub(crate) data: &'a ArrayRef<A, IxDyn>,
    pub(crate) op: Op<A>,
}

// By hand: a derive would require `A: Copy` of the borrow; `Op` is `Copy` for our elements.
impl<A: Copy> Clone for Delta<'_, A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<A: Copy> Copy for Delta<'_, A> {}

/// Elements per chunk: 16 KiB of f32, small enough to stay in L1 across all deltas.
const CHUNK: usize = 4096;

/// Writes `base ± deltas` into `out`, which has the same shape (a pooled version's buffer:
/// no allocation). Versions are always in standard layout, so both are plain slices; deltas
/// are read in place when they are too (the usual case) and copied into standard layout
/// first otherwise.
pub(crate) fn apply<A: Element>(base: &ArrayD<A>, deltas: &[Delta<'_, A>], out: &mut ArrayD<A>) {
    debug_assert!(deltas.iter().all(|d| d.data.shape() == base.shape()));
    debug_assert_eq!(out.shape(), base.shape());
    let base = base.as_slice().expect("versions are in standard layout");
    let out = out.as_slice_mut().expect("versions are in standard layout");
    // One contiguous delta (an uncontended write): one sweep, no chunking, no lists.
    if let [Delta { data, op }] = deltas {
        if let Some(delta) = data.as_slice() {
            zip_into(out, base, delta, *op);
            return;
        }
    }
    // Nearly always empty: deltas are contiguous unless the caller made a transposed view.
    let copies: SmallVec<[ArrayD<A>; 1]> = if deltas.iter().all(|d| d.data.is_standard_layout()) {
        SmallVec::new()
    } else {
        deltas
            .iter()
            .filter(|d| d.data.as_slice().is_none())
            .map(|d| d.data.as_standard_layout().into_owned())
            .collect()
    };
    let mut copies = copies.iter();
    let deltas: SmallVec<[(&[A], Op<A>); 8]> = deltas
        .iter()
        .map(|d| {
            let data = d.data.as_slice().unwrap_or_else(|| {
                let copy = copies.next().expect("one copy per non-standard delta");
                copy.as_slice()
                    .expect("a standard-layout copy is contiguous")
            });
            (data, d.op)
        })
        .collect();
    for (i, chunk) in out.chunks_mut(CHUNK).enumerate() {
        let range = i * CHUNK..i * CHUNK + chunk.len();
        fill_chunk(chunk, &base[range.clone()], &deltas, range);
    }
}

/// One chunk of the pass: the first delta is fused into the copy of the base, so a lone
/// delta is a single sweep; the others are added to the chunk while it is in L1.
fn fill_chunk<A: Element>(
    out: &mut [A],
    base: &[A],
    deltas: &[(&[A], Op<A>)],
    range: std::ops::Range<usize>,
) {
    let Some(((first, op), rest)) = deltas.split_first() else {
        out.copy_from_slice(base);
        return;
    };
    zip_into(out, base, &first[range.clone()], *op);
    for (delta, op) in rest {
        accumulate(out, &delta[range.clone()], *op);
    }
}

/// `out[i] = out[i] ⊕ delta[i]`; both have the same length.
#[inline(always)]
fn accumulate<A: Element>(out: &mut [A], delta: &[A], op: Op<A>) {
    debug_assert_eq!(out.len(), delta.len());
    // The op is matched once, outside the loops, so each loop is plain arithmetic.
    match op {
        Op::Add => each_into(out, delta, A::add),
        Op::Sub => each_into(out, delta, A::sub),
        Op::Scaled(alpha) => each_into(out, delta, |o, d| A::add(o, A::mul(alpha, d))),
    }
}

#[inline(always)]
fn each_into<A: Copy>(out: &mut [A], delta: &[A], f: impl Fn(A, A) -> A) {
    out.iter_mut().zip(delta).for_each(|(o, &d)| *o = f(*o, d));
}

/// `out[i] = a[i] ⊕ b[i]`; all three have the same length.
#[inline(always)]
fn zip_into<A: Element>(out: &mut [A], a: &[A], b: &[A], op: Op<A>) {
    debug_assert!(out.len() == a.len() && a.len() == b.len());
    match op {
        Op::Add => zip_with(out, a, b, A::add),
        Op::Sub => zip_with(out, a, b, A::sub),
        Op::Scaled(alpha) => zip_with(out, a, b, |x, y| A::add(x, A::mul(alpha, y))),
    }
}

#[inline(always)]
fn zip_with<A: Copy>(out: &mut [A], a: &[A], b: &[A], f: impl Fn(A, A) -> A) {
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = f(x, y);
    }
}

/// `out = out ⊕ delta`, in place (a transaction's working copy). Same shapes.
pub(crate) fn apply_in_place<A: Element>(out: &mut ArrayD<A>, delta: Delta<'_, A>) {
    debug_assert_eq!(out.shape(), delta.data.shape());
    match (out.as_slice_mut(), delta.data.as_slice()) {
        (Some(out), Some(d)) => accumulate(out, d, delta.op),
        _ => out.zip_mut_with(delta.data, |o, &d| *o = delta.op.apply(*o, d)),
    }
}

/// `out = from`, element by element (same shapes; `out` is a version, in standard layout;
/// `from` in any layout).
pub(crate) fn copy<A: Element>(from: &ArrayRef<A, IxDyn>, out: &mut ArrayD<A>) {
    debug_assert_eq!(out.shape(), from.shape());
    match (out.as_slice_mut(), from.as_slice()) {
        (Some(out), Some(from)) => out.copy_from_slice(from),
        _ => out.assign(from),
    }
}

/// `value` in standard layout, without a copy when it already is.
pub(crate) fn standard<A: Element>(value: ArrayD<A>) -> ArrayD<A> {
    // A scalar or a vector is always laid out in order (and ndarray's check is not free).
    if value.ndim() <= 1 && value.as_slice().is_some() || value.is_standard_layout() {
        value
    } else {
        value.as_standard_layout().into_owned()
    }
}

#[cfg(all(test, not(mvtensor_loom)))]
mod tests {
    use super::*;
    use ndarray::{IxDyn, ShapeBuilder};

    #[test]
    fn fused_pass_matches_elementwise_arithmetic() {
        let n = if cfg!(miri) { 10 } else { 3 * CHUNK + 7 };
        let base = ArrayD::from_shape_fn(IxDyn(&[n]), |i| i[0] as i64);
        let d1 = ArrayD::from_elem(IxDyn(&[n]), 5i64);
        let d2 = ArrayD::from_shape_fn(IxDyn(&[n]), |i| 2 * i[0] as i64);
        let mut out = ArrayD::default(base.raw_dim());
        apply(
            &base,
            &[
                Delta {
                    data: &d1,
                    op: Op::Add,
                },
                Delta {
                    data: &d2,
                    op: Op::Sub,
                },
            ],
            &mut out,
        );
        let expected = &base + &d1 - &d2;
        assert_eq!(out, expected);
        assert!(out.is_standard_layout());
    }

    #[test]
    fn non_standard_layouts_are_read_in_logical_order() {
        let fortran =
            ArrayD::from_shape_vec(IxDyn(&[2, 3]).f(), vec![1.0f32, 4., 2., 5., 3., 6.]).unwrap();
        let base =
            ArrayD::from_shape_vec(IxDyn(&[2, 3]), vec![1.0f32, 2., 3., 4., 5., 6.]).unwrap();
        let mut out = ArrayD::default(base.raw_dim());
        apply(
            &base,
            &[Delta {
                data: &fortran,
                op: Op::Add,
            }],
            &mut out,
        );
        assert_eq!(out, &base * 2.0);
    }

    #[test]
    fn integer_overflow_wraps_instead_of_panicking() {
        let base = ArrayD::from_elem(IxDyn(&[3]), i32::MAX);
        let one = ArrayD::from_elem(IxDyn(&[3]), 1);
        let mut out = ArrayD::default(base.raw_dim());
        apply(
            &base,
            &[Delta {
                data: &one,
                op: Op::Add,
            }],
            &mut out,
        );
        assert!(out.iter().all(|&x| x == i32::MIN));
    }
}
