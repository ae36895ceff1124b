//! The dense pass behind `assign_add`/`assign_sub`/`scaled_add`: `base ± d1 + a2 * d2 ...` in
//! one sweep; and row deltas (`scatter_add`, `scatter_update`), applied after the copy to the
//! rows they name.
//!
//! Memory bandwidth is the limit for dense updates, so the pass reads the base and each
//! delta once and writes the result once, chunk by chunk (a chunk stays in L1 while every
//! delta is added to it). Combining k deltas therefore costs k + 2 tensor-sized transfers,
//! where k separate updates would cost 3k.
//!
//! A combining pass over a large tensor is split into chunks that the writers waiting for it
//! help compute ([`apply_helped`], [`help`](crate::help)); otherwise the pass runs on the
//! calling thread only. Not rayon's global pool: it deadlocks when the pool's own threads
//! are writers waiting for the pass (the pass waits for the pool, the pool for the pass):
//! whatever runs a pass must never wait for a thread that may be waiting for it
//! (`docs/design.md`, "Who waits for whom"). Helpers are
//! threads that were waiting anyway, and the holder waits for them only while they compute
//! a chunk.

use std::borrow::Cow;

use ndarray::{Array, ArrayD, ArrayRef, Dimension, IxDyn};
use smallvec::SmallVec;

use crate::help::{Helpers, CHUNK_BYTES, HELP_BYTES};
use crate::Element;

/// How a delta is applied: added, subtracted, added times a factor (`scaled_add`), or
/// written over what is there (`scatter_update`, row deltas only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op<A> {
    Add,
    Sub,
    Scaled(A),
    Assign,
}

/// One delta of a pass: its shape (checked against the variable's by the caller) and its
/// elements in standard (row-major) order. No `IxDyn` is built for it, whatever array the
/// caller passed.
///
/// A *row delta* (`rows: Some(indices)`) holds one row per index (`shape` is
/// `[indices.len(), ..the variable's other axes]`, checked by the caller, every index in
/// range) and changes only those rows; a repeated index is applied once per occurrence, in
/// order.
#[derive(Debug)]
pub(crate) struct Delta<'a, A> {
    pub(crate) shape: &'a [usize],
    pub(crate) data: &'a [A],
    pub(crate) op: Op<A>,
    pub(crate) rows: Option<&'a [usize]>,
}

impl<'a, A> Delta<'a, A> {
    /// A delta of the whole tensor.
    pub(crate) fn dense(shape: &'a [usize], data: &'a [A], op: Op<A>) -> Self {
        Self {
            shape,
            data,
            op,
            rows: None,
        }
    }

    /// Whether the delta covers the whole tensor.
    pub(crate) fn is_dense(&self) -> bool {
        self.rows.is_none()
    }

    /// Checks the delta against a value of `shape` of `variable`: the same shape, or for a
    /// row delta rows that fit and indices in range.
    pub(crate) fn check(&self, variable: &str, shape: &[usize]) -> crate::Result<()> {
        match self.rows {
            None => crate::error::check_shape(variable, shape, self.shape),
            Some(rows) => crate::error::check_rows(variable, shape, rows, self.shape),
        }
    }
}

/// The elements of `x` in standard order: borrowed when it is laid out so, else copied.
/// Gradients often are not (`x.t().dot(&dh)` comes out column-major), so the copy is
/// ndarray's strided `assign`, several times cheaper than collecting an element iterator.
#[inline]
pub(crate) fn standard_elements<A: Clone, E: Dimension>(x: &ArrayRef<A, E>) -> Cow<'_, [A]> {
    // One axis (most deltas and gradients): in order when its stride is 1 or it holds at most
    // one element. ndarray's own check walks an `IxDyn` shape generically, which costs
    // many times this one-axis look.
    if let ([len], [stride]) = (x.shape(), x.strides()) {
        if *stride == 1 || *len <= 1 {
            // SAFETY: one axis of `len` elements starting at `as_ptr()`, one apart (or at
            // most one element): the array's elements in order, borrowed with `x`.
            return Cow::Borrowed(unsafe { std::slice::from_raw_parts(x.as_ptr(), *len) });
        }
    }
    if let Some(slice) = x.as_slice() {
        return Cow::Borrowed(slice);
    }
    copied(x)
}

