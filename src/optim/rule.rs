//! The update rules and the arithmetic of one step: each parameter's new value and state
//! computed from the old ones in one sweep, in AVX2 where the processor has it.

use std::borrow::Cow;

use ndarray::NdFloat;

use crate::error::{check_setting, Result, RATE};

/// The update rule of an [`Optimizer`](super::Optimizer).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Rule<A> {
    /// `p -= lr * g`.
    Sgd {
        /// Learning rate.
        lr: A,
    },
    /// `v = momentum * v + g; p -= lr * v` (PyTorch's form).
    Momentum {
        /// Learning rate.
        lr: A,
        /// Momentum factor.
        momentum: A,
    },
    /// Adam, with decoupled weight decay when `weight_decay > 0` (AdamW:
    /// `p -= lr * weight_decay * p` before the Adam update).
    Adam {
        /// Learning rate.
        lr: A,
        /// Decay of the first moment.
        beta1: A,
        /// Decay of the second moment.
        beta2: A,
        /// Added to the denominator.
        eps: A,
        /// Decoupled weight decay (0: plain Adam).
        weight_decay: A,
    },
}

impl<A: NdFloat> Rule<A> {
    /// Checks every setting of the rule (PyTorch's ranges): rates and weight decay finite
    /// and at least 0, momentum too, Adam's betas at least 0 and below 1.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] naming `owner` and the first setting out of range.
    pub(super) fn check(&self, owner: &str) -> Result<()> {
        let owner = || owner.to_owned();
        let rate = |x: A| x.is_finite() && x >= A::zero();
        let decay = |x: A| x >= A::zero() && x < A::one();
        const DECAY: &str = "at least 0 and below 1";
        let lr = self.lr();
        check_setting(owner, "lr", lr, rate(lr), RATE)?;
        match *self {
            Rule::Sgd { .. } => Ok(()),
            Rule::Momentum { momentum, .. } => {
                check_setting(owner, "momentum", momentum, rate(momentum), RATE)
            }
            Rule::Adam {
                beta1,
                beta2,
                eps,
                weight_decay,
                ..
            } => {
                check_setting(owner, "beta1", beta1, decay(beta1), DECAY)?;
                check_setting(owner, "beta2", beta2, decay(beta2), DECAY)?;
                check_setting(owner, "eps", eps, rate(eps), RATE)?;
                let wd = weight_decay;
                check_setting(owner, "weight_decay", wd, rate(wd), RATE)
            }
        }
    }

    /// Adam's bias corrections at step `t`, `(1 - beta1^t, 1 - beta2^t)`; `(1, 1)` for the
    /// other rules. Once per step, not per parameter.
    pub(super) fn bias_correction(&self, t: i64) -> (A, A) {
        match *self {
            Rule::Adam { beta1, beta2, .. } => {
                let exponent = u32::try_from(t.clamp(0, i64::from(i32::MAX))).unwrap_or(0);
                (
                    one_minus_power(beta1, exponent),
                    one_minus_power(beta2, exponent),
                )
            }
            _ => (A::one(), A::one()),
        }
    }

    /// The learning rate.
    pub(super) fn lr(&self) -> A {
        match *self {
            Rule::Sgd { lr } | Rule::Momentum { lr, .. } | Rule::Adam { lr, .. } => lr,
        }
    }

    /// The rule with its learning rate times `factor` (a schedule's), everything else kept.
    /// AdamW's decay scales with it, as PyTorch's does (`p -= lr * weight_decay * p`).
    pub(super) fn with_lr_times(mut self, factor: A) -> Self {
        match &mut self {
            Rule::Sgd { lr } | Rule::Momentum { lr, .. } | Rule::Adam { lr, .. } => {
                *lr *= factor;
            }
        }
        self
    }

    /// How many state tensors per parameter the rule keeps.
    pub(super) fn state_per_param(&self) -> usize {
        match self {
            Rule::Sgd { .. } => 0,
            Rule::Momentum { .. } => 1,
            Rule::Adam { .. } => 2,
        }
    }
}

