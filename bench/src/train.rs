//! Workload 9: the wine-quality trainer of `examples/train.rs`, against the
//! same trainer on locks. Threads take minibatch steps until a fixed number is done; a step
//! reads the parameters, computes the loss and gradients of 32 wines, and applies Adam.
//!
//! * mvtensor: the parameters and Adam's state packed in one variable (`optim::Packed`
//!   built by `build_packed`), read as one snapshot, Adam in one execution
//!   (`optim::Optimizer`);
//! * `Mutex`, whole step: one `std::sync::Mutex` held for the whole step, what TensorFlow's
//!   thread-safety notes recommend for shared state;
//! * parking_lot `Mutex`, copy and apply: locked to clone the parameters, then to apply Adam;
//! * parking_lot `RwLock`: a read lock over the forward and backward pass, a write lock for
//!   Adam;
//! * racy: no synchronisation at all (Hogwild on a dense model): parameters and moments are
//!   relaxed atomic cells, each step loads them, computes, and stores Adam's result back, so
//!   concurrent steps overwrite each other's. The speed limit of lock-free training, which
//!   gives up every consistency the others keep.
//!
//! The figures are steps/s, the loss over all wines at the end (the same number of steps
//! for every variant, so they should agree roughly; with several threads, steps computed from
//! older parameters make any variant but the whole-step mutex a little different), and the
//! loss curve against wall time: [`SAMPLES`] times per run the thread that takes a step
//! whose number is a multiple of `steps / SAMPLES` reads the parameters consistently (for
//! the racy variant, as they are) and measures the loss over all wines, inside the timed run
//! and the same way for every variant.

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use mvtensor::optim::{Optimizer, Packed};
use ndarray::{Array2, ArrayD, Ix1, Ix2, IxDyn};

use super::optimizer::{adam, bias_correction};
use super::wine::{batch, init, loss_and_grads, Grads};

/// Thread counts of the workload (1, 2 and 4).
pub const TRAIN_THREADS: [usize; 3] = [1, 2, 4];

/// Points of the loss curve per run.
pub const SAMPLES: usize = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TrainVariant {
    Mvtensor,
    MutexWholeStep,
    PlMutexCopyApply,
    PlRwLock,
    Racy,
}

impl TrainVariant {
    pub const ALL: [TrainVariant; 5] = [
        TrainVariant::Mvtensor,
        TrainVariant::MutexWholeStep,
        TrainVariant::PlMutexCopyApply,
        TrainVariant::PlRwLock,
        TrainVariant::Racy,
    ];
    /// The variants that lock (the racy one does not, and mvtensor is not a lock).
    pub fn is_lock(self) -> bool {
        !matches!(self, TrainVariant::Mvtensor | TrainVariant::Racy)
    }
    pub fn name(self) -> &'static str {
        match self {
            TrainVariant::Mvtensor => "mvtensor",
            TrainVariant::MutexWholeStep => "std Mutex, whole step",
            TrainVariant::PlMutexCopyApply => "parking_lot Mutex, copy + apply",
            TrainVariant::PlRwLock => "parking_lot RwLock",
            TrainVariant::Racy => "racy (no lock)",
        }
    }
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct TrainRun {
    pub steps_per_s: f64,
    /// The mean squared error over all wines after the run.
    pub loss: f32,
    /// (seconds since the start, loss over all wines), in time order.
    pub curve: Vec<(f64, f32)>,
}

impl TrainRun {
    /// Seconds until the curve first reaches `target`, if it does.
    pub fn time_to(&self, target: f32) -> Option<f64> {
        self.curve.iter().find(|p| p.1 <= target).map(|p| p.0)
    }
}

/// Parameters, as the loss curve reads them.
type Params = [ArrayD<f32>; 4];

/// The loss of `p` over all of `data`.
fn loss_of(p: &Params, data: &Array2<f32>) -> f32 {
    let [w1, b1, w2, b2] = p;
    let (w1, w2) = (
        w1.view().into_dimensionality().expect("2-d"),
        w2.view().into_dimensionality().expect("2-d"),
    );
    let (b1, b2): (ndarray::ArrayView1<f32>, ndarray::ArrayView1<f32>) = (
        b1.view().into_dimensionality().expect("1-d"),
        b2.view().into_dimensionality().expect("1-d"),
    );
    loss_and_grads((&w1, &b1, &w2, &b2), data).0
}

