//! Immutable views of one version: [`Snapshot`] (pinned, for short reads) and
//! [`OwnedSnapshot`] (reference-counted, for long ones).

use std::fmt;
use std::ops::Deref;
use std::ptr::NonNull;

use ndarray::ArrayD;

use crate::sync::epoch;
use crate::version::{Pinned, Version, VersionRef};
use crate::Element;

/// A short-lived, wait-free view of one version of a variable, from
/// [`Variable::read`](crate::Variable::read).
///
/// It dereferences to the tensor (`&ArrayD<A>`), and that tensor never changes, whatever
/// writers do. While it lives, the thread stays *pinned* in the epoch, which delays the
/// reclamation of every version retired meanwhile, by every thread. Keep it for a read, a
/// sum, a step; for anything longer (across an await, a sleep, a channel) use
/// [`Variable::read_owned`](crate::Variable::read_owned) or [`Snapshot::to_owned_snapshot`].
///
/// `Snapshot` is neither `Send` nor `Sync`: the pin belongs to the thread that took it.
pub struct Snapshot<A: Element> {
    version: NonNull<Version<A>>,
    // Declared after `version` only for readability: `version` is a plain pointer with no
    // drop glue, and the guard is what keeps it valid.
    _guard: epoch::Guard,
}

impl<A: Element> Snapshot<A> {
    /// Wraps a version that was reachable while `guard` was pinned.
    pub(crate) fn new(version: Pinned<'_, A>, guard: epoch::Guard) -> Self {
        Self {
            version: NonNull::new(version.as_ptr().cast_mut()).expect("versions are not null"),
            _guard: guard,
        }
    }

    fn pinned(&self) -> Pinned<'_, A> {
        // SAFETY: the pointer came from a `Pinned` (so from `Arc::into_raw`), and the version
        // was reachable from its variable while `_guard` was pinned, so it cannot be
        // reclaimed before `_guard` is dropped, which is after `self`.
        unsafe { Pinned::new(self.version.as_ptr()) }
    }

    fn get(&self) -> &Version<A> {
        self.pinned().get()
    }

    /// The version number: 0 for the value the variable was created with, plus one per commit.
    pub fn version(&self) -> u64 {
        self.get().number
    }

    /// The commit timestamp: the global clock's value when this version committed. Only
    /// store snapshots move the clock, so the commits between two store snapshots share a
    /// timestamp, and a version is in a store snapshot exactly when its timestamp is at most
    /// the snapshot's [`StoreSnapshot::timestamp`](crate::StoreSnapshot::timestamp).
    pub fn timestamp(&self) -> u64 {
        self.get().timestamp()
    }

    /// The tensor (also available through `Deref`).
    pub fn data(&self) -> &ArrayD<A> {
        &self.get().data
    }

    /// A reference-counted handle on the same version, which does not pin the epoch.
    pub fn to_owned_snapshot(&self) -> OwnedSnapshot<A> {
        OwnedSnapshot::new(self.pinned().to_ref())
    }
}

impl<A: Element> Deref for Snapshot<A> {
    type Target = ArrayD<A>;
    fn deref(&self) -> &ArrayD<A> {
        self.data()
    }
}

impl<A: Element> fmt::Debug for Snapshot<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("version", &self.version())
            .field("timestamp", &self.timestamp())
            .field("data", self.data())
            .finish()
    }
}

/// A reference-counted view of one version of a variable, from
/// [`Variable::read_owned`](crate::Variable::read_owned).
///
/// `Send + Sync + 'static`, cheap to clone, and it never pins the epoch: hold it as long as
/// you like, only its own version stays in memory (and goes back to its variable's pool when
/// the last holder lets go). Taking one costs one atomic increment on the version's count,
/// which is why [`Variable::read`](crate::Variable::read) is the faster choice for short
/// reads.
pub struct OwnedSnapshot<A: Element> {
    version: VersionRef<A>,
}

impl<A: Element> Clone for OwnedSnapshot<A> {
    fn clone(&self) -> Self {
        Self {
            version: self.version.clone(),
        }
    }
}

impl<A: Element> OwnedSnapshot<A> {
    pub(crate) fn new(version: VersionRef<A>) -> Self {
        debug_assert!(version.record.is_committed());
        Self { version }
    }

    /// The version number (see [`Snapshot::version`]).
    pub fn version(&self) -> u64 {
        self.version.number
    }

    /// The commit timestamp (see [`Snapshot::timestamp`]).
    pub fn timestamp(&self) -> u64 {
        self.version.timestamp()
    }

    /// The tensor (also available through `Deref`).
    pub fn data(&self) -> &ArrayD<A> {
        &self.version.data
    }
}

impl<A: Element> Deref for OwnedSnapshot<A> {
    type Target = ArrayD<A>;
    fn deref(&self) -> &ArrayD<A> {
        self.data()
    }
}

impl<A: Element> fmt::Debug for OwnedSnapshot<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedSnapshot")
            .field("version", &self.version())
            .field("timestamp", &self.timestamp())
            .field("data", self.data())
            .finish()
    }
}
