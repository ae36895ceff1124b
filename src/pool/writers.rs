//! A third spare for a large variable's pool while several threads add deltas to it.
//!
//! A large version comes back to its pool a grace period after it was replaced. With one
//! writer that is before the write returns ([`reclaim_now`](crate::limbo::reclaim_now)), and
//! the two spares of [`limbo::spares`](crate::limbo::spares) are enough. Under contention it
//! comes back a write or two late (a combining pass's holder reclaims what its passes
//! replaced only once its own write returns, and a descheduled thread holds grace periods
//! up): a trim after one commit can free a spare that the next write then misses, so that
//! write allocates a fresh buffer (a page fault per 4 KiB) and a later trim frees one again.
//! A third spare while several writers are under way removes most of those allocations; a
//! fourth does no better.
//!
//! So the delta writes of a large variable (`assign_add`, `assign_sub`, `scaled_add`, row
//! updates: everything that goes through combining) count themselves in, and a trim keeps a
//! third spare while another one is under way. Other writes (`assign`, `update`,
//! `fetch_update`, critical sections) are not counted: they see two spares. A variable
//! written by one thread at a time keeps its current version and two spares; after several
//! writers stop, its next lone write trims the third spare away.

use crate::sync::{AtomicUsize, Ordering};

/// See the module docs: the writes of one large variable under way.
#[derive(Debug, Default)]
pub(crate) struct Writers(AtomicUsize);

impl Writers {
    /// Counts a write in until the returned guard drops.
    #[must_use = "the write counts only while the guard lives"]
    pub(crate) fn enter(&self) -> Writing<'_> {
        // Relaxed (both here and in `drop`): a heuristic; nothing is ordered by the count,
        // and any value it shows is a valid number of spares to keep.
        self.0.fetch_add(1, Ordering::Relaxed);
        Writing(self)
    }

    /// Spares to keep beyond the base: one while more than one write is under way.
    pub(crate) fn extra_spares(&self) -> usize {
        // Relaxed: as in `enter`.
        usize::from(self.0.load(Ordering::Relaxed) > 1)
    }
}

/// A write counted in [`Writers`].
pub(crate) struct Writing<'w>(&'w Writers);

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        // Relaxed: as in `enter`.
        self.0 .0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(all(test, not(mvtensor_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_third_spare_only_while_another_write_is_under_way() {
        let writers = Writers::default();
        assert_eq!(writers.extra_spares(), 0);
        let first = writers.enter();
        assert_eq!(
            writers.extra_spares(),
            0,
            "one writer: two spares are enough"
        );
        {
            let _second = writers.enter();
            assert_eq!(writers.extra_spares(), 1);
        }
        assert_eq!(writers.extra_spares(), 0);
        drop(first);
        assert_eq!(writers.extra_spares(), 0);
    }
}
