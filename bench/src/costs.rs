//! Cost per operation, against its targets: per-thread CPU nanoseconds of one mvtensor
//! operation beside the same run's floor (the add on plain slices in place and out of place,
//! the best lock updated in place). CPU time, not wall time, so that time spent descheduled
//! on a shared machine does not count. Every row runs once per round, each round runs every
//! row (a different one first each round), and each figure is the median over the rounds.
//!
//! Only mvtensor's public API is used, so this keeps measuring across rewrites of its
//! internals. Shared by `benches/costs.rs` and the report (`--bin report`).

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Barrier;
use std::thread;

use crossbeam_utils::CachePadded;
use mvtensor::Variable;
use ndarray::{arr0, ArrayD, Ix0};

use super::placement::{apart, placed, placed_where, tensor_of};
use super::wide::{add_in_place, add_out_of_place};
use super::{check_dense, initial, median, ones, Subject, SIZES};

pub mod table;

/// The 1K tensor of the read rows and the two-thread rows.
const SMALL: usize = 1 << 10;

/// What one row measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `a += d` on plain slices: the arithmetic alone.
    Kernel(usize),
    /// `out = a + d` into a warm buffer: the least a copy-on-write update must stream.
    OutOfPlace(usize),
    /// `*std::sync::Mutex<ArrayD<f32>>::lock() += d`.
    StdMutex(usize),
    /// `*parking_lot::Mutex<ArrayD<f32>>::lock() += d`.
    PlMutex(usize),
    /// `Variable::<f32>::assign_add(d)`, one thread.
    AssignAdd(usize),
    /// `*parking_lot::Mutex<i64>::lock() += 1`.
    PlMutexI64,
    /// `fetch_update(|c| c + 1)` on a 0-d `Variable<i64>`, the returned snapshot dropped.
    FetchUpdate,
    /// `fetch_add(1)` on `Variable::scalar(0i64)`: the scalar API, no array per call.
    FetchAdd,
    /// A 1K `parking_lot::RwLock<ArrayD<f32>>`: read guard taken and dropped.
    PlRwLockRead,
    /// A 1K `Variable<f32>`: `read()` taken and dropped.
    Read,
    /// Two threads, each updating its own 1K parking_lot mutex: CPU per update. What two
    /// busy threads cost each other on this machine, whatever the code.
    PlMutexTwoThreads,
    /// Two threads, each `assign_add` to its own 1K variable: CPU per write.
    AssignAddTwoThreads,
}

/// How much to measure.
#[derive(Debug, Clone, Copy)]
pub struct CostPlan {
    /// Rounds; each figure is the median of this many measurements.
    pub rounds: usize,
    /// Operations per measurement, relative to the default (about 1-10 ms of CPU each).
    pub scale: f64,
}

impl CostPlan {
    /// Dense updates per measurement on `n` elements: ~16M elements' worth, at least 4.
    fn ops(&self, n: usize) -> u64 {
        ((self.scale * (1u64 << 24) as f64 / n as f64) as u64).max(4)
    }

    /// Scalar operations and reads per measurement.
    fn scalar_ops(&self) -> u64 {
        ((self.scale * 50_000.0) as u64).max(100)
    }
}

/// The CPU time this thread has used, in ns. Unlike wall time it does not grow while the
/// thread waits for a core, so it measures work on a shared machine.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call to fill in.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU ns per operation of `ops` calls of `f` on this thread.
fn per_op(ops: u64, mut f: impl FnMut()) -> f64 {
    let t0 = thread_cpu_ns();
    for _ in 0..ops {
        f();
    }
    (thread_cpu_ns() - t0) as f64 / ops as f64
}

/// One row's workload: its state lives across rounds, and is checked at the end.
trait Probe {
    /// Runs one measurement; returns CPU ns per operation.
    fn run(&mut self) -> f64;
    /// Panics if an update was lost (every write adds ones; f32 sums stay exact).
    fn check(&self);
}

/// The add on plain slices, in place (`out == None`) or into a warm buffer.
struct Slices {
    a: Vec<f32>,
    d: Vec<f32>,
    out: Option<Vec<f32>>,
    ops: u64,
    adds: u64,
}

