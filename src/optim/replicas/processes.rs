//! What [`Replicas`] do across processes: which process this is, whether every replica
//! holds the same values, and checkpoints taken at one global step. For replicas that are
//! threads of one process the same calls work, with one process.

use std::path::PathBuf;

use ndarray::NdFloat;

use super::Replicas;
use crate::checkpoint::Checkpoints;
use crate::distributed::{digest, digest_words};
use crate::distributed::{AllReduceStats, Problem};
use crate::error::{Error, Result};
use crate::optim::Optimizer;
use crate::read_all::read_all;
use crate::{Element, Store, Variable};

impl<A: Element + NdFloat> Replicas<A> {
    /// This process's rank among the processes of the replicas: 0 for threads of one
    /// process.
    pub fn rank(&self) -> usize {
        self.transport.as_ref().map_or(0, |t| t.process())
    }

    /// The number of processes: 1 for threads of one process.
    pub fn ranks(&self) -> usize {
        self.transport.as_ref().map_or(1, |t| t.processes())
    }

    /// The workers of every process together: what each step's gradient sum is divided by.
    pub fn total_workers(&self) -> usize {
        self.transport
            .as_ref()
            .map_or(self.workers, |t| t.workers())
    }

    /// What the all-reduces between processes cost so far (all zeros without processes).
    pub fn all_reduce_stats(&self) -> AllReduceStats {
        self.transport
            .as_ref()
            .map_or_else(AllReduceStats::default, |t| t.stats())
    }

    /// The variables every replica holds a copy of, in order: the optimizer's parameters,
    /// then its state (unless a packed parameter holds it).
    pub(crate) fn replicated(&self) -> Vec<Variable<A>> {
        Self::replicated_by(&self.optimizer)
    }

    /// [`replicated`](Self::replicated) by replicas in front of `optimizer`.
    pub(crate) fn replicated_by(optimizer: &Optimizer<A>) -> Vec<Variable<A>> {
        let mut all = optimizer.params.clone();
        let state = optimizer.state.erased();
        if !all.iter().any(|p| p.id() == state.id()) {
            all.push(state.clone());
        }
        all
    }

    /// Checks that every process holds the same parameters and optimizer state, bit for
    /// bit: one digest per variable and process, gathered by every process. Returns the
    /// digest of them all (the same on every process). Collective: every process calls it
    /// between the same two steps (one thread of each, with no step of its own running).
    ///
    /// # Errors
    /// [`Error::Distributed`] with [`Problem::Diverged`] naming the first variable that
    /// differs, the ranks that hold another value than most and the ranks that agree;
    /// [`Problem::Stalled`] if a process does not take part in time.
    pub fn check_agreement(&self) -> Result<u64> {
        let vars = self.replicated();
        let digests: Vec<u64> = read_all(&vars[..])
            .iter()
            .map(|s| digest(s.as_slice().expect("versions are in standard layout")))
            .collect();
        let Some(transport) = &self.transport else {
            return Ok(digest_words(&digests));
        };
        let step = self.optimizer.steps();
        let all = transport.gather_digests(step, &digests)?;
        for (i, var) in vars.iter().enumerate() {
            let each: Vec<u64> = all.iter().map(|d| d[i]).collect();
            let common = most_common(&each);
            let (agree, diverged): (Vec<usize>, Vec<usize>) =
                (0..each.len()).partition(|&rank| each[rank] == common);
            if !diverged.is_empty() {
                return Err(Error::Distributed {
                    rank: transport.process(),
                    problem: Problem::Diverged {
                        variable: var.name().to_owned(),
                        step,
                        diverged,
                        agree,
                    },
                });
            }
        }
        Ok(digest_words(&digests))
    }

    /// A checkpoint at one global step: checks that every process agrees
    /// ([`check_agreement`](Self::check_agreement)), then rank 0 saves `store` through
    /// `checkpoints` (the usual safetensors file, crash-safe) and tells every process
    /// whether it was written. Returns the file's path on rank 0, `None` on the others.
    /// Collective, as `check_agreement`. `store` must hold every parameter and the
    /// optimizer's state ([`Optimizer::register_state`](crate::optim::Optimizer::register_state)),
    /// so that a job on any number of processes can resume from the file: rank 0 restores it
    /// before building the replicas, which hand it to the others.
    ///
    /// `checkpoints` is used on rank 0 only; the other ranks pass `None` (or anything: it is
    /// ignored). Only rank 0 should make the [`Checkpoints`]: making one removes the
    /// temporary files of saves whose process is gone, judged by this machine's process
    /// ids, so a rank on another machine that shares the directory could take rank 0's
    /// save in flight for a dead one.
    ///
    /// # Errors
    /// `check_agreement`'s; on rank 0 the save's error, [`Error::NotFound`] naming a
    /// replicated variable that `store` lacks, or [`Error::InvalidSetting`] for no
    /// `checkpoints`; on the other ranks [`Problem::Checkpoint`] with rank 0's message. The
    /// previous checkpoint is intact then.
    pub fn save_checkpoint<'c>(
        &self,
        store: &Store,
        checkpoints: impl Into<Option<&'c Checkpoints>>,
    ) -> Result<Option<PathBuf>> {
        let checkpoints = checkpoints.into();
        self.check_agreement()?;
        let save = || -> Result<PathBuf> {
            let Some(checkpoints) = checkpoints else {
                return Err(Error::InvalidSetting {
                    owner: format!("replicas of optimizer `{}`", self.optimizer.name()),
                    setting: "checkpoints",
                    value: "None".to_owned(),
                    expected: "the checkpoints rank 0 saves to",
                });
            };
            if let Some(var) = self.replicated().iter().find(|v| !store.contains(v.name())) {
                return Err(Error::NotFound {
                    name: var.name().to_owned(),
                });
            }
            checkpoints.save(store)
        };
        let Some(transport) = &self.transport else {
            return save().map(Some);
        };
        let step = self.optimizer.steps();
        if transport.process() == 0 {
            let saved = save();
            let outcome = saved.as_ref().map(|_| ()).map_err(|e| e.to_string());
            // Rank 0 knows its own outcome: what it shares is for the others.
            let _shared = transport.share_outcome(step, outcome)?;
            saved.map(Some)
        } else {
            match transport.share_outcome(step, Ok(()))? {
                Ok(()) => Ok(None),
                Err(message) => Err(Error::Distributed {
                    rank: transport.process(),
                    problem: Problem::Checkpoint { step, message },
                }),
            }
        }
    }
}

/// The value most ranks hold; on a tie the first rank's of the tied values.
fn most_common(each: &[u64]) -> u64 {
    let count = |v: u64| each.iter().filter(|&&w| w == v).count();
    let mut best = each[0];
    for &v in each {
        if count(v) > count(best) {
            best = v;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use ndarray::Array1;

    use crate::optim::{Optimizer, Replicas};
    use crate::{Error, Store};

    #[test]
    fn a_checkpoint_without_checkpoints_is_refused_on_rank_0() {
        let store = Store::new();
        let w = store.variable("w", Array1::<f32>::zeros(2)).unwrap();
        let sgd = Optimizer::sgd(0.5).name("sgd").param(&w).build().unwrap();
        sgd.register_state(&store).unwrap();
        let replicas = Replicas::new(sgd, 1);
        let error = replicas.save_checkpoint(&store, None).unwrap_err();
        assert!(
            matches!(
                &error,
                Error::InvalidSetting { owner, setting: "checkpoints", .. }
                    if owner == "replicas of optimizer `sgd`"
            ),
            "{error}"
        );
    }
}
