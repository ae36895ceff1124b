//! Differential fuzz target for critical sections: sections are built and dropped over four
//! variables, and executions (with reads, writes, bad writes, direct writes, nested
//! executions, failures and panics) run against a sequential model of claims and staged
//! writes.
//!
//! Checked after every op: the result (or the exact error) is the model's; a failed or
//! panicking execution commits nothing; every variable's value and version equal the
//! model's, through `read` and a fresh store snapshot. Inside every execution, each `Txn`
//! read equals the model's staged-or-committed value.
//!
//! Single-threaded, so every execution is a batch of one and each commit adds one to the
//! version of every variable it wrote.

#![no_main]

use std::panic::{catch_unwind, AssertUnwindSafe};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mvtensor::ndarray::{ArrayD, IxDyn};
use mvtensor::{CriticalSection, Error, Store, Txn, Variable};

#[path = "common/panics.rs"]
mod panics;
use panics::{is_ours, quiet_hook_for_our_panics, PANIC};

const VARS: usize = 4;
const MAX_OPS: usize = 128;
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

/// A tensor of `shape` filled with `fill`.
#[derive(Arbitrary, Debug, Clone, Copy)]
struct Value {
    shape: ShapeSel,
    fill: i8,
}

impl Value {
    fn build(self) -> ArrayD<i64> {
        ArrayD::from_elem(IxDyn(&self.shape.dims()), i64::from(self.fill))
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Step {
    Read(u8),
    Assign(u8, Value),
    Add(u8, Value),
    Sub(u8, Value),
    /// `x * 2 + 1` elementwise, through `Txn::update`.
    Update(u8),
    /// A plain `assign_add` on the variable itself, from inside the execution.
    Direct(u8, Value),
    /// An `execute` of some section from inside this one.
    Nested(u8),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum End {
    Commit,
    Fail,
    Panic,
}

#[derive(Arbitrary, Debug, Clone)]
enum Op {
    Build {
        resources: u8,
        exclusive: bool,
    },
    Drop {
        which: u8,
    },
    Execute {
        section: u8,
        steps: Vec<Step>,
        end: End,
    },
    Plain {
        var: u8,
        delta: Value,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    shapes: [ShapeSel; VARS],
    ops: Vec<Op>,
}

/// The model of one section: its name, resources and exclusivity.
#[derive(Clone)]
struct ModelSection {
    name: String,
    resources: Vec<usize>,
    exclusive: bool,
}

/// The model: committed values, versions, and the claims on each variable (in claim order).
struct Model {
    values: Vec<ArrayD<i64>>,
    versions: Vec<u64>,
    claims: Vec<Vec<(String, bool)>>,
}

impl Model {
    fn build(&mut self, section: &ModelSection) -> Result<(), Error> {
        for &r in &section.resources {
            if let Some((held_by, held)) = self.claims[r]
                .iter()
                .find(|(_, exclusive)| *exclusive || section.exclusive)
            {
                return Err(Error::ResourceConflict {
                    resource: name(r),
                    held_by: held_by.clone(),
                    held: how(*held),
                    requested_by: section.name.clone(),
                    requested: how(section.exclusive),
                });
            }
        }
        for &r in &section.resources {
            self.claims[r].push((section.name.clone(), section.exclusive));
        }
        Ok(())
    }

    fn release(&mut self, section: &ModelSection) {
        for &r in &section.resources {
            self.claims[r].retain(|(n, _)| *n != section.name);
        }
    }
}

fn how(exclusive: bool) -> &'static str {
    if exclusive {
        "exclusively"
    } else {
        "shared"
    }
}

fn name(var: usize) -> String {
    format!("v{var}")
}

fn shape_error(var: usize, expected: &[usize], found: &[usize]) -> Error {
    Error::ShapeMismatch {
        variable: name(var),
        expected: expected.to_vec(),
        found: found.to_vec(),
    }
}

/// Runs `steps` in an execution of `me`, against the real `Txn` and the model's staged
/// values (and, for variables outside the section, the value each showed when first read).
/// Returns the first error, as the closure would.
#[allow(clippy::too_many_arguments)]
fn run_steps(
    tx: &mut Txn<'_>,
    steps: &[Step],
    vars: &[Variable<i64>],
    sections: &[(CriticalSection, ModelSection)],
    me: &ModelSection,
    staged: &mut [Option<ArrayD<i64>>],
    seen: &mut [Option<ArrayD<i64>>],
    model: &mut Model,
) -> Result<(), Error> {
    for &step in steps {
        match step {
            Step::Read(v) => {
                let v = v as usize % VARS;
                let expected = if me.resources.contains(&v) {
                    staged[v].clone().unwrap_or_else(|| model.values[v].clone())
                } else {
                    // Another variable shows its value as first read in this execution.
                    seen[v]
                        .get_or_insert_with(|| model.values[v].clone())
                        .clone()
                };
                assert_eq!(*tx.read(&vars[v])?, expected, "txn read of {}", name(v));
            }
            Step::Assign(v, value) | Step::Add(v, value) | Step::Sub(v, value) => {
                let v = v as usize % VARS;
                let value = value.build();
                let current = staged[v].clone().unwrap_or_else(|| model.values[v].clone());
                let expected_err = if !me.resources.contains(&v) {
                    Some(Error::NotInResourceSet {
                        variable: name(v),
                        section: me.name.clone(),
                    })
                } else if value.shape() != current.shape() {
                    Some(shape_error(v, current.shape(), value.shape()))
                } else {
                    None
                };
                let real = match step {
                    Step::Assign(..) => tx.assign(&vars[v], value.clone()),
                    Step::Add(..) => tx.assign_add(&vars[v], &value),
                    _ => tx.assign_sub(&vars[v], &value),
                };
                match expected_err {
                    Some(err) => {
                        assert_eq!(real, Err(err.clone()));
                        return Err(err);
                    }
                    None => real.expect("a valid staged write"),
                }
                staged[v] = Some(match step {
                    Step::Assign(..) => value,
                    Step::Add(..) => ndarray_zip(&current, &value, i64::wrapping_add),
                    _ => ndarray_zip(&current, &value, i64::wrapping_sub),
                });
            }
            Step::Update(v) => {
                let v = v as usize % VARS;
                let current = staged[v].clone().unwrap_or_else(|| model.values[v].clone());
                let real = tx.update(&vars[v], |x| x.mapv(|e| e.wrapping_mul(2).wrapping_add(1)));
                if !me.resources.contains(&v) {
                    let err = Error::NotInResourceSet {
                        variable: name(v),
                        section: me.name.clone(),
                    };
                    assert_eq!(real, Err(err.clone()));
                    return Err(err);
                }
                real.expect("a same-shape update");
                staged[v] = Some(current.mapv(|e| e.wrapping_mul(2).wrapping_add(1)));
            }
            Step::Direct(v, delta) => {
                let v = v as usize % VARS;
                let delta = delta.build();
                let real = vars[v].assign_add(&delta);
                if !model.claims[v].is_empty() {
                    assert!(matches!(real, Err(Error::Reentrant { .. })), "{real:?}");
                } else if delta.shape() != model.values[v].shape() {
                    let err = shape_error(v, model.values[v].shape(), delta.shape());
                    assert_eq!(real, Err(err));
                } else {
                    // A free variable: written at once, outside the execution's commit.
                    model.values[v] = ndarray_zip(&model.values[v], &delta, i64::wrapping_add);
                    model.versions[v] += 1;
                    assert_eq!(real, Ok(model.versions[v]));
                }
            }
            Step::Nested(s) => {
                if sections.is_empty() {
                    continue;
                }
                let (inner, _) = &sections[s as usize % sections.len()];
                let real = inner.execute(|_| Ok::<_, Error>(()));
                assert!(matches!(real, Err(Error::Reentrant { .. })), "{real:?}");
            }
        }
    }
    Ok(())
}

fn ndarray_zip(a: &ArrayD<i64>, b: &ArrayD<i64>, f: fn(i64, i64) -> i64) -> ArrayD<i64> {
    let mut out = a.clone();
    out.zip_mut_with(b, |x, &y| *x = f(*x, y));
    out
}

fn refused() -> Error {
    Error::NotFound {
        name: "refused".into(),
    }
}

fuzz_target!(|input: Input| {
    quiet_hook_for_our_panics();
    let store = Store::new();
    let mut model = Model {
        values: Vec::new(),
        versions: vec![0; VARS],
        claims: vec![Vec::new(); VARS],
    };
    let vars: Vec<Variable<i64>> = (0..VARS)
        .map(|v| {
            let init = ArrayD::from_elem(IxDyn(&input.shapes[v].dims()), v as i64);
            model.values.push(init.clone());
            store.variable(&name(v), init).expect("fresh names")
        })
        .collect();
    let mut sections: Vec<(CriticalSection, ModelSection)> = Vec::new();
    let mut built = 0;

    for op in input.ops.iter().take(MAX_OPS) {
        match op {
            Op::Build {
                resources,
                exclusive,
            } => {
                built += 1;
                let me = ModelSection {
                    name: format!("s{built}"),
                    resources: (0..VARS).filter(|v| resources & (1 << v) != 0).collect(),
                    exclusive: *exclusive,
                };
                let mut builder = CriticalSection::builder()
                    .name(me.name.clone())
                    .exclusive(*exclusive);
                for &v in &me.resources {
                    builder = builder.resource(&vars[v]);
                }
                let real = builder.build();
                match model.build(&me) {
                    Ok(()) => sections.push((real.expect("the model found no conflict"), me)),
                    Err(err) => assert_eq!(real.err(), Some(err)),
                }
            }
            Op::Drop { which } => {
                if !sections.is_empty() {
                    let (_, me) = sections.remove(*which as usize % sections.len());
                    model.release(&me);
                }
            }
            Op::Execute {
                section,
                steps,
                end,
            } => {
                if sections.is_empty() {
                    continue;
                }
                let (cs, me) = &sections[*section as usize % sections.len()];
                let steps = &steps[..steps.len().min(MAX_STEPS)];
                let mut staged: Vec<Option<ArrayD<i64>>> = vec![None; VARS];
                let mut seen: Vec<Option<ArrayD<i64>>> = vec![None; VARS];
                let mut step_error = None;
                let result = catch_unwind(AssertUnwindSafe(|| {
                    cs.execute(|tx| {
                        let stepped = run_steps(
                            tx,
                            steps,
                            &vars,
                            &sections,
                            me,
                            &mut staged,
                            &mut seen,
                            &mut model,
                        );
                        if let Err(err) = stepped {
                            step_error = Some(err.clone());
                            return Err(err);
                        }
                        match end {
                            End::Commit => Ok(()),
                            End::Fail => Err(refused()),
                            End::Panic => panic!("{PANIC}"),
                        }
                    })
                }));
                let committed = match (result, step_error, end) {
                    (Ok(real), Some(err), _) => {
                        assert_eq!(real, Err(err), "a failing step fails the execution");
                        false
                    }
                    (Ok(real), None, End::Commit) => {
                        assert_eq!(real, Ok(()));
                        true
                    }
                    (Ok(real), None, End::Fail) => {
                        assert_eq!(real, Err(refused()), "the closure's own error");
                        false
                    }
                    (Err(panic), None, End::Panic) if is_ours(&*panic) => false,
                    // An assertion of the model failed inside the execution: report it.
                    (Err(panic), ..) => std::panic::resume_unwind(panic),
                    (Ok(real), None, End::Panic) => panic!("a panicking execution gave {real:?}"),
                };
                if committed {
                    for (v, value) in staged.into_iter().enumerate() {
                        if let Some(value) = value {
                            model.values[v] = value;
                            model.versions[v] += 1;
                        }
                    }
                }
            }
            Op::Plain { var, delta } => {
                let v = *var as usize % VARS;
                let delta = delta.build();
                let real = vars[v].assign_add(&delta);
                if delta.shape() == model.values[v].shape() {
                    model.values[v] = ndarray_zip(&model.values[v], &delta, i64::wrapping_add);
                    model.versions[v] += 1;
                    assert_eq!(real, Ok(model.versions[v]));
                } else {
                    let err = shape_error(v, model.values[v].shape(), delta.shape());
                    assert_eq!(real, Err(err));
                }
            }
        }
        let snapshot = store.snapshot();
        for (v, var) in vars.iter().enumerate() {
            let read = var.read();
            assert_eq!(&*read, &model.values[v], "value of {}", name(v));
            assert_eq!(read.version(), model.versions[v], "version of {}", name(v));
            let seen = snapshot.get::<i64, IxDyn>(&name(v)).expect("registered");
            assert_eq!(&*seen, &model.values[v], "snapshot of {}", name(v));
        }
    }
});
