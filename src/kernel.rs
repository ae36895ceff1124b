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

use std::mem::MaybeUninit;

use ndarray::{ArrayD, CowArray, IxDyn};
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

/// Elements per chunk: 16 KiB of f32, small enough to stay in L1 across all deltas.
const CHUNK: usize = 4096;

/// Returns `base ± deltas`, in standard (row-major) layout, written into `out` (an empty
/// buffer, recycled or new: see [`Recycler`](crate::recycle::Recycler)). All shapes must be
/// equal.
pub(crate) fn apply<A: Element>(
    base: &ArrayD<A>,
    deltas: &[Delta<'_, A>],
    mut out: Vec<A>,
) -> ArrayD<A> {
    debug_assert!(deltas.iter().all(|d| d.data.shape() == base.shape()));
    let base_std = base.as_standard_layout();
    let base_s = contiguous(&base_std);
    // Deltas are read in place when already in standard layout (the usual case, with no
    // allocation); others are copied into standard layout first.
    let copies: Vec<ArrayD<A>> = deltas
        .iter()
        .filter(|d| d.data.as_slice().is_none())
        .map(|d| d.data.as_standard_layout().into_owned())
        .collect();
    let mut copies = copies.iter();
    let delta_s: SmallVec<[(&[A], Sign); 8]> = deltas
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

    let n = base_s.len();
    out.clear();
    out.reserve(n);
    let spare = &mut out.spare_capacity_mut()[..n];
    for (i, chunk) in spare.chunks_mut(CHUNK).enumerate() {
        fill_chunk(chunk, i * CHUNK, base_s, &delta_s);
    }
    // SAFETY: `fill_chunk` wrote every element of every chunk of `spare`, i.e. `out[..n]`.
    unsafe { out.set_len(n) };
    ArrayD::from_shape_vec(base.raw_dim(), out).expect("length equals the shape's size")
}

fn fill_chunk<A: Element>(
    chunk: &mut [MaybeUninit<A>],
    start: usize,
    base: &[A],
    deltas: &[(&[A], Sign)],
) {
    let range = start..start + chunk.len();
    let base = &base[range.clone()];
    // The first delta is fused into the copy of the base, so a lone delta is a single pass.
    let (first, rest) = match deltas.split_first() {
        Some(((delta, sign), rest)) => (Some((&delta[range.clone()], *sign)), rest),
        None => (None, deltas),
    };
    match first {
        None => init(chunk, base, |b, _| b, base),
        Some((delta, Sign::Add)) => init(chunk, base, A::add, delta),
        Some((delta, Sign::Sub)) => init(chunk, base, A::sub, delta),
    }
    // SAFETY: `init` wrote every element of `chunk` (the slices have equal lengths), and
    // `MaybeUninit<A>` has the same layout as `A`.
    let chunk: &mut [A] = unsafe { &mut *(chunk as *mut [MaybeUninit<A>] as *mut [A]) };
    for (delta, sign) in rest {
        let delta = &delta[range.clone()];
        match sign {
            Sign::Add => chunk
                .iter_mut()
                .zip(delta)
                .for_each(|(o, &d)| *o = A::add(*o, d)),
            Sign::Sub => chunk
                .iter_mut()
                .zip(delta)
                .for_each(|(o, &d)| *o = A::sub(*o, d)),
        }
    }
}

/// `out[i] = op(a[i], b[i])` into uninitialised memory; all three have the same length.
#[inline(always)]
fn init<A: Copy>(out: &mut [MaybeUninit<A>], a: &[A], op: impl Fn(A, A) -> A, b: &[A]) {
    debug_assert!(out.len() == a.len() && a.len() == b.len());
    for ((slot, &x), &y) in out.iter_mut().zip(a).zip(b) {
        slot.write(op(x, y));
    }
}

fn contiguous<'a, A>(array: &'a CowArray<'_, A, IxDyn>) -> &'a [A] {
    array
        .as_slice()
        .expect("as_standard_layout returns a contiguous array")
}

/// `value` in standard layout, without a copy when it already is.
pub(crate) fn standard<A: Element>(value: ArrayD<A>) -> ArrayD<A> {
    if value.is_standard_layout() {
        value
    } else {
        value.as_standard_layout().into_owned()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use ndarray::ShapeBuilder;

    #[test]
    fn fused_pass_matches_elementwise_arithmetic() {
        let n = if cfg!(miri) { 10 } else { 3 * CHUNK + 7 };
        let base = ArrayD::from_shape_fn(IxDyn(&[n]), |i| i[0] as i64);
        let d1 = ArrayD::from_elem(IxDyn(&[n]), 5i64);
        let d2 = ArrayD::from_shape_fn(IxDyn(&[n]), |i| 2 * i[0] as i64);
        let out = apply(
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
            Vec::new(),
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
        let out = apply(
            &base,
            &[Delta {
                data: &fortran,
                sign: Sign::Add,
            }],
            Vec::new(),
        );
        assert_eq!(out, &base * 2.0);
    }

    #[test]
    fn integer_overflow_wraps_instead_of_panicking() {
        let base = ArrayD::from_elem(IxDyn(&[3]), i32::MAX);
        let one = ArrayD::from_elem(IxDyn(&[3]), 1);
        let out = apply(
            &base,
            &[Delta {
                data: &one,
                sign: Sign::Add,
            }],
            Vec::new(),
        );
        assert!(out.iter().all(|&x| x == i32::MIN));
    }
}
