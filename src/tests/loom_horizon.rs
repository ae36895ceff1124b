//! Component model of the horizon: what a writer learns from it after its commit, while
//! store snapshots register, tick the clock and leave.
//!
//! The writer's promise (`horizon` module docs): if it finds no snapshot in progress, every
//! snapshot that is still registered ticked after the writer's commit read the clock, so
//! the writer's timestamp is at or below it and unlinking older versions is safe; and every
//! snapshot that already left has finished its walk, which happens-before the writer's
//! unlinking. A snapshot's walk is a plain cell read here, the writer's reuse of what it
//! unlinked a plain write, so a leaving that does not publish the walk is a reported
//! causality violation.

use std::sync::Arc;

use loom::cell::UnsafeCell;
use loom::thread;

use super::{oldest, Oldest, Registration};
use crate::loom_model::run_model;
use crate::record::{tick, CommitRecord};

/// The clock's value in a fresh execution.
const START: u64 = 1;

/// What the short snapshot walks, and the writer reuses once it may.
struct Walked(UnsafeCell<u64>);

// SAFETY: the writer reuses only after the horizon says the walk is over; that it is over
// (ordered before the reuse) is what the model checks.
unsafe impl Sync for Walked {}

/// A store snapshot's steps, up to its walk: registers, ticks, announces its value.
fn begin() -> (Registration, u64) {
    let registration = Registration::begin();
    let at = tick();
    registration.at(at);
    (registration, at)
}

/// One writer commits (with `commit`, a plain write's clock read as well as a section's
/// commit) and reads the horizon, while one snapshot stays registered until the writer is
/// done and another walks a version and leaves.
fn a_writer_sees_the_snapshots_it_must(commit: fn() -> u64) {
    let walked = Arc::new(Walked(UnsafeCell::new(0)));
    let short = {
        let walked = Arc::clone(&walked);
        thread::spawn(move || {
            let (registration, at) = begin();
            // SAFETY: a read while registered (what the model checks).
            walked
                .0
                .with(|v| unsafe { assert_eq!(*v, 0, "reused under a snapshot") });
            drop(registration);
            at
        })
    };
    let writer = {
        let walked = Arc::clone(&walked);
        thread::spawn(move || {
            let ts = commit();
            let seen = oldest();
            // A commit that read the clock past the start saw the short snapshot's tick or
            // the long one's. Seeing nobody then means the long one ticked after our
            // clock read (checked below) and the short one has left: its walk is over, and
            // what it walked may be reused.
            if seen == Oldest::Nobody && ts > START {
                // SAFETY: what the model checks.
                walked.0.with_mut(|v| unsafe { *v += 1 });
            }
            (ts, seen)
        })
    };
    let (long, at) = begin();
    let (ts, seen) = writer.join().unwrap();
    let short_at = short.join().unwrap();
    // The long snapshot is registered throughout the writer's look.
    match seen {
        Oldest::Nobody => assert!(ts <= at, "committed at {ts}, missed the snapshot at {at}"),
        Oldest::At(oldest) => assert!(
            oldest == at || oldest == short_at,
            "oldest {oldest}, snapshots at {at} and {short_at}"
        ),
        Oldest::Unknown => {}
    }
    drop(long);
    assert_eq!(oldest(), Oldest::Nobody, "every snapshot has left");
}

#[test]
fn a_committing_writer_sees_the_snapshots_it_must() {
    run_model("horizon: a section's commit and two snapshots", || {
        a_writer_sees_the_snapshots_it_must(|| CommitRecord::pending().commit())
    });
}

#[test]
fn a_plain_writer_sees_the_snapshots_it_must() {
    run_model("horizon: a plain write's commit and two snapshots", || {
        a_writer_sees_the_snapshots_it_must(|| CommitRecord::committed_now().timestamp().unwrap())
    });
}
