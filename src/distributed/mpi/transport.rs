//! The replicas' side of a [`Cluster`]: the collectives that start replicas over it (before
//! any data moves every rank describes what it replicates, each variable's dtype and shape
//! and each gradient's shape, and the ranks compare; then rank 0's values are broadcast and
//! the ranks share whether each took them) and the transport of their steps.
//! `Replicas::over_mpi` (in `optim`) is built on these; nothing here knows the replicas.

use std::sync::{Arc, Mutex};

use mpi::datatype::Equivalence;
use ndarray::NdFloat;

use super::fused::{Buffers, Plan};
use super::{Cluster, Shared};
use crate::distributed::{digest_words, AllReduceStats, Held, Problem, Transport};
use crate::error::{Error, Result};
use crate::sync::lock_std as lock;
use crate::{DType, Element, OwnedSnapshot};

/// One thing replicas hold on every rank, as the ranks compare it: its name (as this rank
/// names it), dtype and shape.
pub(crate) type Item = (String, DType, Vec<usize>);

impl Cluster {
    fn fail(&self, problem: Problem) -> Error {
        Error::Distributed {
            rank: self.rank(),
            problem,
        }
    }

    /// Collective: checks that every rank holds the same `items` (count, then each one's
    /// dtype and shape, in order), and returns every rank's `threads` together.
    ///
    /// # Errors
    /// [`Error::Distributed`] with [`Problem::VariableCount`] or [`Problem::Mismatch`]
    /// (naming the item and what each rank holds) on every rank, before anything else is
    /// sent; [`Problem::Stalled`] if a rank does not take part in time.
    pub(crate) fn compare(&self, items: &[Item], threads: usize) -> Result<usize> {
        let words = describe(items);
        let digest = digest_words(&words);
        let mut comm = self.shared.comm();
        let head = [digest, words.len() as u64, threads as u64];
        let heads = comm
            .gather_words(&head, "description gather", 0)
            .map_err(|p| self.fail(p))?;
        let heads: Vec<&[u64]> = heads.chunks(3).collect();
        if heads.iter().any(|h| h[0] != digest) {
            let lens: Vec<usize> = heads
                .iter()
                .map(|h| usize::try_from(h[1]).unwrap_or(usize::MAX))
                .collect();
            let all = comm
                .gather_varied(&words, &lens, "description gather", 0)
                .map_err(|p| self.fail(p))?;
            return Err(self.fail(mismatch(items, &all)));
        }
        Ok(heads
            .iter()
            .map(|h| usize::try_from(h[2]).unwrap_or(usize::MAX))
            .fold(0, usize::saturating_add))
    }

    /// Collective: rank 0's `values` on every rank (each passes as many), in as many MPI
    /// calls as their length needs.
    ///
    /// # Errors
    /// [`Error::Distributed`] with [`Problem::Stalled`] if a rank does not take part in time,
    /// or [`Problem::Mpi`].
    pub(crate) fn broadcast_values<A: Equivalence + Copy>(
        &self,
        values: Vec<A>,
        operation: &'static str,
        step: i64,
    ) -> Result<Vec<A>> {
        self.shared
            .comm()
            .broadcast(values, operation, step)
            .map_err(|p| self.fail(p))
    }

    /// Collective: the ranks whose `failed` is set, in rank order, on every rank.
    ///
    /// # Errors
    /// As [`broadcast_values`](Self::broadcast_values).
    pub(crate) fn failed_ranks(
        &self,
        failed: bool,
        operation: &'static str,
        step: i64,
    ) -> Result<Vec<usize>> {
        let flags = self
            .shared
            .comm()
            .gather_words(&[u64::from(failed)], operation, step)
            .map_err(|p| self.fail(p))?;
        Ok((0..flags.len()).filter(|&r| flags[r] != 0).collect())
    }