/// `max / norm` when the global L2 norm of `grads` exceeds `max`, else 1. The squares are
/// summed in `f64` whatever `A` is: summed in `f32`, each square is lost once the sum is
/// ~2^24 times larger, so a model of tens of millions of parameters would get too small a
/// norm and too large a clipped step. `max / norm` is computed in `f64` too.
pub(super) fn clip_scale<A: NdFloat>(grads: &[(&[usize], Cow<'_, [A]>)], max: A) -> A {
    let wide = |x: A| x.to_f64().unwrap_or(f64::NAN);
    let squares: f64 = grads
        .iter()
        .flat_map(|(_, g)| g.iter())
        .map(|&x| wide(x) * wide(x))
        .sum();
    let (norm, max) = (squares.sqrt(), wide(max));
    if norm > max {
        A::from(max / norm).unwrap_or_else(A::one)
    } else {
        A::one()
    }
}

/// A parameter's state tensors (none, the momentum buffer, or m and v) before a step, and
/// where the step writes them: the rule's [`state_per_param`](Rule::state_per_param) first
/// ones of each array, the rest empty (so that each rule takes its blocks by position, with
/// no length to match).
#[derive(Default)]
pub(super) struct State<'a, A> {
    pub(super) before: [&'a [A]; 2],
    pub(super) after: [&'a mut [A]; 2],
}

/// One parameter's update: from its value and state before the step into where the step
/// writes them (every element), with the gradient times `scale` and the step's bias
/// corrections (`Rule::bias_correction`).
pub(super) struct Update<'a, A> {
    pub(super) rule: Rule<A>,
    pub(super) corrections: (A, A),
    pub(super) scale: A,
    /// The parameter before the step, and where the step writes it.
    pub(super) values: (&'a [A], &'a mut [A]),
    pub(super) state: State<'a, A>,
    pub(super) g: &'a [A],
}

/// Applies `update`, in AVX2 where the processor has it (the same bits:
/// [`wide`](crate::kernel::wide)); Adam's divisions and square roots then go eight `f32` at
/// a time. Returns whether every element's update is finite; where one is not, the caller
/// checks the state the step read ([`invalid_moments`](super::valid::invalid_moments)),
/// and fails the step if that is what made it so.
#[must_use = "a step from an invalid state is refused"]
pub(super) fn apply<A: NdFloat>(update: Update<'_, A>) -> bool {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if crate::kernel::avx2() {
        // SAFETY: the processor has AVX2.
        return unsafe { apply_avx2(update) };
    }
    apply_plain(update)
}

/// [`apply`] in AVX2.
///
/// # Safety
/// The processor has AVX2.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[target_feature(enable = "avx2")]
unsafe fn apply_avx2<A: NdFloat>(update: Update<'_, A>) -> bool {
    apply_plain(update)
}

/// [`apply`], compiled for whichever instructions its caller may use.
#[inline(always)]
fn apply_plain<A: NdFloat>(update: Update<'_, A>) -> bool {
    let Update {
        rule,
        corrections: (c1, c2),
        scale,
        values: (p, p_out),
        state,
        g,
    } = update;
    let State {
        before: [s0, s1],
        after: [s0_out, s1_out],
    } = state;
    match rule {
        Rule::Sgd { lr } => {
            let k = lr * scale;
            for ((out, &p), &g) in p_out.iter_mut().zip(p).zip(g) {
                *out = p - k * g;
            }
            true // no state
        }
        Rule::Momentum { lr, momentum } => {
            let (v, v_out) = (s0, s0_out);
            let (p, v) = (p.iter().zip(v), p_out.iter_mut().zip(v_out.iter_mut()));
            // Accumulated without an early exit, so that the loop stays vectorized: `x * 0`
            // is 0 for a finite `x`, NaN for a NaN or an infinity.
            let (mut finite, zero) = (true, A::zero());
            for (((&p, &v), (p_out, v_out)), &g) in p.zip(v).zip(g) {
                *v_out = momentum * v + scale * g;
                finite &= *v_out * zero == zero;
                *p_out = p - lr * *v_out;
            }
            finite
        }
        Rule::Adam {
            lr,
            beta1,
            beta2,
            eps,
            weight_decay,
        } => {
            let decay = A::one() - lr * weight_decay;
            let consts = AdamConsts {
                lr,
                betas: (beta1, beta2),
                eps,
                corrections: (c1, c2),
            };
            let (values, state) = ((p, p_out), (s0, s1, s0_out, s1_out));
            // Times one is exact: without clipping or weight decay the sweep skips both
            // products (two of Adam's ~17 operations an element), same bits.
            if scale == A::one() && decay == A::one() {
                adam_sweep(consts, values, state, g, |g| g, |p| p)
            } else {
                adam_sweep(consts, values, state, g, |g| scale * g, |p| p * decay)
            }
        }
    }
}

/// Adam's per-step constants.
#[derive(Clone, Copy)]
struct AdamConsts<A> {
    lr: A,
    betas: (A, A),
    eps: A,
    corrections: (A, A),
}

/// One Adam sweep over a parameter, its moments and gradient: `scaled` is the gradient's
/// clipping, `decayed` the weight decay (identities where there is none, so that the
/// compiler drops them). Returns whether every element's update (what is subtracted from
/// the decayed parameter) is finite, accumulated without an early exit, so that the loop
/// stays vectorized: one product and one comparison per element (`x * 0` is 0 for a finite
/// `x`, NaN for a NaN or an infinity), where checking both moments took five.
#[inline(always)]
fn adam_sweep<A: NdFloat>(
    AdamConsts {
        lr,
        betas: (beta1, beta2),
        eps,
        corrections: (c1, c2),
    }: AdamConsts<A>,
    (p, p_out): (&[A], &mut [A]),
    (m, v, m_out, v_out): (&[A], &[A], &mut [A], &mut [A]),
    g: &[A],
    scaled: impl Fn(A) -> A,
    decayed: impl Fn(A) -> A,
) -> bool {
    let before = p.iter().zip(m).zip(v);
    let after = p_out.iter_mut().zip(m_out.iter_mut()).zip(v_out.iter_mut());
    let (mut finite, zero) = (true, A::zero());
    for ((((&p, &m), &v), ((p_out, m_out), v_out)), &g) in before.zip(after).zip(g) {
        let g = scaled(g);
        let m = beta1 * m + (A::one() - beta1) * g;
        let v = beta2 * v + (A::one() - beta2) * g * g;
        (*m_out, *v_out) = (m, v);
        let update = lr * (m / c1) / ((v / c2).sqrt() + eps);
        finite &= update * zero == zero;
        *p_out = decayed(p) - update;
    }
    finite
}

// Only where there is an AVX2 loop to compare (not under miri, which runs the baseline and
// whose `powi` is nondeterministic in its last bits).
#[cfg(all(test, not(mvtensor_loom), target_arch = "x86_64", not(miri)))]
mod tests;

/// `1 - beta^n` for a `beta` in `[0, 1)`, with the bits of `1 - beta.powi(n)`: the
/// multiplications of Rust's `powi` (compiler-builtins' `__powisf2` and `__powidf2`, what it
/// calls where the exponent is not a constant), in the same order, until the rest can only
/// make `beta^n` too small to change `1 - beta^n`. `powi` goes on squaring into the
/// subnormal range, where a multiplication takes a microcode assist, a large part of a small
/// Adam step late in training.
fn one_minus_power<A: NdFloat>(beta: A, mut n: u32) -> A {
    // `1 - x` rounds to 1 for every `x` up to half the spacing of the floats below 1.
    let two = A::one() + A::one();
    let negligible = A::epsilon() / (two * two);
    let (mut base, mut power) = (beta, A::one());
    loop {
        // A clear bit multiplies by one, which is exact: no branch on the step's bits.
        power *= if n & 1 != 0 { base } else { A::one() };
        n >>= 1;
        if n == 0 {
            return A::one() - power;
        }
        base *= base;
        // A set bit of `n` is left, so a factor of `beta^n` is at most `base` (every
        // factor is at most 1, and squaring keeps a value at most 1 from growing).
        if base <= negligible {
            return A::one();
        }
    }
}
