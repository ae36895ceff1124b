//! [`StoreSnapshot`]: every variable of a store as of one point in the commit order.

use std::any::Any;
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::Arc;

use super::{At, Registry};
use crate::error::{Error, Result};
use crate::horizon::Registration;
use crate::record;
use crate::running;
use crate::sync::epoch;
use crate::version::VersionRef;
use crate::{dim, DType, Element, OwnedSnapshot, VariableKind};
use ndarray::Dimension;

/// A consistent cut through a [`Store`](crate::Store), from
/// [`Store::snapshot`](crate::Store::snapshot).
///
/// Every variable is shown as of one clock value ([`timestamp`](Self::timestamp)): each write
/// committed at or before it, none after it. A critical-section execution commits all its
/// writes at one timestamp, so a snapshot shows all of them or none: an invariant that every
/// execution preserves (say, the sum of two balances) holds in every snapshot.
///
/// Taking one never waits for a writer, and its work is bounded by the number of variables
/// whatever writers do: while it is in progress, writers keep the version it needs from each
/// variable linked (at most one extra version per variable and snapshot in progress), so it
/// never starts over. A write still committing when the snapshot looks is not part of it (the
/// snapshot pushes that write's timestamp past its own).
///
/// The snapshot holds one reference-counted version per variable and pins nothing: keep it
/// as long as you like; only the versions it holds stay in memory.
///
/// ```
/// use mvtensor::Store;
/// use ndarray::{Array1, Ix1};
///
/// let store = Store::new();
/// let w = store.variable("w", Array1::<f32>::zeros(2))?;
/// let before = store.snapshot();
/// w.assign_add(&Array1::ones(2))?;
/// assert_eq!(before.get::<f32, Ix1>("w")?[0], 0.0);
/// assert_eq!(store.snapshot().get::<f32, Ix1>("w")?[0], 1.0);
/// # Ok::<(), mvtensor::Error>(())
/// ```
#[derive(Clone)]
pub struct StoreSnapshot {
    timestamp: u64,
    entries: BTreeMap<Arc<str>, Captured>,
    /// Private state this snapshot could not copy (taken inside ticket-holding work): a
    /// checkpoint of it is refused.
    left_out: Vec<Arc<str>>,
}

/// Runs `capture` at one point of the commit order: registers in the horizon, ticks the clock
/// to `S`, and asks `capture` for what every variable showed at `S`. `None` (a version it
/// needed was unlinked: a broken invariant) starts over at a newer clock value. Returns `S`
/// and what was captured. Never waits for a writer.
pub(crate) fn at_one_point<T>(
    mut capture: impl FnMut(u64, &epoch::Guard) -> Option<T>,
) -> (u64, T) {
    let guard = epoch::pin();
    loop {
        // Registered before the tick, so that every writer that commits past our clock
        // value keeps what we need linked (`horizon` module docs).
        let registration = Registration::begin();
        let timestamp = record::tick();
        registration.at(timestamp);
        if let Some(captured) = capture(timestamp, &guard) {
            return (timestamp, captured);
        }
    }
}

/// A version a cut needed was unlinked: writers keep what a cut needs linked, so this is a
/// broken invariant. Tests and loom models fail here; elsewhere the cut starts over.
pub(crate) fn unlinked<T>(name: &str) -> Option<T> {
    if cfg!(any(debug_assertions, mvtensor_loom)) {
        panic!("`{name}`: a version a snapshot needs was unlinked");
    }
    None
}

/// One variable's version in a snapshot, type-erased.
#[derive(Clone)]
pub(crate) struct Captured {
    /// A `VersionRef<A>` (dense) or an `OwnedPagedSnapshot<A>` (paged).
    pub(crate) version: Arc<dyn Any + Send + Sync>,
    pub(crate) kind: VariableKind,
    /// A paged variable's rows per page (for checkpoints).
    pub(crate) rows_per_page: Option<usize>,
    /// A packed set's tensors, described (for checkpoints).
    pub(crate) layout: Option<Arc<str>>,
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<usize>,
    pub(crate) number: u64,
    /// Writes the tensor's elements as little-endian bytes, in row-major order, straight
    /// from the memory that holds them: exactly `shape`'s elements times the dtype's size
    /// (a checkpoint's header says so before they are written, and the writer checks it).
    pub(crate) write: fn(&Captured, &mut dyn Write) -> io::Result<()>,
}