    /// The transport of replicas over this cluster whose gradients have `lens` elements each
    /// (the same on every rank: checked by [`compare`](Self::compare)) and whose ranks have
    /// `workers` workers in all.
    pub(crate) fn transport<A: Element + NdFloat + Equivalence>(
        &self,
        lens: &[usize],
        workers: usize,
    ) -> Box<dyn Transport<A>> {
        let shared = Arc::clone(&self.shared);
        let bucket = (shared.bucket_bytes / std::mem::size_of::<A>().max(1)).max(1);
        Box::new(MpiTransport {
            plan: Plan::new(lens, shared.ranks, bucket),
            shared,
            workers,
            buffers: Mutex::new(Buffers::default()),
            stats: Mutex::new(AllReduceStats::default()),
        })
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
        let bytes = self
            .shared
            .comm()
            .broadcast(
                outcome_bytes(&outcome),
                "checkpoint outcome broadcast",
                step,
            )
            .map_err(|p| self.fail(p))?;
        Ok(outcome_of(&bytes))
    }

    fn stats(&self) -> AllReduceStats {
        *lock(&self.stats)
    }
}

/// The size of a checkpoint's outcome on the wire (its message is cut to fit).
const OUTCOME_BYTES: usize = 1024;

/// `outcome` on the wire: `[failed, length (2 bytes, little-endian), message...]`, one
/// fixed-size broadcast.
fn outcome_bytes(outcome: &std::result::Result<(), String>) -> Vec<u8> {
    let mut bytes = vec![0u8; OUTCOME_BYTES];
    if let Err(message) = outcome {
        let text = &message.as_bytes()[..message.len().min(OUTCOME_BYTES - 3)];
        bytes[0] = 1;
        bytes[1..3].copy_from_slice(&(text.len() as u16).to_le_bytes());
        bytes[3..3 + text.len()].copy_from_slice(text);
    }
    bytes
}

/// The outcome in `bytes` ([`outcome_bytes`]); a length past the bytes at hand is held to
/// them, and a message cut inside a character keeps a replacement character there.
fn outcome_of(bytes: &[u8]) -> std::result::Result<(), String> {
    match bytes {
        [0, ..] | [] => Ok(()),
        [_, lo, hi, text @ ..] => {
            let len = usize::from(u16::from_le_bytes([*lo, *hi]));
            Err(String::from_utf8_lossy(&text[..len.min(text.len())]).into_owned())
        }
        [_, ..] => Err(String::new()),
    }
}

/// Element types as words.
const DTYPES: &[DType] = &[DType::F32, DType::F64, DType::I32, DType::I64];

fn dtype_word(dtype: DType) -> u64 {
    DTYPES
        .iter()
        .position(|&d| d == dtype)
        .map_or(u64::MAX, |i| i as u64)
}

/// `[count, then per item: dtype, rank, dims...]`.
fn describe(items: &[Item]) -> Vec<u64> {
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
fn mismatch(items: &[Item], all: &[Vec<u64>]) -> Problem {
    let each: Vec<Vec<(DType, Vec<usize>)>> = all
        .iter()
        .map(|w| items_of(w).unwrap_or_default())
        .collect();
    let counts: Vec<usize> = each.iter().map(Vec::len).collect();
    if items.is_empty() || counts.iter().any(|&c| c != items.len()) {
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

#[cfg(test)]
mod tests {
    use super::{outcome_bytes, outcome_of, OUTCOME_BYTES};

    #[test]
    fn an_outcome_survives_the_wire_and_a_long_message_is_cut_to_fit() {
        assert_eq!(outcome_of(&outcome_bytes(&Ok(()))), Ok(()));
        let failed = Err("disk full".to_owned());
        assert_eq!(outcome_of(&outcome_bytes(&failed)), failed);
        let long = "x".repeat(OUTCOME_BYTES * 2);
        let cut = outcome_of(&outcome_bytes(&Err(long))).unwrap_err();
        assert_eq!(cut.len(), OUTCOME_BYTES - 3);
    }

    #[test]
    fn a_length_past_the_bytes_is_held_to_them() {
        // Failed, with a length of 65535 but 4 bytes of message.
        let bytes = [1, 0xff, 0xff, b'o', b'o', b'p', b's'];
        assert_eq!(outcome_of(&bytes), Err("oops".to_owned()));
        assert_eq!(outcome_of(&[1, 9]), Err(String::new()));
        assert_eq!(outcome_of(&[]), Ok(()));
    }
}
