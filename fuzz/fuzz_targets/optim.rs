//! Differential fuzz target for optimizers over packed sets: the same tensors as an
//! `optim::Packed` set, as separate variables, and as a mix (a set built by its optimizer,
//! holding the state, after variables), each driven by its own optimizer of the
//! same rule, and a sequential model on plain vectors.
//!
//! Checked after every op: a step's result (or the exact error) is the model's, for both
//! optimizers; a failed step changes nothing; every tensor, read through the packed set's
//! views and through its own variable, equals the model's bit for bit; a view with any index
//! and rank is the tensor or the typed error the layout promises. Building a set with two
//! tensors of one name is `NameTaken`, and nothing panics. A learning-rate schedule from the
//! input (factors of eighths, negative ones included) scales each step's rate by its
//! number's factor, and a negative one fails its step with `InvalidValue` naming the
//! optimizer's state, after the gradients' own checks, applying nothing.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mvtensor::ndarray::{ArrayD, Dimension, Ix0, Ix1, Ix2, Ix3, IxDyn};
use mvtensor::optim::{Optimizer, OptimizerBuilder, Packed};
use mvtensor::{Error, Variable};

const MAX_TENSORS: usize = 4;
const MAX_OPS: usize = 64;

#[derive(Arbitrary, Debug, Clone, Copy)]
enum ShapeSel {
    Scalar,
    Empty,
    Two,
    TwoByThree,
    OneByTwoByTwo,
}

