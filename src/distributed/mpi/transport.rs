//! [`Replicas::over_mpi`]: replicas whose transport is the [`Cluster`]'s ranks. Before any
//! data moves every rank describes what it replicates (each variable's dtype and shape, each
//! gradient's shape) and the ranks compare; then rank 0's values are broadcast.

use std::sync::{Arc, Mutex};

use mpi::datatype::Equivalence;
use ndarray::{ArrayD, IxDyn, NdFloat};

use super::fused::{Buffers, Plan};
use super::{Cluster, Shared};
use crate::distributed::{digest_words, AllReduceStats, Held, Problem, Transport};
use crate::error::{Error, Result};
use crate::optim::{Optimizer, Replicas};
use crate::sync::lock_std as lock;
use crate::{read_all, DType, Element, OwnedSnapshot};

impl<A: Element + NdFloat + Equivalence> Replicas<A> {
    /// Replicas across the ranks of `cluster`, with `threads` workers in this process
    /// (threads may differ between ranks: a step's sum is divided by all ranks' workers).
    /// Collective: every rank calls it, with optimizers over the same parameters. It checks
    /// that every rank replicates the same variables (the parameters, then the optimizer's
    /// state: count, dtype and shape, in order) and gradients, then sets every rank's
    /// parameters and optimizer state (its step count included) to rank 0's: restore a
    /// checkpoint into rank 0's before this, and every rank resumes from it.
    ///
    /// # Errors
    /// [`Error::Distributed`] with [`Problem::VariableCount`] or [`Problem::Mismatch`]
    /// (naming the variable and what each rank holds) before anything is sent, so nothing
    /// changed on any rank; [`Problem::Stalled`] if a rank does not take part in time.
    pub fn over_mpi(optimizer: Optimizer<A>, threads: usize, cluster: &Cluster) -> Result<Self> {
        let shared = Arc::clone(cluster.shared());
        let (rank, ranks) = (shared.rank, shared.ranks);
        let fail = |problem| Error::Distributed { rank, problem };
        let threads = threads.max(1);
        let vars = Self::replicated_by(&optimizer);
        let mut items: Vec<(String, DType, Vec<usize>)> = vars
            .iter()
            .map(|v| (v.name().to_owned(), A::DTYPE, v.shape()))
            .collect();
        let grads: Vec<Vec<usize>> = optimizer.gradient_shapes().map(<[_]>::to_vec).collect();
        for (i, shape) in grads.iter().enumerate() {
            let name = format!("gradient {i} of optimizer `{}`", optimizer.name());
            items.push((name, A::DTYPE, shape.clone()));
        }
        let words = describe(&items);
        let digest = digest_words(&words);
        let mut comm = shared.comm();
        let head = [digest, words.len() as u64, threads as u64];
        let heads = comm
            .gather_words(&head, "description gather", 0)
            .map_err(fail)?;
        let heads: Vec<&[u64]> = heads.chunks(3).collect();
        if heads.iter().any(|h| h[0] != digest) {
            let lens: Vec<usize> = heads.iter().map(|h| h[1] as usize).collect();
            let all = comm
                .gather_varied(&words, &lens, "description gather", 0)
                .map_err(fail)?;
            return Err(fail(mismatch(&items, &all)));
        }
        let workers = heads.iter().map(|h| h[2] as usize).sum();
        // Rank 0's values, on every rank.
        let total: usize = vars
            .iter()
            .map(|v| v.shape().iter().product::<usize>())
            .sum();
        let mut values = Vec::with_capacity(total);
        if rank == 0 {
            for snapshot in read_all(&vars[..]) {
                values.extend_from_slice(snapshot.as_slice().expect("standard layout"));
            }
        } else {
            values.resize(total, A::zero());
        }
        let values = comm
            .broadcast(values, "broadcast of rank 0's state", 0)
            .map_err(fail)?;
        drop(comm);
        if rank != 0 {
            let mut rest = &values[..];
            for var in &vars {
                let shape = var.shape();
                let (mine, after) = rest.split_at(shape.iter().product());
                rest = after;
                let value = ArrayD::from_shape_vec(IxDyn(&shape), mine.to_vec())
                    .expect("the shape's element count");
                var.assign(value)?;
            }
        }
        let lens: Vec<usize> = grads.iter().map(|s| s.iter().product()).collect();
        let bucket = (shared.bucket_bytes / std::mem::size_of::<A>()).max(1);
        let transport = MpiTransport {
            plan: Plan::new(&lens, ranks, bucket),
            shared,
            workers,
            buffers: Mutex::new(Buffers::default()),
            stats: Mutex::new(AllReduceStats::default()),
        };
        Ok(Self::with_transport(
            optimizer,
            threads,
            Box::new(transport),
        ))
    }
}

/// The replicas' transport over MPI.
#[derive(Debug)]
struct MpiTransport<A> {
    shared: Arc<Shared>,
    plan: Plan,
    workers: usize,
    buffers: Mutex<Buffers<A>>,
    stats: Mutex<AllReduceStats>,
}

