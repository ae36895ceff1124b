//! The checks that turn bad input into an [`Error`] before anything is applied: settings in
//! range, shapes, rows and indices.

use super::{Error, Result};

/// A rate's range: finite and at least 0.
pub(crate) const RATE: &str = "finite and at least 0";

/// Checks that `setting` of `owner` is in range (`ok`), described by `expected` otherwise.
pub(crate) fn check_setting(
    owner: impl FnOnce() -> String,
    setting: &'static str,
    value: impl std::fmt::Debug,
    ok: bool,
    expected: &'static str,
) -> Result<()> {
    if ok {
        return Ok(());
    }
    Err(Error::InvalidSetting {
        owner: owner(),
        setting,
        value: format!("{value:?}"),
        expected,
    })
}

/// Checks that `found` is exactly `expected`, naming `variable` otherwise. (Inline, the
/// error built out of line: every write and optimizer step checks a shape.)
#[inline]
pub(crate) fn check_shape(variable: &str, expected: &[usize], found: &[usize]) -> Result<()> {
    if same_shape(expected, found) {
        Ok(())
    } else {
        Err(shape_mismatch(variable, expected, found))
    }
}

#[cold]
fn shape_mismatch(variable: &str, expected: &[usize], found: &[usize]) -> Error {
    Error::ShapeMismatch {
        variable: variable.to_owned(),
        expected: expected.to_vec(),
        found: found.to_vec(),
    }
}

/// Checks a row delta (`rows` of shape `[indices.len(), ..]`) against a value of `shape`:
/// the rows' other axes are the value's, and every index is below its first axis.
pub(crate) fn check_rows(
    variable: &str,
    shape: &[usize],
    indices: &[usize],
    rows: &[usize],
) -> Result<()> {
    check_has_rows(variable, shape)?;
    // Compared in place: a steady row write allocates nothing (the shape is built on error).
    let fits = rows.len() == shape.len()
        && rows[0] == indices.len()
        && same_shape(&shape[1..], &rows[1..]);
    if !fits {
        let mut expected = vec![indices.len()];
        expected.extend_from_slice(&shape[1..]);
        return Err(Error::ShapeMismatch {
            variable: variable.to_owned(),
            expected,
            found: rows.to_vec(),
        });
    }
    check_indices(variable, shape[0], indices)
}

/// A value of `shape` has rows (a first axis): row operations on a 0-d variable are refused.
pub(crate) fn check_has_rows(variable: &str, shape: &[usize]) -> Result<()> {
    if shape.is_empty() {
        return Err(Error::RankMismatch {
            variable: variable.to_owned(),
            expected: Some(0),
            found: Some(1),
        });
    }
    Ok(())
}

/// Checks that every row index is below `bound`.
pub(crate) fn check_indices(variable: &str, bound: usize, indices: &[usize]) -> Result<()> {
    // First whether any is out (a loop without an early exit, which the compiler
    // vectorizes): the usual answer is that none is.
    if !indices.iter().fold(false, |out, &i| out | (i >= bound)) {
        return Ok(());
    }
    match indices.iter().find(|&&i| i >= bound) {
        Some(&index) => Err(Error::IndexOutOfRange {
            variable: variable.to_owned(),
            index,
            bound,
        }),
        None => Ok(()),
    }
}

/// `a == b` for shapes, element by element: slice equality calls `memcmp`, which on the empty
/// shapes of scalars reads through a dangling pointer and takes a microcode assist, a large
/// part of a scalar `fetch_update`.
#[inline]
pub(crate) fn same_shape(a: &[usize], b: &[usize]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}