impl ShapeSel {
    fn dims(self) -> Vec<usize> {
        match self {
            ShapeSel::Scalar => vec![],
            ShapeSel::Empty => vec![0],
            ShapeSel::Two => vec![2],
            ShapeSel::TwoByThree => vec![2, 3],
            ShapeSel::OneByTwoByTwo => vec![1, 2, 2],
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum RuleSel {
    Sgd,
    Momentum,
    Adam,
    AdamW,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct Tensor {
    /// Names come from a small set, so that duplicates happen.
    name: u8,
    shape: ShapeSel,
    fill: i8,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum RankSel {
    Zero,
    One,
    Two,
    Three,
    Dyn,
}

#[derive(Arbitrary, Debug, Clone)]
enum Op {
    /// A step with one gradient per entry (any count, any shapes), each filled with
    /// `fill / 4`.
    Step(Vec<(ShapeSel, i8)>),
    /// A step with the right gradients: one per tensor, each filled with `fill / 4`.
    GoodStep(i8),
    /// A view of tensor `index` of a snapshot, as `rank`.
    View(u8, RankSel),
}

#[derive(Arbitrary, Debug)]
struct Input {
    rule: RuleSel,
    clip: Option<u8>,
    /// The third optimizer's first `split % (n + 1)` tensors are variables, the rest a
    /// packed set.
    split: u8,
    /// A learning-rate schedule: step `t` uses `schedule[(t - 1) % len] / 8` (none if empty).
    schedule: Vec<i8>,
    tensors: Vec<Tensor>,
    ops: Vec<Op>,
}

/// The model: every tensor's elements, its state (none, momentum, or m and v), the steps.
struct Model {
    rule: RuleSel,
    clip: Option<f32>,
    schedule: Option<Factors>,
    shapes: Vec<Vec<usize>>,
    p: Vec<Vec<f32>>,
    s1: Vec<Vec<f32>>,
    s2: Vec<Vec<f32>>,
    t: i64,
}

const LR: f32 = 0.125;
const MOMENTUM: f32 = 0.5;
const WD: f32 = 0.25;
const B1: f32 = 0.9;
const B2: f32 = 0.999;
const EPS: f32 = 1e-8;

/// The schedule's factors, one per step, in a cycle.
#[derive(Clone)]
struct Factors(Vec<i8>);

impl Factors {
    fn factor(&self, t: i64) -> f32 {
        let at = usize::try_from(t - 1).expect("steps count from 1") % self.0.len();
        f32::from(self.0[at]) / 8.0
    }
}

/// The error a step with a negative factor gives: `InvalidValue` naming `state` (the
/// optimizer's state variable) and the step.
fn check_bad_factor(got: Result<i64, Error>, state: &str, t: i64) {
    match got {
        Err(Error::InvalidValue { variable, problem }) => {
            assert_eq!(variable, state);
            assert!(problem.contains(&format!("for step {t} ")), "{problem}");
        }
        other => panic!("step {t}: a negative factor gave {other:?}"),
    }
}

/// What a step must give, beside the model's: its result, or for a bad factor the error
/// each optimizer names its own state in.
enum Expected {
    Step(Result<i64, Error>),
    BadFactor(i64),
}

impl Model {
    /// The step `Optimizer::step` must take, or its error. Names tensors `set.t<i>`.
    fn step(&mut self, grads: &[(Vec<usize>, Vec<f32>)]) -> Expected {
        match self.checked(grads) {
            Ok(()) => {}
            Err(error) => return Expected::Step(Err(error)),
        }
        let factor = self.schedule.as_ref().map_or(1.0, |s| s.factor(self.t + 1));
        if factor < 0.0 {
            return Expected::BadFactor(self.t + 1);
        }
        Expected::Step(Ok(self.apply(grads, LR * factor)))
    }

    /// The checks of a step's gradients, before its execution.
    fn checked(&self, grads: &[(Vec<usize>, Vec<f32>)]) -> Result<(), Error> {
        if grads.len() != self.shapes.len() {
            return Err(Error::GradientCount {
                expected: self.shapes.len(),
                found: grads.len(),
            });
        }
        for (i, (shape, _)) in grads.iter().enumerate() {
            if *shape != self.shapes[i] {
                return Err(Error::ShapeMismatch {
                    variable: label(i),
                    expected: self.shapes[i].clone(),
                    found: shape.clone(),
                });
            }
        }
        Ok(())
    }

    /// Applies a checked step with learning rate `lr`.
    fn apply(&mut self, grads: &[(Vec<usize>, Vec<f32>)], lr: f32) -> i64 {
        let scale = self.clip.map_or(1.0, |max| {
            // Squares summed in f64, as the optimizer does.
            let norm = grads
                .iter()
                .flat_map(|(_, g)| g.iter())
                .map(|&x| f64::from(x) * f64::from(x))
                .sum::<f64>()
                .sqrt();
            if norm > f64::from(max) {
                (f64::from(max) / norm) as f32
            } else {
                1.0
            }
        });
        self.t += 1;
        let t = i32::try_from(self.t).unwrap_or(i32::MAX);
        let (c1, c2) = (1.0 - B1.powi(t), 1.0 - B2.powi(t));
        for (i, (_, g)) in grads.iter().enumerate() {
            let (p, s1, s2) = (&mut self.p[i], &mut self.s1[i], &mut self.s2[i]);
            for k in 0..p.len() {
                match self.rule {
                    RuleSel::Sgd => p[k] = p[k] - lr * scale * g[k],
                    RuleSel::Momentum => {
                        s1[k] = MOMENTUM * s1[k] + scale * g[k];
                        p[k] = p[k] - lr * s1[k];
                    }
                    RuleSel::Adam | RuleSel::AdamW => {
                        let wd = if matches!(self.rule, RuleSel::AdamW) {
                            WD
                        } else {
                            0.0
                        };
                        let g = scale * g[k];
                        s1[k] = B1 * s1[k] + (1.0 - B1) * g;
                        s2[k] = B2 * s2[k] + (1.0 - B2) * g * g;
                        p[k] = p[k] * (1.0 - lr * wd)
                            - lr * (s1[k] / c1) / ((s2[k] / c2).sqrt() + EPS);
                    }
                }
            }
        }
        self.t
    }

    /// Checks what each optimizer's step gave (`mixed` keeps its state in the set).
    fn compare(expected: &Expected, [packed, apart, mixed]: [Result<i64, Error>; 3]) {
        match expected {
            Expected::Step(expected) => {
                assert_eq!(&packed, expected);
                assert_eq!(&apart, expected);
                assert_eq!(&mixed, expected);
            }
            &Expected::BadFactor(t) => {
                check_bad_factor(packed, "optimizer.state", t);
                check_bad_factor(apart, "optimizer.state", t);
                check_bad_factor(mixed, "set", t);
            }
        }
    }
}

fn label(i: usize) -> String {
    format!("set.t{i}")
}

fn optimizer(
    rule: RuleSel,
    clip: Option<f32>,
    schedule: &Option<Factors>,
) -> OptimizerBuilder<f32> {
    let builder = match rule {
        RuleSel::Sgd => Optimizer::sgd(LR),
        RuleSel::Momentum => Optimizer::momentum(LR, MOMENTUM),
        RuleSel::Adam => Optimizer::adam(LR),
        RuleSel::AdamW => Optimizer::adamw(LR, WD),
    };
    let mut builder = builder.betas(B1, B2).eps(EPS);
    if let Some(max) = clip {
        builder = builder.clip_global_norm(max);
    }
    match schedule.clone() {
        Some(factors) => builder.schedule(move |t| factors.factor(t)),
        None => builder,
    }
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|x| x.to_bits()).collect()
}

/// A view of tensor `i` as `D` from the packed set: the tensor, or the error the layout
/// promises.
fn check_view<D: Dimension>(set: &Packed<f32>, model: &Model, i: usize) {
    let snapshot = set.read();
    let got = snapshot.get::<D>(i);
    if i >= model.shapes.len() {
        assert_eq!(
            got.unwrap_err(),
            Error::NoSuchTensor {
                set: "set".into(),
                index: i,
                tensors: model.shapes.len()
            }
        );
    } else if D::NDIM.is_some_and(|rank| rank != model.shapes[i].len()) {
        assert_eq!(
            got.unwrap_err(),
            Error::RankMismatch {
                variable: label(i),
                expected: Some(model.shapes[i].len()),
                found: D::NDIM
            }
        );
    } else {
        let view = got.expect("an index and rank that fit");
        assert_eq!(view.shape(), &model.shapes[i][..]);
        let elements: Vec<f32> = view.iter().copied().collect();
        assert_eq!(bits(&elements), bits(&model.p[i]));
    }
}

fuzz_target!(|input: Input| {
    let tensors = &input.tensors[..input.tensors.len().min(MAX_TENSORS)];
    // Tensors are named t0..t3 by their name byte, so that two may share one.
    let names: Vec<String> = tensors.iter().map(|t| format!("t{}", t.name % 4)).collect();
    let inits: Vec<ArrayD<f32>> = tensors
        .iter()
        .map(|t| ArrayD::from_elem(IxDyn(&t.shape.dims()), f32::from(t.fill) / 8.0))
        .collect();
    let built = names
        .iter()
        .zip(&inits)
        .fold(Packed::builder().name("set"), |b, (n, a)| b.tensor(n, a))
        .build();
    let duplicate = (0..names.len()).find(|&i| names[..i].contains(&names[i]));
    if let Some(i) = duplicate {
        assert_eq!(
            built.unwrap_err(),
            Error::NameTaken {
                name: format!("set.{}", names[i]),
                dtype: mvtensor::DType::F32,
                shape: tensors[i].shape.dims(),
            }
        );
        return;
    }
    drop(built.expect("distinct names"));
    // From here on, tensor i is named t<i> (the fuzzer's names were distinct), so that the
    // separate variables and the set's tensors have the same names in errors: `label`.
    let set = inits
        .iter()
        .enumerate()
        .fold(Packed::builder().name("set"), |b, (i, a)| {
            b.tensor(format!("t{i}"), a)
        })
        .build()
        .expect("distinct names");
    let separate: Vec<Variable<f32>> = inits
        .iter()
        .enumerate()
        .map(|(i, a)| Variable::builder(a.clone()).name(label(i)).build())
        .collect();
    let clip = input.clip.map(|c| f32::from(c) / 16.0);
    let schedule = (!input.schedule.is_empty()).then(|| Factors(input.schedule.clone()));
    if separate.is_empty() {
        // An optimizer of no parameter is refused, as PyTorch's empty parameter list.
        let refused = optimizer(input.rule, clip, &schedule).build().unwrap_err();
        assert!(
            matches!(refused, Error::InvalidSetting { setting: "params", .. }),
            "{refused}"
        );
        return;
    }
    let packed = optimizer(input.rule, clip, &schedule)
        .packed(&set)
        .build()
        .expect("unclaimed");
    let apart = optimizer(input.rule, clip, &schedule)
        .params(&separate)
        .build()
        .expect("unclaimed");
    // Mixed: plain variables first, then a packed set of the rest, built by the optimizer
    // (its state after the set's tensors: `build_packed`); the set's tensors keep their
    // global names, so that errors name them as the others do.
    let split = usize::from(input.split) % (inits.len() + 1);
    let mixed_vars: Vec<Variable<f32>> = inits[..split]
        .iter()
        .enumerate()
        .map(|(i, a)| Variable::builder(a.clone()).name(label(i)).build())
        .collect();
    let (mixed_set, mixed) = optimizer(input.rule, clip, &schedule)
        .params(&mixed_vars)
        .build_packed(
            inits[split..]
                .iter()
                .enumerate()
                .fold(Packed::builder().name("set"), |b, (i, a)| {
                    b.tensor(format!("t{}", split + i), a)
                }),
        )
        .expect("distinct names, unclaimed");
    let mixed_tensor = |i: usize| -> Vec<f32> {
        if i < split {
            mixed_vars[i].read().iter().copied().collect()
        } else {
            let snapshot = mixed_set.read();
            let view = snapshot.get::<IxDyn>(i - split).expect("fits");
            view.iter().copied().collect()
        }
    };
    let zeros = |n: usize| vec![0.0f32; n];
    let mut model = Model {
        rule: input.rule,
        clip,
        schedule: schedule.clone(),
        shapes: inits.iter().map(|a| a.shape().to_vec()).collect(),
        p: inits.iter().map(|a| a.iter().copied().collect()).collect(),
        s1: inits.iter().map(|a| zeros(a.len())).collect(),
        s2: inits.iter().map(|a| zeros(a.len())).collect(),
        t: 0,
    };
    for op in input.ops.iter().take(MAX_OPS) {
        match op {
            Op::Step(grads) => {
                let grads: Vec<(Vec<usize>, Vec<f32>)> = grads
                    .iter()
                    .take(MAX_TENSORS + 1)
                    .map(|&(shape, fill)| {
                        let dims = shape.dims();
                        let n = dims.iter().product();
                        (dims, vec![f32::from(fill) / 4.0; n])
                    })
                    .collect();
                let arrays: Vec<ArrayD<f32>> = grads
                    .iter()
                    .map(|(s, g)| ArrayD::from_shape_vec(IxDyn(s), g.clone()).expect("fits"))
                    .collect();
                let expected = model.step(&grads);
                let got = [&packed, &apart, &mixed].map(|o| o.step(&arrays));
                Model::compare(&expected, got);
            }
            Op::GoodStep(fill) => {
                let grads: Vec<(Vec<usize>, Vec<f32>)> = model
                    .shapes
                    .iter()
                    .map(|s| (s.clone(), vec![f32::from(*fill) / 4.0; s.iter().product()]))
                    .collect();
                let arrays: Vec<ArrayD<f32>> = grads
                    .iter()
                    .map(|(s, g)| ArrayD::from_shape_vec(IxDyn(s), g.clone()).expect("fits"))
                    .collect();
                let expected = model.step(&grads);
                let got = [&packed, &apart, &mixed].map(|o| o.step(&arrays));
                Model::compare(&expected, got);
            }
            Op::View(i, rank) => {
                let i = usize::from(*i % 6);
                match rank {
                    RankSel::Zero => check_view::<Ix0>(&set, &model, i),
                    RankSel::One => check_view::<Ix1>(&set, &model, i),
                    RankSel::Two => check_view::<Ix2>(&set, &model, i),
                    RankSel::Three => check_view::<Ix3>(&set, &model, i),
                    RankSel::Dyn => check_view::<IxDyn>(&set, &model, i),
                }
            }
        }
        assert_eq!(packed.steps(), model.t);
        assert_eq!(apart.steps(), model.t);
        assert_eq!(mixed.steps(), model.t);
        let snapshot = set.read();
        for (i, v) in separate.iter().enumerate() {
            assert_eq!(bits(&mixed_tensor(i)), bits(&model.p[i]));
            let own = v.read();
            assert_eq!(bits(own.as_slice().expect("standard")), bits(&model.p[i]));
            let view = snapshot.get::<IxDyn>(i).expect("fits");
            assert_eq!(bits(view.as_slice().expect("standard")), bits(&model.p[i]));
        }
    }
});
