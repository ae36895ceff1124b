//! Component model of a reader racing a moved link: while a store snapshot is registered, a
//! section's second commit at the first one's timestamp makes `Ledger::settle` move the new
//! table's link past the first table, to the table the snapshot needs (older than one the
//! reader has already shown). A reader that saw the head pending and loads the moved link
//! must look at the record again (`Inner::read`): it then sees the commit, and shows the
//! head. Without that second look it showed the older table: a read going back in time.
//! The counter, a dense variable in the same commits, has the same race with the link
//! `Version::release_prev` moves past versions of its own timestamp: `Head::visible` looks
//! again too (without it: "the row at 1 but the counter at 0", a dense read going back
//! from a value this thread had written itself).

use loom::thread;
use ndarray::{arr0, Array2};

use crate::horizon::Registration;
use crate::loom_model::run_model_at_least;
use crate::{CriticalSection, PagedVariable, Variable};

#[test]
fn loom_a_reader_racing_a_moved_link_never_goes_back() {
    // Three preemptions: the writer installs, the reader loads the pending head, the writer
    // commits and moves the link, the reader loads it (49 s, 267k executions).
    run_model_at_least(
        "loom_a_reader_racing_a_moved_link_never_goes_back",
        3,
        || {
            let table = PagedVariable::new(Array2::<i64>::zeros((1, 1))).unwrap();
            let counter = Variable::new(arr0(0i64).into_dyn());
            let section = CriticalSection::builder()
                .paged(&table)
                .resource(&counter)
                .build()
                .unwrap();
            // A store snapshot in progress at a clock value after the tables' creation: every
            // commit below is past it, so the commits keep a link to version 0.
            let snapshot = Registration::begin();
            snapshot.at(crate::record::tick());
            let step = {
                let (table, counter) = (table.clone(), counter.clone());
                move |section: &CriticalSection| {
                    section
                        .execute(|tx| {
                            tx.scatter_add(&table, &[0], &Array2::ones((1, 1)))?;
                            tx.assign_add(&counter, &arr0(1).into_dyn())
                        })
                        .unwrap();
                }
            };
            step(&section); // version 1: its link keeps version 0 for the snapshot
            let writer = {
                let (section, step) = (section.clone(), step.clone());
                // Version 2, at version 1's timestamp: settle moves its link to version 0.
                thread::spawn(move || step(&section))
            };
            let row = table.read().row(0).unwrap()[[0]];
            assert!(row >= 1, "a read went back to version {row}");
            let count = counter.read()[[]];
            assert!(count >= row, "the row at {row} but the counter at {count}");
            writer.join().unwrap();
            drop(snapshot);
        },
    );
}
