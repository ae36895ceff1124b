//! Data-parallel replicas across processes: [`Replicas`](crate::optim::Replicas) whose
//! workers are MPI ranks (and threads inside each rank), behind the `mpi` cargo feature.
//!
//! One type, two transports. [`Replicas::new`](crate::optim::Replicas::new) all-reduces
//! between threads of one process; `Replicas::over_mpi` (feature `mpi`) adds a transport
//! between processes: a rank's threads combine their gradients first (the in-process
//! machinery), then the rank all-reduces once per step with every other rank, divides by
//! the number of workers of all ranks, and applies the same optimizer step as every other
//! rank. A trainer's step (`replicas.step(grads)`) is the same code in both.
//!
//! * **Replicas stay bit-identical.** Every rank applies the optimizer to the same mean
//!   gradient, computed once by the all-reduce and delivered to every rank bit for bit, so
//!   every rank's parameters and optimizer state stay identical.
//!   [`Replicas::check_agreement`](crate::optim::Replicas::check_agreement) proves it at
//!   any step: one digest per variable and rank, gathered, and a typed error naming the
//!   variable and the ranks that hold another value.
//! * **Same start.** `over_mpi` first checks that every rank replicates the same variables
//!   (count, dtype and shape, in order: a mismatch is [`Problem::Mismatch`] naming the
//!   variable and each rank's dtype and shape, before any data moves), then broadcasts
//!   rank 0's parameters and optimizer state to the others, which take them in one commit
//!   each; if any rank cannot, every rank fails ([`Problem::PeerStartFailed`]).
//! * **Tensor fusion.** Small gradients are copied into buckets of at most
//!   `ClusterBuilder::bucket_bytes` and all-reduced together; a gradient of a bucket's size
//!   or more goes out from where it lies, with no copy.
//! * **No silent hang.** Every collective has a deadline (`ClusterBuilder::timeout`). The
//!   step's all-reduces are blocking calls (the MPI library's tuned algorithms) under a
//!   watchdog thread (`Collectives::Watched`, the default), or non-blocking ones polled
//!   against the deadline, every bucket in flight at once (`Collectives::Polled`); the
//!   small collectives are always polled. A rank that dies or hangs makes the others fail
//!   with [`Problem::Stalled`], naming the ranks that did not answer: polled, the step
//!   returns it; watched, the watchdog prints it. Either way the rank cannot take part in
//!   another collective (MPI cannot cancel one), so the job ends: the watchdog, or the
//!   `Cluster`'s drop after a polled fault, aborts it (`MPI_Abort`) instead of waiting in
//!   `MPI_Finalize`. A rank killed outright is also noticed by `mpirun`, which ends the
//!   job.
//! * **Checkpoints are cuts at one global step.** Every rank holds the same state after
//!   each step, so rank 0's store snapshot is the whole job's state:
//!   `Replicas::save_checkpoint` checks agreement, has rank 0 write the usual safetensors
//!   file, and tells every rank whether it was written. A job on any number of ranks
//!   resumes from it: rank 0 restores the file before `over_mpi`, which broadcasts it.
//!
//! The trainer guide's chapter "Threads or ranks" says when to use which and how to
//! launch them; `examples/train_mpi.rs` is a whole trainer.

use ndarray::NdFloat;

use crate::error::Result;
use crate::{DType, Element, OwnedSnapshot};

#[cfg(feature = "mpi")]
mod mpi;

#[cfg(feature = "mpi")]
pub use self::mpi::{Cluster, ClusterBuilder, Collectives, DEFAULT_BUCKET_BYTES, DEFAULT_TIMEOUT};
/// The element types MPI can all-reduce (`f32`, `f64`): rsmpi's trait, for code generic
/// over them.
#[cfg(feature = "mpi")]
pub use ::mpi::datatype::Equivalence;

