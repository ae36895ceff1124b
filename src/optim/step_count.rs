//! The step count, kept in the optimizer's state as two floats (so that store snapshots
//! and checkpoints carry it with the moments).

use ndarray::NdFloat;

/// Elements at the end of the state that hold the step count.
pub(super) const STEP_LEN: usize = 2;
/// `lo + hi * STEP_RADIX`: each a whole number an `f32` holds exactly.
const STEP_RADIX: i64 = 1 << 24;

/// The step count from the state's last [`STEP_LEN`] elements; `None` unless both are
/// whole numbers in `0..STEP_RADIX` (a restored state could hold anything).
pub(super) fn decode_step<A: NdFloat>(parts: &[A]) -> Option<i64> {
    let whole = |x: A| {
        let n = x.to_i64().filter(|n| (0..STEP_RADIX).contains(n))?;
        (A::from(n) == Some(x)).then_some(n) // not NaN, not a fraction
    };
    Some(whole(parts[0])? + whole(parts[1])? * STEP_RADIX)
}

/// Writes the step count `t` into the state's last [`STEP_LEN`] elements.
pub(super) fn encode_step<A: NdFloat>(t: i64, parts: &mut [A]) {
    let float = |x: i64| A::from(x).expect("a whole number below 2^24 is a float");
    parts[0] = float(t % STEP_RADIX);
    parts[1] = float(t / STEP_RADIX);
}

#[cfg(all(test, not(mvtensor_loom)))]
mod tests {
    use super::*;

    /// The step count survives the state's floats exactly, past what one `f32` holds.
    #[test]
    fn the_step_count_is_exact_in_f32_and_f64() {
        for t in [
            0,
            1,
            (1 << 24) - 1,
            1 << 24,
            (1 << 24) + 1,
            (1 << 40) + 12_345,
        ] {
            let mut narrow = [0.0f32; STEP_LEN];
            encode_step(t, &mut narrow);
            assert_eq!(decode_step(&narrow), Some(t), "{narrow:?}");
            let mut wide = [0.0f64; STEP_LEN];
            encode_step(t, &mut wide);
            assert_eq!(decode_step(&wide), Some(t), "{wide:?}");
        }
    }

    /// Anything but two whole numbers in range is no count (no overflow, no NaN).
    #[test]
    fn a_garbage_step_count_decodes_to_none() {
        let bad = [
            [f32::NAN, 0.0],
            [0.0, f32::INFINITY],
            [-1.0, 0.0],
            [0.5, 0.0],
            [0.0, 1e15],
            [16_777_216.0, 0.0],
        ];
        for parts in bad {
            assert_eq!(decode_step(&parts), None, "{parts:?}");
        }
        assert_eq!(decode_step(&[f64::MAX, f64::MAX]), None);
    }
}
