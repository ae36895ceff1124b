//! Workload 7: Adam over a small model's parameters (four tensors, 1,024 f32 in all), one
//! optimizer step per operation, applied by every thread to the same shared state. mvtensor
//! runs it in one `CriticalSection` execution, three times over: written by hand over the
//! parameters, both moments of each and the step counter as 13 variables; as the crate's
//! own `optim::Optimizer` (its moments and step count in one variable: 5 in all), which
//! computes each working copy from the value it replaces (`Txn::rewrite`); and as that
//! optimizer over the four tensors packed in one variable with its state (`optim::Packed`
//! built by `build_packed`: 1 in all). The
//! hand-written one writes its copies in place. The locks update in place under one guard,
//! on slices.
//!
//! Every step uses its own step number, and all threads apply the same gradients, so the
//! final parameters are a function of the number of steps alone: the driver replays that
//! many steps on plain arrays and checks the parameters bit for bit.

use std::sync::Mutex;

use mvtensor::{CriticalSection, Error, Variable};
use ndarray::{arr0, ArrayD, IxDyn};

pub use crate::adam::{adam, bias_correction};
use crate::adam::{B1, B2, EPS, LR};
use crate::{drive, Budget, Throughput};

/// Thread counts of the workload (the target's: 1 to 4).
pub const OPTIMIZER_THREADS: [usize; 3] = [1, 2, 4];

/// The model's tensors, in elements.
pub const SHAPES: [usize; 4] = [512, 256, 128, 128];

/// The gradient every step applies to tensor `i`.
pub fn gradients() -> Vec<ArrayD<f32>> {
    SHAPES
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            ArrayD::from_shape_fn(IxDyn(&[n]), |i| ((i[0] + k) % 7) as f32 * 0.01 - 0.03)
        })
        .collect()
}

fn initial(i: usize) -> ArrayD<f32> {
    ArrayD::from_shape_fn(IxDyn(&[SHAPES[i]]), |j| (j[0] % 10) as f32 * 0.1)
}

fn zeros(i: usize) -> ArrayD<f32> {
    ArrayD::zeros(IxDyn(&[SHAPES[i]]))
}

/// A variant of the optimizer workload.
pub trait Optimizer: Sync + Sized {
    const NAME: &'static str;
    fn new() -> Self;
    /// One step with `grads` (one per tensor).
    fn step(&self, grads: &[ArrayD<f32>]);
    /// The step counter and the parameters.
    fn state(&self) -> (i64, Vec<ArrayD<f32>>);
}

/// Plain state: what the locks guard, and the sequential replay.
pub struct Plain {
    t: i64,
    p: Vec<ArrayD<f32>>,
    m: Vec<ArrayD<f32>>,
    v: Vec<ArrayD<f32>>,
}

impl Default for Plain {
    fn default() -> Self {
        Self::new()
    }
}

impl Plain {
    pub fn new() -> Self {
        Plain {
            t: 0,
            p: (0..SHAPES.len()).map(initial).collect(),
            m: (0..SHAPES.len()).map(zeros).collect(),
            v: (0..SHAPES.len()).map(zeros).collect(),
        }
    }

    pub fn step(&mut self, grads: &[ArrayD<f32>]) {
        self.t += 1;
        let bias = bias_correction(self.t);
        for (i, g) in grads.iter().enumerate() {
            let (p, m, v) = (&mut self.p[i], &mut self.m[i], &mut self.v[i]);
            adam(p, m, v, g, bias);
        }
    }
}

/// mvtensor: every tensor and the step counter a variable, one section over all of them.
pub struct MvAdam {
    t: Variable<i64>,
    p: Vec<Variable<f32>>,
    m: Vec<Variable<f32>>,
    v: Vec<Variable<f32>>,
    section: CriticalSection,
}

