//! Batches: executions of one section that arrive together run back to back on one thread,
//! under one set of tickets, and commit once.
//!
//! With strict first-come-first-served tickets, every execution hands the resources to the
//! next waiter, which must be running to take them. With more threads than cores it often is
//! not, and each hand-off waited for the scheduler: a tiny execution took ~4 us at 4 threads
//! on 2 cores instead of ~0.4 us alone. (Parking the waiters far from the front made it
//! worse: 8 threads went from 170 k to 30 k executions/s, every hand-off now a wake-up.)
//!
//! So an execution announces itself as a [`Job`] on the section's stack of pending jobs and
//! races for the section's flag ([`announce`](crate::announce)), as dense deltas do in
//! [`combine`](crate::combine). The
//! winner takes the whole stack, takes the resources' tickets once, runs every job in the
//! order they arrived on one shared [`Txn`] (each sees the writes of those before it; a job
//! that fails or panics is rolled back to where it began), commits the survivors' writes as
//! one version per variable, lets the tickets go, and only then marks each job done. Waiters
//! spin and yield until their job is done or the flag is free; a job pushed while a batch
//! runs is taken by the next one, so none starves.
//!
//! Every job's caller is blocked inside its call while its job runs, so the batch's commit
//! point lies within every call: the executions are linearizable, in batch order. What a
//! batch changes is what an observer can count: readers never see the state between two jobs
//! of one batch, and a variable's version number grows by one per batch, not per job.
//!
//! A job runs on whichever thread holds the flag, which is why `execute` requires `Send`
//! closures and results. A job lives on its caller's stack; marking it done is the batch's
//! last access to it.

use std::ptr;

use super::{SectionInner, Txn};
use crate::announce::{Announcements, Linked};
use crate::stats::SectionCounters;
use crate::sync::{AtomicU64, Backoff, Ordering};

/// Not run yet.
const WAITING: u64 = 0;
/// Ran, and its batch committed (its closure's result says whether its writes were kept).
const DONE: u64 = 1;
/// Its batch panicked outside any closure: nothing of the batch was committed.
const ABANDONED: u64 = 2;

/// One caller's execution, announced for whoever holds the flag next.
pub(super) struct Job {
    /// The caller's closure, type-erased: `call(data, txn)` runs it and says whether its
    /// writes are kept. Valid until `state` leaves `WAITING`.
    data: *mut (),
    call: unsafe fn(*mut (), &mut Txn<'_>) -> bool,
    next: *mut Job,
    state: AtomicU64,
}

impl Job {
    /// A job that runs `run`, which returns whether its writes are kept. `run` must outlive
    /// the job's submission (it lives on the same stack frame).
    pub(super) fn new<F: FnMut(&mut Txn<'_>) -> bool + Send>(run: &mut F) -> Self {
        Self {
            data: (run as *mut F).cast(),
            call: call::<F>,
            next: ptr::null_mut(),
            state: AtomicU64::new(WAITING),
        }
    }
}

impl Linked for Job {
    fn next(&mut self) -> &mut *mut Self {
        &mut self.next
    }
}

/// Runs the closure behind a job's `data`.
///
/// # Safety
/// `data` must point to a live `F` that nobody else is using.
unsafe fn call<F: FnMut(&mut Txn<'_>) -> bool>(data: *mut (), txn: &mut Txn<'_>) -> bool {
    // SAFETY: the caller's contract.
    unsafe { (*data.cast::<F>())(txn) }
}

/// A section's pending jobs, the flag of the thread running a batch, and what batches did.
#[derive(Default)]
pub(super) struct Batcher {
    jobs: Announcements<Job>,
    pub(super) counters: SectionCounters,
}

impl SectionInner {
    /// Runs `job`, alone or in a batch, and returns once its batch has committed.
    ///
    /// # Panics
    /// If the batch that took the job panicked outside any closure (a bug): nothing of that
    /// batch was committed, and this caller is told so.
    pub(super) fn submit(&self, job: &mut Job) {
        let batcher = &self.batcher;
        let state = if batcher.jobs.try_lock() {
            self.run_batch(Some(job));
            // Relaxed: we set it ourselves, in `run_batch`.
            job.state.load(Ordering::Relaxed)
        } else {
            // SAFETY: `job` lives on our caller's stack, and we do not return before a batch
            // has set its state.
            unsafe { batcher.jobs.push(job) };
            let mut backoff = Backoff::default();
            loop {
                // Acquire: pairs with the batch's Release, so its commit (and the job's
                // result, written by the closure) happen-before our return.
                let state = job.state.load(Ordering::Acquire);
                if state != WAITING {
                    break state;
                }
                if batcher.jobs.try_lock() {
                    self.run_batch(None); // our job is on the stack: this batch runs it
                } else {
                    backoff.snooze();
                }
            }
        };
        assert_eq!(
            state, DONE,
            "section `{}`: the batch that ran this execution panicked before committing; \
             nothing of it was committed",
            self.name
        );
    }

    /// Holding the flag: runs every pending job (oldest first), then `mine`, as one batch.
    fn run_batch(&self, mine: Option<&mut Job>) {
        let _flag = Flag(&self.batcher);
        let mine: *mut Job = mine.map_or(ptr::null_mut(), |job| job);
        let first = reverse(self.batcher.jobs.take(), mine);
        // Whatever happens below, every job gets a state, so no caller waits forever.
        let mut finish = Finish {
            first,
            state: ABANDONED,
        };
        if first.is_null() {
            return; // a previous batch ran our job already
        }
        let tickets = self.enter();
        let mut txn = Txn::new(&self.name, &self.resources);
        let (mut job, mut size) = (first, 0);
        while !job.is_null() {
            size += 1;
            txn.begin();
            // SAFETY: a taken job is valid until its state is set, in `finish`; its closure is
            // used by nobody else (its caller waits), and `Job::new` paired `call` with it.
            let kept = unsafe { ((*job).call)((*job).data, &mut txn) };
            if !kept {
                txn.rollback();
            }
            // SAFETY: as above.
            job = unsafe { (*job).next };
        }
        txn.commit();
        drop(tickets); // only after the commit: the next holder must see our writes
        self.batcher.counters.batch(size);
        finish.state = DONE;
    }
}

/// Turns the stack (newest first) into a list in arrival order, followed by `last`; returns
/// its first job. The caller holds the flag, so the taken jobs' links are its own.
fn reverse(newest: *mut Job, last: *mut Job) -> *mut Job {
    let (mut done, mut rest) = (last, newest);
    while !rest.is_null() {
        // SAFETY: a taken job is valid until its state is set, and only we touch its links.
        unsafe {
            let next = (*rest).next;
            (*rest).next = done;
            done = rest;
            rest = next;
        }
    }
    done
}

/// Marks every job of a batch with its state, also on unwind.
struct Finish {
    first: *mut Job,
    state: u64,
}

impl Drop for Finish {
    fn drop(&mut self) {
        let mut job = self.first;
        while !job.is_null() {
            // SAFETY: valid until its state is stored, below; read the link first.
            let next = unsafe { (*job).next };
            // Release: the commit happens-before the caller's return. This is the last access
            // to `job`: its caller may return and free it right after.
            // SAFETY: valid until this very store.
            unsafe { (*job).state.store(self.state, Ordering::Release) };
            job = next;
        }
    }
}

/// The batch flag, held; dropping it (also on unwind) lets go.
struct Flag<'b>(&'b Batcher);

impl Drop for Flag<'_> {
    fn drop(&mut self) {
        self.0.jobs.unlock();
    }
}
