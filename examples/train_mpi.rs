//! The wine trainer of `examples/train.rs` as data-parallel replicas across MPI ranks: an
//! MLP regressing the quality of red wines (the UCI wine-quality data as `linfa-datasets`
//! ships it), its four tensors and Adam's state packed in one variable (`optim::Packed`),
//! on every rank.
//!
//! Each global step takes one batch of 32 wines (the same batch whatever the number of
//! ranks and threads); each of the job's workers (`ranks x threads`) computes the gradient of
//! its share, the rank's threads combine theirs, the ranks all-reduce, and every rank applies
//! the same Adam step (`optim::Replicas::over_mpi`). Rank 0 prints the loss as it goes, then
//! steps/s and the share of the time spent in the all-reduce; every rank checks that its
//! replica is bit-identical to the others'. With `--checkpoints DIR` rank 0 saves a cut every
//! 500 steps and a job started again resumes from the newest, on any number of ranks.
//!
//!     cargo build --release --features mpi --example train_mpi
//!     mpirun -np 2 target/release/examples/train_mpi
//!     mpirun -np 4 --oversubscribe target/release/examples/train_mpi --steps 2000
//!     mpirun -np 1 target/release/examples/train_mpi --threads 2
//!
//! (As root, mpirun also wants `--allow-run-as-root`.)

use std::time::{Duration, Instant};

use mvtensor::checkpoint::{Checkpoints, Restore};
use mvtensor::distributed::Cluster;
use mvtensor::metrics::Mean;
use mvtensor::optim::{Optimizer, Packed, Replicas};
use mvtensor::Store;
use ndarray::{s, Ix1, Ix2};
use wine::{init, loss_and_grads, wines, BATCH};

#[path = "train/wine.rs"]
mod wine;

/// Steps between two printed losses, and between two checkpoints.
const EVERY: i64 = 500;

struct Args {
    threads: usize,
    steps: i64,
    checkpoints: Option<String>,
    timeout: Duration,
}

fn args() -> Result<Args, Box<dyn std::error::Error>> {
    let mut args = Args {
        threads: 1,
        steps: 3000,
        checkpoints: None,
        timeout: Duration::from_secs(30),
    };
    let mut given = std::env::args().skip(1);
    while let Some(flag) = given.next() {
        let value = given.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--threads" => args.threads = value.parse()?,
            "--steps" => args.steps = value.parse()?,
            "--checkpoints" => args.checkpoints = Some(value),
            "--timeout-ms" => args.timeout = Duration::from_millis(value.parse()?),
            _ => return Err(format!("unknown flag {flag}").into()),
        }
    }
    Ok(args)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = args()?;
    let cluster = Cluster::builder().timeout(args.timeout).init()?;
    let data = wines();
    let store = Store::new();
    let (w1, b1, w2, b2) = init();
    let (model, adam) = Optimizer::adam(3e-3).name("adam").build_packed(
        Packed::builder()
            .name("mlp")
            .tensor("w1", &w1)
            .tensor("b1", &b1)
            .tensor("w2", &w2)
            .tensor("b2", &b2),
    )?;
    store.register(model.variable())?;
    // Rank 0 alone saves, so it alone makes the checkpoints: making them cleans up what
    // dead saves left, judged by this machine's process ids, which would misjudge the
    // saves of a rank 0 on another machine sharing the directory.
    let checkpoints = match (&args.checkpoints, cluster.rank()) {
        (Some(dir), 0) => Some(Checkpoints::new(dir, 2)?),
        _ => None,
    };
    // Rank 0 resumes from the newest cut; `over_mpi` hands it to every rank.
    if let Some(checkpoints) = &checkpoints {
        if let Some(newest) = checkpoints.list()?.pop() {
            store.restore(&newest, Restore::default())?;
        }
    }
    let replicas = Replicas::over_mpi(adam, args.threads, &cluster)?;
    let (rank, workers) = (replicas.rank(), replicas.total_workers());
    let first = replicas.optimizer().steps();
    let until = first + args.steps;
    let loss_of = |rows: &ndarray::Array2<f32>| -> mvtensor::Result<_> {
        let p = model.read();
        let (w1, b1) = (p.get::<Ix2>(0)?, p.get::<Ix1>(1)?);
        let (w2, b2) = (p.get::<Ix2>(2)?, p.get::<Ix1>(3)?);
        Ok(loss_and_grads((&w1, &b1, &w2, &b2), rows))
    };
    if rank == 0 {
        println!(
            "{} ranks x {} threads, steps {}..{until}",
            replicas.ranks(),
            args.threads,
            first + 1
        );
        println!("{:>8} {:>8} {:>11}", "time", "step", "loss (MSE)");
    }
    let loss = Mean::new();
    let start = Instant::now();
    let ended = replicas.run(|thread| -> mvtensor::Result<()> {
        let me = rank * args.threads + thread;
        let share = BATCH / workers;
        for step in first + 1..=until {
            let batch = wine::batch(&data, step as usize);
            let rows = batch.slice(s![me * share..(me + 1) * share, ..]).to_owned();
            let (l, g) = loss_of(&rows)?;
            loss.record(f64::from(l));
            replicas.step((&g.0, &g.1, &g.2, &g.3))?;
            // One thread of each rank, between two steps (collectives of every rank).
            if thread == 0 && step % EVERY == 0 {
                if args.checkpoints.is_some() {
                    replicas.save_checkpoint(&store, checkpoints.as_ref())?;
                }
                if let (Some(mean), 0) = (loss.take().mean(), rank) {
                    let t = start.elapsed().as_secs_f64();
                    println!("{t:>7.2}s {step:>8} {mean:>11.4}");
                }
            }
        }
        Ok(())
    });
    let seconds = start.elapsed().as_secs_f64();
    ended.into_iter().collect::<mvtensor::Result<Vec<()>>>()?;
    let digest = replicas.check_agreement()?;
    let stats = replicas.all_reduce_stats();
    let (final_loss, _) = loss_of(&data)?;
    if rank == 0 {
        let steps = (until - first) as f64;
        println!(
            "{steps} steps in {seconds:.2} s: {:.0} steps/s; all-reduce {:.0}% of a step ({:.1} us \
             a step, {} buckets); loss over all wines {final_loss:.4}",
            steps / seconds,
            100.0 * stats.seconds / seconds,
            1e6 * stats.seconds / steps,
            stats.buckets / stats.steps.max(1),
        );
        println!("every rank holds the same model and Adam state (digest {digest:016x})");
    }
    Ok(())
}