impl Optimizer for MvAdam {
    const NAME: &'static str = "mvtensor CriticalSection";
    fn new() -> Self {
        let t = Variable::new(arr0(0i64).into_dyn());
        let p: Vec<_> = (0..SHAPES.len())
            .map(|i| Variable::new(initial(i)))
            .collect();
        let m: Vec<_> = (0..SHAPES.len()).map(|i| Variable::new(zeros(i))).collect();
        let v: Vec<_> = (0..SHAPES.len()).map(|i| Variable::new(zeros(i))).collect();
        let section = CriticalSection::builder()
            .name("adam")
            .resource(&t)
            .resources(&p)
            .resources(&m)
            .resources(&v)
            .build()
            .expect("fresh variables are unclaimed");
        MvAdam {
            t,
            p,
            m,
            v,
            section,
        }
    }
    fn step(&self, grads: &[ArrayD<f32>]) {
        self.section
            .execute(|tx| {
                let t = {
                    let mut t = tx.write(&self.t)?;
                    t[[]] += 1;
                    t[[]]
                };
                let bias = bias_correction(t);
                for (i, g) in grads.iter().enumerate() {
                    let mut p = tx.write(&self.p[i])?;
                    let mut m = tx.write(&self.m[i])?;
                    let mut v = tx.write(&self.v[i])?;
                    adam(&mut p, &mut m, &mut v, g, bias);
                }
                Ok::<_, Error>(())
            })
            .expect("the step cannot fail");
    }
    fn state(&self) -> (i64, Vec<ArrayD<f32>>) {
        let p = self.p.iter().map(|p| p.read().to_owned()).collect();
        (self.t.read()[[]], p)
    }
}

/// mvtensor's own Adam (`optim::Optimizer`): the parameters as variables, the moments in one
/// state variable with the step count; one execution per step.
pub struct MvOptim {
    p: Vec<Variable<f32>>,
    adam: mvtensor::optim::Optimizer<f32>,
}

impl Optimizer for MvOptim {
    const NAME: &'static str = "mvtensor optim::Optimizer";
    fn new() -> Self {
        let p: Vec<_> = (0..SHAPES.len())
            .map(|i| Variable::new(initial(i)))
            .collect();
        let adam = mvtensor::optim::Optimizer::adam(LR)
            .betas(B1, B2)
            .eps(EPS)
            .params(&p)
            .build()
            .expect("fresh variables are unclaimed");
        MvOptim { p, adam }
    }
    fn step(&self, grads: &[ArrayD<f32>]) {
        self.adam.step(grads).expect("the step cannot fail");
    }
    fn state(&self) -> (i64, Vec<ArrayD<f32>>) {
        let p = self.p.iter().map(|p| p.read().to_owned()).collect();
        (self.adam.steps(), p)
    }
}

/// mvtensor's own Adam over a packed set (`optim::Packed`) built by the optimizer: the four
/// tensors and Adam's state in one variable, one gradient per tensor; one version a step.
pub struct MvPacked {
    set: mvtensor::optim::Packed<f32>,
    adam: mvtensor::optim::Optimizer<f32>,
}

impl Optimizer for MvPacked {
    const NAME: &'static str = "mvtensor optim::Optimizer, packed";
    fn new() -> Self {
        let tensors = (0..SHAPES.len()).fold(mvtensor::optim::Packed::builder(), |set, i| {
            set.tensor(format!("p{i}"), &initial(i))
        });
        let (set, adam) = mvtensor::optim::Optimizer::adam(LR)
            .betas(B1, B2)
            .eps(EPS)
            .build_packed(tensors)
            .expect("distinct names, a fresh variable");
        MvPacked { set, adam }
    }
    fn step(&self, grads: &[ArrayD<f32>]) {
        self.adam.step(grads).expect("the step cannot fail");
    }
    fn state(&self) -> (i64, Vec<ArrayD<f32>>) {
        let p = self.set.read();
        let p = (0..SHAPES.len())
            .map(|i| p.get::<IxDyn>(i).expect("tensor i").to_owned())
            .collect();
        (self.adam.steps(), p)
    }
}

