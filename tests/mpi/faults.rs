//! Faults: a rank killed outright, or one that hangs, ends the job with an error within a
//! bounded time (never a silent hang), and the last complete checkpoint restores.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mvtensor::checkpoint::{Checkpoints, Restore};
use mvtensor::distributed::Problem;
use mvtensor::optim::Replicas;
use mvtensor::{Error, Store};

use crate::launch::{in_rank, mpirun, number, read, setting};
use crate::model::{
    cluster, exact, exact_grads, rank0_checkpoints, restore_newest, state_bits, write_bits,
};

/// The deadline of the ranks' collectives. Besides a step it covers every legitimate wait:
/// rank 0's checkpoint write (an fsync of a small file) while the others wait for its
/// outcome, with 3 ranks on 2 busy cores. A rank that dies or hangs is taken for one after
/// this.
const TIMEOUT_MS: u64 = 5_000;

/// Every job here must end within this after its fault: the deadline, the second in which
/// the waiting ranks ask who is alive, then the abort.
const BOUND: Duration = Duration::from_secs(10);

/// How long a job may run in all before it counts as hung (and is killed).
const LIMIT: Duration = Duration::from_secs(180);

/// Writes the time now (ns since the epoch) to `dir/name`.
fn stamp(dir: &std::path::Path, name: &str) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    std::fs::write(dir.join(name), now.as_nanos().to_string()).unwrap();
}

/// The time a rank stamped.
fn stamped(dir: &std::path::Path, name: &str) -> SystemTime {
    let ns: u64 = String::from_utf8(read(dir, name)).unwrap().parse().unwrap();
    UNIX_EPOCH + Duration::from_nanos(ns)
}

/// The exact model on the job's ranks, from the newest checkpoint of `MPI_TEST_DIR` if
/// any, up to `MPI_TEST_UNTIL` steps with a checkpoint every 10; at step `MPI_TEST_FAULT_AT`
/// rank 1 stamps the time in `fault` and then dies (`MPI_TEST_FAULT=kill`: SIGKILL) or hangs
/// (`hang`: it parks for ever, alive and never calling MPI again).
fn rank_trains_until_its_fault() {
    let cluster = cluster();
    let store = Store::new();
    let (_w, _b, adam) = exact(&store);
    let dir = PathBuf::from(setting("MPI_TEST_DIR"));
    let checkpoints = rank0_checkpoints(&dir.join("checkpoints"), 2, cluster.rank());
    restore_newest(&store, checkpoints.as_ref());
    let replicas = Replicas::over_mpi(adam, 1, &cluster).unwrap();
    let (rank, ranks) = (replicas.rank(), replicas.ranks());
    let (fault_at, fault) = (number("MPI_TEST_FAULT_AT"), setting("MPI_TEST_FAULT"));
    while replicas.optimizer().steps() < number("MPI_TEST_UNTIL") {
        let step = replicas.optimizer().steps() + 1;
        if rank == 1 && step == fault_at {
            stamp(&dir, "fault");
            if fault == "kill" {
                // SAFETY: sends this process a signal; nothing of ours is in a bad state.
                unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
            }
            loop {
                std::thread::park(); // hung: until the job is ended
            }
        }
        let (gw, gb) = exact_grads(step, rank, ranks);
        match replicas.step((&gw, &gb)) {
            Ok(_) => {}
            Err(
                error @ Error::Distributed {
                    problem: Problem::Stalled { .. },
                    ..
                },
            ) => {
                // The deadline passed: say so, then end (the cluster aborts the job).
                std::fs::write(dir.join(format!("stalled{rank}")), error.to_string()).unwrap();
                return;
            }
            Err(other) => panic!("rank {rank}: {other}"),
        }
        if step % 10 == 0 {
            replicas
                .save_checkpoint(&store, checkpoints.as_ref())
                .unwrap();
        }
    }
    write_bits(&dir, rank, &store);
}

fn env(dir: &std::path::Path, until: i64, at: i64, fault: &str) -> Vec<(&'static str, String)> {
    vec![
        ("MPI_TEST_DIR", dir.display().to_string()),
        ("MPI_TEST_UNTIL", until.to_string()),
        ("MPI_TEST_FAULT_AT", at.to_string()),
        ("MPI_TEST_FAULT", fault.to_owned()),
        ("MPI_TEST_TIMEOUT_MS", TIMEOUT_MS.to_string()),
    ]
}

