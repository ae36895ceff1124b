//! Models of the single-variable protocol: publish (install + commit), wait-free read,
//! help-to-commit, and retirement through the epoch.

#![cfg(mvtensor_loom)]

mod common;

use common::{run_model, scalar, value, writes_get_their_versions_back};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::{mpsc, Arc};
use loom::thread;
use mvtensor::CriticalSection;
use ndarray::ArrayRef;

/// A reader racing two commits sees versions in order, each with the value written at that
/// version (never a pending or torn one), and its snapshot never changes.
#[test]
fn reads_see_committed_versions_in_order() {
    run_model("reads_see_committed_versions_in_order", || {
        let v = scalar(0);
        let writer = {
            let v = v.clone();
            thread::spawn(move || {
                assert_eq!(v.assign(value(1)).unwrap(), 1);
                assert_eq!(v.assign(value(2)).unwrap(), 2);
            })
        };
        let first = v.read();
        let second = v.read();
        assert_eq!(
            first[[]],
            first.version() as i64,
            "value matches its version"
        );
        assert_eq!(second[[]], second.version() as i64);
        assert!(
            first.version() <= second.version(),
            "reads never go back in time"
        );
        let frozen = first[[]];
        writer.join().unwrap();
        assert_eq!(first[[]], frozen, "a snapshot never changes");
        assert_eq!(v.read()[[]], 2);
    });
}

/// Two writers of a counter: each increment lands once (the loser retries on the winner's
/// version, helping it commit first if the winner was preempted mid-commit).
#[test]
fn concurrent_fetch_updates_each_see_a_distinct_value() {
    run_model("concurrent_fetch_updates_each_see_a_distinct_value", || {
        let v = scalar(0);
        let other = {
            let v = v.clone();
            thread::spawn(move || v.fetch_update(|x| x + 1).unwrap()[[]])
        };
        let mine = v.fetch_update(|x| x + 1).unwrap()[[]];
        let theirs = other.join().unwrap();
        let mut seen = [mine, theirs];
        seen.sort_unstable();
        assert_eq!(seen, [0, 1], "each old value handed out exactly once");
        assert_eq!(v.read()[[]], 2);
        assert_eq!(v.version(), 2);
    });
}

/// A reader that finds the newest version still pending falls back to the previous one,
/// which must still be alive; a writer that meets a pending head helps commit it. Owned
/// snapshots taken on another thread keep their version after it is retired. (Use after
/// free itself is miri's to catch: `.ci/run` runs the unit tests under miri.)
#[test]
fn retired_versions_stay_alive_for_their_readers() {
    run_model("retired_versions_stay_alive_for_their_readers", || {
        let v = scalar(0);
        let reader = {
            let v = v.clone();
            thread::spawn(move || {
                let owned = v.read_owned();
                let pinned = v.read();
                (owned[[]], owned.version(), pinned[[]], owned)
            })
        };
        v.update(|x| x + 10).unwrap();
        v.update(|x| x + 10).unwrap();
        let (owned_value, owned_version, pinned_value, owned) = reader.join().unwrap();
        assert_eq!(owned_value, 10 * owned_version as i64);
        assert!(pinned_value >= owned_value);
        assert_eq!(
            owned[[]],
            owned_value,
            "owned snapshot outlives its retirement"
        );
        drop(owned);
        assert_eq!(v.read()[[]], 20);
        // How soon retired versions are freed is a liveness property that loom cannot bound
        // (it explores arbitrarily many failed epoch advances); tests/memory.rs measures it.
    });
}

/// The pool: a version comes back for reuse only once no reader can see it. A reader holds
/// a pinned snapshot while the writer adds twice (writing in place into pooled versions) and
/// pushes the epoch forward after each write: the snapshot never changes, however those
/// flushes fall. (Whether the versions come back *soon* is a liveness property loom cannot
/// bound: it also explores the schedule where the exiting reader's own epoch teardown, which
/// pins, never runs while the writer flushes. `a_lone_writer_reuses_two_versions` checks
/// reuse where no other thread exists.)
#[test]
fn a_version_is_reused_only_after_its_readers_are_done() {
    run_model(
        "a_version_is_reused_only_after_its_readers_are_done",
        || {
            let v = scalar(0);
            let reader = {
                let v = v.clone();
                thread::spawn(move || {
                    let snap = v.read();
                    let seen = snap[[]];
                    assert_eq!(seen, snap.version() as i64, "value matches its version");
                    thread::yield_now(); // the writer runs while we are pinned
                    assert_eq!(snap[[]], seen, "a pinned snapshot's version was reused");
                })
            };
            for _ in 0..2 {
                v.assign_add(&value(1)).unwrap();
                crossbeam_epoch::pin().flush();
            }
            reader.join().unwrap();
            assert_eq!(v.read()[[]], 2);
        },
    );
}