impl Optimizer for Mutex<Plain> {
    const NAME: &'static str = "std Mutex";
    fn new() -> Self {
        Mutex::new(Plain::new())
    }
    fn step(&self, grads: &[ArrayD<f32>]) {
        self.lock().unwrap().step(grads);
    }
    fn state(&self) -> (i64, Vec<ArrayD<f32>>) {
        let s = self.lock().unwrap();
        (s.t, s.p.clone())
    }
}

impl Optimizer for parking_lot::Mutex<Plain> {
    const NAME: &'static str = "parking_lot Mutex";
    fn new() -> Self {
        parking_lot::Mutex::new(Plain::new())
    }
    fn step(&self, grads: &[ArrayD<f32>]) {
        self.lock().step(grads);
    }
    fn state(&self) -> (i64, Vec<ArrayD<f32>>) {
        let s = self.lock();
        (s.t, s.p.clone())
    }
}

/// Workload 7 on `O`: `threads` threads step back to back. Steps per second. Panics unless
/// the parameters are exactly those of the same number of steps applied in sequence.
pub fn optimize<O: Optimizer>(threads: usize, budget: Budget) -> Throughput {
    let subject = O::new();
    let grads = gradients();
    let (elapsed, counts) = drive(threads, budget, u64::MAX, |_, ctl| {
        let mut done = 0;
        ctl.ready();
        while ctl.go(done) {
            subject.step(&grads);
            done += 1;
        }
        done
    });
    let total: u64 = counts.iter().sum();
    let (t, params) = subject.state();
    assert_eq!(t as u64, total, "{}: LOST STEPS", O::NAME);
    let mut replay = Plain::new();
    (0..total).for_each(|_| replay.step(&grads));
    assert_eq!(
        params,
        replay.p,
        "{}: parameters differ from a serial replay",
        O::NAME
    );
    Throughput {
        ops: total,
        elapsed,
        mean_batch: None,
    }
}

/// The variants of workload 7, as values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OptimizerVariant {
    /// A hand-written section over 13 variables ([`MvAdam`]).
    Mvtensor,
    /// The crate's `optim::Optimizer` ([`MvOptim`]).
    MvOptim,
    /// The crate's `optim::Optimizer` over an `optim::Packed` set ([`MvPacked`]).
    MvPacked,
    StdMutex,
    PlMutex,
}

impl OptimizerVariant {
    pub const ALL: [OptimizerVariant; 5] = [
        OptimizerVariant::Mvtensor,
        OptimizerVariant::MvOptim,
        OptimizerVariant::MvPacked,
        OptimizerVariant::StdMutex,
        OptimizerVariant::PlMutex,
    ];

    /// The mutexes (the others are mvtensor).
    pub fn is_lock(self) -> bool {
        matches!(self, OptimizerVariant::StdMutex | OptimizerVariant::PlMutex)
    }

    /// Steps per second of this variant.
    pub fn run(self, threads: usize, budget: Budget) -> Throughput {
        match self {
            OptimizerVariant::Mvtensor => optimize::<MvAdam>(threads, budget),
            OptimizerVariant::MvOptim => optimize::<MvOptim>(threads, budget),
            OptimizerVariant::MvPacked => optimize::<MvPacked>(threads, budget),
            OptimizerVariant::StdMutex => optimize::<Mutex<Plain>>(threads, budget),
            OptimizerVariant::PlMutex => optimize::<parking_lot::Mutex<Plain>>(threads, budget),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            OptimizerVariant::Mvtensor => MvAdam::NAME,
            OptimizerVariant::MvOptim => MvOptim::NAME,
            OptimizerVariant::MvPacked => MvPacked::NAME,
            OptimizerVariant::StdMutex => <Mutex<Plain>>::NAME,
            OptimizerVariant::PlMutex => <parking_lot::Mutex<Plain>>::NAME,
        }
    }
}
