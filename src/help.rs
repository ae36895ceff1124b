//! Helping: the writers waiting for a large combining pass compute part of it.
//!
//! A pass over a large tensor is a stream through memory, and one core streams at about
//! half of what two do. Meanwhile the writers whose deltas it applies have
//! nothing to do but wait. So the holder of the combiner flag cuts a large pass into
//! chunks and publishes it as a [`Job`]; every waiter that may park looks for one before
//! it yields or parks ([`Helpers::help`]) and claims chunks until none is left, and the
//! holder claims them too. The waiters whose deltas are in the pass are woken for it (they
//! park while a large pass runs).
//!
//! A chunk is claimed with one `fetch_add`, so each is computed by exactly one thread, into
//! its own part of the new version's buffer. The holder publishes the version only once
//! every thread that may still touch the job has left it:
//! * a helper counts itself `inside`, then (after a `SeqCst` fence) loads the job;
//! * the holder, once no chunk is left to claim, unpublishes the job, then (after a `SeqCst`
//!   fence) waits until nobody is inside.
//!
//! So either the helper's count is seen by the holder, which waits for it to leave (and its
//! Release on leaving hands its chunks to the holder's Acquire), or the helper sees the job
//! gone and touches nothing (Dekker, as in [`serve`](crate::serve)). The job lives on the
//! holder's stack: nobody reaches it after the holder stops waiting. A holder that panics
//! in a chunk withdraws the job the same way, on unwind, and publishes nothing; a helper
//! that panicked would leave its chunk unwritten in a version about to be published, so it
//! aborts the process instead (the kernel's arithmetic does not panic).
//!
//! What it costs: a helper preempted in the middle of a chunk holds the pass up until it
//! runs again, so chunks are small (a few microseconds each), and only passes over tensors
//! at least [`HELP_BYTES`] large are split: below that, waking a parked waiter costs about
//! what it would save, and on cores busy with other processes it costs more than it saves
//! (docs/benchmarks.md has the figures).

use std::ptr;

use crate::sync::{fence, AtomicPtr, AtomicU64, AtomicUsize, Backoff, Handoff, Ordering};

/// Passes over tensors of at least this many bytes are split into chunks for helpers.
/// Under loom, those of more than one 4-byte element: a split pass of one chunk runs
/// without a job, so the models of `loom/`, whose tensors are scalars, never split one (the
/// job's atomics took some of them past loom's branch limit); `loom_help.rs` models the
/// protocol itself.
/// Under miri, 16 bytes (the tests' tensors are cut to a few elements there, and the split
/// pass's raw writes are what miri should see).
pub(crate) const HELP_BYTES: usize = if cfg!(mvtensor_loom) {
    5
} else if cfg!(miri) {
    16
} else {
    1024 * 1024
};
/// Bytes of the tensor in one chunk: enough work that claiming it costs little beside
/// computing it, few enough that a pass has several. Under loom, one element; under miri,
/// eight bytes.
pub(crate) const CHUNK_BYTES: usize = if cfg!(mvtensor_loom) {
    4
} else if cfg!(miri) {
    8
} else {
    128 * 1024
};

/// One split pass: `work(i)` computes chunk `i` of `chunks`.
struct Job<'w> {
    chunks: usize,
    next: AtomicUsize,
    work: &'w (dyn Fn(usize) + Sync),
    /// Every look at the job happens after it is made and before the holder's return: loom
    /// checks both.
    alive: Handoff,
}

impl Job<'_> {
    /// Claims and computes chunks until none is left; returns how many it computed.
    fn drain(&self) -> u64 {
        let mut computed = 0;
        loop {
            self.alive.look();
            // Relaxed: only uniqueness of the claim matters; the chunk's writes are handed
            // over by `inside` (helpers) or are the holder's own.
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.chunks {
                return computed;
            }
            (self.work)(i);
            computed += 1;
        }
    }
}

/// The job of the pass in progress (if split) and the helpers inside it: one per combiner.
pub(crate) struct Helpers {
    job: AtomicPtr<Job<'static>>,
    inside: AtomicUsize,
    /// Chunks computed by helpers so far ([`Stats::helped_chunks`](crate::Stats)).
    helped: AtomicU64,
}

impl Default for Helpers {
    fn default() -> Self {
        Self {
            job: AtomicPtr::new(ptr::null_mut()),
            inside: AtomicUsize::new(0),
            helped: AtomicU64::new(0),
        }
    }
}