/// A plain write keeps the version it builds on by a count, unpinned while it computes
/// (large variables do; under loom every `update`, `assign` and `fetch_add` does:
/// `src/variable/counted.rs`): meanwhile another writer commits, pushes the epoch through
/// two grace steps and writes again, taking what its pool holds, and the version under
/// computation must not be there to be written over. If the head moved, the update runs again on the newer version: each
/// update lands exactly once.
#[test]
fn a_counted_write_builds_on_a_version_nobody_reuses() {
    run_model("a_counted_write_builds_on_a_version_nobody_reuses", || {
        let v = scalar(0);
        let counted = {
            let v = v.clone();
            thread::spawn(move || {
                v.update(|x| {
                    let seen = x[[]];
                    thread::yield_now(); // the other writer runs while we are unpinned
                    assert_eq!(x[[]], seen, "a counted write's version was reused");
                    x + 1
                })
                .unwrap()
            })
        };
        v.update(|x| x + 10).unwrap();
        two_grace_steps(); // the version it replaced is free to come back, unless counted
        v.update(|x| x + 10).unwrap(); // from the pool, if anything is there
        counted.join().unwrap();
        assert_eq!(v.read()[[]], 21, "each update applied exactly once");
        assert_eq!(v.version(), 3);
    });
}

/// With no other thread, every write after the first reuses the version the one before it
/// replaced: the pool, the limbo batch and its release run end to end on loom's atomics.
#[test]
fn a_lone_writer_reuses_two_versions() {
    run_model("a_lone_writer_reuses_two_versions", || {
        let v = scalar(0);
        for i in 1..=3 {
            v.assign_add(&value(1)).unwrap();
            two_grace_steps(); // two epoch advances release the batch
            assert_eq!(v.read()[[]], i);
            assert_eq!(v.stats().live_versions, 2, "after write {i}");
        }
    });
}

/// An `update` (with `fetch`, a `fetch_update`) closure runs unpinned, whatever the
/// variable's size (`src/variable/counted.rs`): while one waits inside its closure, another
/// thread writing another variable gets every version back after two grace steps. A
/// `fetch_update` returns the value its closure replaced, kept by the write's count of it:
/// it stays as it is while two more writes of the variable go through the pool. When the
/// closure was pinned (a small variable's, `fetch_update`'s always), the epoch could not
/// pass it, and the other writer's versions piled up. With `queued`, a critical section
/// holds the variable: the write runs its closure holding the variable's ticket, unpinned
/// too (it was pinned once it had the ticket).
fn nothing_held_back_beside_an_update(fetch: bool, queued: bool) {
    let v = scalar(0);
    let w = scalar(0);
    let _section = queued.then(|| CriticalSection::builder().resource(&v).build().unwrap());
    let (inside, wait_inside) = mpsc::channel();
    let (done, wait_done) = mpsc::channel::<()>();
    let updating = {
        let v = v.clone();
        thread::spawn(move || {
            let f = |x: &ArrayRef<i64, _>| {
                inside.send(()).unwrap();
                wait_done.recv().unwrap(); // until the writer is done
                x + 1
            };
            if fetch {
                let old = v.fetch_update(f).unwrap();
                for _ in 0..2 {
                    v.assign_add(&value(1)).unwrap();
                    crossbeam_epoch::pin().flush();
                }
                assert_eq!((old[[]], old.version()), (0, 0), "the value replaced");
            } else {
                assert_eq!(v.update(f).unwrap(), 1);
            }
        })
    };
    wait_inside.recv().unwrap();
    writes_get_their_versions_back(&w, "an update closure");
    done.send(()).unwrap();
    updating.join().unwrap();
    assert_eq!(v.read()[[]], if fetch { 3 } else { 1 });
}

#[test]
fn an_update_closure_holds_back_no_other_version() {
    run_model("an_update_closure_holds_back_no_other_version", || {
        nothing_held_back_beside_an_update(false, false)
    });
}

#[test]
fn an_update_closure_of_a_sections_variable_holds_back_no_other_version() {
    run_model(
        "an_update_closure_of_a_sections_variable_holds_back_no_other_version",
        || nothing_held_back_beside_an_update(false, true),
    );
}