impl Captured {
    pub(crate) fn new<A: Element>(version: VersionRef<A>) -> Self {
        Self {
            write: |captured, out| {
                let values = captured
                    .version
                    .downcast_ref::<VersionRef<A>>()
                    .and_then(|version| version.data.as_slice())
                    .ok_or_else(|| {
                        io::Error::other("a version of another type or layout (a broken invariant)")
                    })?;
                crate::checkpoint::write_le(values, out)
            },
            kind: VariableKind::Dense,
            rows_per_page: None,
            layout: None,
            dtype: A::DTYPE,
            shape: version.data.shape().to_vec(),
            number: version.number,
            version: Arc::new(version),
        }
    }
}

impl StoreSnapshot {
    pub(crate) fn take(registry: &Registry) -> Self {
        // Private state: copied under its tickets, held until the variables are captured
        // (`store/private.rs`), unless this thread holds tickets (then it is left out).
        let privates = super::private::privates(registry.iter());
        let mut copies = Vec::with_capacity(privates.len());
        let mut tickets = Vec::with_capacity(privates.len());
        let mut left_out = Vec::new();
        if running::check_outside(String::new).is_ok() {
            for (name, state) in privates {
                tickets.push(state.queue().enter());
                // SAFETY: we hold its ticket.
                copies.push((Arc::clone(name), unsafe { state.capture() }));
            }
        } else {
            left_out = privates
                .into_iter()
                .map(|(name, _)| Arc::clone(name))
                .collect();
        }
        let (timestamp, mut entries) = at_one_point(|at, guard| {
            let mut entries = BTreeMap::new();
            for (name, entry) in registry {
                match entry.erased.version_at(at, guard) {
                    At::Version(captured) => {
                        entries.insert(Arc::clone(name), captured);
                    }
                    At::NotYetCreated => {}
                    At::Unlinked => return unlinked(name),
                }
            }
            Some(entries)
        });
        drop(tickets);
        entries.extend(copies);
        Self {
            timestamp,
            entries,
            left_out,
        }
    }

    /// Private state this snapshot left out (it was taken inside ticket-holding work).
    pub(crate) fn left_out(&self) -> &[Arc<str>] {
        &self.left_out
    }

    /// The clock value this snapshot is taken at: it shows exactly the writes whose commit
    /// timestamp is at most this (compare with
    /// [`Snapshot::timestamp`](crate::Snapshot::timestamp)). Every snapshot ticks the clock,
    /// so a later snapshot has a larger timestamp.
    pub fn timestamp(&self) -> u64 {
        self.timestamp
    }

    /// The variable named `name`, as of this snapshot.
    ///
    /// # Errors
    /// [`Error::NotFound`] if the snapshot has no such variable (unknown, or created after
    /// the snapshot); [`Error::DTypeMismatch`] if it holds another element type than `A`;
    /// [`Error::RankMismatch`] if `D` has a static rank and the value another one;
    /// [`Error::KindMismatch`] for a paged variable ([`get_paged`](Self::get_paged)).
    pub fn get<A: Element, D: Dimension>(&self, name: &str) -> Result<OwnedSnapshot<A, D>> {
        self.entry(name)?.get()
    }

    /// The entry named `name`.
    pub(crate) fn entry<'s>(&'s self, name: &'s str) -> Result<SnapshotEntry<'s>> {
        let entry = self.entries.get(name).ok_or_else(|| Error::NotFound {
            name: name.to_owned(),
        })?;
        Ok(SnapshotEntry { name, entry })
    }

