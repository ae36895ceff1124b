//! Combining: concurrent dense updates to one variable become one pass and one version.
//!
//! Without it, k writers adding deltas at once would each copy the whole tensor, and all but
//! one would lose the compare-and-swap and copy it again. Instead (flat combining), a writer
//! announces its delta on a lock-free stack of pending operations and races for the
//! *combiner* flag. The winner takes every pending delta at once, computes
//! `current + d1 + d2 + ...` in one sweep ([`kernel::apply`](crate::kernel::apply)),
//! publishes one version through the variable's normal write path (which also takes the
//! ticket of a queued variable), and hands that version number to every writer whose delta
//! it applied.
//!
//! The announcing, waiting and hand-off are [`serve`](crate::serve)'s, shared with
//! critical sections: writers of small deltas spin (a pass takes about a microsecond, less
//! than a wake-up), writers of mid-sized ones yield a few times before they park, writers of
//! large ones park (with more writers than cores, spinning waiters took the cores the pass
//! needed).
//!
//! Progress: readers never notice. Delta writers may wait for a combiner that holds their
//! delta; if that combiner is descheduled they wait with it (combining trades lock-freedom
//! of these writes for doing k updates in one pass). Every waiter is served by the next
//! combining pass, so none starves.

use smallvec::SmallVec;

use crate::help::Helpers;
use crate::kernel::Delta;
use crate::serve::{Request, Serve, Server, Wait, Waiters};

/// The combined write failed; the writer applies its delta on its own.
const ALONE: u64 = 1;
/// Outcomes above this are `version + APPLIED`.
const APPLIED: u64 = 2;
/// Waiters may park only for deltas at least this large. A pass over a small tensor takes
/// about a microsecond, less than waking a parked thread, so there waiters spin and yield
/// instead. Under loom, deltas of more than one 4-byte element park, so that the models
/// check both ways of waiting.
const PARK_BYTES: usize = if cfg!(mvtensor_loom) { 5 } else { 64 * 1024 };
/// From this size waiters park after a short spin; below it they yield a few times first. A
/// pass over 256 KiB takes a few microseconds, about what a park and wake-up cost the holder
/// and the waiter, so yielding first gains a little with as many writers as cores; from
/// 1 MiB, waiters that yield take the cores the pass needs.
const PARK_AT_ONCE_BYTES: usize = if cfg!(mvtensor_loom) { 5 } else { 1024 * 1024 };

/// The per-variable combining state: announced deltas and the combiner flag. The `'static`
/// is a lie told to the type system: deltas are borrowed by writers that wait in
/// [`submit`](Combiner::submit) until their outcome is set.
pub(crate) struct Combiner<A: 'static> {
    server: Server<Delta<'static, A>>,
    /// Waiters compute chunks of a large pass ([`help`](crate::help)).
    helpers: Helpers,
}

impl<A: 'static> Default for Combiner<A> {
    fn default() -> Self {
        Self {
            server: Server::default(),
            helpers: Helpers::default(),
        }
    }
}

/// How a combining pass publishes a batch: returns the new version number, or `None` if the
/// write failed (every writer in the batch then applies its delta on its own). A large pass
/// is computed with `helpers` ([`kernel::apply_helped`](crate::kernel::apply_helped)), after
/// `wake` has woken the batch's parked writers to help.
pub(crate) trait Publish<A> {
    fn publish(&self, deltas: &[Delta<'_, A>], helpers: &Helpers, wake: &dyn Fn()) -> Option<u64>;
}

impl<A: 'static> Combiner<A> {
    /// Chunks of large passes computed by waiting writers so far.
    pub(crate) fn helped(&self) -> u64 {
        self.helpers.helped()
    }
}

impl<A: Copy + 'static> Combiner<A> {
    /// Applies `delta` (alone or combined with others) and returns the version number that
    /// includes it, or `None` if the writer must apply it on its own.
    pub(crate) fn submit<P: Publish<A>>(&self, delta: Delta<'_, A>, publish: &P) -> Option<u64> {
        let wait = match std::mem::size_of_val(delta.data) {
            bytes if bytes >= PARK_AT_ONCE_BYTES => Wait::Park,
            bytes if bytes >= PARK_BYTES => Wait::YieldThenPark,
            _ => Wait::Spin,
        };
        // Erased to `'static` for the shared stack; `submit` returns only once the pass that
        // reads them is over.
        let mut request = Request::new(Delta {
            // SAFETY: see above: the borrow outlives every use of it.
            shape: unsafe { &*std::ptr::from_ref(delta.shape) },
            // SAFETY: as for `shape`.
            data: unsafe { &*std::ptr::from_ref(delta.data) },
            op: delta.op,
            // SAFETY: as for `shape`.
            rows: delta.rows.map(|rows| unsafe { &*std::ptr::from_ref(rows) }),
        });
        let pass = Pass {
            publish,
            helpers: &self.helpers,
        };
        // SAFETY: every writer of this variable passes the variable itself as `publish`
        // (`Variable::apply_delta`), and the erased borrow outlives the call.
        let outcome = unsafe { self.server.submit(&mut request, wait, &pass) };
        outcome.checked_sub(APPLIED)
    }
}

/// One combining pass over a batch of deltas.
struct Pass<'p, P> {
    publish: &'p P,
    helpers: &'p Helpers,
}

impl<A: Copy, P: Publish<A>> Serve<Delta<'static, A>> for Pass<'_, P> {
    const UNWOUND: u64 = ALONE;

    fn serve(&self, batch: &mut [&mut Delta<'static, A>], waiters: &Waiters<'_>) -> u64 {
        let wake = || waiters.wake();
        let published = match batch {
            // Alone (every uncontended write): no copy of the delta, a noticeable part of a
            // small write's cost beside its add.
            [one] => self
                .publish
                .publish(std::slice::from_ref(&**one), self.helpers, &wake),
            // Inline for the usual handful of deltas: no allocation on the write path.
            _ => self.publish.publish(
                &batch.iter().map(|d| **d).collect::<SmallVec<[_; 8]>>(),
                self.helpers,
                &wake,
            ),
        };
        match published {
            Some(version) => version + APPLIED,
            None => ALONE,
        }
    }

    fn help(&self) {
        self.helpers.help();
    }
}
