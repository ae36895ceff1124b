//! [`Variable`]: a shared, versioned tensor. Writes are in [`write`](mod@write), row operations in
//! [`rows`], the scalar API in [`scalar`].

mod counted;
mod rows;
mod scalar;
mod write;

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use crossbeam_utils::CachePadded;
use ndarray::{Array, ArrayD, Dimension, IxDyn};

use crate::combine::Combiner;
use crate::dim;
use crate::error::{check_shape, same_shape, Error, Result};
use crate::head::Head;
use crate::kernel;
use crate::limbo;
use crate::pool::Home;
use crate::record::Record;
use crate::section::{Claims, Resource};
use crate::stats::Stats;
use crate::sync::{epoch, next_id};
use crate::ticket::TicketQueue;
use crate::version::{Building, Version};
use crate::{Element, OwnedSnapshot, Snapshot};

pub(crate) use write::Taker;

/// A shared tensor whose value is an immutable, versioned snapshot.
///
/// `Variable` is a cheap handle (`Clone` is one reference-count increment) and is
/// `Send + Sync`: give every thread its own clone. All clones are the same variable.
///
/// * **Reads** ([`read`](Self::read)) are wait-free and return a [`Snapshot`] that never
///   changes, whatever writers do meanwhile.
/// * **Writes** build a new version and publish it with one compare-and-swap; nobody ever
///   mutates a published tensor. Every write returns the number of the version it created:
///   the first value is version 0 and each commit adds one.
/// * **Shapes** are fixed at creation: a write of another shape is
///   [`Error::ShapeMismatch`], and nothing broadcasts. A variable built with
///   [`VariableBuilder::dynamic_shape`] lets [`assign`](Self::assign) and
///   [`update`](Self::update) change the shape; deltas must still match the current one.
///
/// ```
/// use mvtensor::Variable;
/// use ndarray::{arr1, arr2};
///
/// let v = Variable::new(arr1(&[1.0f32, 2.0]));  // a Variable<f32, Ix1>
/// let before = v.read();                       // wait-free, never changes
/// let ver = v.assign_add(&arr1(&[10.0, 10.0]))?;
/// assert_eq!(ver, 1);
/// assert_eq!(before.as_slice().unwrap(), &[1.0, 2.0]);
/// assert_eq!(v.read().as_slice().unwrap(), &[11.0, 12.0]);
///
/// // Typed dimensions: a snapshot of a Variable<f32, Ix2> is a 2-d array, so `dot` works.
/// let w = Variable::new(arr2(&[[1.0f32, 0.0], [0.0, 2.0]]));
/// assert_eq!(w.read().dot(&arr1(&[3.0, 4.0])), arr1(&[3.0, 8.0]));
/// # Ok::<(), mvtensor::Error>(())
/// ```
///
/// # Dimensions
/// `D` is the handle's dimension type: `Ix1`, `Ix2`, ... or `IxDyn` (the default), inferred
/// from the array a variable is created with. Every value of a variable keeps its rank, so
/// a typed handle's snapshots and working copies are typed arrays. Handles of either kind
/// can name the same variable ([`Store::get`](crate::Store::get) checks the rank).
#[repr(transparent)] // `erased` casts between handles of one variable
pub struct Variable<A: Element, D: Dimension = IxDyn> {
    pub(crate) inner: Arc<Inner<A>>,
    _dim: PhantomData<fn() -> D>,
}

