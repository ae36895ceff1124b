//! Models of paged variables: the head swap, the count each retired table waits out the epoch
//! with, and the book's reuse of pages (only at count zero: oldest table first, and a table
//! behind a held older one).

#![cfg(mvtensor_loom)]

mod common;

use common::run_model;
use loom::thread;
use mvtensor::PagedVariable;
use ndarray::Array2;

/// Two rows, a page each: every write adds one to both, so a reader that saw a page reused
/// under it would see the rows differ.
fn two_pages() -> PagedVariable<i64> {
    PagedVariable::builder(Array2::zeros((2, 1)))
        .rows_per_page(1)
        .build()
        .unwrap()
}

fn add_both(table: &PagedVariable<i64>) -> u64 {
    table.scatter_add(&[0, 1], &Array2::ones((2, 1))).unwrap()
}

/// A pinned reader racing three writes (the third reuses the pages the first replaced, once
/// the epoch lets it): the snapshot shows one whole version, and it never changes. A writer
/// reads its own write when the call returns.
#[test]
fn a_paged_snapshot_survives_the_reuse_of_pages() {
    run_model("a_paged_snapshot_survives_the_reuse_of_pages", || {
        let table = two_pages();
        let writer = {
            let table = table.clone();
            thread::spawn(move || {
                for _ in 0..3 {
                    let version = add_both(&table);
                    let mine = table.read();
                    assert!(mine.version() >= version, "a writer reads its own write");
                    assert!(mine.row(0).unwrap()[[0]] >= version as i64);
                }
            })
        };
        let snapshot = table.read();
        let first = snapshot.row(0).unwrap()[[0]];
        assert_eq!(snapshot.row(1).unwrap()[[0]], first, "half a write seen");
        assert_eq!(first, snapshot.version() as i64);
        writer.join().unwrap();
        assert_eq!(snapshot.row(0).unwrap()[[0]], first, "a snapshot changed");
        assert_eq!(snapshot.row(1).unwrap()[[0]], first, "a snapshot changed");
        drop(snapshot);
        assert_eq!(table.read().to_array().sum(), 6);
    });
}

/// On another thread: one write, flushes until the tick after which the head's count of
/// version 0 goes has run, then `writes - 1` more, the first of which releases that count
/// (looking at the holds) and reuses what no table counts.
fn replace_version_0(table: &PagedVariable<i64>, writes: usize) -> thread::JoinHandle<()> {
    let table = table.clone();
    thread::spawn(move || {
        add_both(&table);
        for _ in 0..3 {
            crossbeam_epoch::pin().flush(); // until the tick runs
        }
        for _ in 1..writes {
            add_both(&table);
        }
    })
}

/// A `read()` snapshot keeps its table in a hold slot, not by a pin: this thread holds
/// version 0 while another writes, lets the tick after which the head's count of version 0
/// goes run, and writes again, a write that gives that count up (a release that meets the
/// hold and parks the count on the held list: `book::release_with`) and then reuses what no
/// table counts. Meanwhile this thread turns its hold into a count (`to_owned_snapshot`)
/// and drops the hold. Neither view may see a page reused (the table's handoff marker
/// checks each look came before any reuse). Fails if the release does not look at the
/// holds, or lets the count reach zero before it looks (a count taken through the hold
/// would then come back from zero).
#[test]
fn a_held_paged_table_outlives_its_grace_period_and_passes_to_an_owned_snapshot() {
    run_model("a_held_paged_table_outlives_its_grace_period", || {
        let table = two_pages();
        let snapshot = table.read(); // version 0, held before any write
        let writer = replace_version_0(&table, 2);
        assert_eq!(snapshot.row(0).unwrap()[[0]], 0, "a held page was reused");
        let owned = snapshot.to_owned_snapshot();
        drop(snapshot);
        assert_eq!(owned.row(1).unwrap()[[0]], 0, "an owned page was reused");
        writer.join().unwrap();
        assert_eq!(owned.to_array().sum(), 0, "an owned page was reused");
        drop(owned);
        assert_eq!(table.read().to_array().sum(), 4);
    });
}

/// As above, the hold dropped while the writer releases the table's head count: a release
/// that finds the slot cleared may let the count reach zero and the next reuse rewrite the
/// table, so the clear must carry the reader's last look (its Release, `holds::is_held`'s
/// Acquire). Fails with a causality violation when that load is Relaxed.
#[test]
fn a_dropped_hold_is_seen_before_its_table_is_reused() {
    run_model("a_dropped_hold_is_seen_before_its_table_is_reused", || {
        let table = two_pages();
        let snapshot = table.read(); // version 0
        let writer = replace_version_0(&table, 3);
        assert_eq!(snapshot.row(0).unwrap()[[0]], 0, "a held page was reused");
        assert_eq!(snapshot.row(1).unwrap()[[0]], 0, "a held page was reused");
        drop(snapshot);
        writer.join().unwrap();
        assert_eq!(table.read().to_array().sum(), 6);
    });
}

