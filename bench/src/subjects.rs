//! The variants under test: one shared f32 tensor behind mvtensor, a lock, or an RCU cell.

use std::sync::{Arc, Mutex, RwLock};

use arc_swap::ArcSwap;
use mvtensor::Variable;

use super::wide::{add_array, add_collect};
use ndarray::{ArrayD, Zip};

/// A shared f32 tensor. Every workload is written once against this trait and driven for
/// each variant, so the variants do exactly the same work.
pub trait Subject: Sync + Sized {
    /// The name in tables and plots.
    const NAME: &'static str;

    /// A subject holding `init`.
    fn new(init: ArrayD<f32>) -> Self;

    /// Runs `work` on the current value, under whatever protection the variant needs
    /// (a lock guard, an epoch pin, an `Arc`).
    fn read_with<R>(&self, work: impl FnOnce(&ArrayD<f32>) -> R) -> R;

    /// Adds `delta` elementwise. Locks update in place (their best case), with the add at
    /// its best on this processor ([`wide`](super::wide)).
    fn assign_add(&self, delta: &ArrayD<f32>);

    /// One trainer step: read the parameters, compute a gradient of the same size into
    /// `grad` (a reused buffer), apply it.
    fn step(&self, grad: &mut ArrayD<f32>) {
        self.read_with(|w| gradient(w, grad));
        self.assign_add(grad);
    }

    /// A copy of the current value, for the final check.
    fn value(&self) -> ArrayD<f32> {
        self.read_with(ArrayD::clone)
    }

    /// Versions of the tensor alive right now, where the variant can tell (mvtensor).
    fn live_copies(&self) -> Option<usize> {
        None
    }

    /// Deltas per combined pass so far, where the variant combines (mvtensor).
    fn mean_batch(&self) -> Option<f64> {
        None
    }
}

/// The trainer's gradient: a cheap O(n) function of every parameter. `sign(w)` reads each
/// element and writes one; the parameters stay non-negative, so it is exactly 1 everywhere
/// and the final value can be checked exactly.
pub fn gradient(w: &ArrayD<f32>, grad: &mut ArrayD<f32>) {
    Zip::from(grad).and(w).for_each(|g, &x| *g = x.signum());
}

/// The read of the read workloads: what a reader of parameters does with them, a sum over
/// the whole snapshot. Returns the sum and how many adds the first and last elements show
/// (they must agree, or the read saw a torn value).
pub fn read_work(a: &ArrayD<f32>) -> (f32, f32, f32) {
    let s = a.as_slice().expect("standard layout");
    let n = s.len();
    let first = s[0]; // its initial value is 0
    let last = s[n - 1] - ((n - 1) % super::INITIAL_MAX) as f32;
    (a.sum(), first, last)
}

impl Subject for Variable<f32> {
    const NAME: &'static str = "mvtensor";
    fn new(init: ArrayD<f32>) -> Self {
        Variable::new(init)
    }
    fn read_with<R>(&self, work: impl FnOnce(&ArrayD<f32>) -> R) -> R {
        work(self.read().data())
    }
    fn assign_add(&self, delta: &ArrayD<f32>) {
        Variable::assign_add(self, delta).expect("the delta has the variable's shape");
    }
    fn live_copies(&self) -> Option<usize> {
        Some(self.stats().live_versions)
    }
    fn mean_batch(&self) -> Option<f64> {
        let stats = self.stats();
        (stats.combined_batches > 0)
            .then(|| stats.combined_deltas as f64 / stats.combined_batches as f64)
    }
}

impl Subject for Mutex<ArrayD<f32>> {
    const NAME: &'static str = "std Mutex";
    fn new(init: ArrayD<f32>) -> Self {
        Mutex::new(init)
    }
    fn read_with<R>(&self, work: impl FnOnce(&ArrayD<f32>) -> R) -> R {
        work(&self.lock().unwrap())
    }
    fn assign_add(&self, delta: &ArrayD<f32>) {
        add_array(&mut self.lock().unwrap(), delta);
    }
}

impl Subject for RwLock<ArrayD<f32>> {
    const NAME: &'static str = "std RwLock";
    fn new(init: ArrayD<f32>) -> Self {
        RwLock::new(init)
    }
    fn read_with<R>(&self, work: impl FnOnce(&ArrayD<f32>) -> R) -> R {
        work(&self.read().unwrap())
    }
    fn assign_add(&self, delta: &ArrayD<f32>) {
        add_array(&mut self.write().unwrap(), delta);
    }
}

