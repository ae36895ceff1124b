//! Commit records: when a write becomes visible, and at which timestamp.
//!
//! Every version points to the commit record of the write that made it. A write of one
//! variable reads the clock and installs its version already committed. A critical-section
//! execution that writes several variables first *installs* its new versions with a
//! *pending* record, then *commits* the record with a timestamp read from the global clock.
//! A version is visible exactly when its record is committed; one record shared
//! by several versions makes them visible together.
//!
//! Only store snapshots move the clock: a snapshot *ticks* it (`S = clock++`) and shows the
//! writes whose timestamp is `<= S`. A commit only *reads* it, so a write of one variable
//! writes no shared cache line but its own head and record, and timestamps are equal for the
//! commits made between two snapshots. (If every commit ticked the clock, two threads
//! writing two different variables would fight over its cache line on every write.)
//!
//! A writer preempted between installing and committing must not stall a snapshot, and the
//! snapshot must not count the write as "not yet" on one variable and "already" on another.
//! So a snapshot that meets a pending record *bumps* it: it records a lower bound `S + 1` on
//! the record's timestamp, and moves on without waiting. The committer honours the bound: it
//! reads the clock again, which the snapshot ticked past `S` before bumping. Either way the
//! record's final timestamp is `<= S` only if every snapshot at `S` saw it committed.
//!
//! The record is one `u64` word: `ts << 1 | 1` once committed, `bound << 1` while pending.

use std::collections::VecDeque;
use std::ops::Deref;
use std::sync::Arc;

use crate::sync::{clock, AtomicU64, Ordering};

const COMMITTED: u64 = 1;

/// A version's commit record: its own, for a write of one variable (no allocation), or
/// shared with the other versions a critical-section batch commits together.
#[derive(Debug)]
pub(crate) enum Record {
    Own(CommitRecord),
    Shared(Arc<CommitRecord>),
}

impl Record {
    /// A pending record of the version's own.
    pub(crate) fn pending() -> Self {
        Record::Own(CommitRecord::pending())
    }

    /// A record of the version's own, committed now: a write of one variable is installed
    /// already committed (the clock read, then the install), so readers never find it
    /// pending and nobody has to help it.
    pub(crate) fn committed_now() -> Self {
        Record::Own(CommitRecord::committed_now())
    }

    /// A record of the version's own, committed at `ts`.
    pub(crate) fn committed_at(ts: u64) -> Self {
        Record::Own(CommitRecord::committed_at(ts))
    }
}

impl Deref for Record {
    type Target = CommitRecord;
    fn deref(&self) -> &CommitRecord {
        match self {
            Record::Own(record) => record,
            Record::Shared(record) => record,
        }
    }
}

/// The shared records of one critical section's batches, reused once no version carries them
/// any more: a batch that commits several variables allocates nothing for its record in
/// steady state (an `Arc` per batch was one malloc, and one free on whichever thread released
/// the last version; on one thread the look at the oldest record costs about what they did).
///
/// A record is reused only when the section's clone is its last one (`Arc::get_mut`): every
/// version that carried it has been released, after its grace period, so no reader can reach
/// it (the release's `Release` decrement and `get_mut`'s `Acquire` order their accesses
/// before the reset). Only the holder of the section's batch flag touches the pool.
#[derive(Debug, Default)]
pub(crate) struct SharedRecords {
    /// Oldest first: the first to come back is the oldest.
    kept: VecDeque<Arc<CommitRecord>>,
}

/// Records a section keeps at most (~8 KiB). A small version waits about three limbo batches
/// (64 KiB or 32 versions each) and a grace tick before it is released, so a batch's record
/// comes back tens of batches later: the section keeps enough for every batch in flight
/// of a few small variables. Beyond this many in flight (long-held snapshots), batches
/// allocate.
const KEPT_RECORDS: usize = 256;

impl SharedRecords {
    /// A pending record for a batch's versions: the oldest kept one if nothing carries it
    /// any more, else a new one (kept, while there is room).
    pub(crate) fn pending(&mut self) -> Arc<CommitRecord> {
        if let Some(oldest) = self.kept.front_mut() {
            if let Some(record) = Arc::get_mut(oldest) {
                *record = CommitRecord::pending();
                let reused = self.kept.pop_front().expect("a front");
                self.kept.push_back(Arc::clone(&reused));
                return reused;
            }
        }
        let record = Arc::new(CommitRecord::pending());
        if self.kept.len() == KEPT_RECORDS {
            self.kept.pop_front(); // still carried: its versions free it
        }
        self.kept.push_back(Arc::clone(&record));
        record
    }
}

