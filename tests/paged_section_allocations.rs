//! A steady stream of executions that scatter rows into a paged table and add to a counter
//! allocates nothing of its own: the staged writes' buffers, the book's lists, the commit
//! record, the table and its pages are all reused. What remains is crossbeam-epoch's
//! bookkeeping: a bag node each time the paged variable's grace clock defers a tick, about
//! once per commit here (`row_allocations.rs`: about once per two plain paged writes). The
//! binary's counting allocator counts.

use crate::common;
use crate::counting;

use counting::allocations;
use mvtensor::{PagedVariable, Variable};
use ndarray::{arr0, Array2};

#[test]
fn steady_paged_executions_do_not_allocate() {
    alone!();
    let executions = if cfg!(miri) { 150 } else { 20_000 };
    // Miri spends its time on the table's pages: fewer rows there.
    let rows = if cfg!(miri) { 64 } else { 1000 };
    let table = PagedVariable::new(Array2::<f32>::zeros((rows, 16))).unwrap();
    let steps = Variable::new(arr0(0i64));
    let section = common::table_and_counter(&table, &steps);
    let grads = Array2::<f32>::ones((4, 16));
    let one = arr0(1i64);
    let mut i = 0usize;
    let mut step = || {
        let ids = [i % rows, (i * 7) % rows, (i * 31) % rows, (i * 131) % rows];
        i += 1;
        section
            .execute(|tx| {
                tx.scatter_scaled_add(&table, -0.5, &ids, &grads)?;
                tx.scatter_add(&table, &ids[..1], &grads.slice(ndarray::s![..1, ..]))?;
                tx.assign_add(&steps, &one)
            })
            .unwrap();
    };
    for _ in 0..executions {
        step(); // warm: spares, records and pages fill
    }
    let before = allocations();
    for _ in 0..executions {
        step();
    }
    let per_execution = (allocations() - before) as f64 / executions as f64;
    assert_eq!(steps.read()[[]], 2 * executions as i64);
    // Fresh vectors for each staged write were 6 more an execution, and a fresh list of
    // linked tables after every cut 1 more.
    let bound = if cfg!(miri) { 1.75 } else { 1.25 };
    assert!(
        per_execution < bound,
        "{per_execution} allocations per execution"
    );
    eprintln!("{per_execution:.4} allocations per execution");
}
