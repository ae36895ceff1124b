//! Differential fuzz target for paged variables: arbitrary row and dense writes (with
//! arbitrary, possibly bad, indices and shapes), page sizes, held snapshots, and executions
//! of a critical section over the table (and a counter) that stage row writes, gather rows,
//! and fail or commit, against a plain 2-d array.
//!
//! Checked after every op: the result (the next version number, or the exact error variant)
//! is the model's; an op that fails changes nothing; the whole value, a gather of the op's
//! indices and a row range equal the model's; every snapshot held from earlier (pinned and
//! owned) still shows the value it was taken at.
//!
//! i64 elements with small values: integer arithmetic is exact, so values compare exactly.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mvtensor::ndarray::arr0;
use mvtensor::ndarray::{s, Array2, Axis};
use mvtensor::{CriticalSection, Error, OwnedPagedSnapshot, PagedVariable, Variable};

const MAX_OPS: usize = 128;
const MAX_HELD: usize = 8;
const MAX_STEPS: usize = 16;

/// Applies a row write of `values` to `model` as mvtensor defines it (in order, repeated
/// indices each time).
fn apply_rows(model: &mut Array2<i64>, kind: u8, ids: &[usize], values: &Array2<i64>) {
    for (&id, row) in ids.iter().zip(values.rows()) {
        let mut dst = model.row_mut(id);
        match kind % 3 {
            0 => dst += &row,
            1 => dst.scaled_add(3, &row),
            _ => dst.assign(&row),
        }
    }
}

/// The error a row write of `ids` with rows of width `w` must get, if any.
fn expect_refused(
    result: &Result<(), Error>,
    ids: &[usize],
    rows: usize,
    width: usize,
    w: usize,
) -> bool {
    if w != width {
        assert!(
            matches!(result, Err(Error::ShapeMismatch { .. })),
            "{result:?}"
        );
        return true;
    }
    if let Some(&index) = ids.iter().find(|&&i| i >= rows) {
        match result {
            Err(Error::IndexOutOfRange {
                index: i, bound: b, ..
            }) => {
                assert_eq!((*i, *b), (index, rows));
            }
            other => panic!("expected IndexOutOfRange, got {other:?}"),
        }
        return true;
    }
    assert!(result.is_ok(), "{result:?}");
    false
}

#[derive(Arbitrary, Debug)]
enum Op {
    /// `scatter_add` / `scatter_scaled_add(3)` / `scatter_update` of rows of `fill`.
    Rows {
        kind: u8,
        indices: Vec<u8>,
        fill: i8,
        bad_width: bool,
    },
    /// A dense add, or a whole assign, of `fill` everywhere (or of the wrong shape).
    Dense {
        assign: bool,
        fill: i8,
        bad_shape: bool,
    },
    /// Hold a snapshot (owned or pinned) for later checks.
    Hold { owned: bool },
    /// Drop the oldest held snapshot.
    Release,
    /// One execution of a section over the table (and a counter, if `counter`): its steps,
    /// then `Err` if `fail`. A step that is refused stages nothing.
    Section {
        steps: Vec<Step>,
        counter: bool,
        fail: bool,
    },
}

/// A step of an execution: by `kind % 5`, a row write as [`Op::Rows`] (0-2), a dense add
/// (3) or a whole assign (4) of `fill` everywhere; `bad_width` gives its values a row too
/// wide (a refused step).
#[derive(Arbitrary, Debug)]
struct Step {
    kind: u8,
    indices: Vec<u8>,
    fill: i8,
    bad_width: bool,
}

#[derive(Arbitrary, Debug)]
struct Input {
    rows: u8,
    width: u8,
    rows_per_page: u8,
    ops: Vec<Op>,
}

fn check_value(table: &PagedVariable<i64>, model: &Array2<i64>) {
    let value = table.read().to_array();
    assert_eq!(
        value,
        model.clone().into_dyn(),
        "value differs from the model"
    );
}

