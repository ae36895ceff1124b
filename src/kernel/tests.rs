//! The kernel's passes against element-by-element arithmetic.

use super::*;
use ndarray::{IxDyn, ShapeBuilder};

fn delta<'a, A: Element>(data: &'a [A], shape: &'a [usize], op: Op<A>) -> Delta<'a, A> {
    Delta {
        shape,
        data,
        op,
        rows: None,
    }
}

#[test]
fn row_deltas_apply_in_arrival_order_with_dense_ones() {
    let base = ArrayD::from_shape_fn(IxDyn(&[4, 2]), |i| (i[0] * 10 + i[1]) as i64);
    let mut out = ArrayD::default(base.raw_dim());
    let dense = [1i64; 8];
    let rows = [100i64, 200, 300, 400, 7, 7];
    let twice = [1usize, 1, 3];
    let (row_shape, dense_shape) = ([3usize, 2], [4usize, 2]);
    apply(
        &base,
        &[
            Delta {
                rows: Some(&twice),
                ..delta(&rows, &row_shape, Op::Add)
            },
            delta(&dense, &dense_shape, Op::Add),
            Delta {
                rows: Some(&[0]),
                ..delta(&[-5, -6], &[1, 2], Op::Assign)
            },
        ],
        &mut out,
    );
    // Row 1 gets both of its rows, row 3 its one, then every row +1, then row 0 is set.
    let expected = [-5, -6, 411, 612, 21, 22, 38, 39];
    assert_eq!(out.as_slice().unwrap(), &expected);
}

/// A pass split into chunks for helpers (here computed by the holder alone, chunk by
/// chunk) writes what one sweep writes, whatever the chunk boundaries cut.
#[test]
fn a_split_pass_matches_one_sweep() {
    let n = if cfg!(miri) {
        11
    } else {
        HELP_BYTES / 4 + CHUNK + 3
    };
    let base = ArrayD::from_shape_fn(IxDyn(&[n]), |i| i[0] as i32);
    let d1: Vec<i32> = (0..n).map(|i| (i % 13) as i32).collect();
    let d2: Vec<i32> = (0..n).map(|i| 3 - (i % 5) as i32).collect();
    let shape = &[n][..];
    for deltas in [
        vec![delta(&d1, shape, Op::Add)],
        vec![
            delta(&d1, shape, Op::Sub),
            delta(&d2, shape, Op::Scaled(-2)),
        ],
    ] {
        let mut one = ArrayD::default(base.raw_dim());
        apply(&base, &deltas, &mut one);
        let mut split = ArrayD::default(base.raw_dim());
        apply_helped(&base, &deltas, &mut split, &Helpers::default(), &|| {});
        assert_eq!(split, one);
    }
}

#[test]
fn fused_pass_matches_elementwise_arithmetic() {
    let n = if cfg!(miri) { 10 } else { 3 * CHUNK + 7 };
    let base = ArrayD::from_shape_fn(IxDyn(&[n]), |i| i[0] as i64);
    let d1 = ArrayD::from_elem(IxDyn(&[n]), 5i64);
    let d2 = ArrayD::from_shape_fn(IxDyn(&[n]), |i| 2 * i[0] as i64);
    let d3 = ArrayD::from_elem(IxDyn(&[n]), 7i64);
    let mut out = ArrayD::default(base.raw_dim());
    let shape = &[n][..];
    let slice = |a: &'static str, x: &ArrayD<i64>| x.as_slice().expect(a).to_vec();
    let (s1, s2, s3) = (slice("d1", &d1), slice("d2", &d2), slice("d3", &d3));
    apply(
        &base,
        &[
            delta(&s1, shape, Op::Add),
            delta(&s2, shape, Op::Sub),
            delta(&s3, shape, Op::Scaled(3)),
        ],
        &mut out,
    );
    let expected = &base + &d1 - &d2 + &d3 * 3;
    assert_eq!(out, expected);
    assert!(out.is_standard_layout());
}

