//! Component model of a replaced table reused after its last owned snapshot is dropped on
//! another thread: the writer's reclaim sees the table's count at zero and hands its table
//! and pages to the spares, and the same write's build rebuilds the table and overwrites the
//! page. The snapshot's reads must happen-before that reuse: `Ledger::reclaim` loads the
//! count with Acquire, pairing with the Release decrement of `book::release`. The snapshot's
//! drop looks at the table's `handoff` and the rebuild touches it, so with a Relaxed load (or
//! a decrement without Release) this model fails with a causality violation: the reader's
//! drop is the last, after the writer gave up the head's count, so no read-modify-write of
//! the writer's acquires it.

use loom::thread;
use ndarray::Array2;

use crate::loom_model::run_model;
use crate::sync::epoch;
use crate::PagedVariable;

fn add(table: &PagedVariable<i64>) {
    table.scatter_add(&[0], &Array2::ones((1, 1))).unwrap();
}

#[test]
fn loom_paged_a_table_is_reused_only_after_its_last_holders_reads() {
    run_model(
        "loom_paged_a_table_is_reused_only_after_its_last_holders_reads",
        || {
            let table = PagedVariable::new(Array2::<i64>::from_elem((1, 1), 7)).unwrap();
            let held = table.read_owned(); // version 0
            let reader = thread::spawn(move || {
                assert_eq!(held.row(0).unwrap()[[0]], 7);
                drop(held);
            });
            add(&table); // version 1: defers the tick after which version 0's head count goes
            for _ in 0..3 {
                epoch::pin().flush(); // until crossbeam runs the tick here
            }
            // Version 2's reclaim gives the head's count up; the reader's drop may come before
            // or after (even within that reclaim). The first reclaim that then sees the count
            // at zero reuses version 0, and its write's build rebuilds the table and writes
            // into its page.
            add(&table);
            add(&table);
            reader.join().unwrap();
            assert_eq!(table.read().row(0).unwrap()[[0]], 10);
        },
    );
}
