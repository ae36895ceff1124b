//! A table behind a held older one that still has its own link (written while a store
//! snapshot was in progress, then skipped by the next write's link, which has the same
//! timestamp), whose last owned snapshot is dropped on another thread while the writer
//! reclaims. `release_links` may see it counted (so its link stays), and the reuse behind
//! the oldest then see it uncounted: it must wait for the next reclaim, which gives the
//! link up first. Reused with its link in place (and still on `linked`), the link's count
//! of version 0 would never be given up, so the book and its pages would never be freed
//! (with the table's box freed instead, `linked` would point at freed memory).

use loom::thread;
use ndarray::Array2;

use crate::horizon::Registration;
use crate::loom_model::run_model_branching;
use crate::sync::{epoch, Ordering};
use crate::PagedVariable;

/// Six writes with their flushes: more than loom's default 1,000 branches.
const BRANCHES: usize = 20_000;

fn flush() {
    for _ in 0..3 {
        epoch::pin().flush();
    }
}

fn add(table: &PagedVariable<i64>) {
    table.scatter_add(&[0], &Array2::ones((1, 1))).unwrap();
}

/// `race`: the owned snapshot of version 1 is dropped on another thread while version 4 is
/// written (its reclaim), else on the writer's thread before it.
fn model(race: bool) {
    let table = PagedVariable::new(Array2::<i64>::zeros((1, 1))).unwrap();
    let pages = std::sync::Arc::clone(&table.inner.pages);
    // A store snapshot in progress: every write below (all at one timestamp, past it) links
    // to version 0, and skips the tables of its own timestamp.
    let snapshot = Registration::begin();
    snapshot.at(crate::record::tick());
    add(&table); // version 1, linked to version 0
    let held = table.read_owned(); // version 1
    add(&table); // version 2, linked to version 0 (version 1 keeps its link)
                 // Version 2 stays counted through the race, so that version 1's table is the last one
                 // reclaimed there, and the first the write reuses: with its link still in place.
    let held2 = table.read_owned();
    // Let the head count of version 1 go: its grace tick is deferred by a later write once
    // the one in flight has run.
    flush();
    add(&table); // version 3
    flush();
    if race {
        let dropper = thread::spawn(move || drop(held));
        add(&table); // version 4: its reclaim races the drop
        dropper.join().unwrap();
    } else {
        drop(held);
        add(&table);
    }
    drop(held2);
    drop(snapshot);
    add(&table); // cuts every link
    add(&table);
    drop(table);
    for _ in 0..4 {
        epoch::pin().flush();
    }
    assert_eq!(
        pages.load(Ordering::Relaxed),
        0,
        "the book was never freed: a count leaked"
    );
}

#[test]
fn loom_paged_a_linked_table_behind_a_held_one_keeps_no_count() {
    run_model_branching(
        "loom_paged_a_linked_table_behind_a_held_one_keeps_no_count",
        BRANCHES,
        || model(true),
    );
}

/// The same, the owned snapshot dropped on the writer's thread before the write.
#[test]
fn loom_paged_a_table_dropped_before_the_write_behind_a_held_one_keeps_no_count() {
    run_model_branching(
        "loom_paged_a_table_dropped_before_the_write_behind_a_held_one_keeps_no_count",
        BRANCHES,
        || model(false),
    );
}