/// The racy variant's state: every parameter and moment a relaxed atomic cell.
struct Racy {
    cells: [Vec<AtomicU32>; 12],
    shapes: Vec<ndarray::IxDyn>,
    t: AtomicI64,
}

impl Racy {
    fn new(s: State) -> Self {
        let all = || s.p.iter().chain(&s.m).chain(&s.v);
        Self {
            shapes: all().map(|a| a.raw_dim()).collect(),
            cells: std::array::from_fn(|i| {
                let a = all().nth(i).expect("12 tensors");
                a.iter().map(|x| AtomicU32::new(x.to_bits())).collect()
            }),
            t: AtomicI64::new(0),
        }
    }

    fn tensor(&self, i: usize) -> ArrayD<f32> {
        let data = self.cells[i]
            .iter()
            // Relaxed: racy by design.
            .map(|c| f32::from_bits(c.load(Ordering::Relaxed)))
            .collect();
        ArrayD::from_shape_vec(self.shapes[i].clone(), data).expect("its shape")
    }

    fn params(&self) -> Params {
        std::array::from_fn(|i| self.tensor(i))
    }

    fn load(&self) -> State {
        State {
            p: self.params(),
            m: std::array::from_fn(|i| self.tensor(4 + i)),
            v: std::array::from_fn(|i| self.tensor(8 + i)),
            // Relaxed: racy by design.
            t: self.t.load(Ordering::Relaxed),
        }
    }

    fn store(&self, s: &State) {
        for (cells, a) in self.cells.iter().zip(s.p.iter().chain(&s.m).chain(&s.v)) {
            for (c, x) in cells.iter().zip(a) {
                // Relaxed: racy by design.
                c.store(x.to_bits(), Ordering::Relaxed);
            }
        }
    }
}

/// The locks' state: parameters, Adam's moments, the step count.
#[derive(Clone)]
struct State {
    p: [ArrayD<f32>; 4],
    m: [ArrayD<f32>; 4],
    v: [ArrayD<f32>; 4],
    t: i64,
}

impl State {
    fn new() -> Self {
        let (w1, b1, w2, b2) = init();
        let p = [w1.into_dyn(), b1.into_dyn(), w2.into_dyn(), b2.into_dyn()];
        let zeros = p.clone().map(|a| ArrayD::zeros(a.raw_dim()));
        Self {
            m: zeros.clone(),
            v: zeros,
            p,
            t: 0,
        }
    }

    fn grads(&self, rows: &Array2<f32>) -> Grads {
        grads_of(&self.p, rows)
    }

    fn apply(&mut self, g: Grads) {
        self.t += 1;
        let g = [
            g.0.into_dyn(),
            g.1.into_dyn(),
            g.2.into_dyn(),
            g.3.into_dyn(),
        ];
        let bias = bias_correction(self.t);
        let tensors = self.p.iter_mut().zip(&mut self.m).zip(&mut self.v).zip(&g);
        for (((p, m), v), g) in tensors {
            adam(p, m, v, g, bias);
        }
    }
}

/// The loss's gradients at parameters `p` on `rows`.
fn grads_of(p: &Params, rows: &Array2<f32>) -> Grads {
    let [w1, b1, w2, b2] = p;
    let (w1, w2) = (
        w1.view().into_dimensionality().expect("2-d"),
        w2.view().into_dimensionality().expect("2-d"),
    );
    let (b1, b2) = (
        b1.view().into_dimensionality().expect("1-d"),
        b2.view().into_dimensionality().expect("1-d"),
    );
    loss_and_grads((&w1, &b1, &w2, &b2), rows).1
}

