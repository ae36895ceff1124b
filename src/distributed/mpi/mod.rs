//! The MPI transport: [`Cluster`] (this process's place among the ranks of an `mpirun`
//! job) and the replicas' all-reduce over it.

mod collective;
mod comm;
mod fused;
mod transport;
mod watch;

use std::ffi::c_int;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::ThreadId;
use std::time::Duration;

use mpi::environment::Universe;
use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::Communicator;
use mpi::Threading;

use self::comm::{checked, Comm, Handle};
use crate::distributed::Problem;
use crate::error::{check_setting, Error, Result};
use crate::sync::lock_std as lock;

/// The default bucket size of tensor fusion, in bytes (see docs/mpi.md for how it was
/// chosen).
pub const DEFAULT_BUCKET_BYTES: usize = 4 << 20;

/// The default deadline of a collective.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// How the replicas' all-reduces wait for the other ranks ([`ClusterBuilder::collectives`]).
/// The small collectives (the start's checks and broadcast, digests, a checkpoint's
/// outcome) are always polled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Collectives {
    /// Blocking `MPI_Allreduce`s (the library's tuned algorithms), one bucket after the
    /// other, under a watchdog thread: one that outlives the deadline makes the watchdog
    /// print [`Problem::Stalled`] (naming the ranks that did not answer) and abort the job.
    /// The step's caller never sees that error. Needs `MPI_THREAD_MULTIPLE`. The default.
    Watched,
    /// Non-blocking `MPI_Iallreduce`s, every bucket in flight at once, polled against the
    /// deadline: a missed one returns [`Problem::Stalled`] from the step, and the cluster's
    /// drop then aborts the job. Open MPI's non-blocking collectives are slower than its
    /// blocking ones below some megabytes (docs/mpi.md).
    Polled,
}

/// This process as one rank of an MPI job (started by `mpirun`): MPI is initialized when
/// it is made and finalized when the last clone (and the last replicas over it) is dropped,
/// if that happens on the thread that made it; dropped on another thread, MPI is finalized
/// when the process exits (`main` returning, or `std::process::exit`), since MPI wants the
/// initializing thread to finalize it. One per process.
///
/// If a collective missed its deadline ([`Problem::Stalled`]), this rank can no longer
/// take part in the job: dropping the cluster then prints the fault and calls `MPI_Abort`,
/// which ends every rank of the job, instead of `MPI_Finalize`, which would wait for the
/// rank that died or hangs. [`abort`](Self::abort) does it at once.
///
/// ```no_run
/// use mvtensor::distributed::Cluster;
/// use mvtensor::optim::{Optimizer, Replicas};
/// use mvtensor::Variable;
/// use ndarray::Array1;
///
/// // mpirun -np 2 target/release/examples/...
/// let cluster = Cluster::builder().timeout(std::time::Duration::from_secs(10)).init()?;
/// let w = Variable::new(Array1::<f32>::zeros(4));
/// let adam = Optimizer::adam(1e-3).param(&w).build()?;
/// // One worker thread per rank; rank 0's `w` and Adam's state are broadcast.
/// let replicas = Replicas::over_mpi(adam, 1, &cluster)?;
/// let grad = Array1::from_elem(4, cluster.rank() as f32); // each rank's own shard
/// replicas.step(&grad)?; // the mean over every rank, applied on every rank
/// replicas.check_agreement()?; // every rank holds the same w, bit for bit
/// # Ok::<(), mvtensor::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Cluster {
    shared: Arc<Shared>,
}

/// The settings of a [`Cluster`].
#[derive(Debug, Clone)]
pub struct ClusterBuilder {
    timeout: Duration,
    bucket_bytes: usize,
    collectives: Collectives,
}

#[derive(Debug)]
pub(super) struct Shared {
    comm: Mutex<Comm>,
    rank: usize,
    ranks: usize,
    bucket_bytes: usize,
    watchdog: Mutex<Option<std::thread::JoinHandle<()>>>,
    universe: Mutex<Option<UniverseCell>>,
    /// The thread that initialized MPI: the one that should finalize it (MPI-3.1, 12.4.3).
    init_thread: ThreadId,
    /// Whether a universe dropped on another thread can wait for the process's exit
    /// ([`finalize_parked`] is registered).
    at_exit: bool,
    /// `MPI_THREAD_SERIALIZED` ([`Collectives::Polled`]): every MPI call, `MPI_Abort`
    /// included, is made under the comm lock.
    serialized: bool,
}

/// The rsmpi universe, whose drop finalizes MPI.
struct UniverseCell(#[expect(dead_code, reason = "held for its drop: MPI_Finalize")] Universe);

impl std::fmt::Debug for UniverseCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Universe")
    }
}

