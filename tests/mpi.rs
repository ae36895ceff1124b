//! Replicas across MPI ranks (feature `mpi`): each test launches `mpirun` on this binary
//! (tests/mpi/launch.rs says how) and judges the job. Loopback only: every rank runs on this
//! machine. `bin/mpi-tests.sh` runs them.

#[path = "../examples/train/wine.rs"]
mod wine;

#[path = "mpi/errors.rs"]
mod errors;
#[path = "mpi/faults.rs"]
mod faults;
#[path = "mpi/launch.rs"]
mod launch;
#[path = "mpi/model.rs"]
mod model;

use std::time::Duration;

use mvtensor::optim::Replicas;
use mvtensor::Store;

use launch::{in_rank, mpirun, number, read, setting};
use model::{
    cluster, exact, exact_grads, rank0_checkpoints, restore_newest, train_exact, write_bits,
    EXAMPLES,
};

/// The deadline of the ranks' collectives in tests that expect no fault.
const TIMEOUT: &str = "20000";

/// The wine MLP trained for `MPI_TEST_STEPS` steps (default 10,000) on 2 ranks and on 4:
/// every rank ends with the same parameters and Adam state, bit for bit (compared here from
/// the files the ranks write, and by the ranks' own digest check every 1,000 steps), and
/// the loss over all wines fell.
#[test]
fn replicas_stay_bit_identical_on_2_and_4_ranks() {
    if in_rank() {
        let cluster = cluster();
        let store = Store::new();
        let (model, adam) = model::wine(&store);
        let replicas = Replicas::over_mpi(adam, 1, &cluster).unwrap();
        let (rank, ranks) = (replicas.rank(), replicas.ranks());
        let before = model.loss();
        for step in 1..=number("MPI_TEST_STEPS") {
            let (_, g) = model.grads(step, rank, ranks);
            assert_eq!(replicas.step((&g.0, &g.1, &g.2, &g.3)).unwrap(), step);
            if step % 1000 == 0 {
                replicas.check_agreement().unwrap();
            }
        }
        replicas.check_agreement().unwrap();
        let dir = std::path::PathBuf::from(setting("MPI_TEST_DIR"));
        write_bits(&dir, rank, &store);
        if rank == 0 {
            std::fs::write(dir.join("loss"), format!("{before} {}", model.loss())).unwrap();
        }
        return;
    }
    let steps = std::env::var("MPI_TEST_STEPS").unwrap_or_else(|_| "10000".into());
    for ranks in [2, 4] {
        let dir = tempfile::tempdir().unwrap();
        let env = [
            ("MPI_TEST_STEPS", steps.clone()),
            ("MPI_TEST_TIMEOUT_MS", TIMEOUT.into()),
            ("MPI_TEST_DIR", dir.path().display().to_string()),
        ];
        let job = mpirun(
            ranks,
            "replicas_stay_bit_identical_on_2_and_4_ranks",
            &env,
            Duration::from_secs(300),
        );
        job.assert_ok();
        let first = read(dir.path(), "rank0.bits");
        assert!(!first.is_empty());
        for rank in 1..ranks {
            assert!(
                read(dir.path(), &format!("rank{rank}.bits")) == first,
                "rank {rank} of {ranks} differs from rank 0"
            );
        }
        let loss = String::from_utf8(read(dir.path(), "loss")).unwrap();
        let (before, after) = loss.split_once(' ').unwrap();
        let (before, after): (f32, f32) = (before.parse().unwrap(), after.parse().unwrap());
        assert!(
            after < before * 0.8,
            "{ranks} ranks: loss {before} -> {after}"
        );
    }
}

