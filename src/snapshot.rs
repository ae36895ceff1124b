//! Immutable views of one version: [`Snapshot`] (pinned, for short reads) and
//! [`OwnedSnapshot`] (reference-counted, for long ones).

use std::fmt;
use std::ops::Deref;
use std::ptr::NonNull;

use ndarray::{ArrayD, ArrayRef, Dimension, IxDyn};

use crate::dim::Shown;
use crate::holds::{self, Hold};
use crate::version::{Pinned, Version, VersionRef};
use crate::Element;

/// A wait-free view of one version of a variable, from
/// [`Variable::read`](crate::Variable::read).
///
/// It dereferences to the tensor (ndarray's `&ArrayRef<A, D>`, on which ndarray defines its
/// methods: `sum`, `dot` for `Ix2`, `view`, indexing, iteration), and that tensor never
/// changes, whatever writers do. Its own methods are [`version`](Self::version),
/// [`timestamp`](Self::timestamp), [`data`](Self::data) and
/// [`to_owned_snapshot`](Self::to_owned_snapshot).
///
/// A snapshot keeps its own version in memory and nothing else: `read` pins the epoch only
/// to find the version, then *holds* it in one of its thread's hold slots (eight per thread;
/// a thread holding more snapshots at once counts the rest on their versions, one atomic
/// increment each). So a trainer may keep one across a whole step, and a descheduled
/// thread holding one delays no other version's reuse.
///
/// `Snapshot` is neither `Send` nor `Sync`: its hold slot belongs to the thread that read
/// it. To keep a version on another thread, use
/// [`Variable::read_owned`](crate::Variable::read_owned) or [`Snapshot::to_owned_snapshot`].
///
/// ```compile_fail
/// let v = mvtensor::Variable::scalar(1.0f32);
/// let snapshot = v.read();
/// std::thread::spawn(move || snapshot.sum()); // a hold cannot cross threads
/// ```
#[must_use = "a snapshot only keeps its version until it is dropped"]
pub struct Snapshot<A: Element, D: Dimension = IxDyn> {
    version: NonNull<Version<A>>,
    shown: Shown<A, D>,
    // What keeps `version` as it is: dropped after the fields above, which only borrow it.
    _keep: Keep<A>,
}

/// How a [`Snapshot`] keeps its version.
enum Keep<A: Element> {
    /// A hold slot of this thread (see [`holds`]).
    Hold(#[allow(dead_code)] Hold),
    /// A count, when every slot is taken.
    Count(#[allow(dead_code)] VersionRef<A>),
}

impl<A: Element, D: Dimension> Snapshot<A, D> {
    /// Keeps `version`, found reachable under a pin that is still held.
    pub(crate) fn new(version: Pinned<'_, A>) -> Self {
        let keep = match holds::hold(version.as_ptr().cast()) {
            Some(hold) => Keep::Hold(hold),
            None => Keep::Count(version.to_ref()),
        };
        Self {
            // SAFETY: the version (and so its data, which never moves) is kept as it is by
            // `keep`, which the snapshot holds.
            shown: unsafe { Shown::new(&version.get().data) },
            version: NonNull::from(version.get()),
            _keep: keep,
        }
    }

    /// Keeps `version` by the count the caller hands over (a write that built on it
    /// unpinned, and returns it: `fetch_update`).
    pub(crate) fn counted(version: VersionRef<A>) -> Self {
        Self {
            // SAFETY: as in `new`: the count, which the snapshot holds, keeps the version.
            shown: unsafe { Shown::new(&version.data) },
            version: NonNull::from(&*version),
            _keep: Keep::Count(version),
        }
    }

    fn pinned(&self) -> Pinned<'_, A> {
        // SAFETY: the pointer came from a `Pinned` (so with its allocation's provenance), and
        // `_keep` keeps the version allocated and unreused until after `self` is dropped.
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

    /// The tensor as it is stored, dynamic-dimensional (`Deref` shows it as `D`).
    pub fn data(&self) -> &ArrayD<A> {
        &self.get().data
    }

    /// A reference-counted handle on the same version, `Send` and `'static`.
    pub fn to_owned_snapshot(&self) -> OwnedSnapshot<A, D> {
        OwnedSnapshot::new(self.pinned().to_ref())
    }
}

impl<A: Element, D: Dimension> Deref for Snapshot<A, D> {
    type Target = ArrayRef<A, D>;
    fn deref(&self) -> &ArrayRef<A, D> {
        self.shown.get(&self.get().data)
    }
}

impl<A: Element, D: Dimension> fmt::Debug for Snapshot<A, D> {
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
/// `Send + Sync + 'static` and cheap to clone: hold it as long as you like, on any thread;
/// only its own version stays in memory (and goes back to its variable's pool when the last
/// holder lets go). Taking one costs one atomic increment on the version's count, a cache
/// line that every reader of the version shares, which is why
/// [`Variable::read`](crate::Variable::read) is the faster choice on one thread. It
/// dereferences to the tensor as [`Snapshot`] does.
#[must_use = "an owned snapshot keeps its version in memory until it is dropped"]
pub struct OwnedSnapshot<A: Element, D: Dimension = IxDyn> {
    // Declared before `version`, which keeps the data it borrows alive.
    shown: Shown<A, D>,
    version: VersionRef<A>,
}

impl<A: Element, D: Dimension> Clone for OwnedSnapshot<A, D> {
    fn clone(&self) -> Self {
        Self::new(self.version.clone())
    }
}

impl<A: Element, D: Dimension> OwnedSnapshot<A, D> {
    pub(crate) fn new(version: VersionRef<A>) -> Self {
        debug_assert!(version.record.is_committed());
        Self {
            // SAFETY: the version (and so its data, which never moves) lives as long as the
            // count held in `version`, which the snapshot holds.
            shown: unsafe { Shown::new(&version.data) },
            version,
        }
    }

    /// The version number (see [`Snapshot::version`]).
    pub fn version(&self) -> u64 {
        self.version.number
    }

    /// The commit timestamp (see [`Snapshot::timestamp`]).
    pub fn timestamp(&self) -> u64 {
        self.version.timestamp()
    }

    /// The tensor as it is stored, dynamic-dimensional (`Deref` shows it as `D`).
    pub fn data(&self) -> &ArrayD<A> {
        &self.version.data
    }
}

impl<A: Element, D: Dimension> Deref for OwnedSnapshot<A, D> {
    type Target = ArrayRef<A, D>;
    fn deref(&self) -> &ArrayRef<A, D> {
        self.shown.get(&self.version.data)
    }
}

impl<A: Element, D: Dimension> fmt::Debug for OwnedSnapshot<A, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedSnapshot")
            .field("version", &self.version())
            .field("timestamp", &self.timestamp())
            .field("data", self.data())
            .finish()
    }
}
