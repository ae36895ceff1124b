//! "No heap allocation on a steady-state write", for row writes: a steady `scatter_add` on
//! a dense variable and on a paged one allocates nothing of its own (the shape check builds
//! no `Vec` per call). What remains is
//! crossbeam-epoch's bookkeeping: a bag node each time retired versions are handed to it,
//! once per 32 small dense versions, and about once per two paged writes (each tick of a
//! paged variable's grace clock). One test: the counting allocator counts for the whole
//! process.

use crate::counting;

use counting::allocations;
use mvtensor::{PagedVariable, Variable};
use ndarray::Array2;

/// Allocations per write while `write(i)` runs `writes` times, after as many to warm up.
fn per_write(writes: usize, write: impl Fn(usize)) -> f64 {
    (0..writes).for_each(&write); // warm: pools fill
    let before = allocations();
    (writes..2 * writes).for_each(&write);
    (allocations() - before) as f64 / writes as f64
}

#[test]
fn steady_row_writes_do_not_allocate() {
    alone!();
    let writes = if cfg!(miri) { 300 } else { 5_000 };
    let rows = 64;
    let dense = Variable::new(Array2::<f32>::zeros((rows, 16)));
    let paged = PagedVariable::new(Array2::<f32>::zeros((rows, 16))).unwrap();
    let ones = Array2::<f32>::ones((4, 16));
    let ids = |i: usize| [i % rows, (i * 7) % rows, (i * 13 + 1) % rows, i % rows];
    let dense_per_write = per_write(writes, |i| {
        dense.scatter_add(&ids(i), &ones).unwrap();
    });
    let paged_per_write = per_write(writes, |i| {
        paged.scatter_add(&ids(i), &ones).unwrap();
    });
    // Every write landed: 4 rows of 16 ones each, 2 * writes times on each variable.
    let total = (2 * writes * 4 * 16) as f32;
    assert_eq!(dense.read().sum(), total);
    assert_eq!(paged.read().to_array().sum(), total);
    eprintln!("{dense_per_write:.4} (dense), {paged_per_write:.4} (paged) allocations per write");
    // A `Vec` per call would add 1.0 to each.
    assert!(
        dense_per_write < 0.1,
        "{dense_per_write} per dense row write"
    );
    assert!(
        paged_per_write < 0.75,
        "{paged_per_write} per paged row write"
    );
}
