//! Tensor fusion: a step's gradient sums in buckets, all-reduced together.
//!
//! The gradients, then one flag per rank (whether its step failed), lie one after the other
//! in the output. Consecutive tensors smaller than a bucket are copied into a bucket of at
//! most `bucket` elements and all-reduced as one call; a tensor of a bucket or more is
//! all-reduced straight from its snapshot into its place in the output, with no copy. Every
//! bucket's call is started before any is waited for, so they are all in flight at once. A
//! bucket longer than one MPI call counts (2^31 - 1 elements: a huge tensor, or a huge
//! bucket size) goes out as several calls of consecutive runs.

use std::ffi::c_int;
use std::ops::Range;
use std::time::Instant;

use mpi::datatype::Equivalence;
use mpi::ffi;
use mpi::raw::AsRaw;
use ndarray::NdFloat;
use smallvec::SmallVec;

use super::comm::{checked, count, pieces, Comm, Flight, MAX_COUNT};
use crate::distributed::{AllReduceStats, Problem};
use crate::{Element, OwnedSnapshot};

/// One all-reduce call of a step.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Bucket {
    /// Items copied into the send buffer at the same offsets as in the output.
    Packed(Range<usize>),
    /// One gradient, sent from its snapshot.
    Alone(usize),
}

/// How a step's gradients (and flags) are bucketed: fixed by their shapes.
#[derive(Debug)]
pub(super) struct Plan {
    /// Each item's elements in the output: the gradients, then the flags.
    spans: Vec<Range<usize>>,
    buckets: Vec<Bucket>,
    /// Where each packed item lies in the send buffer (`None`: sent from its snapshot).
    send_at: Vec<Option<usize>>,
    /// The send buffer's length: the packed items'.
    send_len: usize,
}

impl Plan {
    /// Buckets of at most `bucket` elements for gradients of `lens` elements and `ranks`
    /// flags.
    pub(super) fn new(lens: &[usize], ranks: usize, bucket: usize) -> Self {
        let mut spans = Vec::with_capacity(lens.len() + 1);
        let mut at = 0;
        for &len in lens.iter().chain([&ranks]) {
            spans.push(at..at + len);
            at += len;
        }
        let flags = lens.len();
        let mut buckets = Vec::new();
        let mut open: Option<Range<usize>> = None; // items packed so far
        for (item, span) in spans.iter().enumerate() {
            // The flags are always packed: no snapshot holds them.
            if span.len() >= bucket && item != flags {
                buckets.extend(open.take().map(Bucket::Packed));
                buckets.push(Bucket::Alone(item));
                continue;
            }
            open = match open.take() {
                Some(items) if spans[items.start].start + bucket >= span.end => {
                    Some(items.start..item + 1)
                }
                Some(items) => {
                    buckets.push(Bucket::Packed(items));
                    Some(item..item + 1)
                }
                None => Some(item..item + 1),
            };
        }
        buckets.extend(open.map(Bucket::Packed));
        let mut send_at = vec![None; spans.len()];
        let mut send_len = 0;
        for bucket in &buckets {
            if let Bucket::Packed(items) = bucket {
                for item in items.clone() {
                    send_at[item] = Some(send_len);
                    send_len += spans[item].len();
                }
            }
        }
        Self {
            spans,
            buckets,
            send_at,
            send_len,
        }
    }

    /// The output's length: every gradient, then the flags.
    pub(super) fn len(&self) -> usize {
        self.spans.last().map_or(0, |s| s.end)
    }

    /// The elements of `items` (consecutive), in the output.
    fn span(&self, items: &Range<usize>) -> Range<usize> {
        self.spans[items.start].start..self.spans[items.end - 1].end
    }
}

/// What a fused all-reduce keeps between steps: the send buffer of the packed buckets.
#[derive(Debug, Default)]
pub(super) struct Buffers<A> {
    pub(super) send: Vec<A>,
}