#[test]
fn non_standard_layouts_are_read_in_logical_order() {
    let fortran =
        ArrayD::from_shape_vec(IxDyn(&[2, 3]).f(), vec![1.0f32, 4., 2., 5., 3., 6.]).unwrap();
    let base = ArrayD::from_shape_vec(IxDyn(&[2, 3]), vec![1.0f32, 2., 3., 4., 5., 6.]).unwrap();
    let elements = standard_elements(&fortran);
    assert!(
        matches!(elements, Cow::Owned(_)),
        "a Fortran array is copied"
    );
    let mut out = ArrayD::default(base.raw_dim());
    apply(
        &base,
        &[delta(&elements, fortran.shape(), Op::Add)],
        &mut out,
    );
    assert_eq!(out, &base * 2.0);
    assert!(matches!(standard_elements(&base), Cow::Borrowed(_)));
}

/// Vectors take the one-axis path: borrowed when in order (a view from an offset, a single
/// element at any stride, an empty one), copied in logical order otherwise.
#[test]
fn vectors_are_borrowed_only_when_in_order() {
    let v = ArrayD::from_shape_vec(IxDyn(&[6]), vec![0.0f32, 1., 2., 3., 4., 5.]).unwrap();
    let tail = v.slice(ndarray::s![2..]);
    assert!(matches!(
        standard_elements(&tail),
        Cow::Borrowed(&[2., 3., 4., 5.])
    ));
    let one = v.slice(ndarray::s![3..4;5]);
    assert!(matches!(standard_elements(&one), Cow::Borrowed(&[3.])));
    let empty = v.slice(ndarray::s![4..4]);
    assert!(matches!(standard_elements(&empty), Cow::Borrowed(&[])));
    let every_other = v.slice(ndarray::s![..;2]);
    let copied = standard_elements(&every_other);
    assert!(matches!(copied, Cow::Owned(_)));
    assert_eq!(&*copied, &[0., 2., 4.]);
    let reversed = v.slice(ndarray::s![..;-1]);
    assert_eq!(&*standard_elements(&reversed), &[5., 4., 3., 2., 1., 0.]);
}

#[test]
fn integer_overflow_wraps_instead_of_panicking() {
    let base = ArrayD::from_elem(IxDyn(&[3]), i32::MAX);
    let mut out = ArrayD::default(base.raw_dim());
    apply(&base, &[delta(&[1, 1, 1], &[3], Op::Add)], &mut out);
    assert!(out.iter().all(|&x| x == i32::MIN));
    apply_in_place(&mut out, delta(&[2, 2, 2], &[3], Op::Scaled(i32::MAX)));
    assert!(out
        .iter()
        .all(|&x| x == i32::MIN.wrapping_add(i32::MAX.wrapping_mul(2))));
}

/// The AVX2 loops ([`wide`]) give the bits the baseline loops give: every op, lengths that
/// leave tails, `f32` values with rounding in every step (no fused multiply-add). Where the
/// processor has no AVX2 there is nothing to compare, and the test says so.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[test]
fn avx2_loops_give_the_same_bits() {
    if !avx2() {
        eprintln!("no AVX2 here: nothing to compare");
        return;
    }
    let value = |i: usize, k: f32| ((i as f32 * 0.37 + k).sin() * 1e3) / 7.0;
    for len in [0, 1, 7, 8, 15, 33, 64, 1000, 1024] {
        let a: Vec<f32> = (0..len).map(|i| value(i, 0.5)).collect();
        let b: Vec<f32> = (0..len).map(|i| value(i, 2.5)).collect();
        for op in [Op::Add, Op::Sub, Op::Scaled(-0.013_f32), Op::Assign] {
            let (mut plain, mut wide) = (vec![0.0f32; len], vec![0.0f32; len]);
            zip_into_plain(&mut plain, &a, &b, op);
            // SAFETY: the processor has AVX2 (checked above).
            unsafe { wide::zip_into(&mut wide, &a, &b, op) };
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&plain), bits(&wide), "zip_into {op:?}, {len} elements");
            accumulate_plain(&mut plain, &b, op);
            // SAFETY: as above.
            unsafe { wide::accumulate(&mut wide, &b, op) };
            assert_eq!(
                bits(&plain),
                bits(&wide),
                "accumulate {op:?}, {len} elements"
            );
        }
    }
}
