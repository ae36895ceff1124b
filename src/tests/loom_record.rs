//! Component model of a commit record and the clock: one writer commits a pending record
//! while two store snapshots tick the clock and ask whether the write is theirs.
//!
//! What each call promises when it returns: `visible_at(S)` answers for good, and agrees
//! with the timestamp `commit` fixes (`ts <= S` exactly when the snapshot at `S` saw the
//! write), however the two race: a snapshot that finds the record pending bumps it instead
//! of waiting, and the committer must then read the clock past `S`. A snapshot (or a reader
//! of `timestamp`) that finds the record committed sees what the writer installed before
//! committing: a plain cell here, so a commit that does not publish it is a reported
//! causality violation.

use std::sync::Arc;

use loom::cell::UnsafeCell;
use loom::thread;

use super::{tick, CommitRecord};
use crate::loom_model::run_model;

struct Write {
    record: CommitRecord,
    /// What the writer installs before committing.
    installed: UnsafeCell<u64>,
}

// SAFETY: the install is written before the commit and read only by those who see the
// record committed; that the commit orders the two is what the model checks.
unsafe impl Sync for Write {}

impl Write {
    /// Reads what the writer installed: only once the record is seen committed.
    fn look(&self) {
        // SAFETY: written before the commit, never after (what the model checks).
        let installed = self.installed.with(|v| unsafe { *v });
        assert_eq!(installed, 1, "a committed write's install is visible");
    }
}

/// A store snapshot: ticks the clock, asks about the write, and looks if it is visible.
fn snapshot(write: &Write) -> (u64, bool) {
    let at = tick();
    let visible = write.record.visible_at(at);
    if visible {
        write.look();
    }
    (at, visible)
}

#[test]
fn two_snapshots_and_a_commit_agree_on_the_timestamp() {
    run_model("record: a commit racing two snapshots", || {
        let write = Arc::new(Write {
            record: CommitRecord::pending(),
            installed: UnsafeCell::new(0),
        });
        let writer = {
            let write = Arc::clone(&write);
            thread::spawn(move || {
                // SAFETY: nobody looks before the commit (what the model checks).
                write.installed.with_mut(|v| unsafe { *v = 1 });
                write.record.commit()
            })
        };
        let other = {
            let write = Arc::clone(&write);
            thread::spawn(move || snapshot(&write))
        };
        // A reader of the timestamp (a version's own, on the read path) that finds the
        // record committed sees the install too.
        if write.record.timestamp().is_some() {
            write.look();
        }
        let mine = snapshot(&write);
        let ts = writer.join().unwrap();
        let theirs = other.join().unwrap();
        assert_eq!(
            write.record.timestamp(),
            Some(ts),
            "commit returns the timestamp"
        );
        assert_ne!(mine.0, theirs.0, "each tick its own value");
        for (at, visible) in [mine, theirs] {
            assert_eq!(
                visible,
                ts <= at,
                "the snapshot at {at} saw visible={visible}, committed at {ts}"
            );
            assert_eq!(
                write.record.visible_at(at),
                visible,
                "an answer is for good"
            );
        }
        assert!(write.record.visible_at(ts));
    });
}
