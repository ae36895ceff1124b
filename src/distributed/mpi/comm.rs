//! The MPI calls: communicator handles, non-blocking collectives polled against a deadline,
//! and what a rank learns about the others once a deadline has passed.
//!
//! Every collective is started non-blocking and polled with `MPI_Testall` until it completes
//! or the deadline passes. MPI cannot cancel a collective, so one that missed its deadline
//! may still read and write its buffers: a [`Flight`] owns them, and forgets them (never
//! frees them) if it does not land. The rank then takes part in no other collective.

use std::ffi::c_int;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mpi::ffi;

use super::watch::Watch;
use crate::distributed::Problem;

/// A communicator handle.
#[derive(Debug, Clone, Copy)]
pub(super) struct Handle(pub(super) ffi::MPI_Comm);

// SAFETY: an MPI communicator handle names a process-wide object that any thread may use;
// MPI is initialized with `MPI_THREAD_SERIALIZED` and every call that uses a handle is made
// under the lock of the `Comm` that holds it, so no two threads call MPI at once.
unsafe impl Send for Handle {}
// SAFETY: as for `Send`: shared handles are only used under that lock.
unsafe impl Sync for Handle {}

/// This rank's communicators and its state: what every MPI call goes through, under the
/// cluster's lock.
#[derive(Debug)]
pub(super) struct Comm {
    /// The collectives of the replicas (a duplicate of the world: no user message matches).
    pub(super) data: Handle,
    /// Rank-to-rank calls after a missed deadline.
    pub(super) diag: Handle,
    pub(super) rank: usize,
    pub(super) ranks: usize,
    pub(super) timeout: Duration,
    /// The first fault: every later collective fails at once with it.
    pub(super) fault: Option<Problem>,
    /// The watchdog of blocking all-reduces ([`Collectives::Watched`](super::Collectives));
    /// `None`: they are non-blocking and polled.
    pub(super) watch: Option<Arc<Watch>>,
}

/// Buffers that a call in flight reads or writes, and its requests. The buffers' memory is
/// on the heap, so moving `B` does not move it.
pub(super) struct Flight<B> {
    requests: Vec<ffi::MPI_Request>,
    buffers: B,
}

impl<B> Flight<B> {
    /// A flight whose calls will use only memory that `buffers` owns.
    pub(super) fn new(buffers: B) -> Self {
        Self {
            requests: Vec::new(),
            buffers,
        }
    }

    pub(super) fn buffers(&mut self) -> &mut B {
        &mut self.buffers
    }

    /// The buffers of a flight whose calls were all blocking (none is in flight).
    pub(super) fn into_buffers(self) -> B {
        debug_assert!(self.requests.is_empty(), "calls in flight");
        self.buffers
    }

    /// Adds a call in flight; `start` makes it, over memory of the buffers only.
    pub(super) fn start(
        &mut self,
        call: &'static str,
        start: impl FnOnce(&mut ffi::MPI_Request) -> c_int,
    ) -> Result<(), Problem> {
        // SAFETY: a request handle is plain data, all zeros before MPI writes it.
        let mut request: ffi::MPI_Request = unsafe { std::mem::zeroed() };
        checked(call, start(&mut request))?;
        self.requests.push(request);
        Ok(())
    }

    /// Waits until every call completes and returns the buffers, or fails once `comm`'s
    /// deadline has passed: the buffers are then forgotten (MPI may still use them) and
    /// `comm` is faulted.
    pub(super) fn land(
        mut self,
        comm: &mut Comm,
        operation: &'static str,
        step: i64,
    ) -> Result<B, Problem> {
        match comm.complete(&mut self.requests, operation, step) {
            Ok(()) => Ok(self.buffers),
            Err(problem) => {
                std::mem::forget(self.buffers);
                Err(problem)
            }
        }
    }
}

impl Comm {
    /// `Err` at once after a fault.
    pub(super) fn usable(&self) -> Result<(), Problem> {
        match &self.fault {
            Some(fault) => Err(Problem::Faulted(Box::new(fault.clone()))),
            None => Ok(()),
        }
    }

    /// Records `problem` as this rank's fault, and returns it.
    pub(super) fn faulted(&mut self, problem: Problem) -> Problem {
        self.fault.get_or_insert(problem).clone()
    }

    /// Polls `requests` until all complete, or the deadline passes.
    fn complete(
        &mut self,
        raw: &mut [ffi::MPI_Request],
        operation: &'static str,
        step: i64,
    ) -> Result<(), Problem> {
        let start = Instant::now();
        let count = c_int::try_from(raw.len()).expect("a few requests");
        loop {
            let mut done: c_int = 0;
            // SAFETY: `raw` holds `count` requests started by this rank and not completed;
            // MPI writes completed ones back as null requests, and no status is asked for.
            let rc = unsafe {
                ffi::MPI_Testall(
                    count,
                    raw.as_mut_ptr(),
                    &mut done,
                    ffi::RSMPI_STATUSES_IGNORE,
                )
            };
            if let Err(problem) = checked("MPI_Testall", rc) {
                return Err(self.faulted(problem));
            }
            if done != 0 {
                return Ok(());
            }
            let waited = start.elapsed();
            if waited >= self.timeout {
                let missing = super::watch::missing(self.diag, self.rank, self.ranks, step);
                let timeout_ms = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX);
                return Err(self.faulted(Problem::Stalled {
                    operation,
                    step,
                    timeout_ms,
                    missing,
                }));
            }
            // Spin while a collective usually completes; then let the other ranks of an
            // oversubscribed machine (and this rank's own threads) run between polls.
            if waited > SPIN {
                std::thread::yield_now();
            }
        }
    }
}

/// How long a rank polls without yielding its core.
const SPIN: Duration = Duration::from_micros(50);

/// `Ok` for `MPI_SUCCESS`, else the library's text for `rc`.
pub(super) fn checked(call: &'static str, rc: c_int) -> Result<(), Problem> {
    if rc == 0 {
        return Ok(());
    }
    let mut text = vec![0u8; ffi::MPI_MAX_ERROR_STRING as usize + 1];
    let mut len: c_int = 0;
    // SAFETY: `text` holds MPI_MAX_ERROR_STRING bytes and more; MPI writes at most that
    // many and their length into `len`.
    unsafe { ffi::MPI_Error_string(rc, text.as_mut_ptr().cast(), &mut len) };
    text.truncate(usize::try_from(len).unwrap_or(0).min(text.len()));
    Err(Problem::Mpi {
        call,
        code: rc,
        message: String::from_utf8_lossy(&text).into_owned(),
    })
}
