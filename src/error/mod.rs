//! The crate's one error type.
//!
//! Every fallible operation returns [`Error`]. Each variant names the variable (or section)
//! involved and the shapes, dtypes or versions that did not fit, so the message alone tells a
//! user what to change. An operation that returns an error has applied nothing.

use crate::DType;

mod check;

pub(crate) use check::{
    check_has_rows, check_indices, check_rows, check_setting, check_shape, same_shape, RATE,
};

/// Everything that can go wrong in mvtensor.
///
/// ```
/// use mvtensor::{Error, Variable};
/// use ndarray::ArrayD;
///
/// let v = Variable::builder(ArrayD::<f32>::zeros(vec![4])).name("w").build();
/// let err = v.assign_add(&ArrayD::zeros(vec![])).unwrap_err();
/// assert!(matches!(err, Error::ShapeMismatch { .. }));
/// assert_eq!(
///     err.to_string(),
///     "shape mismatch on variable `w`: the value must have shape [4], it has shape [] (no \
///      broadcasting)"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A value or delta does not have the shape it must have. mvtensor never broadcasts.
    #[error(
        "shape mismatch on variable `{variable}`: the value must have shape {expected:?}, \
         it has shape {found:?} (no broadcasting)"
    )]
    ShapeMismatch {
        /// The variable written.
        variable: String,
        /// The shape the value must have: the variable's, or for rows (`scatter_add` and
        /// the like) `[indices, ..the variable's row shape]`.
        expected: Vec<usize>,
        /// The shape of the value supplied.
        found: Vec<usize>,
    },

    /// A variable was asked for with another element type than it holds.
    #[error("dtype mismatch on variable `{variable}`: it holds {found}, {expected} was asked for")]
    DTypeMismatch {
        /// The variable.
        variable: String,
        /// The element type asked for.
        expected: DType,
        /// The element type the variable holds.
        found: DType,
    },

    /// A typed handle (`Variable<A, Ix2>`, say) was asked for a variable of another rank,
    /// or a write would change the rank of a variable whose rank is fixed.
    #[error(
        "rank mismatch on variable `{variable}`: it has {}, {} was asked for",
        rank_words(*expected),
        rank_words(*found)
    )]
    RankMismatch {
        /// The variable.
        variable: String,
        /// The variable's rank (`None`: a dynamic shape whose rank may change).
        expected: Option<usize>,
        /// The rank asked for or supplied (`None`: any rank, `IxDyn`).
        found: Option<usize>,
    },

    /// A row index (`scatter_add`, `scatter_update`, `gather`) past the variable's first
    /// axis.
    #[error("index out of range on variable `{variable}`: row {index}, but it has {bound} rows")]
    IndexOutOfRange {
        /// The variable.
        variable: String,
        /// The first index out of range.
        index: usize,
        /// The number of rows (the length of the first axis).
        bound: usize,
    },

    /// A tensor index past the tensors of a [`Packed`](crate::optim::Packed) set.
    #[error("no tensor {index} in packed set `{set}`: it has {tensors}")]
    NoSuchTensor {
        /// The set's name (its variable's).
        set: String,
        /// The index asked for.
        index: usize,
        /// The number of tensors in the set.
        tensors: usize,
    },

    /// An optimizer step got another number of gradients than it has parameters.
    #[error(
        "gradient count mismatch: the optimizer takes {expected} gradients (one per parameter, \
         one per tensor of a packed set), the step gave {found}"
    )]
    GradientCount {
        /// The number of gradients a step takes.
        expected: usize,
        /// The number of gradients given.
        found: usize,
    },

    /// A [`TensorQueue`](crate::queue::TensorQueue) operation could not be served.
    #[error("queue `{queue}`: {problem}")]
    Queue {
        /// The queue's name.
        queue: String,
        /// Why.
        problem: QueueProblem,
    },

    /// No variable of that name exists.
    #[error("no variable named `{name}`")]
    NotFound {
        /// The name looked up.
        name: String,
    },

    /// A store's variable (or a store snapshot's entry) is paged where a dense one was asked
    /// for, or dense where a paged one was: `get` is for [`Variable`](crate::Variable)s,
    /// `get_paged` for [`PagedVariable`](crate::PagedVariable)s.
    #[error("variable `{variable}` is {found}, not {expected}")]
    KindMismatch {
        /// The variable.
        variable: String,
        /// The kind asked for.
        expected: VariableKind,
        /// The kind it is.
        found: VariableKind,
    },

    /// A variable of that name already exists in the store.
    #[error("a variable named `{name}` already exists (it holds {dtype}, shape {shape:?})")]
    NameTaken {
        /// The name.
        name: String,
        /// The element type of the existing variable.
        dtype: DType,
        /// The shape of the existing variable.
        shape: Vec<usize>,
    },

    /// `compare_and_set` saw another version than the one expected.
    #[error(
        "version conflict on variable `{variable}`: expected version {expected}, found {actual}"
    )]
    VersionConflict {
        /// The variable.
        variable: String,
        /// The version the caller expected.
        expected: u64,
        /// The variable's current version.
        actual: u64,
    },

    /// A resource is already claimed exclusively, or an exclusive claim meets any other claim.
    #[error(
        "resource conflict on variable `{resource}`: section `{requested_by}` wants it \
         {requested}, but section `{held_by}` holds it {held}"
    )]
    ResourceConflict {
        /// The contested variable.
        resource: String,
        /// The section that already claims it.
        held_by: String,
        /// How `held_by` claims it ("exclusively" or "shared").
        held: &'static str,
        /// The section being built.
        requested_by: String,
        /// How the new section asked for it.
        requested: &'static str,
    },

    /// `execute` was called, or a queued resource was written directly, from a thread that
    /// holds tickets: inside an execution, or inside the `update` closure of a queued
    /// variable. Waiting would deadlock.
    #[error(
        "re-entrant call from inside {running}: {attempted} \
         (it would wait on itself; use the Txn for writes inside an execution)"
    )]
    Reentrant {
        /// What this thread is inside, e.g. "an execution of section `optimizer`".
        running: String,
        /// What was attempted.
        attempted: String,
    },

    /// Inside an execution, a borrow of a variable conflicted with one still alive: a write
    /// while it is read or written, or a read while it is written (`RefCell`'s rules).
    #[error(
        "variable `{variable}` is already borrowed{} in this execution of section \
         `{section}`: drop that borrow first",
        if *mutably { " mutably" } else { "" }
    )]
    Borrowed {
        /// The variable.
        variable: String,
        /// The section.
        section: String,
        /// Whether the borrow still alive is mutable.
        mutably: bool,
    },

    /// A checkpoint could not be written, read or restored: the file, and what is wrong
    /// (an I/O error, a malformed file, a tensor that does not fit the store). Nothing was
    /// applied, and a failed save leaves the previous file intact.
    #[error("checkpoint `{file}`: {problem}")]
    Checkpoint {
        /// The file (or `<bytes>` for [`Store::load_bytes`](crate::Store::load_bytes)).
        file: String,
        /// What went wrong.
        problem: String,
    },

    /// A variable holds a value its owner cannot use: an optimizer's state whose step count
    /// is not a whole number it wrote (the state was restored from elsewhere, or assigned).
    /// Nothing was applied.
    #[error("variable `{variable}` holds an invalid value: {problem}")]
    InvalidValue {
        /// The variable.
        variable: String,
        /// What is wrong with its value.
        problem: String,
    },

    /// An execution tried to write a variable its section does not hold.
    #[error("variable `{variable}` is not in the resource set of section `{section}`")]
    NotInResourceSet {
        /// The variable written.
        variable: String,
        /// The section.
        section: String,
    },

    /// A setting that no step could use (a NaN or negative learning rate, a decay of 1 or
    /// more, a negative clipping norm): refused before anything was built or applied.
    #[error("{owner}: {setting} = {value}, expected {expected}")]
    InvalidSetting {
        /// What the setting belongs to, e.g. ``optimizer `adam` ``.
        owner: String,
        /// The setting, e.g. `lr`.
        setting: &'static str,
        /// The value given, as `{:?}` prints it.
        value: String,
        /// The range it must be in.
        expected: &'static str,
    },

    /// A gradient holds a NaN or an infinity, and its optimizer refuses such steps
    /// ([`OptimizerBuilder::error_if_nonfinite`](crate::optim::OptimizerBuilder::error_if_nonfinite)):
    /// nothing was applied, and the step count did not move.
    #[error(
        "optimizer `{optimizer}`: the gradient of `{parameter}` holds a NaN or an infinity; \
         the step was refused"
    )]
    NonFinite {
        /// The optimizer (its section's name).
        optimizer: String,
        /// The parameter whose gradient it is (`<set>.<tensor>` in a packed set).
        parameter: String,
    },

    /// A synchronous step of [`Replicas`](crate::optim::Replicas) could not complete: a
    /// worker of [`Replicas::run`](crate::optim::Replicas::run) panicked or returned while
    /// the others still stepped, or [`Replicas::stop`](crate::optim::Replicas::stop) was
    /// called. Nothing of the step was applied, and every later step fails the same way
    /// (until the next `run`).
    #[error(
        "replicas of optimizer `{optimizer}`: stopped before every worker reached this step (a \
         worker panicked or returned early, or `stop` was called); nothing of it was applied"
    )]
    ReplicasStopped {
        /// The optimizer (its section's name).
        optimizer: String,
    },

    /// Replicas across processes ([`distributed`](crate::distributed)) could not agree or
    /// complete a collective step: what went wrong, seen from this rank.
    #[error("rank {rank}: {problem}")]
    Distributed {
        /// The rank that reports it (this process's).
        rank: usize,
        /// What went wrong, naming the variables and ranks involved.
        problem: crate::distributed::Problem,
    },
}

