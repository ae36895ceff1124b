//! [`Store`]: a registry of named variables of mixed element types, and its consistent
//! snapshots.
//!
//! The registry is a persistent sorted map (a red-black tree from `rpds` whose nodes are
//! shared between versions) behind an RCU cell. A lookup, a listing or a store snapshot loads
//! the current map and reads it without a lock, never waiting for a registration. A
//! registration builds the next map from the current one by copying the one path from the
//! root to the new name (logarithmic in the number of variables, the rest shared) and swaps
//! it in with a compare-and-swap, so registering N variables, or loading a checkpoint of N
//! tensors, costs O(N log N) in all. A copied `BTreeMap` per registration cost O(N) each and
//! O(N^2) in all; batching only the checkpoint's inserts would have left a loop of
//! `store.variable` calls quadratic. `rpds` over a B-tree crate such as `imbl`: its tree is
//! safe code over `archery`'s counted pointers, which run under miri as this crate's tests
//! do; lookups walk a binary tree instead of a B-tree's nodes, which matters little for a
//! lookup by name, done once per handle.

mod paged;
mod private;
pub(crate) mod snapshot;

pub use snapshot::{Entries, SnapshotEntry, StoreSnapshot};

use std::any::Any;
use std::sync::Arc;

use ndarray::{Array, Dimension};

use crate::error::{Error, Result};
use crate::head;
use crate::sync::{epoch, RcuCell};
use crate::variable::Inner;
use crate::{DType, Element, Variable, VariableKind};

/// A registry of named variables of mixed element types.
///
/// Looking a variable up never blocks (the registry is an RCU cell over a persistent map);
/// registering one costs time logarithmic in the number of variables (the new map shares
/// all of the old one but the path to the new name), so a store of N variables is built in
/// O(N log N).
/// Variables are shared handles: the `Variable` returned by [`get`](Self::get) is the same
/// variable every other thread writes.
///
/// ```
/// use mvtensor::{Error, Store, Variable};
/// use ndarray::{arr0, Array2, Ix1, Ix2, IxDyn};
///
/// let store = Store::new();
/// let w = store.variable("w", Array2::<f32>::zeros((2, 2)))?; // a Variable<f32, Ix2>
/// store.variable("step", arr0(0i64))?;
/// w.assign_add(&Array2::ones((2, 2)))?;
///
/// let again = store.get::<f32, Ix2>("w")?;       // typed: rank checked
/// let any: Variable<f32> = store.get("w")?;      // or IxDyn: any rank
/// assert_eq!((again.version(), any.version()), (1, 1));
/// assert!(matches!(store.get::<f64, IxDyn>("w"), Err(Error::DTypeMismatch { .. })));
/// assert!(matches!(store.get::<f32, Ix1>("w"), Err(Error::RankMismatch { .. })));
/// assert!(matches!(store.variable("w", arr0(1.0f32)), Err(Error::NameTaken { .. })));
/// let names: Vec<_> = store.list().into_iter().map(|info| info.name).collect();
/// assert_eq!(names, ["step", "w"]);
/// # Ok::<(), mvtensor::Error>(())
/// ```
#[derive(Default)]
pub struct Store {
    registry: RcuCell<Registry>,
}

/// The registry: sorted by name, its nodes shared between successive versions and counted by
/// std's `Arc`.
pub(crate) type Registry = rpds::RedBlackTreeMap<Arc<str>, Entry, archery::ArcK>;

/// One registered variable, type-erased.
#[derive(Clone)]
pub(crate) struct Entry {
    /// The `Arc<Inner<A>>`, for typed lookups.
    any: Arc<dyn Any + Send + Sync>,
    /// The same `Arc`, for what does not need the element type.
    pub(crate) erased: Arc<dyn ErasedVariable>,
}

/// What the store can do with a variable without knowing its element type.
pub(crate) trait ErasedVariable: Send + Sync {
    fn kind(&self) -> VariableKind;
    fn dtype(&self) -> DType;
    fn info(&self) -> VariableInfo;
    /// The version a snapshot at clock value `at` sees (see [`Head::visible_at`](crate::head::Head::visible_at)).
    fn version_at(&self, at: u64, guard: &epoch::Guard) -> At;
    /// A section's private state, which a snapshot copies under its ticket instead.
    fn private(&self) -> Option<&dyn private::ErasedPrivate> {
        None
    }
}

/// A variable as of a snapshot's clock value.
pub(crate) enum At {
    /// This version, type-erased (a `VersionRef<A>`).
    Version(snapshot::Captured),
    /// The variable was created after the snapshot's clock value.
    NotYetCreated,
    /// The version it needs was unlinked (never, unless an invariant broke): retry.
    Unlinked,
}

impl<A: Element> ErasedVariable for Inner<A> {
    fn kind(&self) -> VariableKind {
        VariableKind::Dense
    }
    fn dtype(&self) -> DType {
        A::DTYPE
    }
    fn version_at(&self, at: u64, guard: &epoch::Guard) -> At {
        match self.head.visible_at(at, guard) {
            head::At::Version(version) => At::Version(snapshot::Captured {
                layout: self.layout.clone(),
                ..snapshot::Captured::new(version.to_ref())
            }),
            head::At::NotYetCreated => At::NotYetCreated,
            head::At::Unlinked => At::Unlinked,
        }
    }

