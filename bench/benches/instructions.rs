//! Instruction counts (callgrind, through gungraun) of mvtensor's per-operation costs beside
//! their references: `assign_add` 1K/64K/1M against the add on plain slices and an in-place
//! parking_lot mutex update, scalar `fetch_update`, `fetch_add` and a critical-section
//! increment against a parking_lot `Mutex<i64>`, `read()` + drop against a parking_lot
//! `RwLock` read, and an Adam step of the report's optimizer workload (`optim::Optimizer`
//! over a packed set) against the same step under a parking_lot mutex. Unlike time, an instruction count
//! does not move with the machine's load, so a regression of a few percent shows.
//!
//! ```text
//! cargo install --locked gungraun-runner --version 0.20.0   # gungraun's version in Cargo.lock
//! cargo bench -p mvtensor-bench --bench instructions        # needs valgrind
//! ```
//!
//! Every benchmark runs [`OPS`] operations after a warm-up: the counts are per `OPS`
//! operations, in a steady state. Setup (building the tensors, the warm-up) and teardown
//! (the fixture is returned, so it is dropped outside the measured function) do not count.
//! Benchmarks with the same id (`k1`, `k64`, `m1`, `scalar`, `read`, `adam`) are compared with each
//! other in the output: under mvtensor's figures, "Comparison with kernel k1" shows the
//! reference's count first and, in brackets, how many times fewer it executes (`-2.98x`:
//! mvtensor executes 2.98 times the reference's instructions).

use std::hint::black_box;

use gungraun::prelude::*;
use mvtensor::{CriticalSection, Error, Variable};
use mvtensor_bench::optimizer::{gradients, MvPacked, Optimizer, Plain};
use ndarray::{arr0, ArrayD, Ix0, IxDyn};

/// Operations per benchmark.
const OPS: usize = 100;

/// Untimed operations before the measured ones, so that thread-locals, the allocator and
/// any pooled versions are in their steady state.
const WARM_UP: usize = 100;

/// The add in place, in AVX2 where the processor has it, as mvtensor's loops: a plain loop
/// (SSE2 in a default build, half the width) would count the width of the loop in
/// mvtensor's favour at 64K and 1M.
#[inline(never)]
fn add_in_place(a: &mut [f32], d: &[f32]) {
    mvtensor_bench::wide::add_in_place(a, d);
}

/// Two plain vectors: the tensor and the delta.
fn slices(n: usize) -> (Vec<f32>, Vec<f32>) {
    let (mut a, d) = (vec![0.0; n], vec![1.0; n]);
    for _ in 0..WARM_UP {
        add_in_place(&mut a, &d);
    }
    (a, d)
}

fn pl_mutex(n: usize) -> (parking_lot::Mutex<ArrayD<f32>>, ArrayD<f32>) {
    let (m, d) = (
        parking_lot::Mutex::new(ArrayD::zeros(IxDyn(&[n]))),
        ArrayD::ones(IxDyn(&[n])),
    );
    for _ in 0..WARM_UP {
        mvtensor_bench::wide::add_array(&mut m.lock(), &d);
    }
    (m, d)
}

fn variable(n: usize) -> (Variable<f32>, ArrayD<f32>) {
    let (v, d) = (
        Variable::new(ArrayD::zeros(IxDyn(&[n]))),
        ArrayD::ones(IxDyn(&[n])),
    );
    for _ in 0..WARM_UP {
        v.assign_add(&d).expect("same shape");
    }
    (v, d)
}

#[library_benchmark]
#[bench::k1(args = (1 << 10), setup = slices)]
#[bench::k64(args = (1 << 16), setup = slices)]
#[bench::m1(args = (1 << 20), setup = slices)]
fn kernel((mut a, d): (Vec<f32>, Vec<f32>)) -> (Vec<f32>, Vec<f32>) {
    for _ in 0..OPS {
        add_in_place(black_box(&mut a), black_box(&d));
    }
    (a, d)
}

#[library_benchmark]
#[bench::k1(args = (1 << 10), setup = pl_mutex)]
#[bench::k64(args = (1 << 16), setup = pl_mutex)]
#[bench::m1(args = (1 << 20), setup = pl_mutex)]
fn parking_lot_mutex(
    (m, d): (parking_lot::Mutex<ArrayD<f32>>, ArrayD<f32>),
) -> (parking_lot::Mutex<ArrayD<f32>>, ArrayD<f32>) {
    for _ in 0..OPS {
        mvtensor_bench::wide::add_array(&mut black_box(&m).lock(), black_box(&d));
    }
    (m, d)
}

#[library_benchmark]
#[bench::k1(args = (1 << 10), setup = variable)]
#[bench::k64(args = (1 << 16), setup = variable)]
#[bench::m1(args = (1 << 20), setup = variable)]
fn assign_add((v, d): (Variable<f32>, ArrayD<f32>)) -> (Variable<f32>, ArrayD<f32>) {
    for _ in 0..OPS {
        black_box(&v).assign_add(black_box(&d)).expect("same shape");
    }
    (v, d)
}

fn counter_lock() -> parking_lot::Mutex<i64> {
    let m = parking_lot::Mutex::new(0);
    for _ in 0..WARM_UP {
        *m.lock() += 1;
    }
    m
}