pub(crate) struct Inner<A: Element> {
    pub(crate) id: u64,
    pub(crate) name: Arc<str>,
    /// The creation shape, enforced on every write unless `dynamic_shape`.
    shape: Vec<usize>,
    /// Bytes of a version of the creation shape, and the spares its pool keeps
    /// ([`limbo::spares`]): worked out once, so that small writes do not pay the division in
    /// `spares` every time.
    bytes: usize,
    spares: usize,
    /// Versions past which a compare-and-swap writer waits for one to come back
    /// ([`make_room`](Self::make_room)).
    room: usize,
    /// The tensors it packs, described, if it is an [`optim::Packed`](crate::optim::Packed)
    /// set's (checkpoints carry it: a restore into another layout is refused).
    pub(crate) layout: Option<Arc<str>>,
    dynamic_shape: bool,
    /// The rank every value has: fixed with the shape, or by a typed handle's `D` for a
    /// dynamic shape; `None` if a dynamic shape may change rank.
    pub(crate) rank: Option<usize>,
    /// On a line of its own: every write swaps it, and beside the fields every writer and
    /// reader only reads (shape, name, pool) each swap would take those from the other cores.
    pub(crate) head: CachePadded<Head<A>>,
    /// Counters and buffer pool, shared with every version.
    pub(crate) home: Arc<Home<A>>,
    /// Serialises writes while the variable belongs to a critical section.
    queue: TicketQueue,
    /// The sections that hold the variable.
    claims: Claims,
    /// Concurrent `assign_add`/`assign_sub` calls meet here and share one pass.
    combiner: Combiner<A>,
}

/// Options for a new [`Variable`]; start with [`Variable::builder`].
#[derive(Debug)]
#[must_use = "call .build() to create the variable"]
pub struct VariableBuilder<A: Element, D: Dimension = IxDyn> {
    init: ArrayD<A>,
    name: Option<String>,
    dynamic_shape: bool,
    layout: Option<Arc<str>>,
    _dim: PhantomData<fn() -> D>,
}

impl<A: Element, D: Dimension> VariableBuilder<A, D> {
    /// Names the variable; the name appears in every error about it. Unnamed variables are
    /// called `var#<id>`. (A [`Store`](crate::Store) names its variables itself.)
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Lets [`Variable::assign`] and [`Variable::update`] replace the value with one of
    /// another shape. Deltas (`assign_add`, `assign_sub`) must still match the current shape.
    /// The rank may change only for an `IxDyn` variable.
    pub fn dynamic_shape(mut self) -> Self {
        self.dynamic_shape = true;
        self
    }

    /// What the variable's elements are, when it packs several tensors
    /// ([`optim::Packed`](crate::optim::Packed)): checkpoints carry it, and a restore refuses
    /// a file whose description of the variable differs.
    pub(crate) fn layout(mut self, description: String) -> Self {
        self.layout = Some(description.into());
        self
    }

    /// Creates the variable; its initial value is version 0.
    pub fn build(self) -> Variable<A, D> {
        let id = next_id();
        let name: Arc<str> = match self.name {
            Some(name) => name.into(),
            None => format!("var#{id}").into(),
        };
        let home = Arc::new(Home::default());
        let init = kernel::standard(self.init);
        let shape = init.shape().to_vec();
        let bytes = init.len() * std::mem::size_of::<A>();
        let rank = if self.dynamic_shape {
            dim::rank::<D>()
        } else {
            Some(shape.len())
        };
        let mut first = Version::allocate(init, &home);
        first.record = Record::committed_now();
        Variable::from_inner(Arc::new(Inner {
            id,
            name,
            shape,
            bytes,
            spares: limbo::spares(bytes),
            room: limbo::room(bytes),
            dynamic_shape: self.dynamic_shape,
            rank,
            head: CachePadded::new(Head::new(first)),
            home,
            queue: TicketQueue::default(),
            claims: Claims::default(),
            combiner: Combiner::default(),
            layout: self.layout,
        }))
    }
}

impl<A: Element, D: Dimension> Variable<A, D> {
    /// A fixed-shape, unnamed variable holding `init` as version 0. Its handle has `init`'s
    /// dimension type.
    pub fn new(init: Array<A, D>) -> Self {
        Self::builder(init).build()
    }

    /// Options for a new variable: a name, a dynamic shape.
    pub fn builder(init: Array<A, D>) -> VariableBuilder<A, D> {
        VariableBuilder {
            init: init.into_dyn(),
            name: None,
            dynamic_shape: false,
            layout: None,
            _dim: PhantomData,
        }
    }

    pub(crate) fn from_inner(inner: Arc<Inner<A>>) -> Self {
        Self {
            inner,
            _dim: PhantomData,
        }
    }