/// An owned snapshot taken on another thread keeps its pages through later writes (its count
/// holds the table, and the pages it reaches, out of the book's reuse), and outlives the
/// variable.
#[test]
fn an_owned_paged_snapshot_keeps_its_pages() {
    run_model("an_owned_paged_snapshot_keeps_its_pages", || {
        let table = two_pages();
        let reader = {
            let table = table.clone();
            thread::spawn(move || table.read_owned())
        };
        add_both(&table);
        add_both(&table);
        let held = reader.join().unwrap();
        let v = held.row(0).unwrap()[[0]];
        assert_eq!(v, held.version() as i64);
        add_both(&table);
        drop(table);
        assert_eq!(held.row(0).unwrap()[[0]], v, "an owned snapshot changed");
        assert_eq!(held.row(1).unwrap()[[0]], v);
    });
}

/// An owned snapshot read and dropped on another thread while the writer goes on: the
/// writer reuses its table only after the drop (the count's Release, the book's Acquire),
/// which the table's handoff marker checks against the reader's last look.
#[test]
fn a_dropped_owned_snapshot_hands_its_pages_back() {
    run_model("a_dropped_owned_snapshot_hands_its_pages_back", || {
        let table = two_pages();
        read_and_drop_beside_three_writes(&table);
        assert_eq!(table.read().to_array().sum(), 6);
    });
}

/// Another thread takes an owned snapshot, reads both rows (one whole version) and drops
/// it, while this one writes three times.
fn read_and_drop_beside_three_writes(table: &PagedVariable<i64>) {
    let reader = {
        let table = table.clone();
        thread::spawn(move || {
            let held = table.read_owned();
            let v = held.row(0).unwrap()[[0]];
            assert_eq!(held.row(1).unwrap()[[0]], v, "half a write seen");
            assert_eq!(v, held.version() as i64);
        })
    };
    for _ in 0..3 {
        add_both(table);
    }
    reader.join().unwrap();
}

/// A table behind a held older one is reused once nobody counts it
/// (`Ledger::reclaim`): the writer holds version 0 throughout, while a
/// reader on another thread takes a newer version, reads it and drops it; the writes after
/// reuse its table and the pages the held one does not reach only after that drop (the
/// count's Release, the book's Acquire: the table's handoff marker checks the reader's last
/// look came first), and never a page of version 0.
#[test]
fn a_table_behind_a_held_one_is_reused_once_dropped() {
    run_model("a_table_behind_a_held_one_is_reused_once_dropped", || {
        let table = two_pages();
        let oldest = table.read_owned();
        add_both(&table);
        read_and_drop_beside_three_writes(&table);
        add_both(&table);
        assert_eq!(oldest.to_array().sum(), 0, "the held version changed");
        assert_eq!(table.read().to_array().sum(), 10);
    });
}

/// Two writers of different rows: both land (combined or one after the other), and each
/// reads its own write on return.
#[test]
fn concurrent_paged_writes_both_land() {
    run_model("concurrent_paged_writes_both_land", || {
        let table = two_pages();
        let other = {
            let table = table.clone();
            thread::spawn(move || {
                table.scatter_add(&[1], &Array2::ones((1, 1))).unwrap();
                assert_eq!(table.read().row(1).unwrap()[[0]], 1, "read your write");
            })
        };
        table.scatter_add(&[0], &Array2::ones((1, 1))).unwrap();
        assert_eq!(table.read().row(0).unwrap()[[0]], 1, "read your write");
        other.join().unwrap();
        assert_eq!(table.read().to_array().sum(), 2);
    });
}

/// The book's grace clock: a write that replaces a table while the tick of an earlier write
/// is still in flight must wait for the *next* tick (one deferred after the swap). Here the
/// main thread's writes defer a tick, then it reads the table the last one made while the
/// writer's first write replaces it and its second reuses what it can: the snapshot never
/// changes. (That replaced tables do come back is `tests/paged_memory.rs`'s bound: under loom
/// a tick runs writes after it was deferred, and a model of enough writes hits loom's branch
/// limit.)
#[test]
fn a_table_replaced_during_a_tick_waits_for_the_next_one() {
    run_model(
        "a_table_replaced_during_a_tick_waits_for_the_next_one",
        || {
            let table = two_pages();
            // Under loom a tick runs three writes after it was deferred: the first write's tick
            // is still in flight when the writer replaces the third's table.
            for _ in 0..3 {
                add_both(&table);
            }
            let writer = {
                let table = table.clone();
                thread::spawn(move || {
                    add_both(&table);
                    add_both(&table);
                })
            };
            let snapshot = table.read();
            let first = snapshot.row(0).unwrap()[[0]];
            assert_eq!(snapshot.row(1).unwrap()[[0]], first, "half a write seen");
            writer.join().unwrap();
            assert_eq!(snapshot.row(0).unwrap()[[0]], first, "a snapshot changed");
            assert_eq!(snapshot.row(1).unwrap()[[0]], first, "a snapshot changed");
            drop(snapshot);
            assert_eq!(table.read().to_array().sum(), 10);
        },
    );
}