impl Helpers {
    /// Runs `work` over `chunks` chunks with whoever helps, then returns once every chunk is
    /// computed and no helper touches the job any more. `wake` is called once the job is
    /// published (to wake parked waiters that may help). Only the combiner flag's holder
    /// calls it, so one job at most is published at a time.
    pub(crate) fn run(&self, chunks: usize, work: &(dyn Fn(usize) + Sync), wake: impl FnOnce()) {
        let job = Job {
            chunks,
            next: AtomicUsize::new(0),
            work,
            alive: Handoff::default(),
        };
        // The job is made: every look at it must come after (loom checks the Release and
        // Acquire that publish it).
        job.alive.touch();
        // The `'static` is erased: see the module docs for why no helper reaches the job
        // after we return.
        let erased: *const Job<'_> = &job;
        // Release: the job's fields are visible to a helper that loads the pointer.
        self.job
            .store(erased.cast::<Job<'static>>().cast_mut(), Ordering::Release);
        {
            // Withdraws the job even if `work` panics: the job must not outlive this frame.
            let _withdraw = Withdraw(self);
            wake();
            job.drain();
        }
        job.alive.touch(); // the job is gone: nobody may look at it any more
    }

    /// Computes chunks of the published job, if there is one.
    pub(crate) fn help(&self) {
        // Relaxed pre-check: usually no job, and then no write to a shared line.
        if self.job.load(Ordering::Relaxed).is_null() {
            return;
        }
        // Relaxed: ordered before our load of the job by the fence.
        self.inside.fetch_add(1, Ordering::Relaxed);
        // The helper's half of the Dekker check (module docs).
        fence(Ordering::SeqCst);
        // Acquire: pairs with the publishing Release, so the job's fields are visible.
        let job = self.job.load(Ordering::Acquire);
        let _leave = Leave(self);
        // SAFETY: published and counted inside: the holder does not return (and the job
        // stays on its stack) until we leave.
        if let Some(job) = unsafe { job.as_ref() } {
            let computed = job.drain();
            if computed > 0 {
                // Relaxed: a diagnostic counter.
                self.helped.fetch_add(computed, Ordering::Relaxed);
            }
        }
    }

    /// Chunks computed by helpers so far.
    pub(crate) fn helped(&self) -> u64 {
        // Relaxed: a diagnostic counter.
        self.helped.load(Ordering::Relaxed)
    }
}

/// The holder's end of a job (also on unwind): unpublish it, then wait until no helper is
/// inside.
struct Withdraw<'h>(&'h Helpers);

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        // Relaxed: ordered before our look at `inside` by the fence.
        self.0.job.store(ptr::null_mut(), Ordering::Relaxed);
        // The holder's half of the Dekker check (module docs).
        fence(Ordering::SeqCst);
        let mut backoff = Backoff::default();
        // Acquire: pairs with each helper's Release on leaving, so its chunks are ours.
        while self.0.inside.load(Ordering::Acquire) != 0 {
            backoff.snooze();
        }
    }
}

/// A helper leaving a job.
struct Leave<'h>(&'h Helpers);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        // (Not under loom: there a panic is a model's finding, to be reported as such.)
        if std::thread::panicking() && !cfg!(mvtensor_loom) {
            // A chunk panicked (the kernel's arithmetic does not: wrapping integers, IEEE
            // floats). Unwinding on would publish a version with that chunk unwritten, and
            // free our own request, still announced, from under its flag holder: abort.
            eprintln!("mvtensor: a helper panicked in a combining pass; aborting");
            std::process::abort();
        }
        // Release: our chunks happen-before the holder's return.
        self.0.inside.fetch_sub(1, Ordering::Release);
    }
}

#[cfg(all(test, mvtensor_loom))]
#[path = "tests/loom_help.rs"]
mod loom_help;

#[cfg(all(test, not(mvtensor_loom)))]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::thread;

    use super::*;

    /// The holder stays in its first chunk until the other one is computed, which only a
    /// helper can then do: the job is shared, each chunk is computed once, and `run`
    /// returns with the helper's chunk in place.
    #[test]
    fn a_waiting_thread_computes_a_chunk_the_holder_does_not_get_to() {
        let helpers = Helpers::default();
        let out: [AtomicU64; 2] = Default::default();
        let (over, claimed) = (AtomicBool::new(false), AtomicBool::new(false));
        let holder = thread::current().id();
        thread::scope(|s| {
            s.spawn(|| {
                while !over.load(Ordering::Acquire) {
                    helpers.help();
                    std::hint::spin_loop();
                }
            });
            let work = |i: usize| {
                // Whoever claims a chunk first waits until the other chunk is computed, which
                // the other thread must then do.
                if !claimed.swap(true, Ordering::Relaxed) {
                    while out[1 - i].load(Ordering::Acquire) == 0 {
                        std::hint::spin_loop();
                    }
                }
                let by = if thread::current().id() == holder {
                    1
                } else {
                    2
                };
                assert_eq!(out[i].swap(by, Ordering::Release), 0, "chunk {i} twice");
            };
            helpers.run(2, &work, || {});
            over.store(true, Ordering::Release);
        });
        let by: Vec<u64> = out.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        assert!(by.contains(&1) && by.contains(&2), "computed by {by:?}");
        assert_eq!(helpers.helped(), 1);
    }
}