/// The commit state of one write. See the module docs.
#[derive(Debug)]
pub(crate) struct CommitRecord {
    word: AtomicU64,
}

impl CommitRecord {
    /// A record for a write that is about to be installed.
    pub(crate) fn pending() -> Self {
        Self {
            word: AtomicU64::new(0),
        }
    }

    /// A record committed now, at the clock's current value.
    pub(crate) fn committed_now() -> Self {
        // Acquire: as in `commit`.
        Self::committed_at(clock().load(Ordering::Acquire))
    }

    /// A record committed at `ts`.
    pub(crate) fn committed_at(ts: u64) -> Self {
        Self {
            word: AtomicU64::new(ts << 1 | COMMITTED),
        }
    }

    /// The commit timestamp, or `None` while pending.
    pub(crate) fn timestamp(&self) -> Option<u64> {
        // Acquire: seeing the record committed must also show every version it installed.
        let word = self.word.load(Ordering::Acquire);
        (word & COMMITTED != 0).then_some(word >> 1)
    }

    pub(crate) fn is_committed(&self) -> bool {
        self.timestamp().is_some()
    }

    /// Commits the record and returns its timestamp. Idempotent: a helper and the writer
    /// may both call it; the first to succeed fixes the timestamp and both return it.
    ///
    /// Only call this once every version carrying the record is installed: committing is
    /// what makes them visible, all at once.
    pub(crate) fn commit(&self) -> u64 {
        // Acquire: a snapshot's bump (Release) happens-before this load, and so does its tick,
        // so the clock read below is past that snapshot's value.
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            if word & COMMITTED != 0 {
                return word >> 1;
            }
            // Acquire: synchronises with the tick of every snapshot whose value we read past,
            // so that its registration in the horizon is visible to our `release_prev`
            // (`horizon` module docs).
            let ts = clock().load(Ordering::Acquire);
            debug_assert!(ts >= word >> 1, "a bump is never past the clock");
            // AcqRel on success: Release publishes the installs to whoever sees the record
            // committed. Acquire on failure: we may have met a bump and must re-read the clock.
            match self.word.compare_exchange_weak(
                word,
                ts << 1 | COMMITTED,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return ts,
                Err(current) => word = current,
            }
        }
    }

    /// Is this write part of the snapshot taken at clock value `at`? Never waits: a pending
    /// record is bumped past `at` and reported invisible, now and forever, to that snapshot.
    pub(crate) fn visible_at(&self, at: u64) -> bool {
        // Acquire: pairs with the commit's Release (see `timestamp`).
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            if word & COMMITTED != 0 {
                return word >> 1 <= at;
            }
            if word >> 1 > at {
                return false; // another reader already bumped it past us
            }
            // AcqRel: Release orders our tick before the committer's next clock read (see
            // `commit`); Acquire on failure to re-read a commit or a larger bump.
            match self.word.compare_exchange_weak(
                word,
                (at + 1) << 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return false,
                Err(current) => word = current,
            }
        }
    }
}

/// Ticks the clock for a store snapshot and returns its value `S`: every write committed
/// before the tick has a timestamp `<= S`, every write committed after it one `> S`.
pub(crate) fn tick() -> u64 {
    // AcqRel: Acquire synchronises with earlier ticks; Release publishes the snapshot's
    // registration in the horizon to every commit that reads the clock past `S`.
    clock().fetch_add(1, Ordering::AcqRel)
}

#[cfg(all(test, mvtensor_loom))]
#[path = "tests/loom_record.rs"]
mod loom_record;

#[cfg(all(test, not(mvtensor_loom)))]
mod tests {
    use super::*;

    #[test]
    fn commit_is_idempotent_and_monotonic() {
        let a = CommitRecord::pending();
        assert_eq!(a.timestamp(), None);
        let ts = a.commit();
        assert_eq!(a.commit(), ts);
        assert_eq!(a.timestamp(), Some(ts));
        let b = CommitRecord::pending();
        assert!(
            b.commit() >= ts,
            "commits between two snapshots share a timestamp"
        );
        let at = tick();
        assert!(at >= ts);
        assert!(
            CommitRecord::pending().commit() > at,
            "a commit after a tick is after it"
        );
    }

    #[test]
    fn a_bumped_record_commits_after_the_snapshot() {
        let r = CommitRecord::pending();
        let at = tick();
        assert!(!r.visible_at(at));
        let ts = r.commit();
        assert!(ts > at, "bumped to {}, committed at {ts}", at + 1);
        assert!(
            !r.visible_at(at),
            "stays invisible to the snapshot that bumped it"
        );
        assert!(r.visible_at(ts));
    }
}