fn counter() -> Variable<i64> {
    let v = Variable::new(arr0(0i64).into_dyn());
    for _ in 0..WARM_UP {
        drop(v.fetch_update(|c| c + 1).expect("same shape"));
    }
    v
}

#[library_benchmark]
#[bench::scalar(setup = counter_lock)]
fn parking_lot_mutex_i64(m: parking_lot::Mutex<i64>) -> parking_lot::Mutex<i64> {
    for _ in 0..OPS {
        *black_box(&m).lock() += 1;
    }
    m
}

#[library_benchmark]
#[bench::scalar(setup = counter)]
fn fetch_update(v: Variable<i64>) -> Variable<i64> {
    for _ in 0..OPS {
        let old = black_box(&v).fetch_update(|c| c + 1).expect("same shape");
        black_box(&old);
    }
    v
}

fn scalar_counter() -> Variable<i64, Ix0> {
    let v = Variable::scalar(0i64);
    for _ in 0..WARM_UP {
        v.fetch_add(1).expect("outside any section");
    }
    v
}

#[library_benchmark]
#[bench::scalar(setup = scalar_counter)]
fn fetch_add(v: Variable<i64, Ix0>) -> Variable<i64, Ix0> {
    for _ in 0..OPS {
        black_box(black_box(&v).fetch_add(1).expect("outside any section"));
    }
    v
}

fn section_counter() -> (CriticalSection, Variable<i64, Ix0>) {
    let v = Variable::scalar(0i64);
    let cs = CriticalSection::builder()
        .resource(&v)
        .build()
        .expect("a fresh variable");
    for _ in 0..WARM_UP {
        increment(&cs, &v);
    }
    (cs, v)
}

/// One execution that adds one to the counter's working copy (the report's tiny section).
fn increment(cs: &CriticalSection, v: &Variable<i64, Ix0>) -> i64 {
    cs.execute(|tx| {
        let mut c = tx.write(v)?;
        c[[]] += 1;
        Ok::<_, Error>(c[[]] - 1)
    })
    .expect("the counter execution cannot fail")
}

#[library_benchmark]
#[bench::scalar(setup = section_counter)]
fn section(
    (cs, v): (CriticalSection, Variable<i64, Ix0>),
) -> (CriticalSection, Variable<i64, Ix0>) {
    for _ in 0..OPS {
        black_box(increment(black_box(&cs), black_box(&v)));
    }
    (cs, v)
}

/// An optimizer of the report's Adam workload (four tensors, 1,024 f32) and its gradients,
/// warmed up.
fn adam<O: Optimizer>() -> (O, Vec<ArrayD<f32>>) {
    let (o, g) = (O::new(), gradients());
    for _ in 0..WARM_UP {
        o.step(&g);
    }
    (o, g)
}

#[library_benchmark]
#[bench::adam(setup = adam::<parking_lot::Mutex<Plain>>)]
fn parking_lot_mutex_adam(
    (o, g): (parking_lot::Mutex<Plain>, Vec<ArrayD<f32>>),
) -> (parking_lot::Mutex<Plain>, Vec<ArrayD<f32>>) {
    for _ in 0..OPS {
        black_box(&o).step(black_box(&g));
    }
    (o, g)
}

#[library_benchmark]
#[bench::adam(setup = adam::<MvPacked>)]
fn optimizer_packed((o, g): (MvPacked, Vec<ArrayD<f32>>)) -> (MvPacked, Vec<ArrayD<f32>>) {
    for _ in 0..OPS {
        black_box(&o).step(black_box(&g));
    }
    (o, g)
}

fn rwlock_1k() -> parking_lot::RwLock<ArrayD<f32>> {
    let l = parking_lot::RwLock::new(ArrayD::zeros(IxDyn(&[1 << 10])));
    for _ in 0..WARM_UP {
        black_box(&*l.read());
    }
    l
}

fn variable_1k() -> Variable<f32> {
    let (v, _) = variable(1 << 10);
    for _ in 0..WARM_UP {
        black_box(&*v.read());
    }
    v
}

#[library_benchmark]
#[bench::read(setup = rwlock_1k)]
fn parking_lot_rwlock_read(
    l: parking_lot::RwLock<ArrayD<f32>>,
) -> parking_lot::RwLock<ArrayD<f32>> {
    for _ in 0..OPS {
        black_box(&*black_box(&l).read());
    }
    l
}

#[library_benchmark]
#[bench::read(setup = variable_1k)]
fn read(v: Variable<f32>) -> Variable<f32> {
    for _ in 0..OPS {
        black_box(&*black_box(&v).read());
    }
    v
}

library_benchmark_group!(
    name = dense,
    compare_by_id = true,
    benchmarks = [kernel, parking_lot_mutex, assign_add]
);

library_benchmark_group!(
    name = scalar,
    compare_by_id = true,
    benchmarks = [parking_lot_mutex_i64, fetch_update, fetch_add, section]
);

library_benchmark_group!(
    name = reads,
    compare_by_id = true,
    benchmarks = [parking_lot_rwlock_read, read]
);

library_benchmark_group!(
    name = steps,
    compare_by_id = true,
    benchmarks = [parking_lot_mutex_adam, optimizer_packed]
);

main!(library_benchmark_groups = dense, scalar, reads, steps);
