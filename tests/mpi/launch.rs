//! How the MPI tests run: each `#[test]` launches `mpirun -np N` on this very test binary,
//! with [`ROLE`] set, asking it to run that one test; in a rank the test sees [`in_rank`]
//! and plays its rank's part instead. The outer test then judges the job: its exit, its
//! output, the files its ranks wrote.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Set in a rank's environment.
pub const ROLE: &str = "MVTENSOR_MPI_TEST_RANK";

/// Whether this process is a rank of a job (not the test that launched it).
pub fn in_rank() -> bool {
    std::env::var_os(ROLE).is_some()
}

/// A finished job.
#[derive(Debug)]
pub struct Job {
    /// mpirun's exit code (`None`: killed by a signal, or by us at the limit).
    pub code: Option<i32>,
    /// Every rank's stdout and stderr, and mpirun's, together.
    pub output: String,
    /// When mpirun exited.
    pub ended: std::time::SystemTime,
    /// Whether the job ran past its limit (and was killed).
    pub timed_out: bool,
    /// Its ranks.
    pub ranks: usize,
}

impl Job {
    /// Panics with the output unless the job succeeded, every rank having run its test.
    pub fn assert_ok(&self) {
        assert!(
            self.code == Some(0) && !self.timed_out,
            "the job failed ({:?}):\n{}",
            self.code,
            self.output
        );
        // The ranks' output reaches mpirun's together, one write at a time, so lines of two
        // ranks can interleave: libtest writes "test result: ", "ok" and ". 1 passed; ..."
        // separately. The count is of the last, which is one write.
        let passed = self.output.matches(". 1 passed; 0 failed;").count();
        assert_eq!(
            passed, self.ranks,
            "ranks that ran the test:\n{}",
            self.output
        );
    }
}

/// One job at a time: the tests share two cores, and the fault tests time their job.
static ONE_JOB: Mutex<()> = Mutex::new(());

/// Runs `test` (its full name) on `np` ranks with `env` set in each, killing the job after
/// `limit`.
pub fn mpirun(np: usize, test: &str, env: &[(&str, String)], limit: Duration) -> Job {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let exe = std::env::current_exe().expect("the test binary");
    let out = tempfile::NamedTempFile::new().expect("a temporary file");
    let mut command = Command::new("mpirun");
    command
        .args(["--oversubscribe", "-np", &np.to_string()])
        .arg(&exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, "1")
        // As root (CI, containers) mpirun refuses to start without these.
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .stdin(Stdio::null())
        .stdout(out.reopen().expect("the output file"))
        .stderr(out.reopen().expect("the output file"));
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command
        .spawn()
        .expect("mpirun (apt-get install openmpi-bin)");
    let start = Instant::now();
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait().expect("mpirun's status") {
            break status;
        }
        if start.elapsed() > limit {
            timed_out = true;
            let _ = child.kill();
            break child.wait().expect("mpirun's status");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let ended = std::time::SystemTime::now();
    let output = std::fs::read_to_string(out.path()).unwrap_or_default();
    Job {
        code: status.code(),
        output,
        ended,
        timed_out,
        ranks: np,
    }
}

/// A rank's setting from the launching test.
pub fn setting(key: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| panic!("{key} is set by the launching test"))
}

/// A rank's numeric setting.
pub fn number(key: &str) -> i64 {
    setting(key).parse().expect("a number")
}

/// The bytes a rank wrote to `dir/name`.
pub fn read(dir: &Path, name: &str) -> Vec<u8> {
    std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}