/// The exact model's state after `steps` steps of one process.
fn reference(steps: i64) -> Vec<u8> {
    let store = Store::new();
    let (_w, _b, adam) = exact(&store);
    for step in 1..=steps {
        let (gw, gb) = exact_grads(step, 0, 1);
        adam.step((&gw, &gb)).unwrap();
    }
    state_bits(&store)
}

/// 2 ranks checkpoint every 10 steps; rank 1 is killed (SIGKILL) before step 25. The job
/// ends with an error within [`BOUND`] of the kill; the newest checkpoint is the cut of step
/// 20, complete, and 2 new ranks resume from it to step 40 with the same state as one
/// process.
#[test]
fn a_killed_rank_ends_the_job_with_an_error_and_the_last_checkpoint_restores() {
    let test = "faults::a_killed_rank_ends_the_job_with_an_error_and_the_last_checkpoint_restores";
    if in_rank() {
        return rank_trains_until_its_fault();
    }
    let dir = tempfile::tempdir().unwrap();
    let job = mpirun(2, test, &env(dir.path(), 40, 25, "kill"), LIMIT);
    assert!(!job.timed_out && job.code != Some(0), "{}", job.output);
    let took = job
        .ended
        .duration_since(stamped(dir.path(), "fault"))
        .unwrap();
    assert!(took <= BOUND, "the job took {took:?} to end after the kill");
    println!("a killed rank: the job ended {took:?} after the kill");

    // The newest checkpoint is step 20's, and every file left loads.
    let checkpoints = Checkpoints::new(dir.path().join("checkpoints"), 2).unwrap();
    let files = checkpoints.list().unwrap();
    assert!(!files.is_empty());
    for file in &files {
        Store::load(file).unwrap();
    }
    let store = Store::new();
    let (_w, _b, adam) = exact(&store);
    store
        .restore(files.last().unwrap(), Restore::default())
        .unwrap();
    assert_eq!(adam.steps(), 20);
    assert_eq!(state_bits(&store), reference(20));

    let job = mpirun(2, test, &env(dir.path(), 40, 0, "none"), LIMIT);
    job.assert_ok();
    for rank in 0..2 {
        assert!(read(dir.path(), &format!("rank{rank}.bits")) == reference(40));
    }
}

/// 3 ranks; rank 1 hangs before step 15 (alive, never calling MPI again), with each kind
/// of all-reduce. Polled: ranks 0 and 2 fail step 15's all-reduce at the deadline
/// ([`TIMEOUT_MS`]) with the error naming rank 1, and their clusters abort the job. Watched:
/// their watchdogs print that error and abort the job. Either way it ends within [`BOUND`]
/// of the hang (the first survivor to abort may end the other before it reports).
#[test]
fn a_hung_rank_makes_the_others_fail_naming_it_and_end_the_job() {
    let test = "faults::a_hung_rank_makes_the_others_fail_naming_it_and_end_the_job";
    if in_rank() {
        return rank_trains_until_its_fault();
    }
    for collectives in ["polled", "watched"] {
        let dir = tempfile::tempdir().unwrap();
        let mut env = env(dir.path(), 40, 15, "hang");
        env.push(("MPI_TEST_COLLECTIVES", collectives.into()));
        let job = mpirun(3, test, &env, LIMIT);
        assert!(!job.timed_out && job.code != Some(0), "{}", job.output);
        let took = job
            .ended
            .duration_since(stamped(dir.path(), "fault"))
            .unwrap();
        assert!(
            took <= BOUND,
            "{collectives}: the job took {took:?} to end after the hang"
        );
        println!("a hung rank, {collectives}: the job ended {took:?} after the hang");
        let mut reports = 0;
        for rank in [0, 2] {
            let what = format!(
                "the all-reduce of step 15 did not complete within {TIMEOUT_MS} ms: rank 1 did \
                 not answer (dead or hung)"
            );
            let reported = match collectives {
                "polled" => std::fs::read_to_string(dir.path().join(format!("stalled{rank}")))
                    .is_ok_and(|error| error.starts_with(&format!("rank {rank}: {what}"))),
                _ => job
                    .output
                    .contains(&format!("mvtensor: rank {rank} of 3: {what}")),
            };
            reports += usize::from(reported);
        }
        assert!(
            reports > 0,
            "{collectives}: no survivor reported:\n{}",
            job.output
        );
    }
}