    /// The same variable through a dynamic-dimensional handle.
    pub(crate) fn erased(&self) -> &Variable<A> {
        // SAFETY: `Variable` is `repr(transparent)` over its `Arc` (the other field is a
        // zero-sized marker), so handles of every `D` have one layout.
        unsafe { &*std::ptr::from_ref(self).cast::<Variable<A>>() }
    }

    /// The current value, wait-free.
    ///
    /// An epoch pin, one acquire load of the head, and a store to one of this thread's hold
    /// slots: no lock, no retry, no write to memory another thread writes, and never a wait
    /// for a writer (a write that is still committing is simply not visible yet). The pin
    /// ends before `read` returns; the snapshot keeps only its own version (see
    /// [`Snapshot`]), so it may live as long as a training step or longer. To send it to
    /// another thread, use [`read_owned`](Self::read_owned).
    #[must_use = "a read has no effect"]
    pub fn read(&self) -> Snapshot<A, D> {
        Snapshot::new(self.inner.head.visible(&epoch::pin()))
    }

    /// The current value as a reference-counted snapshot: `Send`, `'static`, and free to
    /// live as long as you like, on any thread.
    #[must_use = "a read has no effect"]
    pub fn read_owned(&self) -> OwnedSnapshot<A, D> {
        OwnedSnapshot::new(self.inner.head.visible(&epoch::pin()).to_ref())
    }

    /// The current version number (0 at creation, +1 per commit).
    pub fn version(&self) -> u64 {
        self.inner.head.visible(&epoch::pin()).number
    }

    /// The current shape.
    pub fn shape(&self) -> Vec<usize> {
        self.inner.head.visible(&epoch::pin()).data.shape().to_vec()
    }

    /// The variable's name, as used in error messages.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// A process-wide unique id; critical sections acquire resources in id order.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// What the write path has done so far (commits, retries, combining, live versions).
    pub fn stats(&self) -> Stats {
        let helped = self.inner.combiner.helped();
        self.inner.home.counters.read(self.version(), helped)
    }

    /// Checks a whole new value's shape (see [`Inner::check_new_shape`]).
    pub(crate) fn check_new_shape(&self, found: &[usize]) -> Result<()> {
        self.inner.check_new_shape(found)
    }
}

impl<A: Element> Inner<A> {
    /// Checks a whole new value's shape: the variable's shape, or for a dynamic shape only
    /// its rank (if fixed).
    pub(crate) fn check_new_shape(&self, found: &[usize]) -> Result<()> {
        if !self.dynamic_shape {
            return check_shape(&self.name, &self.shape, found);
        }
        match self.rank {
            Some(rank) if rank != found.len() => Err(Error::RankMismatch {
                variable: self.name.to_string(),
                expected: Some(rank),
                found: Some(found.len()),
            }),
            _ => Ok(()),
        }
    }

    /// Whether a handle of dimension `D` may name this variable.
    pub(crate) fn check_rank<D: Dimension>(&self) -> Result<()> {
        match dim::rank::<D>() {
            Some(want) if self.rank != Some(want) => Err(Error::RankMismatch {
                variable: self.name.to_string(),
                expected: self.rank,
                found: Some(want),
            }),
            _ => Ok(()),
        }
    }

    /// After a commit: frees pooled versions beyond what a steady writer needs (the pool
    /// grows while reclamation is held up, and shrinks back here). After every write of a
    /// large version, every 64th of a small one (a walk of the pool costs more than they do).
    pub(crate) fn published(&self, number: u64, bytes: usize) {
        if bytes >= limbo::BATCH_BYTES {
            self.trim_large(bytes);
        } else if number.is_multiple_of(64) {
            self.home.trim(self.spares_for(bytes));
        }
    }

    /// After a write, once this thread's [`limbo::reclaim_now`] has brought back the large
    /// version the write replaced: trims the pool again, so that a variable nobody else
    /// writes keeps its current version and two spares, not more (the trim in
    /// [`published`](Self::published) ran before that version came back).
    ///
    /// The creation shape's size decides: a dynamic shape's current one may differ, and then
    /// the pool keeps a version more or fewer until the next write's trims.
    pub(crate) fn reclaimed(&self) {
        if self.large() {
            self.trim_large(self.bytes);
        }
    }

