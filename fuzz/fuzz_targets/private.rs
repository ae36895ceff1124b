//! Differential fuzz target for section-private state: executions of one section over a
//! variable and three private states (in-place adds, rewrites from the last value, reads,
//! conflicting borrows, failures and panics), store snapshots, and another section's attempts
//! to reach the state, against a sequential model.
//!
//! Checked after every op: the result (or the exact error) is the model's; a failed or
//! panicking execution leaves every state and the variable as they were; a store snapshot
//! shows the model's committed values. Inside every execution, each read of a private state
//! equals the model's value as the execution has changed it so far.

#![no_main]

use std::panic::{catch_unwind, AssertUnwindSafe};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mvtensor::ndarray::{arr0, ArrayD, IxDyn};
use mvtensor::{CriticalSection, Error, Private, Store, Txn, Variable};

#[path = "common/panics.rs"]
mod panics;
use panics::{quiet_hook_for_our_panics, PANIC};

const STATES: usize = 3;
const MAX_OPS: usize = 32;
const MAX_STEPS: usize = 8;

#[derive(Arbitrary, Debug, Clone, Copy)]
enum ShapeSel {
    Scalar,
    Two,
    Three,
}

impl ShapeSel {
    fn dims(self) -> Vec<usize> {
        match self {
            ShapeSel::Scalar => vec![],
            ShapeSel::Two => vec![2],
            ShapeSel::Three => vec![3],
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Step {
    /// `private_mut`: every element plus `by`.
    Add(u8, i8),
    /// `private_rewrite`: the next value `2 * old + by`, computed from the last.
    Rewrite(u8, i8),
    /// `private`: the value as this execution has changed it so far.
    Read(u8),
    /// A `private_mut` held while another borrow is asked for: `Error::Borrowed`.
    Conflict(u8),
    /// `assign_add` on the section's variable.
    Sum(i8),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum End {
    Commit,
    Fail,
    Panic,
}

#[derive(Arbitrary, Debug, Clone)]
enum Op {
    Execute {
        steps: Vec<Step>,
        end: End,
    },
    Snapshot,
    /// Another section's execution asks for the state: `Error::NotInResourceSet`.
    Foreign(u8),
}

#[derive(Arbitrary, Debug)]
struct Input {
    shapes: [ShapeSel; STATES],
    ops: Vec<Op>,
}

fn name(i: usize) -> String {
    format!("p{i}")
}

/// The committed values: the three states and the variable.
#[derive(Clone, PartialEq, Debug)]
struct Model {
    states: Vec<ArrayD<i64>>,
    sum: i64,
}

/// Runs `steps` against the real `Txn` and `model` (the execution's own copy).
fn run_steps(
    tx: &mut Txn<'_>,
    steps: &[Step],
    states: &[Private<i64>],
    sum: &Variable<i64>,
    model: &mut Model,
) -> Result<(), Error> {
    for &step in steps {
        match step {
            Step::Add(i, by) => {
                let i = i as usize % STATES;
                tx.private_mut(&states[i])?
                    .mapv_inplace(|x| x.wrapping_add(i64::from(by)));
                model.states[i].mapv_inplace(|x| x.wrapping_add(i64::from(by)));
            }
            Step::Rewrite(i, by) => {
                let i = i as usize % STATES;
                let mut state = tx.private_rewrite(&states[i])?;
                let (old, new) = state.split();
                mvtensor::ndarray::Zip::from(new)
                    .and(old)
                    .for_each(|n, &o| *n = o.wrapping_mul(2).wrapping_add(i64::from(by)));
                model.states[i].mapv_inplace(|x| x.wrapping_mul(2).wrapping_add(i64::from(by)));
            }
            Step::Read(i) => {
                let i = i as usize % STATES;
                assert_eq!(
                    *tx.private(&states[i])?,
                    model.states[i],
                    "read of {}",
                    name(i)
                );
            }
            Step::Conflict(i) => {
                let i = i as usize % STATES;
                let held = tx.private_mut(&states[i])?;
                let err = tx.private(&states[i]).map(|_| ()).unwrap_err();
                assert_eq!(
                    err,
                    Error::Borrowed {
                        variable: name(i),
                        section: "owner".into(),
                        mutably: true,
                    }
                );
                drop(held);
            }
            Step::Sum(by) => {
                tx.assign_add(sum, &arr0(i64::from(by)).into_dyn())?;
                model.sum = model.sum.wrapping_add(i64::from(by));
            }
        }
    }
    Ok(())
}

/// What a store snapshot and the section show now, against `model`.
fn check(store: &Store, section: &CriticalSection, states: &[Private<i64>], model: &Model) {
    let snapshot = store.snapshot();
    for i in 0..STATES {
        let seen = snapshot.get::<i64, IxDyn>(&name(i)).expect("registered");
        assert_eq!(*seen, model.states[i], "snapshot of {}", name(i));
    }
    let sum = snapshot.get::<i64, IxDyn>("sum").expect("registered");
    assert_eq!(sum[[]], model.sum, "snapshot of the variable");
    let now = section
        .execute(|tx| {
            states
                .iter()
                .map(|state| Ok(tx.private(state)?.to_owned()))
                .collect::<Result<Vec<_>, Error>>()
        })
        .expect("reads");
    assert_eq!(now, model.states, "the states in an execution");
}

fuzz_target!(|input: Input| {
    quiet_hook_for_our_panics();
    let store = Store::new();
    let sum = store
        .variable("sum", arr0(0i64).into_dyn())
        .expect("a new name");
    let states: Vec<Private<i64>> = (0..STATES)
        .map(|i| {
            let value = ArrayD::from_elem(IxDyn(&input.shapes[i].dims()), i as i64);
            store.private(&name(i), value).expect("a new name")
        })
        .collect();
    let section = states
        .iter()
        .fold(
            CriticalSection::builder().name("owner").resource(&sum),
            |b, s| b.private(s),
        )
        .build()
        .expect("fresh resources");
    let other = CriticalSection::builder()
        .name("other")
        .build()
        .expect("no resources");
    let mut model = Model {
        states: states
            .iter()
            .enumerate()
            .map(|(i, s)| ArrayD::from_elem(IxDyn(s.shape()), i as i64))
            .collect(),
        sum: 0,
    };
    for op in input.ops.into_iter().take(MAX_OPS) {
        match op {
            Op::Execute { steps, end } => {
                let steps = &steps[..steps.len().min(MAX_STEPS)];
                let mut staged = model.clone();
                let mut result = None;
                let outcome = catch_unwind(AssertUnwindSafe(|| {
                    section.execute(|tx| {
                        let ran = run_steps(tx, steps, &states, &sum, &mut staged);
                        result = Some(ran.clone());
                        ran?;
                        match end {
                            End::Commit => Ok(()),
                            End::Fail => Err(Error::InvalidSetting {
                                owner: "the fuzz target".into(),
                                setting: "end",
                                value: "Fail".into(),
                                expected: "an execution asked to fail",
                            }),
                            End::Panic => panic!("{PANIC}"),
                        }
                    })
                }));
                let committed = matches!(outcome, Ok(Ok(())));
                assert_eq!(
                    committed,
                    matches!(end, End::Commit) && matches!(result, Some(Ok(()))),
                    "{outcome:?}"
                );
                if committed {
                    model = staged;
                }
            }
            Op::Snapshot => {}
            Op::Foreign(i) => {
                let i = i as usize % STATES;
                let err = other
                    .execute(|tx| tx.private(&states[i]).map(|_| ()))
                    .unwrap_err();
                assert_eq!(
                    err,
                    Error::NotInResourceSet {
                        variable: name(i),
                        section: "other".into(),
                    }
                );
            }
        }
        check(&store, &section, &states, &model);
    }
});