/// How a step's gradient sums cross processes: the seam between replicas that are threads
/// of one process and replicas that are processes too. Every method is collective: each
/// process calls it at the same point of its steps.
pub(crate) trait Transport<A: Element>: std::fmt::Debug + Send + Sync {
    /// This process's number among `processes()`.
    fn process(&self) -> usize;
    /// The number of processes.
    fn processes(&self) -> usize;
    /// The workers of every process together: what a step's sum is divided by.
    fn workers(&self) -> usize;
    /// Sums every process's `sums` (one per gradient, this process's workers' sums) into
    /// `out`, one gradient after the other; `failed` says this process's step failed.
    /// Returns the processes whose step failed. The transport may keep `sums` and `out`'s
    /// buffer for ever (a collective that never completes may still use them).
    fn all_reduce(
        &self,
        step: i64,
        sums: Vec<OwnedSnapshot<A>>,
        failed: bool,
        out: &mut Vec<A>,
    ) -> Result<Vec<usize>>;
    /// Every process's `digests`, in process order.
    fn gather_digests(&self, step: i64, digests: &[u64]) -> Result<Vec<Vec<u64>>>;
    /// Process 0's `outcome` (`Err` carries its message), on every process.
    fn share_outcome(
        &self,
        step: i64,
        outcome: std::result::Result<(), String>,
    ) -> Result<std::result::Result<(), String>>;
    /// What the all-reduces cost so far.
    fn stats(&self) -> AllReduceStats;
}

/// What the all-reduces of replicas across processes cost so far
/// ([`Replicas::all_reduce_stats`](crate::optim::Replicas::all_reduce_stats)): all zeros
/// for replicas that are threads of one process.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct AllReduceStats {
    /// Steps all-reduced.
    pub steps: u64,
    /// Seconds spent in them, from the first bucket's start to the last one's completion
    /// (packing, unpacking and waiting for the slowest rank included).
    pub seconds: f64,
    /// Bytes each rank contributed (gradients and the step's failure flags).
    pub bytes: u64,
    /// All-reduce calls (buckets) issued.
    pub buckets: u64,
}