    /// The number of variables in the snapshot.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the snapshot has no variables.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The captured variables, by name (for checkpoints).
    pub(crate) fn entries(&self) -> &BTreeMap<Arc<str>, Captured> {
        &self.entries
    }

    /// Every variable in the snapshot, sorted by name.
    pub fn iter(&self) -> Entries<'_> {
        Entries {
            inner: self.entries.iter(),
        }
    }
}

impl<'s> IntoIterator for &'s StoreSnapshot {
    type Item = SnapshotEntry<'s>;
    type IntoIter = Entries<'s>;
    fn into_iter(self) -> Entries<'s> {
        self.iter()
    }
}

/// The variables of a [`StoreSnapshot`], sorted by name: [`StoreSnapshot::iter`].
#[derive(Clone)]
pub struct Entries<'s> {
    inner: std::collections::btree_map::Iter<'s, Arc<str>, Captured>,
}

impl<'s> Iterator for Entries<'s> {
    type Item = SnapshotEntry<'s>;
    fn next(&mut self) -> Option<SnapshotEntry<'s>> {
        let (name, entry) = self.inner.next()?;
        Some(SnapshotEntry { name, entry })
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl ExactSizeIterator for Entries<'_> {}

impl std::fmt::Debug for Entries<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.clone()).finish()
    }
}

/// One variable of a [`StoreSnapshot`].
#[derive(Clone, Copy)]
pub struct SnapshotEntry<'s> {
    pub(crate) name: &'s str,
    pub(crate) entry: &'s Captured,
}

impl SnapshotEntry<'_> {
    /// The variable's name.
    pub fn name(&self) -> &str {
        self.name
    }
    /// Dense or private ([`get`](Self::get)), or paged ([`get_paged`](Self::get_paged)).
    pub fn kind(&self) -> VariableKind {
        self.entry.kind
    }
    /// Its element type.
    pub fn dtype(&self) -> DType {
        self.entry.dtype
    }
    /// Its shape in this snapshot.
    pub fn shape(&self) -> &[usize] {
        &self.entry.shape
    }
    /// Its version number in this snapshot (0 for private state, which has no versions).
    pub fn version(&self) -> u64 {
        self.entry.number
    }
    /// Its value, typed: `get::<f32, IxDyn>()`, or with a static rank, `get::<f32, Ix2>()`.
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] if it holds another element type than `A`;
    /// [`Error::RankMismatch`] if `D` has a static rank and the value another one;
    /// [`Error::KindMismatch`] if it is a paged variable's ([`get_paged`](Self::get_paged)).
    pub fn get<A: Element, D: Dimension>(&self) -> Result<OwnedSnapshot<A, D>> {
        if self.entry.kind != VariableKind::Private {
            self.check_kind(VariableKind::Dense)?;
        }
        if let Some(rank) = dim::rank::<D>() {
            if rank != self.entry.shape.len() {
                return Err(Error::RankMismatch {
                    variable: self.name.to_owned(),
                    expected: Some(self.entry.shape.len()),
                    found: Some(rank),
                });
            }
        }
        let version = self
            .entry
            .version
            .downcast_ref::<VersionRef<A>>()
            .ok_or_else(|| Error::DTypeMismatch {
                variable: self.name.to_owned(),
                expected: A::DTYPE,
                found: self.entry.dtype,
            })?;
        Ok(OwnedSnapshot::new(version.clone()))
    }
}

impl std::fmt::Debug for StoreSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut map = f.debug_map();
        for entry in self {
            map.entry(
                &entry.name(),
                &(entry.dtype(), entry.shape(), entry.version()),
            );
        }
        map.finish()
    }
}

impl std::fmt::Debug for SnapshotEntry<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotEntry")
            .field("name", &self.name())
            .field("kind", &self.kind())
            .field("dtype", &self.dtype())
            .field("shape", &self.shape())
            .field("version", &self.version())
            .finish()
    }
}