/// A run checkpointed and resumed on other rank counts (and threads) ends where a run of
/// one process's threads ends, bit for bit: 2 ranks take steps 1-40 (checkpoints every 10),
/// 4 ranks resume from step 40 and take 41-80, 2 ranks of 2 threads resume from 80 and take
/// 81-120. The exact model's mean gradient is the same on any split, so every difference
/// would be the checkpoint's or the restore's (parameters, Adam's moments, the step count).
#[test]
fn checkpoints_resume_on_another_rank_count_with_identical_results() {
    if in_rank() {
        let cluster = cluster();
        let store = Store::new();
        let (_w, _b, adam) = exact(&store);
        let dir = std::path::PathBuf::from(setting("MPI_TEST_DIR"));
        let checkpoints = rank0_checkpoints(&dir.join("checkpoints"), 3, cluster.rank());
        let resumed = restore_newest(&store, checkpoints.as_ref());
        let threads = number("MPI_TEST_THREADS") as usize;
        let replicas = Replicas::over_mpi(adam, threads, &cluster).unwrap();
        // Every rank starts where rank 0's checkpoint left off.
        assert_eq!(replicas.optimizer().steps(), number("MPI_TEST_FROM"));
        if cluster.rank() == 0 {
            assert_eq!(resumed, number("MPI_TEST_FROM") > 0);
        }
        train_exact(
            &replicas,
            number("MPI_TEST_UNTIL"),
            10,
            &store,
            checkpoints.as_ref(),
        );
        replicas.check_agreement().unwrap();
        write_bits(&dir, replicas.rank(), &store);
        return;
    }
    // The reference: one process, 4 threads, 120 steps; its state at 40, 80 and 120.
    let store = Store::new();
    let (_w, _b, adam) = exact(&store);
    let replicas = Replicas::new(adam, EXAMPLES);
    let mut expected = Vec::new();
    for step in 1..=120 {
        replicas.run(|worker| {
            let (gw, gb) = exact_grads(step, worker, EXAMPLES);
            replicas.step((&gw, &gb)).unwrap()
        });
        if step % 40 == 0 {
            expected.push(model::state_bits(&store));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let jobs = [(2, 1, 0, 40), (4, 1, 40, 80), (2, 2, 80, 120)];
    for ((ranks, threads, from, until), expected) in jobs.into_iter().zip(&expected) {
        let env = [
            ("MPI_TEST_THREADS", threads.to_string()),
            ("MPI_TEST_FROM", from.to_string()),
            ("MPI_TEST_UNTIL", until.to_string()),
            ("MPI_TEST_TIMEOUT_MS", TIMEOUT.into()),
            ("MPI_TEST_DIR", dir.path().display().to_string()),
        ];
        let job = mpirun(
            ranks,
            "checkpoints_resume_on_another_rank_count_with_identical_results",
            &env,
            Duration::from_secs(120),
        );
        job.assert_ok();
        for rank in 0..ranks {
            assert!(
                read(dir.path(), &format!("rank{rank}.bits")) == *expected,
                "{ranks} ranks x {threads} threads, rank {rank}: step {until} differs from \
                 one process's"
            );
        }
    }
}

/// 2 ranks, each dropping its cluster and replicas (the last handles) on a thread other than
/// the one that made the cluster: MPI is finalized at the process's exit instead, and the
/// job succeeds (`mpirun` fails a job whose ranks exit without finalizing).
#[test]
fn a_cluster_dropped_off_its_thread_still_ends_the_job_cleanly() {
    if in_rank() {
        let cluster = cluster();
        let store = Store::new();
        let (_w, _b, adam) = exact(&store);
        let replicas = Replicas::over_mpi(adam, 1, &cluster).unwrap();
        let (gw, gb) = exact_grads(1, replicas.rank(), replicas.ranks());
        replicas.step((&gw, &gb)).unwrap();
        replicas.check_agreement().unwrap();
        std::thread::spawn(move || drop((replicas, cluster)))
            .join()
            .unwrap();
        return;
    }
    let test = "a_cluster_dropped_off_its_thread_still_ends_the_job_cleanly";
    let env = [("MPI_TEST_TIMEOUT_MS", TIMEOUT.into())];
    mpirun(2, test, &env, Duration::from_secs(60)).assert_ok();
}
