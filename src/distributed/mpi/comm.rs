//! The MPI calls: communicator handles, non-blocking collectives polled against a deadline,
//! and what a rank learns about the others once a deadline has passed.
//!
//! Every collective is started non-blocking and polled with `MPI_Testall` until it completes
//! or the deadline passes. MPI cannot cancel a collective, so one that missed its deadline
//! (or whose later calls failed to start) may still read and write its buffers: a [`Flight`]
//! owns them, and leaks them (never frees them) if it is dropped before every call landed.
//! The rank is faulted then and takes part in no other collective.

use std::ffi::c_int;
use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mpi::ffi;

use super::watch::Watch;
use crate::distributed::Problem;

/// A communicator handle.
#[derive(Debug, Clone, Copy)]
pub(super) struct Handle(pub(super) ffi::MPI_Comm);

// SAFETY: an MPI communicator handle names a process-wide object that any thread may use,
// as the thread level MPI was initialized with allows. `Collectives::Polled` initializes
// `MPI_THREAD_SERIALIZED`: every MPI call, on either handle, is made under the lock of the
// `Comm` that holds it (`Cluster::abort` takes it too), so no two threads call MPI at once.
// `Collectives::Watched` initializes `MPI_THREAD_MULTIPLE`: the replicas' calls are made
// under that lock, and the watchdog thread calls MPI without it (`MPI_Isend`, `MPI_Iprobe`
// and `MPI_Recv` on the `diag` handle, which nothing else uses meanwhile, then
// `MPI_Abort`), beside a blocked all-reduce on the `data` handle, as that level permits.
unsafe impl Send for Handle {}
// SAFETY: as for `Send`: a shared handle is used only as described there.
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
///
/// A flight dropped with requests (calls started and not seen to land: a missed deadline,
/// a failed `MPI_Testall`, a later call that failed to start) leaks its buffers: MPI may
/// still read and write them, and cannot be told to stop.
pub(super) struct Flight<B> {
    requests: Vec<ffi::MPI_Request>,
    /// Dropped by [`Drop`] only when no request is left; taken by [`release`](Self::release).
    buffers: ManuallyDrop<B>,
}

impl<B> Drop for Flight<B> {
    fn drop(&mut self) {
        if self.requests.is_empty() {
            // SAFETY: no call uses the buffers (none was started, or every one landed and
            // `release` took them, which forgets the flight so this drop never runs), and
            // this is their only drop.
            unsafe { ManuallyDrop::drop(&mut self.buffers) };
        }
        // Otherwise the buffers stay allocated for ever: a collective in flight may still
        // write into them, and freeing them would hand that memory to someone else.
    }
}

impl<B> Flight<B> {
    /// A flight whose calls will use only memory that `buffers` owns.
    pub(super) fn new(buffers: B) -> Self {
        Self {
            requests: Vec::new(),
            buffers: ManuallyDrop::new(buffers),
        }
    }

    pub(super) fn buffers(&mut self) -> &mut B {
        &mut self.buffers
    }

    /// The buffers of a flight whose calls were all blocking (none is in flight).
    pub(super) fn into_buffers(self) -> B {
        debug_assert!(self.requests.is_empty(), "calls in flight");
        self.release()
    }

    /// The buffers, once no call of the flight uses them.
    fn release(self) -> B {
        let mut this = ManuallyDrop::new(self);
        drop(std::mem::take(&mut this.requests));
        // SAFETY: `this` is never dropped, so the buffers are taken here once, and nothing
        // else drops them.
        unsafe { ManuallyDrop::take(&mut this.buffers) }
    }

    /// Adds a call in flight; `start` makes it, over memory of the buffers only. A call that
    /// fails to start faults `comm`: the other ranks may be in the collective already, and
    /// the calls started before it stay in flight (the flight then leaks its buffers).
    pub(super) fn start(
        &mut self,
        comm: &mut Comm,
        call: &'static str,
        start: impl FnOnce(&mut ffi::MPI_Request) -> c_int,
    ) -> Result<(), Problem> {
        // SAFETY: a request handle is plain data, all zeros before MPI writes it.
        let mut request: ffi::MPI_Request = unsafe { std::mem::zeroed() };
        checked(call, start(&mut request)).map_err(|problem| comm.faulted(problem))?;
        self.requests.push(request);
        Ok(())
    }

    /// Waits until every call completes and returns the buffers, or fails once `comm`'s
    /// deadline has passed: `comm` is faulted, and the flight's drop leaks the buffers (MPI
    /// may still use them).
    pub(super) fn land(
        mut self,
        comm: &mut Comm,
        operation: &'static str,
        step: i64,
    ) -> Result<B, Problem> {
        comm.complete(&mut self.requests, operation, step)?;
        Ok(self.release())
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
        loop {
            let mut all = true;
            for part in raw.chunks_mut(MAX_COUNT) {
                let mut done: c_int = 0;
                // SAFETY: `part` holds requests started by this rank, no more than a count
                // holds; MPI writes completed ones back as null requests (which a later
                // test takes as complete), and no status is asked for.
                let rc = unsafe {
                    ffi::MPI_Testall(
                        count(part.len()),
                        part.as_mut_ptr(),
                        &mut done,
                        ffi::RSMPI_STATUSES_IGNORE,
                    )
                };
                if let Err(problem) = checked("MPI_Testall", rc) {
                    return Err(self.faulted(problem));
                }
                all &= done != 0;
            }
            if all {
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

/// The most elements (or requests) one MPI call counts: its counts are C `int`s.
pub(super) const MAX_COUNT: usize = c_int::MAX as usize;

/// `len` as a count of one MPI call; `len` is at most [`MAX_COUNT`] (the callers split
/// longer runs with [`pieces`]).
pub(super) fn count(len: usize) -> c_int {
    c_int::try_from(len).unwrap_or(c_int::MAX)
}

/// `len` elements as runs of at most `max` (at least 1): each run's offset and length, in
/// order. None for no elements.
pub(super) fn pieces(len: usize, max: usize) -> impl Iterator<Item = (usize, usize)> {
    let max = max.max(1);
    (0..len.div_ceil(max)).map(move |i| {
        let at = i * max;
        (at, max.min(len - at))
    })
}

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

#[cfg(test)]
mod tests {
    use super::pieces;

    #[test]
    fn pieces_cover_the_elements_in_order_and_none_is_longer_than_the_most() {
        let all: Vec<_> = pieces(10, 4).collect();
        assert_eq!(all, [(0, 4), (4, 4), (8, 2)]);
        assert_eq!(pieces(8, 4).collect::<Vec<_>>(), [(0, 4), (4, 4)]);
        assert_eq!(pieces(3, 4).collect::<Vec<_>>(), [(0, 3)]);
        assert_eq!(pieces(0, 4).count(), 0);
        // A run longer than a C int counts: split at the most an MPI call counts.
        let long = super::MAX_COUNT * 2 + 5;
        let runs: Vec<_> = pieces(long, super::MAX_COUNT).collect();
        assert_eq!(runs.len(), 3);
        assert!(runs.iter().all(|&(_, n)| n <= super::MAX_COUNT));
        assert_eq!(runs[2], (super::MAX_COUNT * 2, 5));
    }
}