// SAFETY: the universe is moved between threads only to be dropped (MPI_Finalize), once,
// after every other MPI call of this process (the last handle is gone and the watchdog
// joined): by the initializing thread when it drops the last handle, or else by
// `finalize_parked` as the process exits (the thread that ends the process: the main
// thread when `main` returns, which is the initializing one in the usual program). MPI's
// own state is process-wide; only its finalize asks for a thread, as said.
unsafe impl Send for UniverseCell {}

/// A universe whose last handle was dropped off the initializing thread: it waits here for
/// the process's exit.
static PARKED: Mutex<Option<UniverseCell>> = Mutex::new(None);

extern "C" {
    /// The C library's: `f` runs when the process exits (`exit`, or `main` returning), on
    /// the exiting thread, in the reverse order of registration.
    fn atexit(f: extern "C" fn()) -> c_int;
}

/// Finalizes a parked universe at the process's exit. Registered after `MPI_Init`, so it runs
/// before whatever the MPI library registered for the exit. Without a finalize, `mpirun`
/// takes a rank that exits for a failed one.
extern "C" fn finalize_parked() {
    let parked = PARKED.lock().unwrap_or_else(PoisonError::into_inner).take();
    drop(parked); // MPI_Finalize
}

/// Registers [`finalize_parked`] once per process; whether it is registered.
fn register_at_exit() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    // SAFETY: registers a function of no arguments that touches only `PARKED`.
    *REGISTERED.get_or_init(|| unsafe { atexit(finalize_parked) } == 0)
}

impl ClusterBuilder {
    /// The deadline of every collective (default [`DEFAULT_TIMEOUT`]): a rank that does
    /// not reach a step's all-reduce within it is taken for dead or hung. It must cover
    /// the slowest legitimate wait: the longest step, and rank 0's checkpoint writes.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The bucket size of tensor fusion in bytes (default [`DEFAULT_BUCKET_BYTES`]):
    /// consecutive gradients smaller than this are all-reduced together, in buckets of at
    /// most this size; larger ones on their own, straight from where they lie.
    pub fn bucket_bytes(mut self, bytes: usize) -> Self {
        self.bucket_bytes = bytes;
        self
    }

    /// How the all-reduces wait (default [`Collectives::Watched`]).
    pub fn collectives(mut self, collectives: Collectives) -> Self {
        self.collectives = collectives;
        self
    }

    /// Initializes MPI and joins the job. The thread level asked for is
    /// `MPI_THREAD_SERIALIZED` (any thread calls MPI, one at a time: the cluster serializes
    /// its calls), or `MPI_THREAD_MULTIPLE` for [`Collectives::Watched`] (the watchdog
    /// calls MPI while a blocked all-reduce is in progress).
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] for a zero timeout or bucket size;
    /// [`Error::Distributed`] with [`Problem::Unavailable`] if MPI was initialized already
    /// in this process or cannot serve several threads, or [`Problem::Mpi`].
    pub fn init(self) -> Result<Cluster> {
        let owner = || "cluster".to_owned();
        check_setting(
            owner,
            "timeout",
            self.timeout,
            !self.timeout.is_zero(),
            "> 0",
        )?;
        let ok = self.bucket_bytes > 0;
        check_setting(owner, "bucket_bytes", self.bucket_bytes, ok, "> 0")?;
        let unavailable = |why: String| Error::Distributed {
            rank: 0,
            problem: Problem::Unavailable(why),
        };
        let needed = match self.collectives {
            Collectives::Watched => Threading::Multiple,
            Collectives::Polled => Threading::Serialized,
        };
        let (universe, threading) = mpi::initialize_with_threading(needed)
            .ok_or_else(|| unavailable("MPI is initialized already in this process".into()))?;
        if threading < needed {
            return Err(unavailable(format!(
                "the library provides thread level {threading:?}, {needed:?} is needed"
            )));
        }
        let world = universe.world();
        let (rank, ranks) = (world.rank() as usize, world.size() as usize);
        let dup = |what| -> Result<Handle> {
            // SAFETY: a null handle, written by MPI_Comm_dup.
            let mut comm: ffi::MPI_Comm = unsafe { std::mem::zeroed() };
            // SAFETY: the world communicator is valid while the universe lives; errors on
            // the new one return codes instead of ending the process.
            let rc = unsafe {
                let rc = ffi::MPI_Comm_dup(world.as_raw(), &mut comm);
                if rc == 0 {
                    ffi::MPI_Comm_set_errhandler(comm, ffi::RSMPI_ERRORS_RETURN)
                } else {
                    rc
                }
            };
            checked(what, rc).map_err(|problem| Error::Distributed { rank, problem })?;
            Ok(Handle(comm))
        };
        let (data, diag) = (dup("MPI_Comm_dup")?, dup("MPI_Comm_dup")?);
        let (watch, watchdog) = match self.collectives {
            Collectives::Watched => {
                let (watch, thread) = watch::Watch::start(diag, rank, ranks, self.timeout)
                    .map_err(|problem| Error::Distributed { rank, problem })?;
                (Some(watch), Some(thread))
            }
            Collectives::Polled => (None, None),
        };
        let comm = Comm {
            data,
            diag,
            rank,
            ranks,
            timeout: self.timeout,
            fault: None,
            watch,
        };
        Ok(Cluster {
            shared: Arc::new(Shared {
                comm: Mutex::new(comm),
                rank,
                ranks,
                bucket_bytes: self.bucket_bytes,
                watchdog: Mutex::new(watchdog),
                universe: Mutex::new(Some(UniverseCell(universe))),
                init_thread: std::thread::current().id(),
                at_exit: register_at_exit(),
                serialized: self.collectives == Collectives::Polled,
            }),
        })
    }
}

