//! The replicas' fused all-reduce against a raw `MPI_Allreduce` of the same bytes, for
//! models of 1K to 16M f32 gradients (each model: three large tensors of 1/2, 1/4 and 1/8 of
//! it and eight small ones sharing the last 1/8, as weights and biases).
//!
//! The fused side is `Replicas::over_mpi` with plain SGD: its all-reduce time per step
//! (`all_reduce_stats`: packing, the bucketed all-reduces, waiting for the other ranks)
//! against the same run's blocking `MPI_Allreduce` of one buffer of the model's size. Both
//! start each call from a barrier, so that neither waits for a rank still busy elsewhere.
//! Rank 0 prints one line per model.
//!
//!     cargo build --release --features mpi --example mpi_allreduce
//!     mpirun -np 2 target/release/examples/mpi_allreduce [bucket bytes] [watched|polled] [sizes...]

use std::time::{Duration, Instant};

use mpi::collective::SystemOperation;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use mvtensor::distributed::{Cluster, Collectives, DEFAULT_BUCKET_BYTES};
use mvtensor::optim::{Optimizer, Replicas};
use mvtensor::Variable;
use ndarray::{ArrayD, IxDyn};

/// How long each side of each size is timed.
const BUDGET: Duration = Duration::from_millis(3000);

/// Tensor sizes of a model of `n` elements.
fn layout(n: usize) -> Vec<usize> {
    let mut sizes = vec![n / 2, n / 4, n / 8];
    let rest = n - sizes.iter().sum::<usize>();
    sizes.extend((0..8).map(|i| rest / 8 + usize::from(i < rest % 8)));
    sizes.retain(|&s| s > 0);
    sizes
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let bucket = args
        .next()
        .map_or(Ok(DEFAULT_BUCKET_BYTES), |b| b.parse())?;
    let collectives = match args.next().as_deref() {
        Some("polled") => Collectives::Polled,
        _ => Collectives::Watched,
    };
    let mut sizes: Vec<usize> = args.map(|s| s.parse()).collect::<Result<_, _>>()?;
    if sizes.is_empty() {
        sizes = vec![1 << 10, 1 << 14, 1 << 18, 1 << 20, 1 << 22, 1 << 24];
    }
    let cluster = Cluster::builder()
        .bucket_bytes(bucket)
        .collectives(collectives)
        .init()?;
    let world = SimpleCommunicator::world();
    let rank = cluster.rank();
    if rank == 0 {
        println!(
            "{} ranks, {collectives:?}, buckets of {bucket} bytes\n{:>10} {:>8} {:>12} {:>12} {:>7}",
            cluster.ranks(),
            "f32s",
            "buckets",
            "fused GB/s",
            "raw GB/s",
            "ratio"
        );
    }
    for n in sizes {
        let params: Vec<Variable<f32>> = layout(n)
            .into_iter()
            .map(|len| Variable::new(ArrayD::<f32>::zeros(IxDyn(&[len]))))
            .collect();
        let mut sgd = Optimizer::sgd(1e-3);
        for p in &params {
            sgd = sgd.param(p);
        }
        let replicas = Replicas::over_mpi(sgd.build()?, 1, &cluster)?;
        let grads: Vec<ArrayD<f32>> = params
            .iter()
            .map(|p| ArrayD::from_elem(IxDyn(&p.shape()), rank as f32 + 1.0))
            .collect();
        for _ in 0..3 {
            replicas.step(&grads)?; // warm: buffers allocated, pages touched
        }
        let send = vec![rank as f32 + 1.0; n];
        let mut recv = vec![0.0f32; n];
        let mut raw_call = || {
            world.all_reduce_into(&send[..], &mut recv[..], SystemOperation::sum());
            Ok(())
        };
        raw_call()?;
        // Every rank takes as many rounds as rank 0 decides fit in the budget. A round is
        // one fused step and one raw call, each from a barrier, so that both meet the same
        // spells of a busy machine; each side's median round is reported. Before its call
        // the raw side adds the gradients into variables as the step does into its sums,
        // so that a rank still adding when the other starts costs both sides alike.
        let sums: Vec<Variable<f32>> = params
            .iter()
            .map(|p| Variable::new(ArrayD::<f32>::zeros(IxDyn(&p.shape()))))
            .collect();
        let rounds = agree_on_steps(&world, || {
            replicas.step(&grads)?;
            raw_call()
        })?;
        let (mut fused, mut raw) = (Vec::new(), Vec::new());
        let mut buckets = 0;
        for _ in 0..rounds {
            world.barrier();
            let before = replicas.all_reduce_stats();
            replicas.step(&grads)?;
            let after = replicas.all_reduce_stats();
            fused.push(after.seconds - before.seconds);
            buckets = after.buckets - before.buckets;
            world.barrier();
            for (sum, g) in sums.iter().zip(&grads) {
                sum.assign_add(g)?;
            }
            let _read = mvtensor::read_all(&sums[..]);
            let start = Instant::now();
            raw_call()?;
            raw.push(start.elapsed().as_secs_f64());
        }
        let (fused, raw) = (median(fused), median(raw));
        if rank == 0 {
            let gb = |s: f64| (n * 4) as f64 / s / 1e9;
            println!(
                "{n:>10} {buckets:>8} {:>12.3} {:>12.3} {:>7.2}",
                gb(fused),
                gb(raw),
                raw / fused
            );
        }
    }
    Ok(())
}

/// The number of calls of `once` that fit in [`BUDGET`] on rank 0 (timed over a few),
/// broadcast so that every rank makes as many.
fn agree_on_steps(
    world: &SimpleCommunicator,
    mut once: impl FnMut() -> mvtensor::Result<()>,
) -> mvtensor::Result<u64> {
    // The same number of probes on every rank: each is a collective.
    const PROBES: u32 = 5;
    let start = Instant::now();
    for _ in 0..PROBES {
        once()?;
    }
    let each = start.elapsed().as_secs_f64() / f64::from(PROBES);
    let mut steps = ((BUDGET.as_secs_f64() / each) as u64).clamp(5, 100_000);
    world.process_at_rank(0).broadcast_into(&mut steps);
    Ok(steps)
}

fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}