impl Comm {
    /// Sums every rank's `sums` into `out` (the gradients, one after the other: `plan`'s
    /// output less the flags) and returns the ranks whose `failed` was set. On a missed
    /// deadline `sums`, `out`'s buffer and `buffers`' are forgotten (MPI may still use them).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fused_all_reduce<A: Element + NdFloat + Equivalence>(
        &mut self,
        plan: &Plan,
        step: i64,
        sums: Vec<OwnedSnapshot<A>>,
        failed: bool,
        out: &mut Vec<A>,
        buffers: &mut Buffers<A>,
        stats: &mut AllReduceStats,
    ) -> Result<Vec<usize>, Problem> {
        self.usable()?;
        let started = Instant::now();
        let flags = plan.spans[plan.spans.len() - 1].clone();
        let mut send = std::mem::take(&mut buffers.send);
        send.resize(plan.send_len, A::zero());
        let mut recv = std::mem::take(out);
        recv.resize(plan.len(), A::zero());
        // This rank's flags: 1 at its own place if its step failed.
        let at = plan.send_at[plan.spans.len() - 1].expect("the flags are packed");
        send[at..at + self.ranks].fill(A::zero());
        if failed {
            send[at + self.rank] = A::one();
        }
        for (item, sum) in sums.iter().enumerate() {
            if let Some(at) = plan.send_at[item] {
                let sum = standard(sum);
                send[at..at + sum.len()].copy_from_slice(sum);
            }
        }
        let dtype = A::equivalent_datatype().as_raw();
        let comm = self.data.0;
        let mut flight = Flight::new((sums, send, recv));
        let (sums, send, recv) = flight.buffers();
        // Each call's send and receive memory: in the flight's buffers, disjoint in the
        // receive buffer; a bucket longer than a call counts is several calls.
        let mut calls: SmallVec<[(*const A, *mut A, c_int); 8]> = SmallVec::new();
        for bucket in &plan.buckets {
            let (from, to): (&[A], &mut [A]) = match bucket {
                Bucket::Packed(items) => {
                    let at = plan.send_at[items.start].expect("a packed item");
                    let span = plan.span(items);
                    (&send[at..at + span.len()], &mut recv[span])
                }
                Bucket::Alone(item) => {
                    (standard(&sums[*item]), &mut recv[plan.spans[*item].clone()])
                }
            };
            for (at, n) in pieces(to.len(), MAX_COUNT) {
                let to = &mut to[at..at + n];
                calls.push((from[at..at + n].as_ptr(), to.as_mut_ptr(), count(n)));
            }
        }
        stats.buckets += calls.len() as u64;
        let (_, send, mut recv) = match &self.watch {
            // Blocking calls, one bucket after the other, under the watchdog.
            Some(watch) => {
                watch.arm("all-reduce", step);
                for &(from, to, n) in &calls {
                    // SAFETY: `from` and `to` point into memory the flight owns (the
                    // snapshots' versions, the send and receive buffers' heap memory), `n`
                    // elements of `dtype` each; the call returns when it is done with them.
                    let rc = unsafe {
                        ffi::MPI_Allreduce(from.cast(), to.cast(), n, dtype, ffi::RSMPI_SUM, comm)
                    };
                    if let Err(problem) = checked("MPI_Allreduce", rc) {
                        watch.disarm();
                        std::mem::forget(flight);
                        return Err(self.faulted(problem));
                    }
                }
                watch.disarm();
                flight.into_buffers()
            }
            // Every bucket in flight at once, polled against the deadline.
            None => {
                for &(from, to, n) in &calls {
                    flight.start(self, "MPI_Iallreduce", |request| {
                        // SAFETY: as above; the flight keeps the memory until the calls
                        // complete, or for ever.
                        unsafe {
                            ffi::MPI_Iallreduce(
                                from.cast(),
                                to.cast(),
                                n,
                                dtype,
                                ffi::RSMPI_SUM,
                                comm,
                                request,
                            )
                        }
                    })?; // faulted; the calls already started keep the flight's memory
                }
                flight.land(self, "all-reduce", step)?
            }
        };
        let failed_ranks = recv[flags.clone()]
            .iter()
            .enumerate()
            .filter(|(_, &f)| f != A::zero())
            .map(|(rank, _)| rank)
            .collect();
        recv.truncate(flags.start);
        *out = recv;
        buffers.send = send;
        stats.steps += 1;
        stats.bytes += (plan.len() * std::mem::size_of::<A>()) as u64;
        stats.seconds += started.elapsed().as_secs_f64();
        Ok(failed_ranks)
    }
}

/// A version's elements (versions are always in standard layout).
fn standard<A: Element>(sum: &OwnedSnapshot<A>) -> &[A] {
    sum.as_slice().expect("versions are in standard layout")
}

#[cfg(test)]
mod tests {
    use super::{Bucket, Plan};

    #[test]
    fn small_tensors_share_buckets_and_large_ones_go_alone() {
        // Gradients of 10, 10, 100 and 5 elements, then 2 flags; buckets of 30 elements.
        let plan = Plan::new(&[10, 10, 100, 5], 2, 30);
        assert_eq!(
            plan.buckets,
            [Bucket::Packed(0..2), Bucket::Alone(2), Bucket::Packed(3..5)]
        );
        assert_eq!((plan.len(), plan.send_len), (127, 27));
        // One bucket as large as the model: everything packed, flags included.
        let plan = Plan::new(&[10, 10, 100, 5], 2, 1000);
        assert_eq!(plan.buckets, [Bucket::Packed(0..5)]);
    }

    #[test]
    fn a_bucket_never_holds_more_than_its_size() {
        let plan = Plan::new(&[6, 6, 6, 6, 6], 4, 12);
        assert_eq!(
            plan.buckets,
            [
                Bucket::Packed(0..2),
                Bucket::Packed(2..4),
                Bucket::Packed(4..6)
            ]
        );
    }
}
