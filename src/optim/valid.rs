//! What an optimizer checks of the state it is about to step from: a step count and moments
//! restored from a checkpoint or assigned by hand could hold anything, and a step from them
//! would write NaN (or overflow) into every row it touches.
//!
//! The moments are checked where they make a step non-finite: the step's own sweep reports
//! whether every update it computed is finite ([`apply`](super::rule::apply)), at one
//! product and one comparison per element, and only where one is not are the moments the
//! step read scanned ([`invalid_moments`]). A NaN or infinite update from valid moments
//! comes from the gradient or the parameter, which the step applies as it always has (a
//! NaN gradient is refused only with `error_if_nonfinite`). A step from invalid moments
//! fails its execution, which discards every write of the step.

use ndarray::NdFloat;

use super::rule::Rule;
use crate::error::{Error, Result};

/// Whether a moment's element is one a step can use: finite, and for Adam's second moment
/// (`second`) at least 0 (a sum of squares; under the square root a negative one is NaN).
pub(super) fn valid_moment<A: NdFloat>(x: A, second: bool) -> bool {
    let zero = A::zero();
    (x * zero == zero) && (!second || x >= zero)
}

/// The step number after `steps` (the count the state holds), for `rule`: `steps + 1`, and
/// its bias corrections ([`Rule::bias_correction`]), finite and above 0.
///
/// # Errors
/// [`Error::InvalidValue`] naming `variable` (the state that holds the count) and the count
/// if it is negative, if `steps + 1` overflows, or if its bias correction is not a positive
/// finite number (nothing is written then).
#[inline]
pub(super) fn next_step<A: NdFloat>(
    rule: &Rule<A>,
    steps: i64,
    variable: &str,
) -> Result<(i64, (A, A))> {
    let Some(t) = steps.checked_add(1).filter(|_| steps >= 0) else {
        return Err(invalid_count(variable, steps, None));
    };
    let (c1, c2) = rule.bias_correction(t);
    let usable = |c: A| c.is_finite() && c > A::zero();
    if !usable(c1) || !usable(c2) {
        let corrections = format!("({c1:?}, {c2:?})");
        return Err(invalid_count(variable, steps, Some(corrections)));
    }
    Ok((t, (c1, c2)))
}

/// [`next_step`]'s error: `corrections` are the next step's, where they are what failed.
#[cold]
fn invalid_count(variable: &str, steps: i64, corrections: Option<String>) -> Error {
    let why = match corrections {
        Some(c) => format!("whose next step's bias corrections {c} are not positive and finite"),
        None if steps < 0 => "below 0 (a count of steps taken)".to_owned(),
        None => "and the next step's number would overflow an i64".to_owned(),
    };
    Error::InvalidValue {
        variable: variable.to_owned(),
        problem: format!("its step count is {steps}, {why}"),
    }
}

/// The error for a step whose sweep found an update that is not finite, if the state it
/// read is what made it so: `before` holds the rule's state tensors as the step read them
/// (momentum: the buffer; Adam: the first moment, then the second), each of `of`'s
/// elements. Names `variable` (the state), the tensor, `of` (the parameter or row whose
/// state it is), the element's position and its value. `None` if every element passes
/// [`valid_moment`].
#[cold]
pub(super) fn invalid_moments<A: NdFloat>(
    rule: &Rule<A>,
    variable: &str,
    of: &str,
    before: [&[A]; 2],
) -> Option<Error> {
    let names: &[&str] = match rule {
        Rule::Adam { .. } => &["first moment", "second moment"],
        Rule::Momentum { .. } => &["momentum buffer"],
        _ => &[],
    };
    let (name, second, at, x) = names.iter().enumerate().find_map(|(k, &name)| {
        let second = k == 1;
        let at = before[k].iter().position(|&x| !valid_moment(x, second))?;
        Some((name, second, at, before[k][at]))
    })?;
    let range = if second {
        "finite and at least 0"
    } else {
        "finite"
    };
    Some(Error::InvalidValue {
        variable: variable.to_owned(),
        problem: format!(
            "the {name} of {of} holds {x:?} at element {at} (it must be {range}: the step \
             from it is not finite); nothing was applied"
        ),
    })
}

/// `error_if_nonfinite`'s check, for every optimizer: `Err(NonFinite)` naming (by `name` of
/// its position) the first of `grads` that holds a NaN or an infinity.
pub(super) fn check_finite<'g, A: NdFloat>(
    optimizer: &str,
    grads: impl IntoIterator<Item = &'g [A]>,
    name: impl FnOnce(usize) -> String,
) -> Result<()> {
    match grads
        .into_iter()
        .position(|g| !g.iter().all(|x| x.is_finite()))
    {
        Some(i) => Err(Error::NonFinite {
            optimizer: optimizer.to_owned(),
            parameter: name(i),
        }),
        None => Ok(()),
    }
}
