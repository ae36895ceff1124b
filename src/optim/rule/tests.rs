//! Bit-identity: the bias corrections against `powi`, every rule's AVX2 sweep against the
//! baseline loop.

use super::*;

/// The bits of `1 - powi` with the standard library's `powi`, for both float types, at
/// exponents from the first steps to the largest (on x86_64: compiler-builtins'
/// `__powisf2` and `__powidf2`).
#[test]
fn one_minus_power_has_the_bits_of_one_minus_powi() {
    let exponents = (0..3_000).chain([65_535, 65_536, 1 << 20, 999_999, i32::MAX as u32]);
    let betas = [
        0.0f32,
        1e-3,
        0.5,
        0.9,
        0.95,
        0.999,
        0.9999,
        0.99999,
        1.0 - 6e-8,
    ];
    for n in exponents {
        for beta in betas {
            let want = (1.0 - beta.powi(n as i32)).to_bits();
            assert_eq!(one_minus_power(beta, n).to_bits(), want, "{beta}^{n}");
            let beta = f64::from(beta);
            let want = (1.0 - beta.powi(n as i32)).to_bits();
            assert_eq!(one_minus_power(beta, n).to_bits(), want, "{beta}^{n}");
        }
    }
}

/// Every rule's step in AVX2 gives the bits of the baseline loop's (same operations,
/// no fused multiply-add), tails included. Without AVX2 there is nothing to compare.
#[test]
fn every_rule_gives_the_same_bits_in_avx2() {
    if !crate::kernel::avx2() {
        eprintln!("no AVX2 here: nothing to compare");
        return;
    }
    let n = 37;
    let value = |i: usize, k: f32| ((i as f32 * 0.61 + k).sin() * 3.0) / 7.0;
    let (p, m, g): (Vec<f32>, Vec<f32>, Vec<f32>) = (
        (0..n).map(|i| value(i, 0.1)).collect(),
        (0..n).map(|i| value(i, 1.1)).collect(),
        (0..n).map(|i| value(i, 2.1)).collect(),
    );
    let v: Vec<f32> = m.iter().map(|x| x * x).collect();
    let rules = [
        Rule::Sgd { lr: 0.03 },
        Rule::Momentum {
            lr: 0.03,
            momentum: 0.9,
        },
        Rule::Adam {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
        },
    ];
    let adam = Rule::Adam {
        lr: 1e-3,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.0,
    };
    // Scale 1 and no weight decay take Adam's sweep without those products.
    for (rule, scale) in rules
        .into_iter()
        .chain([adam])
        .flat_map(|r| [(r, 0.5), (r, 1.0)])
    {
        let step = |wide: bool| {
            let (mut p_out, mut m_out, mut v_out) = (vec![0.0f32; n], vec![0.0; n], vec![0.0; n]);
            let update = Update {
                rule,
                corrections: (0.1, 0.001),
                scale,
                values: (&p[..], &mut p_out[..]),
                state: State {
                    before: [&m[..], &v[..]],
                    after: [&mut m_out[..], &mut v_out[..]],
                },
                g: &g,
            };
            let valid = if wide {
                // SAFETY: the processor has AVX2 (checked above).
                unsafe { apply_avx2(update) }
            } else {
                apply_plain(update)
            };
            assert!(valid, "finite moments, a second moment of squares");
            [p_out, m_out, v_out]
                .concat()
                .iter()
                .map(|x| x.to_bits())
                .collect::<Vec<_>>()
        };
        assert_eq!(step(false), step(true), "{rule:?}, scale {scale}");
    }
}