impl<A> MpiTransport<A> {
    fn fail(&self, problem: Problem) -> Error {
        Error::Distributed {
            rank: self.shared.rank,
            problem,
        }
    }
}

impl<A: Element + NdFloat + Equivalence> Transport<A> for MpiTransport<A> {
    fn process(&self) -> usize {
        self.shared.rank
    }

    fn processes(&self) -> usize {
        self.shared.ranks
    }

    fn workers(&self) -> usize {
        self.workers
    }

    fn all_reduce(
        &self,
        step: i64,
        sums: Vec<OwnedSnapshot<A>>,
        failed: bool,
        out: &mut Vec<A>,
    ) -> Result<Vec<usize>> {
        let mut comm = self.shared.comm();
        let (mut buffers, mut stats) = (lock(&self.buffers), lock(&self.stats));
        comm.fused_all_reduce(
            &self.plan,
            step,
            sums,
            failed,
            out,
            &mut buffers,
            &mut stats,
        )
        .map_err(|p| self.fail(p))
    }

    fn gather_digests(&self, step: i64, digests: &[u64]) -> Result<Vec<Vec<u64>>> {
        let all = self
            .shared
            .comm()
            .gather_words(digests, "digest gather", step)
            .map_err(|p| self.fail(p))?;
        Ok(all
            .chunks(digests.len().max(1))
            .map(<[u64]>::to_vec)
            .collect())
    }

    fn share_outcome(
        &self,
        step: i64,
        outcome: std::result::Result<(), String>,
    ) -> Result<std::result::Result<(), String>> {
        // [failed, length (2 bytes), message...]: one fixed-size broadcast.
        let mut bytes = vec![0u8; OUTCOME_BYTES];
        if let Err(message) = &outcome {
            let text = &message.as_bytes()[..message.len().min(OUTCOME_BYTES - 3)];
            bytes[0] = 1;
            bytes[1..3].copy_from_slice(&(text.len() as u16).to_le_bytes());
            bytes[3..3 + text.len()].copy_from_slice(text);
        }
        let bytes = self
            .shared
            .comm()
            .broadcast(bytes, "checkpoint outcome broadcast", step)
            .map_err(|p| self.fail(p))?;
        if bytes[0] == 0 {
            return Ok(Ok(()));
        }
        let len = usize::from(u16::from_le_bytes([bytes[1], bytes[2]]));
        Ok(Err(String::from_utf8_lossy(&bytes[3..3 + len]).into_owned()))
    }

    fn stats(&self) -> AllReduceStats {
        *lock(&self.stats)
    }
}

/// The size of a checkpoint's outcome on the wire (its message is cut to fit).
const OUTCOME_BYTES: usize = 1024;

/// Element types as words.
const DTYPES: &[DType] = &[DType::F32, DType::F64, DType::I32, DType::I64];

fn dtype_word(dtype: DType) -> u64 {
    DTYPES
        .iter()
        .position(|&d| d == dtype)
        .map_or(u64::MAX, |i| i as u64)
}

/// `[count, then per item: dtype, rank, dims...]`.
fn describe(items: &[(String, DType, Vec<usize>)]) -> Vec<u64> {
    let mut words = vec![items.len() as u64];
    for (_, dtype, shape) in items {
        words.push(dtype_word(*dtype));
        words.push(shape.len() as u64);
        words.extend(shape.iter().map(|&d| d as u64));
    }
    words
}

/// The items of a description; `None` if it is malformed.
fn items_of(words: &[u64]) -> Option<Vec<(DType, Vec<usize>)>> {
    let (&count, mut rest) = words.split_first()?;
    let mut items = Vec::new();
    for _ in 0..count {
        let (&dtype, after) = rest.split_first()?;
        let (&rank, after) = after.split_first()?;
        let (dims, after) = after.split_at_checked(usize::try_from(rank).ok()?)?;
        rest = after;
        let dtype = *DTYPES.get(usize::try_from(dtype).ok()?)?;
        items.push((dtype, dims.iter().map(|&d| d as usize).collect()));
    }
    Some(items)
}

/// What differs between this rank's `items` and every rank's description.
fn mismatch(items: &[(String, DType, Vec<usize>)], all: &[Vec<u64>]) -> Problem {
    let each: Vec<Vec<(DType, Vec<usize>)>> = all
        .iter()
        .map(|w| items_of(w).unwrap_or_default())
        .collect();
    let counts: Vec<usize> = each.iter().map(Vec::len).collect();
    if counts.iter().any(|&c| c != items.len()) {
        return Problem::VariableCount { counts };
    }
    let index = (0..items.len())
        .find(|&i| each.iter().any(|e| e[i] != each[0][i]))
        .unwrap_or(0);
    let held = each
        .iter()
        .enumerate()
        .map(|(rank, e)| Held {
            rank,
            dtype: e[index].0,
            shape: e[index].1.clone(),
        })
        .collect();
    Problem::Mismatch {
        variable: items[index].0.clone(),
        index,
        held,
    }
}
