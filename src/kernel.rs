//! The dense pass behind `assign_add`/`assign_sub`: `base ± d1 ± d2 ± ...` in one sweep.
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

use ndarray::ArrayD;
use smallvec::SmallVec;

use crate::Element;

/// Whether a delta is added or subtracted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sign {
    Add,
    Sub,
}

/// One delta of a pass; its shape was checked against the variable's.
pub(crate) struct Delta<'a, A> {
    pub(crate) data: &'a ArrayD<A>,
    pub(crate) sign: Sign,
}

// By hand: a derive would require `A: Copy`, but only the borrow is copied.
impl<A> Clone for Delta<'_, A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<A> Copy for Delta<'_, A> {}

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
    if let [Delta { data, sign }] = deltas {
        if let Some(delta) = data.as_slice() {
            match sign {
                Sign::Add => zip_into(out, base, delta, A::add),
                Sign::Sub => zip_into(out, base, delta, A::sub),
            }
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
    let deltas: SmallVec<[(&[A], Sign); 8]> = deltas
        .iter()
        .map(|d| {
            let data = d.data.as_slice().unwrap_or_else(|| {
                let copy = copies.next().expect("one copy per non-standard delta");
                copy.as_slice()
                    .expect("a standard-layout copy is contiguous")
            });
            (data, d.sign)
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
    deltas: &[(&[A], Sign)],
    range: std::ops::Range<usize>,
) {
    let Some(((first, sign), rest)) = deltas.split_first() else {
        out.copy_from_slice(base);
        return;
    };
    let first = &first[range.clone()];
    match sign {
        Sign::Add => zip_into(out, base, first, A::add),
        Sign::Sub => zip_into(out, base, first, A::sub),
    }
    for (delta, sign) in rest {
        accumulate(out, &delta[range.clone()], *sign);
    }
}

/// `out[i] ±= delta[i]`; both have the same length.
#[inline(always)]
fn accumulate<A: Element>(out: &mut [A], delta: &[A], sign: Sign) {
    debug_assert_eq!(out.len(), delta.len());
    let op = match sign {
        Sign::Add => A::add,
        Sign::Sub => A::sub,
    };
    out.iter_mut().zip(delta).for_each(|(o, &d)| *o = op(*o, d));
}

/// `out[i] = op(a[i], b[i])`; all three have the same length.
#[inline(always)]
fn zip_into<A: Copy>(out: &mut [A], a: &[A], b: &[A], op: impl Fn(A, A) -> A) {
    debug_assert!(out.len() == a.len() && a.len() == b.len());
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = op(x, y);
    }
}

/// `out ±= delta`, in place (a transaction's working copy). Same shapes.
pub(crate) fn apply_in_place<A: Element>(out: &mut ArrayD<A>, delta: Delta<'_, A>) {
    debug_assert_eq!(out.shape(), delta.data.shape());
    match (out.as_slice_mut(), delta.data.as_slice()) {
        (Some(out), Some(d)) => accumulate(out, d, delta.sign),
        _ => {
            let op = match delta.sign {
                Sign::Add => A::add,
                Sign::Sub => A::sub,
            };
            out.zip_mut_with(delta.data, |o, &d| *o = op(*o, d));
        }
    }
}

/// `out = from`, element by element (same shapes; `out` is a version, in standard layout;
/// `from` in any layout).
pub(crate) fn copy<A: Element>(from: &ArrayD<A>, out: &mut ArrayD<A>) {
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
                    sign: Sign::Add,
                },
                Delta {
                    data: &d2,
                    sign: Sign::Sub,
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
                sign: Sign::Add,
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
                sign: Sign::Add,
            }],
            &mut out,
        );
        assert!(out.iter().all(|&x| x == i32::MIN));
    }
}