fn rank_words(rank: Option<usize>) -> String {
    match rank {
        Some(rank) => format!("rank {rank}"),
        None => "a rank that may change".to_owned(),
    }
}

/// Why a queue operation failed, or a queue could not be made ([`Error::Queue`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QueueProblem {
    /// Closed: no more enqueues; for a dequeue, closed and drained.
    #[error("closed")]
    Closed,
    /// A `try_enqueue` found no room.
    #[error("full")]
    Full,
    /// A `try_dequeue` found nothing.
    #[error("empty")]
    Empty,
    /// A timed operation's time ran out.
    #[error("timed out")]
    TimedOut,
    /// `dequeue_many(n)` with `n` above the capacity: it could never be served.
    #[error("more elements asked for than the queue can hold")]
    TooMany,
    /// An enqueued element does not have the queue's shape (no broadcasting).
    #[error(
        "an element must have shape {expected:?}, this one has shape {found:?} (no broadcasting)"
    )]
    Shape {
        /// The queue's element shape.
        expected: Vec<usize>,
        /// The shape of the element given.
        found: Vec<usize>,
    },
    /// `TensorQueue::new` with a shape no batch of the queue could have as an array: the
    /// element count overflows `usize`, or a batch of `capacity` elements (the most a
    /// `dequeue_many` returns) would take more than `isize::MAX` bytes.
    #[error(
        "elements of shape {shape:?} in batches of up to {capacity} do not fit in memory \
         ({why})"
    )]
    TooLarge {
        /// The element shape asked for.
        shape: Vec<usize>,
        /// The capacity asked for.
        capacity: usize,
        /// What overflows.
        why: &'static str,
    },
}

/// `Result<T, mvtensor::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a store's entry keeps its value: versions of one dense tensor, versions of pages
/// ([`PagedVariable`](crate::PagedVariable)), or one value changed in place
/// ([`Private`](crate::Private)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum VariableKind {
    /// A [`Variable`](crate::Variable): each version is one tensor.
    Dense,
    /// A [`PagedVariable`](crate::PagedVariable): each version is a tree of pages.
    Paged,
    /// A section's [`Private`](crate::Private) state: one value, changed in place.
    Private,
}

impl std::fmt::Display for VariableKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            VariableKind::Dense => "dense",
            VariableKind::Paged => "paged",
            VariableKind::Private => "private",
        })
    }
}
