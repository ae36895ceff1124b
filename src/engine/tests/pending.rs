//! Unit tests of pending objects (`pending.rs`, `link.rs`): a reader sees the replaced object
//! until the install commits; the replaced object is retired once, when the link is released,
//! and only once no reader holds it; the counted path; a home dropped while an install is
//! pending. They run under miri too.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use super::domain::{Domain, SLOTS};
use super::retire::{Home, SPARES};

/// A value with a commit flag, counting the values alive.
struct Value {
    number: u64,
    committed: AtomicBool,
    live: Arc<AtomicUsize>,
}

impl Value {
    fn new(number: u64, committed: bool, live: &Arc<AtomicUsize>) -> Self {
        live.fetch_add(1, Ordering::Relaxed);
        Self {
            number,
            committed: AtomicBool::new(committed),
            live: Arc::clone(live),
        }
    }

    fn is_committed(&self) -> bool {
        self.committed.load(Ordering::Acquire)
    }
}

impl Drop for Value {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
    }
}

fn home() -> (Home<Value>, Arc<AtomicUsize>) {
    let live = Arc::new(AtomicUsize::new(0));
    let home = Home::new(Domain::new(), Value::new(0, true, &live)).unwrap();
    (home, live)
}

/// Installs value `number` pending on `home`.
fn install<'h>(
    home: &'h Home<Value>,
    live: &Arc<AtomicUsize>,
    number: u64,
) -> super::pending::Installed<'h, Value> {
    let mut new = home.spare(|| Value::new(u64::MAX, false, live)).unwrap();
    new.number = number;
    new.committed.store(false, Ordering::Relaxed);
    let base = home.base();
    home.install(base, new).ok().expect("no other writer")
}

/// Commits `installed` and releases its link.
fn commit(installed: super::pending::Installed<'_, Value>) {
    installed.get().committed.store(true, Ordering::Release);
    installed.committed();
}

/// Publishes value `number`, committed, with a plain write.
fn publish(home: &Home<Value>, live: &Arc<AtomicUsize>, number: u64) {
    let mut new = home.spare(|| Value::new(0, true, live)).unwrap();
    new.number = number;
    new.committed.store(true, Ordering::Relaxed);
    assert!(home.publish(home.base(), new).is_ok(), "the only writer");
}

fn visible(home: &Home<Value>) -> super::word::Read<'_, Value> {
    home.read_visible(Value::is_committed)
}

#[test]
fn readers_see_the_replaced_object_until_the_install_commits() {
    let (home, live) = home();
    let installed = install(&home, &live, 1);
    assert_eq!(visible(&home).number, 0, "pending: the replaced object");
    assert_eq!(home.read().number, 1, "the head word shows the pending one");
    installed.get().committed.store(true, Ordering::Release);
    assert_eq!(visible(&home).number, 1, "committed, before the release");
    installed.committed();
    assert_eq!(visible(&home).number, 1);
    assert_eq!(
        home.listed(),
        (1, 0),
        "nobody held the replaced object: a spare"
    );
    assert_eq!(live.load(Ordering::Relaxed), 2);
}

#[test]
fn a_held_replaced_object_is_retired_at_the_release_and_reused_after_its_reader() {
    let (home, live) = home();
    let installed = install(&home, &live, 1);
    let old = visible(&home);
    assert!(old.is_slot());
    assert_eq!(old.number, 0);
    commit(installed);
    assert_eq!(home.listed(), (0, 1), "held: it waits on the retired list");
    assert_eq!(old.number, 0, "and stays whole for its reader");
    drop(old);
    // The next install takes its spare from the recheck: the replaced object, not a new one.
    let installed = install(&home, &live, 2);
    assert_eq!(live.load(Ordering::Relaxed), 2, "reused");
    commit(installed);
    assert_eq!(visible(&home).number, 2);
}

#[test]
fn with_every_slot_taken_the_link_is_read_by_a_count() {
    let (home, live) = home();
    let installed = install(&home, &live, 1);
    let reads: Vec<_> = (0..SLOTS).map(|_| home.read()).collect();
    assert!(reads.iter().all(|r| r.is_slot()));
    let old = visible(&home);
    assert!(!old.is_slot(), "counted");
    assert_eq!(old.number, 0);
    drop(reads);
    installed.get().committed.store(true, Ordering::Release);
    home.release_prev(&home.base());
    assert_eq!(
        home.listed(),
        (0, 1),
        "the link's count moved into the object"
    );
    drop(installed);
    home.release_prev(&home.base()); // idempotent: nothing left to release
    drop(old);
    let _spare = home.spare(|| Value::new(9, true, &live)).unwrap();
    assert_eq!(home.listed(), (0, 0), "rechecked and reused");
    assert_eq!(live.load(Ordering::Relaxed), 2);
}

#[test]
fn an_install_that_loses_its_word_comes_back_unlinked() {
    let (home, live) = home();
    let mut new = home.spare(|| Value::new(1, false, &live)).unwrap();
    new.number = 1;
    let base = home.base();
    home.word().set_queued(true); // the mark changed since the base was taken
    let new = home.install(base, new).err().expect("refused");
    home.word().set_queued(false);
    let base = home.base();
    let installed = home.install(base, new).ok().expect("accepted now");
    assert_eq!(visible(&home).number, 0);
    commit(installed);
    assert_eq!(visible(&home).number, 1);
}

#[test]
fn a_committed_object_replaced_before_its_release_has_its_link_emptied_when_free() {
    let (home, live) = home();
    let installed = install(&home, &live, 1);
    installed.get().committed.store(true, Ordering::Release);
    drop(installed); // never released
    publish(&home, &live, 2);
    assert_eq!(visible(&home).number, 2);
    assert_eq!(
        home.listed(),
        (2, 0),
        "both came back: the head's and the one its link held"
    );
    assert_eq!(live.load(Ordering::Relaxed), 3);
}

#[test]
fn a_home_dropped_while_pending_leaves_a_counted_snapshot_of_the_replaced_object() {
    let (home, live) = home();
    let installed = install(&home, &live, 1);
    let old = visible(&home).into_counted();
    drop(installed);
    drop(home);
    assert_eq!(old.number, 0, "alive after its home");
    assert_eq!(live.load(Ordering::Relaxed), 1, "the pending head went");
    drop(old);
    assert_eq!(live.load(Ordering::Relaxed), 0);
}

/// Readers on other threads against a writer that alternates pending installs (each committed
/// and released) with plain writes: every read is committed, values only grow, and the objects
/// stay bounded (each reader holds one, the writer's head and spares the rest).
#[test]
fn readers_never_see_a_pending_value_under_a_stream_of_installs() {
    let writes = if cfg!(miri) { 40 } else { 20_000 };
    let readers = 2;
    let (home, live) = home();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..readers {
            s.spawn(|| {
                let mut last = 0;
                while !done.load(Ordering::Acquire) {
                    let read = visible(&home);
                    assert!(read.is_committed(), "a pending value was shown");
                    assert!(read.number >= last, "{} after {last}", read.number);
                    last = read.number;
                }
            });
        }
        for number in 1..=writes {
            if number % 2 == 1 {
                commit(install(&home, &live, number));
            } else {
                publish(&home, &live, number);
            }
        }
        done.store(true, Ordering::Release);
    });
    assert_eq!(visible(&home).number, writes);
    let alive = live.load(Ordering::Relaxed);
    // The head, the spares, one held by each reader at the last recheck, one retired since.
    assert!(alive <= 1 + SPARES + readers + 1, "{alive} objects alive");
}