/// [`standard_elements`] of an array not laid out in standard order: a copy that is.
#[cold]
fn copied<A: Clone, E: Dimension>(x: &ArrayRef<A, E>) -> Cow<'_, [A]> {
    let Some(first) = x.first() else {
        return Cow::Owned(Vec::new());
    };
    let mut out = Array::from_elem(x.raw_dim(), first.clone());
    out.assign(x);
    let (data, _) = out.into_raw_vec_and_offset();
    Cow::Owned(data)
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

/// Writes `base ⊕ deltas` into `out`, which has the same shape (a pooled version's buffer:
/// no allocation). Versions are always in standard layout, so all are plain slices.
pub(crate) fn apply<A: Element>(base: &ArrayD<A>, deltas: &[Delta<'_, A>], out: &mut ArrayD<A>) {
    debug_assert!(deltas
        .iter()
        .all(|d| !d.is_dense() || d.shape == base.shape()));
    debug_assert_eq!(out.shape(), base.shape());
    let base = base.as_slice().expect("versions are in standard layout");
    let out = out.as_slice_mut().expect("versions are in standard layout");
    // Row deltas in the batch: copy, then every delta in arrival order, in place.
    if !deltas.iter().all(Delta::is_dense) {
        out.copy_from_slice(base);
        deltas.iter().for_each(|d| apply_slice(out, d));
        return;
    }
    // One delta (an uncontended write): one sweep, no chunking.
    if let [delta] = deltas {
        zip_into(out, base, delta.data, delta.op);
        return;
    }
    let deltas: SmallVec<[(&[A], Op<A>); 8]> = deltas.iter().map(|d| (d.data, d.op)).collect();
    fill(out, base, &deltas, 0);
}

/// Fills `out`, the part of the result from element `start` on, CHUNK by CHUNK.
fn fill<A: Element>(out: &mut [A], base: &[A], deltas: &[(&[A], Op<A>)], start: usize) {
    for (i, chunk) in out.chunks_mut(CHUNK).enumerate() {
        let range = start + i * CHUNK..start + i * CHUNK + chunk.len();
        fill_chunk(chunk, &base[range.clone()], deltas, range);
    }
}

/// [`apply`], split into chunks that waiting writers help compute when the tensor is at least
/// [`HELP_BYTES`] and every delta dense (see [`help`](crate::help)); `wake` wakes the writers
/// of the batch once there is a job for them.
#[inline]
pub(crate) fn apply_helped<A: Element>(
    base: &ArrayD<A>,
    deltas: &[Delta<'_, A>],
    out: &mut ArrayD<A>,
    helpers: &Helpers,
    wake: &dyn Fn(),
) {
    // A dense delta holds every element: its size is the tensor's, without the product over
    // an `IxDyn` shape that `out.len()` takes.
    let large = deltas
        .first()
        .is_some_and(|d| d.is_dense() && std::mem::size_of_val(d.data) >= HELP_BYTES);
    if large {
        apply_split(base, deltas, out, helpers, wake);
    } else {
        apply(base, deltas, out);
    }
}

#[inline(never)]
fn apply_split<A: Element>(
    base: &ArrayD<A>,
    deltas: &[Delta<'_, A>],
    out: &mut ArrayD<A>,
    helpers: &Helpers,
    wake: &dyn Fn(),
) {
    // The first delta is dense and large (`apply_helped`), so the tensor is not empty; a
    // batch that also holds row deltas copies first and then applies them in order.
    if !deltas.iter().all(Delta::is_dense) {
        return apply(base, deltas, out);
    }
    let (len, size) = (out.len(), std::mem::size_of::<A>().max(1));
    debug_assert_eq!(out.shape(), base.shape());
    let base = base.as_slice().expect("versions are in standard layout");
    let out = Shared(
        out.as_slice_mut()
            .expect("versions are in standard layout")
            .as_mut_ptr(),
    );
    let deltas: SmallVec<[(&[A], Op<A>); 8]> = deltas.iter().map(|d| (d.data, d.op)).collect();
    let per = (CHUNK_BYTES / size).max(1);
    let work = |i: usize| {
        let range = i * per..((i + 1) * per).min(len);
        // SAFETY: `Helpers::run` hands each chunk index to exactly one call, so the ranges
        // are disjoint parts of `out`, which outlives the run (it returns only once every
        // chunk is done and no helper is left).
        let chunk = unsafe { std::slice::from_raw_parts_mut(out.at(range.start), range.len()) };
        fill(chunk, base, &deltas, range.start);
    };
    match len.div_ceil(per) {
        1 => work(0), // nothing to share
        chunks => helpers.run(chunks, &work, wake),
    }
}

/// The output buffer of a split pass, shared by the threads computing its chunks.
struct Shared<A>(*mut A);

impl<A> Shared<A> {
    /// The element at `i` (a method, so that closures capture the `Sync` wrapper).
    fn at(&self, i: usize) -> *mut A {
        // SAFETY: callers pass indices within the buffer (a chunk's start).
        unsafe { self.0.add(i) }
    }
}

// SAFETY: each thread writes only the chunks it claimed (see `apply_helped`).
unsafe impl<A: Send> Sync for Shared<A> {}

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

/// `out[i] = out[i] ⊕ delta[i]`; both have the same length. In AVX2 where the processor has
/// it ([`wide`]).
#[inline]
pub(crate) fn accumulate<A: Element>(out: &mut [A], delta: &[A], op: Op<A>) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if wide::avx2() {
        // SAFETY: the processor has AVX2.
        return unsafe { wide::accumulate(out, delta, op) };
    }
    accumulate_plain(out, delta, op);
}

/// [`accumulate`], compiled for whichever instructions its caller may use.
#[inline(always)]
fn accumulate_plain<A: Element>(out: &mut [A], delta: &[A], op: Op<A>) {
    debug_assert_eq!(out.len(), delta.len());
    // The op is matched once, outside the loops, so each loop is plain arithmetic.
    match op {
        Op::Add => each_into(out, delta, A::add),
        Op::Sub => each_into(out, delta, A::sub),
        Op::Scaled(alpha) => each_into(out, delta, |o, d| A::add(o, A::mul(alpha, d))),
        Op::Assign => out.copy_from_slice(delta),
    }
}

#[inline(always)]
fn each_into<A: Copy>(out: &mut [A], delta: &[A], f: impl Fn(A, A) -> A) {
    out.iter_mut().zip(delta).for_each(|(o, &d)| *o = f(*o, d));
}

/// `out[i] = a[i] ⊕ b[i]`; all three have the same length. In AVX2 where the processor has
/// it ([`wide`]).
#[inline]
pub(crate) fn zip_into<A: Element>(out: &mut [A], a: &[A], b: &[A], op: Op<A>) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if wide::avx2() {
        // SAFETY: the processor has AVX2.
        return unsafe { wide::zip_into(out, a, b, op) };
    }
    zip_into_plain(out, a, b, op);
}

/// [`zip_into`], compiled for whichever instructions its caller may use.
#[inline(always)]
fn zip_into_plain<A: Element>(out: &mut [A], a: &[A], b: &[A], op: Op<A>) {
    debug_assert!(out.len() == a.len() && a.len() == b.len());
    match op {
        Op::Add => zip_with(out, a, b, A::add),
        Op::Sub => zip_with(out, a, b, A::sub),
        Op::Scaled(alpha) => zip_with(out, a, b, |x, y| A::add(x, A::mul(alpha, y))),
        Op::Assign => out.copy_from_slice(b),
    }
}

#[inline(always)]
fn zip_with<A: Copy>(out: &mut [A], a: &[A], b: &[A], f: impl Fn(A, A) -> A) {
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = f(x, y);
    }
}

/// `out = out ⊕ delta`, in place (a transaction's working copy, in standard layout).
pub(crate) fn apply_in_place<A: Element>(out: &mut ArrayD<A>, delta: Delta<'_, A>) {
    debug_assert!(!delta.is_dense() || out.shape() == delta.shape);
    let out = out
        .as_slice_mut()
        .expect("working copies are in standard layout");
    apply_slice(out, &delta);
}

/// `out = out ⊕ delta`: the whole slice, or the delta's rows.
fn apply_slice<A: Element>(out: &mut [A], delta: &Delta<'_, A>) {
    let Some(rows) = delta.rows else {
        accumulate(out, delta.data, delta.op);
        return;
    };
    let width = delta.shape[1..].iter().product::<usize>();
    if width == 0 {
        return;
    }
    for (&row, values) in rows.iter().zip(delta.data.chunks_exact(width)) {
        accumulate(&mut out[row * width..(row + 1) * width], values, delta.op);
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
mod tests;
#[cfg(all(target_arch = "x86_64", not(miri)))]
pub(crate) mod wide;
#[cfg(all(target_arch = "x86_64", not(miri)))]
pub(crate) use wide::avx2;
