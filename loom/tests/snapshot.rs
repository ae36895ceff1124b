//! Models of store snapshots: a cut never shows part of an execution, even when the writer is
//! preempted between installing and committing (the snapshot bumps it instead of waiting);
//! it respects the order of plain writes, although commits only read the clock; and it finds
//! its version without starting over however often the variable commits meanwhile (a start
//! over panics under loom).

#![cfg(mvtensor_loom)]

mod common;

use common::{run_model, spawn_transfer, value};
use loom::thread;
use mvtensor::Store;
use ndarray::IxDyn;

#[test]
fn a_snapshot_never_sees_half_a_transfer() {
    run_model("a_snapshot_never_sees_half_a_transfer", || {
        let store = std::sync::Arc::new(Store::new());
        let a = store.variable("a", value(10)).unwrap();
        let b = store.variable("b", value(0)).unwrap();
        let writer = spawn_transfer(&a, &b, 4);
        let snap = store.snapshot();
        let (sa, sb) = (
            snap.get::<i64, IxDyn>("a").unwrap()[[]],
            snap.get::<i64, IxDyn>("b").unwrap()[[]],
        );
        assert_eq!(
            sa + sb,
            10,
            "snapshot at {} saw a={sa} b={sb}",
            snap.timestamp()
        );
        assert!(sa == 10 || sa == 6);
        writer.join().unwrap();
        let after = store.snapshot();
        assert_eq!(after.get::<i64, IxDyn>("a").unwrap()[[]], 6);
    });
}

/// One thread writes `x` then `y`; a snapshot that shows the new `y` shows the new `x`. Commits
/// only read the clock, so this holds because the snapshot reads each head with a
/// read-modify-write (`Head::newest_for_snapshot`); with a plain load loom finds the cut that
/// shows `y` without `x`.
#[test]
fn a_snapshot_respects_the_order_of_plain_writes() {
    run_model("a_snapshot_respects_the_order_of_plain_writes", || {
        let store = std::sync::Arc::new(Store::new());
        let x = store.variable("x", value(0)).unwrap();
        let y = store.variable("y", value(0)).unwrap();
        let writer = thread::spawn(move || {
            x.assign(value(1)).unwrap();
            y.assign(value(1)).unwrap();
        });
        let snap = store.snapshot();
        let (sx, sy) = (
            snap.get::<i64, IxDyn>("x").unwrap()[[]],
            snap.get::<i64, IxDyn>("y").unwrap()[[]],
        );
        assert!(sy <= sx, "snapshot saw y={sy} but x={sx}");
        writer.join().unwrap();
    });
}

/// A snapshot racing two commits of the variable it reads: it shows the version that was
/// current at its clock value (value = version number), never restarts, and a snapshot taken
/// after the writes shows them all.
#[test]
fn a_snapshot_racing_two_commits_finds_its_version() {
    run_model("a_snapshot_racing_two_commits_finds_its_version", || {
        let store = std::sync::Arc::new(Store::new());
        let v = store.variable("v", value(0)).unwrap();
        let writer = {
            let v = v.clone();
            thread::spawn(move || {
                v.assign(value(1)).unwrap();
                v.assign(value(2)).unwrap();
            })
        };
        let snap = store.snapshot();
        let seen = snap.get::<i64, IxDyn>("v").unwrap();
        assert_eq!(seen[[]], seen.version() as i64);
        writer.join().unwrap();
        assert_eq!(store.snapshot().get::<i64, IxDyn>("v").unwrap()[[]], 2);
        assert!(snap.timestamp() < store.snapshot().timestamp());
    });
}

/// `read_all` takes the same cut over just the variables it is given (no store): it never
/// shows half an execution either, and what it returns is the caller's to keep.
#[test]
fn read_all_never_sees_half_a_transfer() {
    run_model("read_all_never_sees_half_a_transfer", || {
        let a = mvtensor::Variable::new(value(10));
        let b = mvtensor::Variable::new(value(0));
        let writer = spawn_transfer(&a, &b, 4);
        let (sa, sb) = mvtensor::read_all((&a, &b));
        assert_eq!(
            sa[[]] + sb[[]],
            10,
            "read_all saw a={} b={}",
            sa[[]],
            sb[[]]
        );
        writer.join().unwrap();
        assert_eq!(sa[[]], if sa.version() == 0 { 10 } else { 6 });
        let [fa, fb] = mvtensor::read_all([&a, &b]);
        assert_eq!((fa[[]], fb[[]]), (6, 4));
    });
}

/// A section that changes private state and a variable together, one execution, against a
/// store snapshot: the snapshot copies the private state under its ticket and ticks the
/// clock before it lets the ticket go, so it shows the execution on both or on neither.
#[test]
fn a_snapshot_copies_private_state_as_a_cut() {
    run_model("a_snapshot_copies_private_state_as_a_cut", || {
        let store = std::sync::Arc::new(Store::new());
        let total = store.variable("total", value(0)).unwrap();
        let count = store.private("count", value(0)).unwrap();
        let section = mvtensor::CriticalSection::builder()
            .resource(&total)
            .private(&count)
            .build()
            .unwrap();
        let writer = thread::spawn(move || {
            section
                .execute(|tx| {
                    tx.private_mut(&count)?[[]] += 1;
                    tx.write(&total)?[[]] += 1;
                    Ok::<_, mvtensor::Error>(())
                })
                .unwrap();
        });
        let snap = store.snapshot();
        let (t, c) = (
            snap.get::<i64, IxDyn>("total").unwrap()[[]],
            snap.get::<i64, IxDyn>("count").unwrap()[[]],
        );
        assert_eq!(
            t,
            c,
            "snapshot at {} saw total={t} count={c}",
            snap.timestamp()
        );
        writer.join().unwrap();
    });
}