    /// Whether versions of the creation shape are large ([`limbo::spares`]): pooled and
    /// trimmed one by one, their delta writes counted in [`Writers`](crate::pool::Writers).
    pub(crate) fn large(&self) -> bool {
        self.bytes >= limbo::BATCH_BYTES
    }

    /// The spares a pool of versions of `bytes` keeps: the creation shape's, worked out once,
    /// unless a dynamic shape has changed.
    fn spares_for(&self, bytes: usize) -> usize {
        if bytes == self.bytes {
            self.spares
        } else {
            limbo::spares(bytes)
        }
    }

    /// Trims the pool of versions of `bytes` (large) to its spares, and one more while
    /// several threads add deltas ([`Writers`](crate::pool::Writers)).
    fn trim_large(&self, bytes: usize) {
        self.home
            .trim(self.spares_for(bytes) + self.home.writers.extra_spares());
    }

    /// A version to build the next value in: a pooled one, or a new one, shaped like `like`
    /// (its values are whatever they were: every writer overwrites them all).
    // Inlined into both write loops (plain and counted): out of line it costs a scalar
    // `fetch_add` a call's worth of instructions.
    #[inline(always)]
    pub(crate) fn building(&self, like: &ArrayD<A>, taker: Taker) -> Building<A> {
        let bytes = like.len() * std::mem::size_of::<A>();
        let take = || match taker {
            // A large version is taken from the shared lists even by the flag holder (two
            // swaps, nothing beside its copy), so that its spares all sit where the trims
            // see them: with the flag's list as well, a quiescent variable kept a third spare.
            Taker::Anyone => self.home.take(),
            Taker::FlagHolder if bytes >= limbo::BATCH_BYTES => self.home.take(),
            Taker::FlagHolder => {
                let keep = self.spares_for(bytes);
                // SAFETY: `Taker::FlagHolder` is only passed by the combining pass, which
                // holds the combiner flag (see `Publish for Variable`).
                unsafe { self.home.take_held(keep) }
            }
        };
        // A dry pool: this thread's expired retirements, and versions whose snapshots were
        // dropped, may be waiting to come back.
        let taken = take().or_else(|| {
            limbo::collect();
            take()
        });
        let Some(mut building) = taken else {
            return Version::allocate(ArrayD::default(like.raw_dim()), &self.home);
        };
        if !same_shape(building.data.shape(), like.shape()) {
            // A pooled version of an older shape (dynamic-shape variables).
            self.home
                .counters
                .buffer_allocated(like.len() * std::mem::size_of::<A>());
            building.data = ArrayD::default(like.raw_dim());
        }
        building
    }
}

impl<A: Element> Resource for Inner<A> {
    fn id(&self) -> u64 {
        self.id
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn queue(&self) -> &TicketQueue {
        &self.queue
    }
    fn claims(&self) -> &Claims {
        &self.claims
    }
    fn set_queued(&self, queued: bool) {
        self.head.set_queued(queued);
    }
    fn reclaimed(&self) {
        Inner::reclaimed(self);
    }
    fn make_room(&self) {
        Inner::make_room(self);
    }
}

impl<A: Element> Drop for Inner<A> {
    /// The variable is gone: its pool frees what it holds, and versions still held elsewhere
    /// (snapshots, limbo) are freed once they come back.
    fn drop(&mut self) {
        self.home.close();
    }
}

impl<A: Element, D: Dimension> Clone for Variable<A, D> {
    fn clone(&self) -> Self {
        Self::from_inner(Arc::clone(&self.inner))
    }
}

impl<A: Element, D: Dimension> fmt::Debug for Variable<A, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let guard = epoch::pin();
        let current = self.inner.head.visible(&guard);
        f.debug_struct("Variable")
            .field("name", &self.name())
            .field("dtype", &A::DTYPE)
            .field("shape", &current.data.shape())
            .field("version", &current.number)
            .finish()
    }
}
