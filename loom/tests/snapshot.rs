//! Model of store snapshots: a cut never shows part of an execution, even when the writer is
//! preempted between installing and committing (the snapshot bumps it instead of waiting).

#![cfg(loom)]

mod common;

use common::{run_model, value};
use loom::thread;
use mvtensor::{CriticalSection, Store};

#[test]
fn a_snapshot_never_sees_half_a_transfer() {
    run_model("a_snapshot_never_sees_half_a_transfer", || {
        let store = std::sync::Arc::new(Store::new());
        let a = store.variable("a", value(10)).unwrap();
        let b = store.variable("b", value(0)).unwrap();
        let cs = CriticalSection::builder()
            .resource(&a)
            .resource(&b)
            .build()
            .unwrap();
        let writer = thread::spawn(move || {
            cs.execute(|tx| {
                tx.assign_sub(&a, &value(4))?;
                tx.assign_add(&b, &value(4))
            })
            .unwrap();
        });
        let snap = store.snapshot();
        let (sa, sb) = (
            snap.get::<i64>("a").unwrap()[[]],
            snap.get::<i64>("b").unwrap()[[]],
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
        assert_eq!(after.get::<i64>("a").unwrap()[[]], 6);
    });
}
