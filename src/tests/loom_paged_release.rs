//! Component model of the last count of a dropped paged variable's table: an owned snapshot
//! dropped on one thread while the variable is dropped on another. Whichever gives up the
//! table's last count frees the book (under loom at once; in a build, through the orphan
//! list), pages and tables included, so every other holder's reads of the table must
//! happen-before that free: `book::release` decrements with AcqRel. The table's `handoff`
//! is looked at by the snapshot's reads and touched by the free, so with a Release-only
//! decrement this model fails with a causality violation (the variable's side freeing after
//! the snapshot's release, which it did not acquire).

use loom::thread;
use ndarray::Array2;

use crate::loom_model::run_model;
use crate::sync::epoch;
use crate::PagedVariable;

#[test]
fn loom_the_last_holder_of_a_dropped_tables_frees_it_after_every_look() {
    run_model(
        "loom_the_last_holder_of_a_dropped_tables_frees_it_after_every_look",
        || {
            let v = PagedVariable::new(Array2::<i64>::from_elem((1, 1), 7)).unwrap();
            let snapshot = v.read_owned();
            let reader = thread::spawn(move || {
                assert_eq!(snapshot.row(0).unwrap()[[0]], 7);
                drop(snapshot);
            });
            // The variable gives its head's count up through a deferred call: flush until
            // crossbeam runs it here (two epochs), while the reader may still hold its own.
            drop(v);
            for _ in 0..3 {
                epoch::pin().flush();
            }
            reader.join().unwrap();
        },
    );
}
