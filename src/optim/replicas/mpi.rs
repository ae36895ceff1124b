//! [`Replicas::over_mpi`]: replicas whose transport is a [`Cluster`]'s ranks, built on the
//! cluster's collectives (`distributed`'s side knows nothing of the replicas).

use mpi::datatype::Equivalence;
use ndarray::{ArrayViewD, IxDyn, NdFloat};

use super::Replicas;
use crate::distributed::{Cluster, Problem};
use crate::error::{Error, Result};
use crate::optim::Optimizer;
use crate::read_all::read_all;
use crate::{DType, Element};

impl<A: Element + NdFloat + Equivalence> Replicas<A> {
    /// Replicas across the ranks of `cluster`, with `threads` workers in this process
    /// (threads may differ between ranks: a step's sum is divided by all ranks' workers).
    /// Collective: every rank calls it, with optimizers over the same parameters. It checks
    /// that every rank replicates the same variables (the parameters, then the optimizer's
    /// state: count, dtype and shape, in order) and gradients, then sets every rank's
    /// parameters and optimizer state (its step count included) to rank 0's, in one commit
    /// of the optimizer's section (a reader sees all of rank 0's values or none): restore a
    /// checkpoint into rank 0's before this, and every rank resumes from it. The ranks then
    /// share whether each took them, and fail together if one did not.
    ///
    /// # Errors
    /// [`Error::Distributed`] with [`Problem::VariableCount`] or [`Problem::Mismatch`]
    /// (naming the variable and what each rank holds) before anything is sent, so nothing
    /// changed on any rank; [`Problem::Stalled`] if a rank does not take part in time. A rank
    /// whose variables cannot take rank 0's values returns that error (its variables are
    /// unchanged), and every other rank [`Problem::PeerStartFailed`] naming it.
    pub fn over_mpi(optimizer: Optimizer<A>, threads: usize, cluster: &Cluster) -> Result<Self> {
        let rank = cluster.rank();
        let threads = threads.max(1);
        let vars = Self::replicated_by(&optimizer);
        // One cut: what rank 0 describes is what it sends.
        let snapshots = read_all(&vars[..]);
        let shapes: Vec<Vec<usize>> = snapshots.iter().map(|s| s.shape().to_vec()).collect();
        let mut items: Vec<(String, DType, Vec<usize>)> = vars
            .iter()
            .zip(&shapes)
            .map(|(v, shape)| (v.name().to_owned(), A::DTYPE, shape.clone()))
            .collect();
        let grads: Vec<Vec<usize>> = optimizer.gradient_shapes().map(<[_]>::to_vec).collect();
        for (i, shape) in grads.iter().enumerate() {
            let name = format!("gradient {i} of optimizer `{}`", optimizer.name());
            items.push((name, A::DTYPE, shape.clone()));
        }
        let workers = cluster.compare(&items, threads)?;
        // Rank 0's values, on every rank.
        let total: usize = shapes.iter().map(|s| s.iter().product::<usize>()).sum();
        let mut values = Vec::with_capacity(total);
        if rank == 0 {
            for snapshot in &snapshots {
                values.extend_from_slice(snapshot.as_slice().expect("standard layout"));
            }
        } else {
            values.resize(total, A::zero());
        }
        drop(snapshots);
        let values = cluster.broadcast_values(values, "broadcast of rank 0's state", 0)?;
        let taken = if rank == 0 {
            Ok(())
        } else {
            take(&optimizer, &vars, &shapes, &values)
        };
        drop(values);
        let failed = cluster.failed_ranks(taken.is_err(), "gather of the start's outcome", 0)?;
        taken?;
        if !failed.is_empty() {
            return Err(Error::Distributed {
                rank,
                problem: Problem::PeerStartFailed { ranks: failed },
            });
        }
        let lens: Vec<usize> = grads.iter().map(|s| s.iter().product()).collect();
        let transport = cluster.transport(&lens, workers);
        Ok(Self::with_transport(optimizer, threads, transport))
    }
}

/// Assigns `values` (the replicated variables' values, one after the other, of `shapes`) to
/// `vars` in one execution of the optimizer's section, which holds every one of them: all
/// are assigned, or (on an error) none.
fn take<A: Element + NdFloat>(
    optimizer: &Optimizer<A>,
    vars: &[crate::Variable<A>],
    shapes: &[Vec<usize>],
    values: &[A],
) -> Result<()> {
    optimizer.section.execute(|tx| {
        let mut rest = values;
        for (var, shape) in vars.iter().zip(shapes) {
            let (mine, after) = rest.split_at(shape.iter().product());
            rest = after;
            let value =
                ArrayViewD::from_shape(IxDyn(shape), mine).map_err(|e| Error::InvalidValue {
                    variable: var.name().to_owned(),
                    problem: e.to_string(),
                })?;
            tx.assign(var, value.to_owned())?;
        }
        Ok(())
    })
}
