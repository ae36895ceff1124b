//! Batches: executions of one section that arrive together run back to back on one thread,
//! under one set of tickets, and commit once.
//!
//! With strict first-come-first-served tickets, every execution hands the resources to the
//! next waiter, which must be running to take them. With more threads than cores it often is
//! not, and each hand-off waits for the scheduler, which costs a tiny execution many times
//! its own work. (Parking the waiters far from the front makes it worse: every hand-off is
//! then a wake-up.)
//!
//! So an execution announces itself as a [`Job`] and races for the section's flag, as dense
//! deltas do in [`combine`](crate::combine), through the same protocol
//! ([`serve`](crate::serve)). The winner takes every pending job, takes the resources'
//! tickets once, runs the jobs in the order they arrived on one shared [`Txn`] (each sees
//! the writes of those before it; a job that fails or panics is rolled back to where it
//! began), commits the survivors' writes as one version per variable, lets the tickets go,
//! and only then marks each job done. Waiters spin, yield a few times, and then park until
//! the batch that ran their job wakes them: a tiny execution is shorter than a wake-up, but
//! a long one (an optimizer step) should not have its waiters take the cores it needs. Parking
//! costs a tiny section's throughput a little beside waiters that only spin and yield, and
//! gives a long one its cores.
//!
//! Every job's caller is blocked inside its call while its job runs, so the batch's commit
//! point lies within every call: the executions are linearizable, in batch order. What a
//! batch changes is what an observer can count: readers never see the state between two jobs
//! of one batch, and a variable's version number grows by one per batch, not per job.
//!
//! A job runs on whichever thread holds the flag, which is why `execute` requires `Send`
//! closures and results. A job lives on its caller's stack; marking it done is the batch's
//! last access to it.

use super::{SectionInner, Txn};
use crate::serve::{Request, Serve, Server, Wait, Waiters};
use crate::stats::SectionCounters;

/// Ran, and its batch committed (its closure's result says whether its writes were kept).
const DONE: u64 = 1;
/// Its batch panicked outside any closure: nothing of the batch was committed.
const ABANDONED: u64 = 2;

/// One caller's execution, announced for whoever holds the flag next.
pub(super) struct Job {
    /// The caller's closure, type-erased: `call(data, txn)` runs it and says whether its
    /// writes are kept. Valid until the job's request has its outcome.
    data: *mut (),
    call: unsafe fn(*mut (), &mut Txn<'_>) -> bool,
}

impl Job {
    /// A job that runs `run`, which returns whether its writes are kept. `run` must outlive
    /// the job's submission (it lives on the same stack frame).
    pub(super) fn new<F: FnMut(&mut Txn<'_>) -> bool + Send>(run: &mut F) -> Self {
        Self {
            data: (run as *mut F).cast(),
            call: call::<F>,
        }
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
    jobs: Server<Job>,
    pub(super) counters: SectionCounters,
}

impl SectionInner {
    /// Runs `job`, alone or in a batch, and returns once its batch has committed.
    ///
    /// # Panics
    /// If the batch that took the job panicked outside any closure (a bug): nothing of that
    /// batch was committed, and this caller is told so.
    pub(super) fn submit(&self, job: Job) {
        // SAFETY: every job of this section is served by `self`; a job borrows nothing
        // beyond its caller's frame, which waits in `submit`.
        let state = unsafe {
            self.batcher
                .jobs
                .submit(&mut Request::new(job), Wait::SpinIfCoresFree, self)
        };
        assert_eq!(
            state, DONE,
            "section `{}`: the batch that ran this execution panicked before committing; \
             nothing of it was committed",
            self.name
        );
    }
}

/// Holding the flag: runs a batch of jobs (oldest first) under one set of tickets.
impl Serve<Job> for SectionInner {
    const UNWOUND: u64 = ABANDONED;

    fn serve(&self, batch: &mut [&mut Job], _: &Waiters<'_>) -> u64 {
        let tickets = self.enter();
        // SAFETY: `serve` runs with the batch flag held.
        let (slots, records) = unsafe { (self.slots.get(), self.records.get()) };
        let mut txn = Txn::new(&self.name, &self.resources, &self.ids, slots, records);
        for job in batch.iter() {
            txn.begin();
            // SAFETY: a job's closure is used by nobody else (its caller waits until the
            // batch is over), and `Job::new` paired `call` with it.
            let kept = unsafe { (job.call)(job.data, &mut txn) };
            if !kept {
                txn.rollback();
            }
        }
        txn.commit();
        drop(tickets); // only after the commit: the next holder must see our writes
        self.batcher.counters.batch(batch.len() as u64);
        DONE
    }
}
