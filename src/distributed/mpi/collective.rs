//! The small collectives of replicas across ranks: gathers of 64-bit words (descriptions,
//! digests, flags) and broadcasts from rank 0 (the starting state, a checkpoint's outcome).
//! Each is non-blocking, polled against the deadline ([`Flight`]). A broadcast longer than
//! one MPI call counts is split into several calls, all in flight at once; a gather that
//! long is refused ([`Problem::TooLarge`]) on every rank alike, before anything starts (its
//! lengths are the same on every rank).

use std::ffi::c_int;

use mpi::datatype::Equivalence;
use mpi::ffi;
use mpi::raw::AsRaw;

use super::comm::{count, pieces, Comm, Flight, MAX_COUNT};
use crate::distributed::Problem;

/// `n` as the count of one call of `operation`, or [`Problem::TooLarge`].
fn fits(n: usize, operation: &'static str) -> Result<c_int, Problem> {
    if n > MAX_COUNT {
        return Err(Problem::TooLarge {
            operation,
            elements: n,
        });
    }
    Ok(count(n))
}

impl Comm {
    /// Every rank's `mine` (of one length on every rank), in rank order.
    pub(super) fn gather_words(
        &mut self,
        mine: &[u64],
        operation: &'static str,
        step: i64,
    ) -> Result<Vec<u64>, Problem> {
        self.usable()?;
        let n = fits(mine.len(), operation)?;
        let mut flight = Flight::new((mine.to_vec(), vec![0u64; mine.len() * self.ranks]));
        let data = self.data.0;
        let (send, recv) = flight.buffers();
        let (send, recv) = (send.as_ptr(), recv.as_mut_ptr());
        flight.start(self, "MPI_Iallgather", |request| {
            // SAFETY: both buffers belong to the flight (heap memory that stays put); the
            // receive buffer holds `n` words per rank.
            unsafe {
                ffi::MPI_Iallgather(
                    send.cast(),
                    n,
                    ffi::RSMPI_UINT64_T,
                    recv.cast(),
                    n,
                    ffi::RSMPI_UINT64_T,
                    data,
                    request,
                )
            }
        })?;
        Ok(flight.land(self, operation, step)?.1)
    }

    /// Every rank's `mine` (of any length), in rank order; `lens` is each rank's length.
    pub(super) fn gather_varied(
        &mut self,
        mine: &[u64],
        lens: &[usize],
        operation: &'static str,
        step: i64,
    ) -> Result<Vec<Vec<u64>>, Problem> {
        self.usable()?;
        let n = fits(mine.len(), operation)?;
        let counts = lens
            .iter()
            .map(|&l| fits(l, operation))
            .collect::<Result<Vec<c_int>, _>>()?;
        // Each rank's place in the receive buffer: where the ones before it end.
        let mut displs = Vec::with_capacity(lens.len());
        let mut total = 0usize;
        for &l in lens {
            displs.push(fits(total, operation)?);
            total = total.saturating_add(l);
        }
        let mut flight = Flight::new((mine.to_vec(), vec![0u64; total], counts, displs));
        let data = self.data.0;
        let (send, recv, counts, displs) = flight.buffers();
        let (send, recv) = (send.as_ptr(), recv.as_mut_ptr());
        let (counts, displs) = (counts.as_ptr(), displs.as_ptr());
        flight.start(self, "MPI_Iallgatherv", |request| {
            // SAFETY: every buffer belongs to the flight; the receive buffer holds every
            // rank's count at its displacement.
            unsafe {
                ffi::MPI_Iallgatherv(
                    send.cast(),
                    n,
                    ffi::RSMPI_UINT64_T,
                    recv.cast(),
                    counts,
                    displs,
                    ffi::RSMPI_UINT64_T,
                    data,
                    request,
                )
            }
        })?;
        let all = flight.land(self, operation, step)?.1;
        let mut rest = &all[..];
        Ok(lens
            .iter()
            .map(|&l| {
                let (one, after) = rest.split_at(l);
                rest = after;
                one.to_vec()
            })
            .collect())
    }

    /// Rank 0's `values` on every rank (each passes a buffer of the same length), in calls
    /// of at most [`MAX_COUNT`] elements.
    pub(super) fn broadcast<T: Equivalence + Copy>(
        &mut self,
        values: Vec<T>,
        operation: &'static str,
        step: i64,
    ) -> Result<Vec<T>, Problem> {
        self.usable()?;
        let mut flight = Flight::new(values);
        let data = self.data.0;
        let buffer = flight.buffers();
        let (base, len) = (buffer.as_mut_ptr(), buffer.len());
        let dtype = T::equivalent_datatype().as_raw();
        for (offset, n) in pieces(len, MAX_COUNT) {
            let at = base.wrapping_add(offset);
            flight.start(self, "MPI_Ibcast", |request| {
                // SAFETY: the buffer belongs to the flight (heap memory that stays put) and
                // holds `n` elements of `dtype` from `at` (`offset + n <= len`); the calls'
                // runs are disjoint.
                unsafe { ffi::MPI_Ibcast(at.cast(), count(n), dtype, 0, data, request) }
            })?;
        }
        flight.land(self, operation, step)
    }
}
