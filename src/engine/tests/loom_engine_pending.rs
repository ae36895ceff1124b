//! Component models of pending objects (`pending.rs`, `link.rs`): a reader against an install,
//! its commit, the release of its link and the reuse of what it replaced (f), and the same with
//! the reader's slots taken, so that it reads the link by a count (g). The value is a loom cell,
//! so a reuse while the reader reads fails the model. Both run at preemption bound 3 at least:
//! a release that lands between the reader's look at the link and its count on it takes three.

use std::sync::Arc;

use loom::thread;

use super::domain::Domain;
use super::loom_harness::Payload;
use super::retire::Home;
use crate::loom_model::run_model_at_least;
use crate::sync::{AtomicBool, Ordering};

/// A value (a loom cell: `loom_harness.rs`) and its commit flag.
struct Versioned {
    value: Payload,
    committed: AtomicBool,
}

impl Versioned {
    fn new(value: u64, committed: bool) -> Self {
        Self {
            value: Payload::new(value),
            committed: AtomicBool::new(committed),
        }
    }

    fn get(&self) -> u64 {
        self.value.get()
    }

    fn set(&mut self, value: u64, committed: bool) {
        self.value.set(value);
        // Relaxed: the object is ours until it is published.
        self.committed.store(committed, Ordering::Relaxed);
    }

    fn is_committed(&self) -> bool {
        // Acquire: pairs with the commit's Release.
        self.committed.load(Ordering::Acquire)
    }
}

fn home_in(domain: Arc<Domain>) -> Arc<Home<Versioned>> {
    Arc::new(Home::new(domain, Versioned::new(0, true)).expect("addressable"))
}

/// The writer's side: installs 1 pending, commits it, releases its link, then publishes 2 in
/// a spare (the replaced object, if no reader holds it).
fn write(home: &Home<Versioned>) {
    let mut new = home
        .spare(|| Versioned::new(u64::MAX, false))
        .expect("addressable");
    new.set(1, false);
    let installed = home
        .install(home.base(), new)
        .ok()
        .expect("the only writer");
    // Release: the commit happens-before a reader that sees it.
    installed.get().committed.store(true, Ordering::Release);
    installed.committed();
    let mut new = home
        .spare(|| Versioned::new(u64::MAX, false))
        .expect("addressable");
    new.set(2, true);
    assert!(home.publish(home.base(), new).is_ok());
}

/// What a reader is promised: a committed value, whole, that does not change while it reads.
fn check(read: &Versioned) {
    let seen = read.get();
    assert!(seen <= 2, "a published value, not a spare's {seen}");
    assert!(read.is_committed(), "a pending value was shown");
    assert_eq!(read.get(), seen, "the snapshot changed");
}

/// (f) The reader finds the head pending and reads the replaced object through a slot on the
/// link, or finds the link emptied and the head committed.
#[test]
fn loom_engine_f_a_reader_sees_past_a_pending_install() {
    run_model_at_least("engine: a reader against a pending install", 3, || {
        let home = home_in(Domain::new());
        let reader = {
            let home = home.clone();
            thread::spawn(move || check(&home.read_visible(Versioned::is_committed)))
        };
        write(&home);
        reader.join().unwrap();
        assert_eq!(home.read().get(), 2);
    });
}

/// (g) As (f), with the reader's slots taken by reads of another home: it reads the head word
/// and the link by counts, which the release moves into the replaced object.
#[test]
fn loom_engine_g_a_counted_reader_sees_past_a_pending_install() {
    run_model_at_least(
        "engine: a counted reader against a pending install",
        3,
        || {
            let domain = Domain::new();
            let home = home_in(Arc::clone(&domain));
            let reader = {
                let home = home.clone();
                thread::spawn(move || {
                    let other = home_in(domain);
                    let held: Vec<_> = (0..super::domain::SLOTS).map(|_| other.read()).collect();
                    check(&home.read_visible(Versioned::is_committed));
                    drop(held);
                })
            };
            write(&home);
            reader.join().unwrap();
            assert_eq!(home.read().get(), 2);
        },
    );
}