    fn info(&self) -> VariableInfo {
        let guard = epoch::pin();
        let version = self.head.visible(&guard);
        VariableInfo {
            name: self.name.to_string(),
            dtype: A::DTYPE,
            shape: version.data.shape().to_vec(),
            version: version.number,
            kind: VariableKind::Dense,
        }
    }
}

/// A line of [`Store::list`]: what a variable is, as of the moment it was listed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VariableInfo {
    /// The name it is registered under.
    pub name: String,
    /// Its element type.
    pub dtype: DType,
    /// Its current shape.
    pub shape: Vec<usize>,
    /// Its current version number.
    pub version: u64,
    /// Dense ([`Store::get`]) or paged ([`Store::get_paged`]).
    pub kind: VariableKind,
}

impl Default for RcuCell<Registry> {
    fn default() -> Self {
        RcuCell::new(Registry::new_with_ptr_kind())
    }
}

impl Store {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Creates a fixed-shape variable named `name` holding `init` (version 0) and registers it.
    ///
    /// # Errors
    /// [`Error::NameTaken`] if the store already has a variable of that name.
    pub fn variable<A: Element, D: Dimension>(
        &self,
        name: &str,
        init: Array<A, D>,
    ) -> Result<Variable<A, D>> {
        let variable = Variable::builder(init).name(name).build();
        self.register(&variable)?;
        Ok(variable)
    }

    /// Registers an existing variable under its own name (see [`Variable::builder`] for a
    /// name and a dynamic shape).
    ///
    /// # Errors
    /// [`Error::NameTaken`] if the store already has a variable of that name.
    pub fn register<A: Element, D: Dimension>(&self, variable: &Variable<A, D>) -> Result<()> {
        self.insert(
            variable.name(),
            Entry {
                any: variable.inner.clone(),
                erased: variable.inner.clone(),
            },
        )
    }

    /// Registers `entry` under `name`, unless the name is taken.
    fn insert(&self, name: &str, entry: Entry) -> Result<()> {
        let name: Arc<str> = name.into();
        self.registry.update(|registry| {
            if let Some(existing) = registry.get(&name) {
                let info = existing.erased.info();
                return Err(Error::NameTaken {
                    name: name.to_string(),
                    dtype: info.dtype,
                    shape: info.shape,
                });
            }
            // One path copied, the rest of the tree shared with `registry`.
            Ok(registry.insert(Arc::clone(&name), entry.clone()))
        })
    }

    /// The variable named `name`, through a handle of dimension `D`: `get::<f32, IxDyn>`
    /// for any rank, or `get::<f32, Ix2>` for a typed one.
    ///
    /// # Errors
    /// [`Error::NotFound`] if there is none; [`Error::DTypeMismatch`] if it holds another
    /// element type than `A`; [`Error::RankMismatch`] if `D` has a static rank and the
    /// variable another one (or a dynamic shape whose rank may change);
    /// [`Error::KindMismatch`] if it is a paged variable ([`get_paged`](Self::get_paged)) or
    /// private state ([`get_private`](Self::get_private)).
    pub fn get<A: Element, D: Dimension>(&self, name: &str) -> Result<Variable<A, D>> {
        let inner = self.typed::<A, Inner<A>>(name, VariableKind::Dense)?;
        inner.check_rank::<D>()?;
        Ok(Variable::from_inner(inner))
    }

    /// The variable `name`'s inner state, a `T` (a dense or paged `Inner<A>`), checked to be
    /// of `kind` and to hold `A`.
    fn typed<A: Element, T: Send + Sync + 'static>(
        &self,
        name: &str,
        kind: VariableKind,
    ) -> Result<Arc<T>> {
        let registry = self.registry.load();
        let entry = entry(&registry, name, kind)?;
        Arc::clone(&entry.any)
            .downcast::<T>()
            .map_err(|_| Error::DTypeMismatch {
                variable: name.to_owned(),
                expected: A::DTYPE,
                found: entry.erased.dtype(),
            })
    }

    /// Whether a variable named `name` is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.registry.load().contains_key(name)
    }

    /// The number of registered variables.
    pub fn len(&self) -> usize {
        self.registry.load().size()
    }

    /// Whether the store has no variables.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A consistent cut of every variable: each as of one point in the global commit order,
    /// never part of a critical-section execution. Never waits for writers (a writer
    /// preempted mid-commit is simply not part of the cut), but for the running batch of a
    /// section whose private state the store holds, which it copies under its ticket
    /// ([`Store::private`]); inside an execution (or a queued variable's update closure) it
    /// leaves private state out: `get` of it is then [`Error::NotFound`], and a checkpoint of
    /// that snapshot is refused. See [`StoreSnapshot`].
    pub fn snapshot(&self) -> StoreSnapshot {
        StoreSnapshot::take(&self.registry.load())
    }

    /// Every variable's name, dtype, shape and version, sorted by name. Each line is read
    /// on its own; for a consistent view of all values take a store snapshot.
    pub fn list(&self) -> Vec<VariableInfo> {
        self.registry
            .load()
            .values()
            .map(|entry| entry.erased.info())
            .collect()
    }
}

/// The entry named `name`, checked to be of `kind`.
fn entry<'r>(registry: &'r Registry, name: &str, kind: VariableKind) -> Result<&'r Entry> {
    let entry = registry.get(name).ok_or_else(|| Error::NotFound {
        name: name.to_owned(),
    })?;
    let found = entry.erased.kind();
    if found != kind {
        return Err(Error::KindMismatch {
            variable: name.to_owned(),
            expected: kind,
            found,
        });
    }
    Ok(entry)
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.list()).finish()
    }
}