/// Runs `variant` on `threads` threads until `steps` steps are done.
pub fn run(variant: TrainVariant, threads: usize, steps: usize, data: &Array2<f32>) -> TrainRun {
    let next = AtomicUsize::new(0);
    let take = || {
        // Relaxed: only the numbers handed out matter (each once); the threads' results come
        // back through their join.
        let i = next.fetch_add(1, Ordering::Relaxed);
        (i < steps).then_some(i)
    };
    let every = (steps / SAMPLES).max(1);
    let curve = Mutex::new(Vec::with_capacity(SAMPLES + 1));
    let start = Instant::now();
    let sample = |i: usize, params: &dyn Fn() -> Params| {
        if i.is_multiple_of(every) {
            let loss = loss_of(&params(), data);
            let at = start.elapsed().as_secs_f64();
            curve.lock().expect("no panic").push((at, loss));
        }
    };
    let state = match variant {
        TrainVariant::Mvtensor => {
            let (w1, b1, w2, b2) = init();
            let (model, opt) = Optimizer::adam(1e-3)
                .build_packed(
                    Packed::builder()
                        .tensor("w1", &w1)
                        .tensor("b1", &b1)
                        .tensor("w2", &w2)
                        .tensor("b2", &b2),
                )
                .expect("distinct names, a fresh variable");
            let params = || {
                let p = model.read();
                std::array::from_fn(|i| p.get::<IxDyn>(i).expect("tensor i").to_owned())
            };
            across(threads, || {
                while let Some(i) = take() {
                    let rows = batch(data, i);
                    let p = model.read();
                    let (w1, b1) = (p.get::<Ix2>(0), p.get::<Ix1>(1));
                    let (w2, b2) = (p.get::<Ix2>(2), p.get::<Ix1>(3));
                    let (w1, b1, w2, b2) = (
                        w1.expect("2-d"),
                        b1.expect("1-d"),
                        w2.expect("2-d"),
                        b2.expect("1-d"),
                    );
                    let (_, g) = loss_and_grads((&w1, &b1, &w2, &b2), &rows);
                    drop(p);
                    opt.step((&g.0, &g.1, &g.2, &g.3)).expect("gradients fit");
                    sample(i, &params);
                }
            });
            assert_eq!(opt.steps(), steps as i64, "mvtensor: LOST OR EXTRA STEP");
            params()
        }
        TrainVariant::MutexWholeStep => {
            let m = std::sync::Mutex::new(State::new());
            across(threads, || {
                while let Some(i) = take() {
                    // The minibatch is the data pipeline's, not the shared state's: built
                    // before the lock, as every variant builds it outside its own.
                    let rows = batch(data, i);
                    {
                        let mut s = m.lock().expect("no panic");
                        let g = s.grads(&rows);
                        s.apply(g);
                    }
                    sample(i, &|| m.lock().expect("no panic").p.clone());
                }
            });
            let s = m.into_inner().expect("no panic");
            assert_eq!(s.t, steps as i64, "std Mutex: LOST OR EXTRA STEP");
            s.p
        }
        TrainVariant::PlMutexCopyApply => {
            let m = parking_lot::Mutex::new(State::new());
            across(threads, || {
                while let Some(i) = take() {
                    let rows = batch(data, i);
                    // The parameters alone: the gradient needs nothing else, and copying
                    // both moments too would triple the copy under the lock.
                    let p = m.lock().p.clone();
                    let g = grads_of(&p, &rows);
                    m.lock().apply(g);
                    sample(i, &|| m.lock().p.clone());
                }
            });
            let s = m.into_inner();
            assert_eq!(s.t, steps as i64, "parking_lot Mutex: LOST OR EXTRA STEP");
            s.p
        }
        TrainVariant::PlRwLock => {
            let l = parking_lot::RwLock::new(State::new());
            across(threads, || {
                while let Some(i) = take() {
                    let rows = batch(data, i);
                    let g = l.read().grads(&rows);
                    l.write().apply(g);
                    sample(i, &|| l.read().p.clone());
                }
            });
            let s = l.into_inner();
            assert_eq!(s.t, steps as i64, "parking_lot RwLock: LOST OR EXTRA STEP");
            s.p
        }
        TrainVariant::Racy => {
            let r = Racy::new(State::new());
            across(threads, || {
                while let Some(i) = take() {
                    let rows = batch(data, i);
                    let g = grads_of(&r.params(), &rows); // the parameters alone
                    let mut s = r.load();
                    // Relaxed: racy by design; `apply` counts its own step from `t`.
                    s.t = r.t.fetch_add(1, Ordering::Relaxed);
                    s.apply(g);
                    r.store(&s);
                    sample(i, &|| r.params());
                }
            });
            r.params()
        }
    };
    let seconds = start.elapsed().as_secs_f64();
    let loss = loss_of(&state, data);
    assert!(loss.is_finite(), "{} diverged", variant.name());
    let mut curve = curve.into_inner().expect("no panic");
    curve.sort_by(|a, b| a.0.total_cmp(&b.0));
    curve.push((seconds, loss));
    TrainRun {
        steps_per_s: steps as f64 / seconds,
        loss,
        curve,
    }
}

fn across(threads: usize, work: impl Fn() + Sync) {
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(&work);
        }
    });
}