impl Probe for Slices {
    fn run(&mut self) -> f64 {
        let (a, d) = (&mut self.a, &self.d);
        let ns = match &mut self.out {
            None => per_op(self.ops, || {
                add_in_place(black_box(&mut a[..]), d);
            }),
            Some(out) => per_op(self.ops, || {
                add_out_of_place(black_box(&mut out[..]), black_box(&a[..]), d);
            }),
        };
        if self.out.is_none() {
            self.adds += self.ops;
        }
        ns
    }
    fn check(&self) {
        let n = self.a.len();
        let a = ArrayD::from_shape_vec(vec![n], self.a.clone()).expect("1-d");
        check_dense("add kernel", &a, &initial(n), self.adds);
        if let Some(out) = &self.out {
            let out = ArrayD::from_shape_vec(vec![n], out.clone()).expect("1-d");
            check_dense("out-of-place add", &out, &initial(n), 1);
        }
    }
}

/// `assign_add` of ones on a [`Subject`] (mvtensor, or a lock updated in place), through
/// the same trait as every other benchmark.
struct Dense<S> {
    s: S,
    d: ArrayD<f32>,
    ops: u64,
    adds: u64,
}

impl<S: Subject> Probe for Dense<S> {
    fn run(&mut self) -> f64 {
        self.adds += self.ops;
        per_op(self.ops, || self.s.assign_add(black_box(&self.d)))
    }
    fn check(&self) {
        let n = self.d.len();
        check_dense(S::NAME, &self.s.value(), &initial(n), self.adds);
    }
}

/// A read taken and dropped, doing nothing with the value.
struct Reads<S> {
    s: S,
    ops: u64,
}

impl<S: Subject> Probe for Reads<S> {
    fn run(&mut self) -> f64 {
        per_op(self.ops, || {
            self.s.read_with(|a| {
                black_box(a);
            })
        })
    }
    fn check(&self) {
        check_dense(S::NAME, &self.s.value(), &initial(SMALL), 0);
    }
}

/// A scalar counter: `parking_lot::Mutex<i64>`, mvtensor's `fetch_update` on a 0-d
/// variable, or its scalar `fetch_add`.
enum Counter {
    Lock(parking_lot::Mutex<i64>),
    Mv(Variable<i64>),
    Scalar(Variable<i64, Ix0>),
}

struct Increments {
    c: Counter,
    ops: u64,
    done: u64,
}

impl Probe for Increments {
    fn run(&mut self) -> f64 {
        self.done += self.ops;
        match &self.c {
            Counter::Lock(m) => per_op(self.ops, || *black_box(m).lock() += 1),
            Counter::Mv(v) => per_op(self.ops, || {
                let old = black_box(v).fetch_update(|c| c + 1).expect("same shape");
                black_box(&old);
            }),
            Counter::Scalar(v) => per_op(self.ops, || {
                black_box(black_box(v).fetch_add(1).expect("outside any section"));
            }),
        }
    }
    fn check(&self) {
        let value = match &self.c {
            Counter::Lock(m) => *m.lock(),
            Counter::Mv(v) => v.read()[[]],
            Counter::Scalar(v) => v.get(),
        };
        assert_eq!(value, self.done as i64, "a lost increment");
    }
}

/// Two threads, each adding ones to its own subject. Each thread warms up (a quarter of
/// its operations, untimed) and waits for the other before its timed loop. The subjects
/// are cache-padded, so that two locks side by side do not share a cache line, and their
/// tensors placed [`apart`] (no 128-byte block in common).
struct TwoThreads<S> {
    s: [CachePadded<S>; 2],
    d: ArrayD<f32>,
    ops: u64,
    adds: u64,
}