#[test]
fn a_fetch_update_closure_holds_back_no_other_version_and_keeps_the_value_it_replaced() {
    run_model(
        "a_fetch_update_closure_holds_back_no_other_version_and_keeps_the_value_it_replaced",
        || nothing_held_back_beside_an_update(true, false),
    );
}

/// Holds (`holds.rs`): a snapshot keeps its version after its pin has ended. The writer
/// retires the version, pushes the epoch through a grace period and writes again, so its
/// last count goes (at the next retirement) while the reader may still hold it; the reader then turns its snapshot
/// into an owned one (a count taken through the hold) and drops the hold. Neither view may
/// ever see the version reused, and the owned one outlives more writes.
#[test]
fn a_held_version_outlives_its_grace_period_and_passes_to_an_owned_snapshot() {
    run_model("a_held_version_outlives_its_grace_period", || {
        let v = scalar(0);
        let reader = {
            let v = v.clone();
            thread::spawn(move || {
                let snap = v.read();
                let seen = snap[[]];
                thread::yield_now(); // the writer retires our version meanwhile
                assert_eq!(snap[[]], seen, "a held version was reused");
                let owned = snap.to_owned_snapshot();
                drop(snap);
                assert_eq!(owned[[]], seen, "an owned snapshot's version was reused");
                (seen, owned)
            })
        };
        // The second write's retirement releases the first's expired batch: its last count
        // meets the hold, which must keep it from the pool the third write takes from.
        v.assign_add(&value(1)).unwrap();
        two_grace_steps();
        v.assign_add(&value(1)).unwrap();
        v.assign_add(&value(1)).unwrap();
        let (seen, owned) = reader.join().unwrap();
        v.assign_add(&value(1)).unwrap();
        two_grace_steps();
        assert_eq!(owned[[]], seen, "an owned snapshot's version was reused");
        assert_eq!(v.read()[[]], 4);
    });
}

/// The grace clock (`grace.rs`): a writer's tick may run on any thread that collects, here
/// the reader's own flushes, after its hold. The writer then releases the version it
/// retired, looking at the holds first: the tick's Release and the writer's Acquire of the
/// clock are what make the reader's hold visible to that look, so the version the reader
/// holds must never come back to the pool the next write takes from. The two threads take
/// turns through `Relaxed` flags, which order nothing: only the clock can.
#[test]
fn a_tick_run_by_the_reader_shows_its_hold_to_the_writer() {
    run_model(
        "a_tick_run_by_the_reader_shows_its_hold_to_the_writer",
        || {
            let v = scalar(0);
            let turn = Arc::new(AtomicUsize::new(0));
            let reader = {
                let (v, turn) = (v.clone(), Arc::clone(&turn));
                thread::spawn(move || {
                    let snap = v.read();
                    let seen = snap[[]];
                    take_turn(&turn, 0); // the writer retires our version, and flushes
                    two_grace_steps(); // which may run the writer's tick here
                    take_turn(&turn, 2); // the writer writes twice more
                    wait_turn(&turn, 4);
                    assert_eq!(snap[[]], seen, "a held version was reused");
                })
            };
            wait_turn(&turn, 1);
            v.assign_add(&value(1)).unwrap(); // retires the first version: tick 1 deferred
            crossbeam_epoch::pin().flush(); // tick 1 on the global queue, for any thread to run
            take_turn(&turn, 1);
            wait_turn(&turn, 3);
            v.assign_add(&value(1)).unwrap(); // releases the first version if tick 1 ran
            v.assign_add(&value(1)).unwrap(); // and writes into it, if it came back
            take_turn(&turn, 3);
            reader.join().unwrap();
            assert_eq!(v.read()[[]], 3);
        },
    );
}

/// Waits until `turn` reaches `n`. Relaxed: the turns order nothing (see the model above).
fn wait_turn(turn: &AtomicUsize, n: usize) {
    while turn.load(Ordering::Relaxed) != n {
        thread::yield_now();
    }
}

/// Hands the turn on from `n`.
fn take_turn(turn: &AtomicUsize, n: usize) {
    wait_turn(turn, n);
    turn.store(n + 1, Ordering::Relaxed);
}

/// Pushes crossbeam's epoch forward twice (when nobody pinned holds it back): enough for a
/// batch sealed before to expire. (Under loom, limbo seals without flushing.)
fn two_grace_steps() {
    for _ in 0..2 {
        crossbeam_epoch::pin().flush();
    }
}
