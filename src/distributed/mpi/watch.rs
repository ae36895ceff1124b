//! What a rank does once a deadline has passed: asks who is alive, and, for the blocking
//! all-reduces of [`Collectives::Watched`](super::Collectives::Watched), the watchdog that
//! ends the job when one of them misses its deadline.
//!
//! The diagnosis runs on a communicator of its own, so that it can run while a collective
//! of the replicas is still in flight (or, watched, blocked) on another thread.

use std::ffi::c_int;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mpi::ffi;

use super::comm::Handle;
use crate::distributed::Problem;
use crate::sync::lock_std as lock;

/// The tag of the rank-to-rank calls made after a missed deadline.
const ALIVE_TAG: c_int = 7;

/// How long a rank listens for the others after a missed deadline.
const GRACE: Duration = Duration::from_millis(1000);

/// After a missed deadline: tells every other rank that this one is alive and listens,
/// for a moment, for the others to say so too. Returns the ranks not heard from.
///
/// A failed call of this rank's own ends only that part of the diagnosis: a send that does
/// not start leaves that rank untold (it may then name this one), and a listen that fails
/// stops listening (the ranks not heard from by then are named).
pub(super) fn missing(diag: Handle, rank: usize, ranks: usize, step: i64) -> Vec<usize> {
    // Forgotten below: a send to a rank that hangs may never complete.
    let word: &'static [i64; 1] = Box::leak(Box::new([step]));
    for to in (0..ranks).filter(|&r| r != rank) {
        let Ok(to) = c_int::try_from(to) else {
            continue; // no such rank: MPI counts ranks in C ints
        };
        // SAFETY: a request handle is plain data, written by MPI_Isend.
        let mut request: ffi::MPI_Request = unsafe { std::mem::zeroed() };
        // SAFETY: the buffer is leaked (lives for ever), one i64 of the datatype given;
        // the request is dropped uncompleted on purpose (nothing waits for a rank that
        // may never receive).
        let rc = unsafe {
            ffi::MPI_Isend(
                word.as_ptr().cast(),
                1,
                ffi::RSMPI_INT64_T,
                to,
                ALIVE_TAG,
                diag.0,
                &mut request,
            )
        };
        if rc != 0 {
            // Not started: that rank is not told (it may name this one); the others still
            // are, and this rank listens.
            continue;
        }
    }
    let mut heard = vec![false; ranks];
    heard[rank] = true;
    let grace = Instant::now();
    while grace.elapsed() < GRACE && heard.iter().any(|h| !h) {
        let mut found: c_int = 0;
        // SAFETY: a status is plain data, written by MPI_Iprobe when it finds a message.
        let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
        // SAFETY: `found` and `status` are valid for writes; the communicator is ours.
        let rc = unsafe {
            ffi::MPI_Iprobe(
                ffi::RSMPI_ANY_SOURCE,
                ALIVE_TAG,
                diag.0,
                &mut found,
                &mut status,
            )
        };
        if rc != 0 {
            break;
        }
        if found == 0 {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let mut from = [0i64; 1];
        // SAFETY: receives the one i64 just probed into `from`, which holds one.
        let rc = unsafe {
            ffi::MPI_Recv(
                from.as_mut_ptr().cast(),
                1,
                ffi::RSMPI_INT64_T,
                status.MPI_SOURCE,
                ALIVE_TAG,
                diag.0,
                ffi::RSMPI_STATUS_IGNORE,
            )
        };
        // The probe found its message: that rank answered, whether or not it was received.
        if let Some(h) = usize::try_from(status.MPI_SOURCE)
            .ok()
            .and_then(|r| heard.get_mut(r))
        {
            *h = true;
        }
        if rc != 0 {
            // Unreceived, the message stays first in line: a next probe would find it again.
            break;
        }
    }
    (0..ranks).filter(|&r| !heard[r]).collect()
}

/// The blocking collective in progress, watched against the deadline.
#[derive(Debug, Default)]
struct Armed {
    /// When it started, what it is and its step; `None` between collectives.
    call: Option<(Instant, &'static str, i64)>,
    /// Set when the cluster ends: the watchdog returns.
    stop: bool,
}

/// The watchdog of a cluster's blocking collectives: a thread that ends the job (after
/// printing which ranks did not answer) if one of them outlives the deadline. Arming and
/// disarming take an uncontended lock; the thread wakes a few times a deadline.
#[derive(Debug)]
pub(super) struct Watch {
    armed: Mutex<Armed>,
    wake: Condvar,
}

impl Watch {
    /// Starts the watchdog over `diag` for collectives of `timeout`.
    ///
    /// # Errors
    /// [`Problem::Unavailable`] if the system gives no thread for it.
    pub(super) fn start(
        diag: Handle,
        rank: usize,
        ranks: usize,
        timeout: Duration,
    ) -> Result<(Arc<Self>, JoinHandle<()>), Problem> {
        let watch = Arc::new(Self {
            armed: Mutex::new(Armed::default()),
            wake: Condvar::new(),
        });
        let dog = Arc::clone(&watch);
        let thread = std::thread::Builder::new()
            .name("mvtensor-mpi-watchdog".into())
            .spawn(move || dog.run(diag, rank, ranks, timeout))
            .map_err(|e| Problem::Unavailable(format!("no thread for the watchdog: {e}")))?;
        Ok((watch, thread))
    }

    /// A blocking collective starts.
    pub(super) fn arm(&self, operation: &'static str, step: i64) {
        lock(&self.armed).call = Some((Instant::now(), operation, step));
    }

    /// It completed.
    pub(super) fn disarm(&self) {
        lock(&self.armed).call = None;
    }

    /// Ends the watchdog.
    pub(super) fn stop(&self) {
        lock(&self.armed).stop = true;
        self.wake.notify_all();
    }

    fn run(&self, diag: Handle, rank: usize, ranks: usize, timeout: Duration) {
        let every = (timeout / 10).clamp(Duration::from_millis(1), Duration::from_millis(100));
        let mut armed = lock(&self.armed);
        loop {
            if armed.stop {
                return;
            }
            if let Some((since, operation, step)) = armed.call {
                if since.elapsed() >= timeout {
                    drop(armed);
                    let problem = Problem::Stalled {
                        operation,
                        step,
                        timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                        missing: missing(diag, rank, ranks, step),
                    };
                    // One write: the ranks' lines interleave in mpirun's output.
                    let line =
                        format!("mvtensor: rank {rank} of {ranks}: {problem}; aborting the job\n");
                    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
                    // SAFETY: MPI is initialized with MPI_THREAD_MULTIPLE for watched
                    // collectives, so this thread may call it while another is blocked.
                    unsafe { ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, 1) };
                    std::process::abort();
                }
            }
            armed = self
                .wake
                .wait_timeout(armed, every)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }
}