/// What a rank of replicas across processes reports in
/// [`Error::Distributed`](crate::Error::Distributed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Problem {
    /// The ranks do not replicate the same number of variables (parameters, then the
    /// optimizer's state).
    #[error(
        "the ranks replicate different numbers of variables: {}",
        counts_words(counts)
    )]
    VariableCount {
        /// Each rank's count, in rank order.
        counts: Vec<usize>,
    },

    /// A variable has another dtype or shape on some ranks than on rank 0. Found before
    /// anything is sent: nothing was changed on any rank.
    #[error(
        "variable `{variable}` (replicated variable {index}) differs across ranks: {}",
        held_words(held)
    )]
    Mismatch {
        /// The variable, as rank 0 names it.
        variable: String,
        /// Its position among the replicated variables.
        index: usize,
        /// What each rank holds, in rank order.
        held: Vec<Held>,
    },

    /// A collective did not complete in time: some rank died or hangs. This rank cannot
    /// take part in another collective and must end (drop the `Cluster`: it aborts the job).
    #[error(
        "the {operation} of step {step} did not complete within {timeout_ms} ms: {} (dead or \
         hung); this rank must end (dropping the Cluster aborts the job)",
        missing_words(missing)
    )]
    Stalled {
        /// The collective: `all-reduce`, `broadcast`, `digest gather`, ...
        operation: &'static str,
        /// The optimizer step it belongs to (the step being taken, or the last one taken).
        step: i64,
        /// The deadline it missed.
        timeout_ms: u64,
        /// The ranks that did not answer a rank-to-rank call after the deadline (empty: every
        /// rank answered, and the collective itself is stuck).
        missing: Vec<usize>,
    },

    /// An MPI call returned an error.
    #[error("MPI call {call} failed with error code {code}: {message}")]
    Mpi {
        /// The MPI function.
        call: &'static str,
        /// Its return code.
        code: i32,
        /// The MPI library's text for it.
        message: String,
    },

    /// The step's gradients failed on other ranks (a wrong shape or count): nothing of the
    /// step was applied on any rank.
    #[error("step {step} failed on rank(s) {ranks:?}: nothing of it was applied on any rank")]
    PeerStepFailed {
        /// The step.
        step: i64,
        /// The ranks whose gradients failed.
        ranks: Vec<usize>,
    },

    /// The replicas disagree: some ranks hold other values of a variable than the others.
    #[error(
        "replicas disagree on variable `{variable}` at step {step}: rank(s) {diverged:?} hold \
         other values than rank(s) {agree:?}"
    )]
    Diverged {
        /// The first variable that differs (in replicated order).
        variable: String,
        /// The optimizer's step count on this rank.
        step: i64,
        /// The ranks whose value differs from the most common one (from rank 0's on a tie).
        diverged: Vec<usize>,
        /// The ranks that hold the most common value.
        agree: Vec<usize>,
    },

    /// Rank 0 could not write the step's checkpoint; the previous one is intact.
    #[error("the checkpoint of step {step} failed on rank 0: {message}")]
    Checkpoint {
        /// The step.
        step: i64,
        /// Rank 0's error (on rank 0 itself the original error is returned instead).
        message: String,
    },

    /// An earlier fault ended this rank's part in collectives.
    #[error("an earlier fault ended this rank's part in the job: {0}")]
    Faulted(Box<Problem>),

    /// The MPI library cannot be used as the replicas need.
    #[error("MPI cannot be used: {0}")]
    Unavailable(String),

    /// Some ranks could not take rank 0's parameters and optimizer state at the start: no
    /// replicas were made on any rank. Those ranks' variables are unchanged; the other
    /// ranks' hold rank 0's values, each rank's in one commit (none is half-assigned).
    #[error("rank(s) {ranks:?} could not take rank 0's state: no replicas were made on any rank")]
    PeerStartFailed {
        /// The ranks that failed, in rank order (each returns its own error).
        ranks: Vec<usize>,
    },

    /// One MPI call would count more elements than a C `int` holds (2^31 - 1), in a
    /// collective that is not split into several calls: refused on every rank alike,
    /// before anything is sent.
    #[error(
        "the {operation} needs {elements} elements in one MPI call, more than its count holds \
         (2^31 - 1)"
    )]
    TooLarge {
        /// The collective.
        operation: &'static str,
        /// The elements it needed in one call.
        elements: usize,
    },
}

/// What one rank holds of a replicated variable ([`Problem::Mismatch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The rank.
    pub rank: usize,
    /// The variable's dtype there.
    pub dtype: DType,
    /// Its shape there.
    pub shape: Vec<usize>,
}

fn counts_words(counts: &[usize]) -> String {
    let each: Vec<String> = counts
        .iter()
        .enumerate()
        .map(|(rank, n)| format!("rank {rank}: {n}"))
        .collect();
    each.join(", ")
}

fn held_words(held: &[Held]) -> String {
    let each: Vec<String> = held
        .iter()
        .map(|h| format!("rank {} holds {} {:?}", h.rank, h.dtype, h.shape))
        .collect();
    each.join(", ")
}

fn missing_words(missing: &[usize]) -> String {
    match missing {
        [] => "every rank answered, the collective itself is stuck".to_owned(),
        [one] => format!("rank {one} did not answer"),
        many => format!("ranks {many:?} did not answer"),
    }
}

/// A 64-bit digest of `values`' bits (FNV-1a over 64-bit words): equal values, bit for bit
/// (signed zeros and NaN payloads included), give equal digests.
pub(crate) fn digest<A: NdFloat>(values: &[A]) -> u64 {
    let words = values
        .iter()
        .map(|x| x.to_f64().expect("a float").to_bits());
    fold(words.chain([values.len() as u64]))
}

pub(crate) fn digest_words(words: &[u64]) -> u64 {
    fold(words.iter().copied())
}

fn fold(words: impl Iterator<Item = u64>) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    words.fold(0xcbf2_9ce4_8422_2325, |h, w| (h ^ w).wrapping_mul(PRIME))
}