fuzz_target!(|input: Input| {
    let (rows, width) = (input.rows as usize % 40, input.width as usize % 6);
    let mut model = Array2::from_shape_fn((rows, width), |(r, c)| (r * 7 + c) as i64);
    let mut builder = PagedVariable::builder(model.clone()).name("t");
    if input.rows_per_page > 0 {
        builder = builder.rows_per_page(input.rows_per_page as usize % 9);
    }
    let table = builder.build().expect("2-d");
    let mut version = 0u64;
    let mut held: Vec<(OwnedPagedSnapshot<i64>, Array2<i64>)> = Vec::new();
    let mut pinned = Vec::new();
    let counter = Variable::new(arr0(0i64).into_dyn());
    let mut count = 0i64;
    for op in input.ops.into_iter().take(MAX_OPS) {
        match op {
            Op::Rows {
                kind,
                indices,
                fill,
                bad_width,
            } => {
                let bound = rows + 2; // some indices past the end
                let ids: Vec<usize> = indices.iter().map(|&i| i as usize % bound).collect();
                let w = if bad_width { width + 1 } else { width };
                let values = Array2::from_elem((ids.len(), w), i64::from(fill));
                let result = match kind % 3 {
                    0 => table.scatter_add(&ids, &values),
                    1 => table.scatter_scaled_add(3, &ids, &values),
                    _ => table.scatter_update(&ids, &values),
                };
                if bad_width {
                    assert!(
                        matches!(result, Err(Error::ShapeMismatch { .. })),
                        "{result:?}"
                    );
                } else if let Some(&index) = ids.iter().find(|&&i| i >= rows) {
                    match result {
                        Err(Error::IndexOutOfRange {
                            index: i, bound: b, ..
                        }) => {
                            assert_eq!((i, b), (index, rows));
                        }
                        other => panic!("expected IndexOutOfRange, got {other:?}"),
                    }
                } else {
                    apply_rows(&mut model, kind, &ids, &values);
                    // A write of no rows makes no version.
                    version += u64::from(!ids.is_empty());
                    assert_eq!(result.expect("valid"), version);
                    if !ids.is_empty() {
                        let gathered = table.read().gather(&ids).expect("valid");
                        assert_eq!(gathered, model.select(Axis(0), &ids).into_dyn());
                    }
                }
            }
            Op::Dense {
                assign,
                fill,
                bad_shape,
            } => {
                let shape = if bad_shape {
                    (rows + 1, width)
                } else {
                    (rows, width)
                };
                let values = Array2::from_elem(shape, i64::from(fill));
                let result = if assign {
                    table.assign(&values)
                } else {
                    table.assign_add(&values)
                };
                if bad_shape {
                    assert!(
                        matches!(result, Err(Error::ShapeMismatch { .. })),
                        "{result:?}"
                    );
                } else {
                    if assign {
                        model.assign(&values);
                    } else {
                        model += &values;
                    }
                    version += 1;
                    assert_eq!(result.expect("valid"), version);
                }
            }
            Op::Hold { owned } => {
                if owned {
                    held.push((table.read_owned(), model.clone()));
                    if held.len() > MAX_HELD {
                        held.remove(0);
                    }
                } else {
                    pinned.push((table.read(), model.clone()));
                    if pinned.len() > MAX_HELD {
                        drop(pinned.remove(0));
                    }
                }
            }
            Op::Section {
                steps,
                counter: with_counter,
                fail,
            } => {
                let mut builder = CriticalSection::builder().paged(&table);
                if with_counter {
                    builder = builder.resource(&counter);
                }
                let section = builder.build().expect("no other section");
                let mut seen = model.clone();
                let mut staged = false;
                let result = section.execute(|tx| {
                    for step in steps.iter().take(MAX_STEPS) {
                        let bound = rows + 2;
                        let ids: Vec<usize> =
                            step.indices.iter().map(|&i| i as usize % bound).collect();
                        let w = if step.bad_width { width + 1 } else { width };
                        if step.kind % 5 >= 3 {
                            // A dense write of the whole table: an add, or an assign.
                            let whole = Array2::from_elem((rows, w), i64::from(step.fill));
                            let result = if step.kind % 5 == 3 {
                                tx.assign_add(&table, &whole)
                            } else {
                                tx.assign(&table, whole.clone())
                            };
                            if step.bad_width {
                                assert!(
                                    matches!(result, Err(Error::ShapeMismatch { .. })),
                                    "{result:?}"
                                );
                            } else {
                                assert!(result.is_ok(), "{result:?}");
                                if step.kind % 5 == 3 {
                                    seen += &whole;
                                } else {
                                    seen.assign(&whole);
                                }
                                staged = true;
                            }
                        } else {
                            let values = Array2::from_elem((ids.len(), w), i64::from(step.fill));
                            let result = match step.kind % 3 {
                                0 => tx.scatter_add(&table, &ids, &values),
                                1 => tx.scatter_scaled_add(&table, 3, &ids, &values),
                                _ => tx.scatter_update(&table, &ids, &values),
                            };
                            if !expect_refused(&result, &ids, rows, width, w) {
                                apply_rows(&mut seen, step.kind, &ids, &values);
                                staged |= !ids.is_empty(); // no row stages nothing
                            }
                        }
                        let valid: Vec<usize> = ids.iter().copied().filter(|&i| i < rows).collect();
                        let gathered = tx.gather(&table, &valid)?;
                        assert_eq!(
                            gathered,
                            seen.select(Axis(0), &valid).into_dyn(),
                            "gather in a txn"
                        );
                    }
                    if with_counter {
                        tx.assign_add(&counter, &arr0(1i64).into_dyn())?;
                    }
                    if fail {
                        return Err(Error::Reentrant {
                            running: "the fuzz target".into(),
                            attempted: "a failing execution".into(),
                        });
                    }
                    Ok(())
                });
                assert_eq!(result.is_err(), fail, "{result:?}");
                if !fail {
                    model = seen;
                    if staged {
                        version += 1;
                    }
                    if with_counter {
                        count += 1;
                    }
                }
                assert_eq!(counter.read()[[]], count);
            }
            Op::Release => {
                if !held.is_empty() {
                    held.remove(0);
                }
                if !pinned.is_empty() {
                    drop(pinned.remove(0));
                }
            }
        }
        check_value(&table, &model);
        let snapshot = table.read();
        assert_eq!(snapshot.version(), version);
        if rows > 1 {
            let part = snapshot.rows(1..rows).expect("in range");
            assert_eq!(part, model.slice(s![1..rows, ..]).into_dyn());
        }
        for (s, then) in &held {
            assert_eq!(
                s.to_array(),
                then.clone().into_dyn(),
                "an owned snapshot changed"
            );
        }
        for (s, then) in &pinned {
            assert_eq!(
                s.to_array(),
                then.clone().into_dyn(),
                "a pinned snapshot changed"
            );
        }
    }
});