impl Subject for parking_lot::Mutex<ArrayD<f32>> {
    const NAME: &'static str = "parking_lot Mutex";
    fn new(init: ArrayD<f32>) -> Self {
        parking_lot::Mutex::new(init)
    }
    fn read_with<R>(&self, work: impl FnOnce(&ArrayD<f32>) -> R) -> R {
        work(&self.lock())
    }
    fn assign_add(&self, delta: &ArrayD<f32>) {
        add_array(&mut self.lock(), delta);
    }
}

impl Subject for parking_lot::RwLock<ArrayD<f32>> {
    const NAME: &'static str = "parking_lot RwLock";
    fn new(init: ArrayD<f32>) -> Self {
        parking_lot::RwLock::new(init)
    }
    fn read_with<R>(&self, work: impl FnOnce(&ArrayD<f32>) -> R) -> R {
        work(&self.read())
    }
    fn assign_add(&self, delta: &ArrayD<f32>) {
        add_array(&mut self.write(), delta);
    }
}

/// An RCU cell: readers load the `Arc`; writers load, build `current + delta` into a new
/// tensor (one pass: its best case of "clone, then add") and compare-and-swap, retrying if
/// another writer won.
impl Subject for ArcSwap<ArrayD<f32>> {
    const NAME: &'static str = "arc-swap RCU";
    fn new(init: ArrayD<f32>) -> Self {
        ArcSwap::from_pointee(init)
    }
    fn read_with<R>(&self, work: impl FnOnce(&ArrayD<f32>) -> R) -> R {
        work(&self.load())
    }
    fn assign_add(&self, delta: &ArrayD<f32>) {
        loop {
            let current = self.load();
            // On slices in AVX2, as every other variant's add (ndarray's `+` runs an SSE2
            // loop behind shape checks).
            let next = match (current.as_slice(), delta.as_slice()) {
                (Some(a), Some(d)) => ArrayD::from_shape_vec(current.raw_dim(), add_collect(a, d))
                    .expect("the tensor's shape"),
                _ => &**current + delta,
            };
            let next = Arc::new(next);
            let previous = self.compare_and_swap(&current, next);
            if Arc::ptr_eq(&previous, &current) {
                return;
            }
        }
    }
}

/// Something to do with a subject type: the workloads implement it, [`Variant::visit`]
/// calls it with the right type.
pub trait Visit {
    type Out;
    fn visit<S: Subject>(self) -> Self::Out;
}

/// The variants, as values (for loops, tables and command lines).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    Mvtensor,
    StdMutex,
    StdRwLock,
    PlMutex,
    PlRwLock,
    ArcSwap,
}

impl Variant {
    pub const ALL: [Variant; 6] = [
        Variant::Mvtensor,
        Variant::StdMutex,
        Variant::StdRwLock,
        Variant::PlMutex,
        Variant::PlRwLock,
        Variant::ArcSwap,
    ];

    /// Runs `v` with this variant's subject type.
    pub fn visit<V: Visit>(self, v: V) -> V::Out {
        match self {
            Variant::Mvtensor => v.visit::<Variable<f32>>(),
            Variant::StdMutex => v.visit::<Mutex<ArrayD<f32>>>(),
            Variant::StdRwLock => v.visit::<RwLock<ArrayD<f32>>>(),
            Variant::PlMutex => v.visit::<parking_lot::Mutex<ArrayD<f32>>>(),
            Variant::PlRwLock => v.visit::<parking_lot::RwLock<ArrayD<f32>>>(),
            Variant::ArcSwap => v.visit::<ArcSwap<ArrayD<f32>>>(),
        }
    }

    pub fn name(self) -> &'static str {
        struct Name;
        impl Visit for Name {
            type Out = &'static str;
            fn visit<S: Subject>(self) -> &'static str {
                S::NAME
            }
        }
        self.visit(Name)
    }

    /// A short name for command lines and file names.
    pub fn key(self) -> &'static str {
        match self {
            Variant::Mvtensor => "mvtensor",
            Variant::StdMutex => "std-mutex",
            Variant::StdRwLock => "std-rwlock",
            Variant::PlMutex => "pl-mutex",
            Variant::PlRwLock => "pl-rwlock",
            Variant::ArcSwap => "arc-swap",
        }
    }

    pub fn from_key(key: &str) -> Option<Variant> {
        Variant::ALL.into_iter().find(|v| v.key() == key)
    }

    /// A lock (the "mutex variants" the goals compare against); arc-swap is not one.
    pub fn is_lock(self) -> bool {
        !matches!(self, Variant::Mvtensor | Variant::ArcSwap)
    }
}