impl<S: Subject> Probe for TwoThreads<S> {
    fn run(&mut self) -> f64 {
        let (ops, d) = (self.ops, &self.d);
        let start = Barrier::new(2);
        let cpu: Vec<f64> = thread::scope(|scope| {
            let handles: Vec<_> = self
                .s
                .iter()
                .map(|s| {
                    let start = &start;
                    scope.spawn(move || {
                        for _ in 0..ops / 4 {
                            s.assign_add(d);
                        }
                        start.wait();
                        per_op(ops, || s.assign_add(black_box(d)))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        self.adds += ops + ops / 4;
        cpu.iter().sum::<f64>() / cpu.len() as f64
    }
    fn check(&self) {
        for s in &self.s {
            check_dense(S::NAME, &s.value(), &initial(SMALL), self.adds);
        }
    }
}

/// A delta of ones for `tensors`, clear of aliasing with each (see
/// [`clear_of_aliasing`](super::placement)).
fn delta_for(n: usize, tensors: &[*const f32]) -> ArrayD<f32> {
    placed(|| ones(n), ArrayD::as_ptr, tensors, &[])
}

fn dense<S: Subject + 'static>(n: usize, ops: u64) -> Box<dyn Probe> {
    let s = S::new(initial(n));
    let d = delta_for(n, &[tensor_of(&s)]);
    Box::new(Dense { s, d, ops, adds: 0 })
}

fn two_threads<S: Subject + 'static>(ops: u64) -> Box<dyn Probe> {
    let first = CachePadded::new(S::new(initial(SMALL)));
    let bytes = SMALL * std::mem::size_of::<f32>();
    let other = tensor_of(&*first);
    let second = placed_where(
        || CachePadded::new(S::new(initial(SMALL))),
        |s| tensor_of(&**s),
        |p| apart(p, other, bytes),
    );
    let s = [first, second];
    let d = delta_for(SMALL, &[tensor_of(&*s[0]), tensor_of(&*s[1])]);
    Box::new(TwoThreads { s, d, ops, adds: 0 })
}

fn probes(plan: CostPlan) -> Vec<(Op, Box<dyn Probe>)> {
    let mut probes: Vec<(Op, Box<dyn Probe>)> = Vec::new();
    for n in SIZES {
        let ops = plan.ops(n);
        let slices = |out: bool| -> Box<dyn Probe> {
            let a: Vec<f32> = initial(n).iter().copied().collect();
            let d = placed(|| vec![1.0; n], |v| v.as_ptr(), &[a.as_ptr()], &[]);
            let out = out.then(|| {
                let loads = [a.as_ptr(), d.as_ptr()];
                placed(|| vec![0.0; n], |v| v.as_ptr(), &[], &loads)
            });
            Box::new(Slices {
                out,
                a,
                d,
                ops,
                adds: 0,
            })
        };
        probes.push((Op::Kernel(n), slices(false)));
        probes.push((Op::OutOfPlace(n), slices(true)));
        probes.push((Op::StdMutex(n), dense::<std::sync::Mutex<_>>(n, ops)));
        probes.push((Op::PlMutex(n), dense::<parking_lot::Mutex<_>>(n, ops)));
        probes.push((Op::AssignAdd(n), dense::<Variable<f32>>(n, ops)));
    }
    let ops = plan.scalar_ops();
    let counter = |c| -> Box<dyn Probe> { Box::new(Increments { c, ops, done: 0 }) };
    let zero = parking_lot::Mutex::new(0);
    probes.push((Op::PlMutexI64, counter(Counter::Lock(zero))));
    let zero = Variable::new(arr0(0i64).into_dyn());
    probes.push((Op::FetchUpdate, counter(Counter::Mv(zero))));
    let zero = Variable::scalar(0i64);
    probes.push((Op::FetchAdd, counter(Counter::Scalar(zero))));
    let rwlock = parking_lot::RwLock::new(initial(SMALL));
    probes.push((Op::PlRwLockRead, Box::new(Reads { s: rwlock, ops })));
    let v = Variable::new(initial(SMALL));
    probes.push((Op::Read, Box::new(Reads { s: v, ops })));
    // Sixteen times the one-thread rows' count: on a shared machine the two threads need not
    // run side by side for a whole round, and a short round makes the ratio that of however
    // long they happened to overlap.
    let ops = 16 * plan.ops(SMALL);
    let pl = two_threads::<parking_lot::Mutex<_>>(ops);
    probes.push((Op::PlMutexTwoThreads, pl));
    probes.push((Op::AssignAddTwoThreads, two_threads::<Variable<f32>>(ops)));
    probes
}

/// Medians of one run, by operation.
#[derive(Debug, Clone)]
pub struct Costs {
    pub plan: CostPlan,
    ns: HashMap<Op, f64>,
}

/// Measures every row: one untimed round to warm up, then `plan.rounds` rounds, each
/// running every row once, starting at a different row each round. Checks every result.
pub fn measure(plan: CostPlan) -> Costs {
    let mut probes = probes(plan);
    for (_, p) in &mut probes {
        p.run();
    }
    let mut runs: HashMap<Op, Vec<f64>> = HashMap::new();
    for round in 0..plan.rounds {
        let k = round % probes.len();
        for i in (k..probes.len()).chain(0..k) {
            let (op, p) = &mut probes[i];
            runs.entry(*op).or_default().push(p.run());
        }
    }
    for (_, p) in &probes {
        p.check();
    }
    let ns = runs.into_iter().map(|(op, xs)| (op, median(xs))).collect();
    Costs { plan, ns }
}
