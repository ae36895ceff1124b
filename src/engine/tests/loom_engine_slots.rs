//! Component models of the engine's slots: a reader's slot against a writer's unlink, scan and
//! reuse (a), and a held object rechecked after its reader drops it (c). Every read of a value
//! and every write of a spare goes through a loom cell (`loom_harness.rs`), so a reuse while a
//! reader reads fails the model.

use loom::thread;

use super::domain::Domain;
use super::loom_harness::{home, home_in, increment};
use crate::loom_model::{run_model, run_model_at_least};

/// (a) What a slot promises: the object it protects is not reused while the slot lives, and
/// what the reader sees through it is a whole published value that does not change.
#[test]
fn loom_engine_a_slot_keeps_its_object_from_reuse() {
    run_model_at_least("engine: a slot against unlink, scan and reuse", 3, || {
        let home = home();
        let reader = {
            let home = home.clone();
            thread::spawn(move || {
                // Twice through the same slot: a scan that reads the second protection must
                // still see the first one's reads.
                let mut last = 0;
                for _ in 0..2 {
                    let read = home.read();
                    let seen = read.get();
                    assert!(seen <= 2, "a published value, not a spare's {seen}");
                    assert!(seen >= last, "values only grow");
                    assert_eq!(read.get(), seen, "the snapshot changed");
                    last = seen;
                }
            })
        };
        let mut made = 0;
        assert_eq!(increment(&home, &mut made), 1);
        // Reuses the first object if the reader's slot let it go.
        assert_eq!(increment(&home, &mut made), 2);
        reader.join().unwrap();
        assert_eq!(home.read().get(), 2);
    });
}

/// (c) An object held at its unlink waits on the retired list; once its reader drops it, the
/// next write's look finds it free and reuses it (after the reader's reads), so that no write
/// after the reader is gone allocates.
#[test]
fn loom_engine_a_held_object_is_rechecked_after_its_reader_drops() {
    run_model(
        "engine: a held object rechecked after its reader drops",
        || {
            // In the standalone variables' domain: one per execution under loom.
            let home = home_in(Domain::standalone());
            let reader = {
                let home = home.clone();
                thread::spawn(move || {
                    let read = home.read();
                    assert!(read.get() <= 2);
                })
            };
            let mut made = 0;
            increment(&home, &mut made);
            increment(&home, &mut made);
            reader.join().unwrap();
            // The reader's slot was one of the home's domain (the only thread that read).
            assert_eq!(home.domain().nodes().count(), 1);
            let before = made;
            assert_eq!(increment(&home, &mut made), 3);
            assert_eq!(made, before, "the write after the reader reused an object");
            assert!(made <= 2, "{made} objects allocated for three writes");
        },
    );
}
