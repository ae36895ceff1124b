//! Counters that show what the write path did: commits, combining, retries, live versions.

use crate::sync::{AtomicU64, AtomicUsize, Ordering};

/// What happened to one variable so far; see [`Variable::stats`](crate::Variable::stats).
///
/// The counters are read one by one, so a snapshot taken while writers run may be slightly
/// out of step with itself; each counter on its own is exact.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Commits since creation: the current version number.
    pub commits: u64,
    /// Compare-and-swap attempts on the head that lost to another writer and were redone.
    pub cas_retries: u64,
    /// Combined passes: each applied a batch of one or more queued deltas at once.
    pub combined_batches: u64,
    /// Deltas applied through combined passes (`combined_deltas / combined_batches` is the
    /// mean batch size).
    pub combined_deltas: u64,
    /// The largest batch one combined pass applied.
    pub max_batch: u64,
    /// Chunks of combined passes over large tensors (1 MiB and up) that writers waiting for
    /// the pass computed, beside the writer running it (see `docs/design.md`, §8).
    pub helped_chunks: u64,
    /// Large buffers (64 KiB and up) a write had to allocate because its variable's pool had
    /// no version to reuse: the first touch of fresh pages is what makes them slow.
    pub fresh_buffers: u64,
    /// Versions of this variable allocated right now: the current one, those held by
    /// snapshots or kept for store snapshots in progress, retired ones waiting for a grace
    /// period, and idle ones in the pool, ready for the next writes. This is the variable's
    /// memory, in tensors.
    pub live_versions: usize,
}

/// What one critical section did so far; see
/// [`CriticalSection::stats`](crate::CriticalSection::stats).
///
/// Read counter by counter, like [`Stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SectionStats {
    /// Executions run (committed, failed or panicked).
    pub executions: u64,
    /// Batches: each ran one or more executions that arrived together, and committed once
    /// (`executions / batches` is the mean batch size).
    pub batches: u64,
    /// The largest batch.
    pub max_batch: u64,
}

/// The live counters behind [`SectionStats`]; Relaxed, like [`Counters`].
#[derive(Debug, Default)]
pub(crate) struct SectionCounters {
    executions: AtomicU64,
    batches: AtomicU64,
    max_batch: AtomicU64,
}

impl SectionCounters {
    pub(crate) fn batch(&self, size: u64) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.executions.fetch_add(size, Ordering::Relaxed);
        self.max_batch.fetch_max(size, Ordering::Relaxed);
    }
    pub(crate) fn read(&self) -> SectionStats {
        SectionStats {
            executions: self.executions.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            max_batch: self.max_batch.load(Ordering::Relaxed),
        }
    }
}

/// The live counters behind [`Stats`], shared by a variable and all its versions.
///
/// Every update is Relaxed: they are diagnostics, and publish no other memory. None is
/// written on every write: allocations and frees are rare, a lost CAS is rare, and the
/// combining figures are written only by the holder of the combiner flag, with plain stores.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    cas_retries: AtomicU64,
    combined_batches: AtomicU64,
    combined_deltas: AtomicU64,
    max_batch: AtomicU64,
    fresh_buffers: AtomicU64,
    live_versions: AtomicUsize,
}

impl Counters {
    pub(crate) fn version_allocated(&self, bytes: usize) {
        self.live_versions.fetch_add(1, Ordering::Relaxed);
        self.buffer_allocated(bytes);
    }
    pub(crate) fn version_freed(&self, _bytes: usize) {
        self.live_versions.fetch_sub(1, Ordering::Relaxed);
    }
    /// A buffer of `bytes` was allocated for a version (counted when large).
    pub(crate) fn buffer_allocated(&self, bytes: usize) {
        if bytes >= LARGE {
            self.fresh_buffers.fetch_add(1, Ordering::Relaxed);
        }
    }
    /// Versions of the variable allocated now (its [`Stats::live_versions`]).
    pub(crate) fn live(&self) -> usize {
        self.live_versions.load(Ordering::Relaxed)
    }
    pub(crate) fn cas_retried(&self) {
        self.cas_retries.fetch_add(1, Ordering::Relaxed);
    }
    /// A combined pass of `batch` deltas. Only the combiner flag's holder calls this, so a
    /// load and a store are enough (no read-modify-write on the write path).
    pub(crate) fn combined(&self, batch: usize) {
        let bump = |counter: &AtomicU64, by: u64| {
            counter.store(counter.load(Ordering::Relaxed) + by, Ordering::Relaxed);
        };
        bump(&self.combined_batches, 1);
        bump(&self.combined_deltas, batch as u64);
        if self.max_batch.load(Ordering::Relaxed) < batch as u64 {
            self.max_batch.store(batch as u64, Ordering::Relaxed);
        }
    }
    pub(crate) fn read(&self, commits: u64, helped_chunks: u64) -> Stats {
        Stats {
            commits,
            helped_chunks,
            cas_retries: self.cas_retries.load(Ordering::Relaxed),
            combined_batches: self.combined_batches.load(Ordering::Relaxed),
            combined_deltas: self.combined_deltas.load(Ordering::Relaxed),
            max_batch: self.max_batch.load(Ordering::Relaxed),
            fresh_buffers: self.fresh_buffers.load(Ordering::Relaxed),
            live_versions: self.live_versions.load(Ordering::Relaxed),
        }
    }
}

/// Buffers at least this large are counted in [`Stats::fresh_buffers`].
const LARGE: usize = 64 * 1024;