impl Cluster {
    /// The settings, at their defaults; [`ClusterBuilder::init`] joins the job.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder {
            timeout: DEFAULT_TIMEOUT,
            bucket_bytes: DEFAULT_BUCKET_BYTES,
            collectives: Collectives::Watched,
        }
    }

    /// Joins the job with the default settings.
    ///
    /// # Errors
    /// As [`ClusterBuilder::init`].
    pub fn init() -> Result<Self> {
        Self::builder().init()
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.shared.rank
    }

    /// The number of ranks in the job.
    pub fn ranks(&self) -> usize {
        self.shared.ranks
    }

    /// The deadline of a collective.
    pub fn timeout(&self) -> Duration {
        self.shared.comm().timeout
    }

    /// The bucket size of tensor fusion, in bytes.
    pub fn bucket_bytes(&self) -> usize {
        self.shared.bucket_bytes
    }

    /// The fault that ended this rank's part in the job, if one did.
    pub fn fault(&self) -> Option<Problem> {
        self.shared.comm().fault.clone()
    }

    /// Ends every rank of the job at once (`MPI_Abort` with `code`), printing nothing.
    /// Under [`Collectives::Polled`] it first waits for a collective that another thread of
    /// this rank is polling (at most its deadline): MPI serves one thread at a time there.
    pub fn abort(&self, code: i32) -> ! {
        // Watched: MPI_THREAD_MULTIPLE lets this call run beside a blocked all-reduce (which
        // may never return, so its lock is not waited for).
        let _serial = self.shared.serialized.then(|| self.shared.comm());
        // SAFETY: the world communicator is valid while MPI is initialized, which it is
        // while this cluster lives; no other thread is in MPI unless the thread level
        // allows it (above).
        unsafe { ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, code as c_int) };
        std::process::abort()
    }
}

impl Shared {
    /// The communicators, for one MPI call or collective at a time.
    fn comm(&self) -> MutexGuard<'_, Comm> {
        lock(&self.comm)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let comm = self.comm.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(fault) = &comm.fault {
            // One write: the ranks' lines interleave in mpirun's output.
            let line = format!(
                "mvtensor: rank {} of {}: {fault}; aborting the job\n",
                comm.rank, comm.ranks
            );
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
            // SAFETY: MPI is initialized (the universe is still held).
            unsafe { ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, 1) };
            std::process::abort();
        }
        if let Some(watch) = comm.watch.take() {
            watch.stop();
        }
        if let Some(thread) = self
            .watchdog
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            // The watchdog returns once stopped; it panics in nothing of ours.
            let _ = thread.join();
        }
        let comm = self.comm.get_mut().unwrap_or_else(|e| e.into_inner());
        for handle in [&mut comm.data, &mut comm.diag] {
            // SAFETY: each duplicate is freed once, with no call in flight on it (every
            // flight landed: there is no fault).
            unsafe { ffi::MPI_Comm_free(&mut handle.0) };
        }
        let universe = self
            .universe
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if self.at_exit && std::thread::current().id() != self.init_thread {
            // Not the initializing thread: MPI is finalized at the process's exit.
            *PARKED.lock().unwrap_or_else(PoisonError::into_inner) = universe;
        } else {
            // MPI_Finalize: on the initializing thread, or (no exit handler) here, which
            // still beats a rank that exits unfinalized (mpirun takes it for a failure).
            drop(universe);
        }
    }
}