/// One thread adds to a paged table, then assigns a dense variable; a store snapshot that
/// shows the dense write shows the paged one. Paged writes only read the clock too, so this
/// holds because the writer swaps the paged head and the snapshot reads it with
/// read-modify-writes (with a plain store, loom finds the cut that shows `done` without the
/// row).
#[test]
fn a_store_snapshot_respects_the_order_of_paged_and_dense_writes() {
    run_model(
        "a_store_snapshot_respects_the_order_of_paged_and_dense_writes",
        || {
            let store = std::sync::Arc::new(mvtensor::Store::new());
            // Named so that the snapshot reads the table first, the dense variable second:
            // the order in which a plain load of the table's head could miss the write.
            let table = PagedVariable::builder(Array2::zeros((2, 1)))
                .name("a")
                .rows_per_page(1)
                .build()
                .unwrap();
            store.register_paged(&table).unwrap();
            let done = store.variable("done", common::value(0)).unwrap();
            let writer = thread::spawn(move || {
                add_both(&table);
                done.assign(common::value(1)).unwrap();
            });
            let snap = store.snapshot();
            let seen = snap.get_paged::<i64>("a").unwrap();
            let row = seen.row(0).unwrap()[[0]];
            assert_eq!(seen.row(1).unwrap()[[0]], row, "half a write");
            let d = snap.get::<i64, ndarray::IxDyn>("done").unwrap()[[]];
            assert!(d <= row, "snapshot saw done={d} but the row at {row}");
            writer.join().unwrap();
        },
    );
}

/// The other order: one thread assigns a dense variable, then adds to a paged table that
/// the snapshot reads second. A snapshot that misses the dense write must miss the paged one
/// too, although the table's head may already show it: the snapshot finds, by the tables'
/// timestamps and the links the writer kept for it, the table as of its clock value (a walk
/// that took the newest table fails here).
#[test]
fn a_store_snapshot_shows_a_paged_table_as_of_its_clock_value() {
    run_model(
        "a_store_snapshot_shows_a_paged_table_as_of_its_clock_value",
        || {
            let store = std::sync::Arc::new(mvtensor::Store::new());
            let first = store.variable("first", common::value(0)).unwrap();
            let table = PagedVariable::builder(Array2::<i64>::zeros((1, 1)))
                .name("then")
                .build()
                .unwrap();
            store.register_paged(&table).unwrap();
            let writer = thread::spawn(move || {
                first.assign(common::value(1)).unwrap();
                table.scatter_add(&[0], &Array2::ones((1, 1))).unwrap();
            });
            let snap = store.snapshot();
            let f = snap.get::<i64, ndarray::IxDyn>("first").unwrap()[[]];
            let row = snap.get_paged::<i64>("then").unwrap().row(0).unwrap()[[0]];
            assert!(row <= f, "snapshot saw the row at {row} but first={f}");
            writer.join().unwrap();
        },
    );
}

/// A store snapshot racing two writes of a paged table: it shows the table that was current
/// at its clock value (row = version number), found by walking the links the writer keeps
/// while the snapshot is in progress, without starting over (a start over panics under
/// loom); a snapshot taken after the writes shows both.
#[test]
fn a_store_snapshot_racing_two_paged_writes_finds_its_table() {
    run_model(
        "a_store_snapshot_racing_two_paged_writes_finds_its_table",
        || {
            let store = std::sync::Arc::new(mvtensor::Store::new());
            let table = two_pages();
            store.register_paged(&table).unwrap();
            let name = table.name().to_owned();
            let writer = {
                let table = table.clone();
                thread::spawn(move || {
                    add_both(&table);
                    add_both(&table);
                })
            };
            let snap = store.snapshot();
            let seen = snap.get_paged::<i64>(&name).unwrap();
            assert_eq!(seen.row(0).unwrap()[[0]], seen.version() as i64);
            assert_eq!(seen.row(1).unwrap()[[0]], seen.version() as i64);
            writer.join().unwrap();
            let after = store.snapshot();
            assert_eq!(after.get_paged::<i64>(&name).unwrap().version(), 2);
            assert_eq!(
                seen.row(0).unwrap()[[0]],
                seen.version() as i64,
                "it changed"
            );
            drop(table);
        },
    );
}
