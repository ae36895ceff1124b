//! The small collectives of replicas across ranks: gathers of 64-bit words (descriptions,
//! digests) and broadcasts from rank 0 (the starting state, a checkpoint's outcome). Each is
//! non-blocking, polled against the deadline ([`Flight`]).

use std::ffi::c_int;

use mpi::datatype::Equivalence;
use mpi::ffi;
use mpi::raw::AsRaw;

use super::comm::{Comm, Flight};
use crate::distributed::Problem;

fn count(n: usize) -> c_int {
    c_int::try_from(n).expect("fewer than 2^31 elements in one call")
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
        let mut flight = Flight::new((mine.to_vec(), vec![0u64; mine.len() * self.ranks]));
        let data = self.data.0;
        let (send, recv) = flight.buffers();
        let (send, recv) = (send.as_ptr(), recv.as_mut_ptr());
        let n = count(mine.len());
        flight.start("MPI_Iallgather", |request| {
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
        let counts: Vec<c_int> = lens.iter().map(|&l| count(l)).collect();
        let displs: Vec<c_int> = lens
            .iter()
            .scan(0, |at, &l| {
                let here = *at;
                *at += l;
                Some(count(here))
            })
            .collect();
        let total = lens.iter().sum();
        let mut flight = Flight::new((mine.to_vec(), vec![0u64; total], counts, displs));
        let data = self.data.0;
        let (send, recv, counts, displs) = flight.buffers();
        let (send, recv) = (send.as_ptr(), recv.as_mut_ptr());
        let (counts, displs) = (counts.as_ptr(), displs.as_ptr());
        let n = count(mine.len());
        flight.start("MPI_Iallgatherv", |request| {
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

    /// Rank 0's `values` on every rank (each passes a buffer of the same length).
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
        let (at, n) = (buffer.as_mut_ptr(), count(buffer.len()));
        let dtype = T::equivalent_datatype().as_raw();
        flight.start("MPI_Ibcast", |request| {
            // SAFETY: the buffer belongs to the flight and holds `n` elements of `dtype`.
            unsafe { ffi::MPI_Ibcast(at.cast(), n, dtype, 0, data, request) }
        })?;
        flight.land(self, operation, step)
    }
}
