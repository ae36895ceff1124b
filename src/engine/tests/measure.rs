//! The instruction counts of docs/design.md's "Engine: reclamation by hazard slots": each test
//! runs one operation `N` times inside a function whose name contains `cg_region`, which
//! callgrind counts alone:
//!
//! ```text
//! cargo test --release --lib engine::measure --no-run
//! valgrind --tool=callgrind --toggle-collect='*cg_region*' <test binary> \
//!     engine::measure::<test> --ignored --exact --test-threads 1
//! ```
//!
//! Instructions per operation: the total over `N`, less the empty loop's (`nop`). Ignored in
//! normal runs (a measurement, not a check); each still checks what it computed.

use std::hint::black_box;

use super::cell::TestCell;

const N: usize = 100_000;
const ADDS: usize = 10_000;

#[inline(never)]
fn cg_region_nop(n: usize) -> usize {
    let mut sum = 0;
    for i in 0..n {
        sum += black_box(i);
    }
    sum
}

#[inline(never)]
fn cg_region_read(cell: &TestCell, n: usize) -> u64 {
    let mut sum = 0;
    for _ in 0..n {
        sum += black_box(cell.read().number);
    }
    sum
}

#[inline(never)]
fn cg_region_add(cell: &TestCell, delta: &[f32], n: usize) {
    for _ in 0..n {
        black_box(cell.assign_add(black_box(delta)));
    }
}

/// The floor: the same kernel, out of place, into a buffer of our own.
#[inline(never)]
fn cg_region_oop(a: &mut Vec<f32>, out: &mut Vec<f32>, delta: &[f32], n: usize) {
    for _ in 0..n {
        for ((o, x), d) in out.iter_mut().zip(a.iter()).zip(black_box(delta)) {
            *o = x + d;
        }
        std::mem::swap(a, out);
    }
}

#[test]
#[ignore = "a measurement: run under callgrind"]
fn nop() {
    assert_eq!(cg_region_nop(N), N * (N - 1) / 2);
}

#[test]
#[ignore = "a measurement: run under callgrind"]
fn read_and_drop() {
    let cell = TestCell::zeros(1024);
    cell.assign_add(&[1.0; 1024]);
    assert_eq!(cg_region_read(&cell, N), N as u64);
}

#[test]
#[ignore = "a measurement: run under callgrind"]
fn assign_add_1k() {
    let cell = TestCell::zeros(1024);
    cell.assign_add(&[1.0; 1024]);
    cg_region_add(&cell, &[1.0; 1024], ADDS);
    assert_eq!(cell.read().values[1023], 1.0 + ADDS as f32);
    assert_eq!(cell.made(), 2);
}

#[test]
#[ignore = "a measurement: run under callgrind"]
fn out_of_place_add_1k() {
    let (mut a, mut out) = (vec![1.0; 1024], vec![0.0; 1024]);
    cg_region_oop(&mut a, &mut out, &[1.0; 1024], ADDS);
    assert_eq!(a[1023], 1.0 + ADDS as f32);
}

#[test]
#[ignore = "a measurement: run under callgrind"]
fn fetch_add() {
    let cell = TestCell::zeros(1);
    cg_region_fetch(&cell, N);
    assert_eq!(cell.read().values[0], N as f32);
}

#[inline(never)]
fn cg_region_fetch(cell: &TestCell, n: usize) {
    for _ in 0..n {
        black_box(cell.fetch_add(black_box(1.0)));
    }
}
