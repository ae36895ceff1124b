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
//! **Waiting.** A writer whose delta is small spins and yields until its outcome is set: a
//! pass takes about a microsecond, less than a wake-up. A writer of a large delta parks
//! until the combiner that applies it unparks it: with more writers than cores, waiters
//! that spun, yielded or woke on a timer took the cores the combiner's pass needed (a 4 MiB
//! pass took 1.7 ms instead of 0.2 ms).
//!
//! **Nobody is stranded.** A parked writer is never woken by a timer, so the protocol must
//! guarantee that some flag holder sees every announced operation:
//! * a combiner runs up to [`PASSES`] passes while operations keep arriving;
//! * if operations are still pending when it stops, it unparks the writer of the newest
//!   one (its *heir*) after letting go of the flag, and the heir combines next;
//! * if none were pending, it looks once more *after* letting go, and takes the flag back
//!   if one arrived meanwhile. A writer announces (push) and then checks the flag before it
//!   parks; the combiner releases the flag and then checks the stack. A `SeqCst` fence sits
//!   between the two steps on each side, so at least one side sees the other (Dekker):
//!   either the writer finds the flag free and combines itself, or the combiner finds its
//!   operation.
//!
//! The operation lives on its writer's stack: the writer does not return before its outcome
//! is set, and setting the outcome is the combiner's last access to it. (The unpark that
//! follows may reach a writer that has already returned: it leaves a token, and that
//! thread's next `std::thread::park` returns at once, which std allows as a spurious wake.)
//!
//! Progress: readers never notice. Delta writers may wait for a combiner that holds their
//! delta; if that combiner is descheduled they wait with it (combining trades lock-freedom
//! of these writes for doing k updates in one pass). Every waiter is served by the next
//! combining pass, so none starves.

use std::ptr;

use smallvec::SmallVec;

use ndarray::ArrayD;

use crate::announce::{Announcements, Linked};
use crate::kernel::{Delta, Sign};
use crate::sync::{current_thread, fence, park, AtomicU64, Backoff, Ordering, Thread};

/// No outcome yet.
const WAITING: u64 = 0;
/// The combined write failed; the writer applies its delta on its own.
const ALONE: u64 = 1;
/// Outcomes above this are `version + APPLIED`.
const APPLIED: u64 = 2;
/// Spins before a waiter parks.
const SPINS: u32 = 64;
/// Waiters park only for deltas at least this large. A pass over a small tensor takes about
/// a microsecond, less than waking a parked thread, so there waiters spin and yield instead
/// (measured: parking cut 1K-element updates at 8 threads from 1.58 M to 1.14 M per second).
/// Under loom every waiter parks, so that the models check the wake-up protocol.
const PARK_BYTES: usize = if cfg!(mvtensor_loom) { 0 } else { 64 * 1024 };
/// Passes a combiner runs at most before handing the flag to the writer of a pending op.
/// Under loom, one: so that two writers already reach the hand-off.
const PASSES: usize = if cfg!(mvtensor_loom) { 1 } else { 4 };

/// One writer's announced delta.
pub(crate) struct Op<'d, A> {
    delta: &'d ArrayD<A>,
    sign: Sign,
    next: *mut Op<'d, A>,
    outcome: AtomicU64,
    /// The writer to unpark once the outcome is set; only a writer that may park sets it,
    /// so the uncontended path clones no thread handle.
    waiter: Option<Thread>,
}

impl<'d, A> Op<'d, A> {
    pub(crate) fn new(delta: &'d ArrayD<A>, sign: Sign) -> Self {
        Self {
            delta,
            sign,
            next: ptr::null_mut(),
            outcome: AtomicU64::new(WAITING),
            waiter: None,
        }
    }
}

impl<A> Linked for Op<'_, A> {
    fn next(&mut self) -> &mut *mut Self {
        &mut self.next
    }
}

/// The per-variable combining state: announced operations and the combiner flag. The
/// `'static` is a lie told to the type system: operations live on their writers' stacks,
/// valid until their outcome is set.
pub(crate) struct Combiner<A: 'static> {
    ops: Announcements<Op<'static, A>>,
}

impl<A: 'static> Default for Combiner<A> {
    fn default() -> Self {
        Self {
            ops: Announcements::default(),
        }
    }
}

/// How a combining pass publishes a batch: returns the new version number, or `None` if the
/// write failed (every writer in the batch then applies its delta on its own).
pub(crate) trait Publish<A> {
    fn publish(&self, deltas: &[Delta<'_, A>]) -> Option<u64>;
}

impl<A: 'static> Combiner<A> {
    /// Applies `op` (alone or combined with others) and returns the version number that
    /// includes it, or `None` if the writer must apply it on its own.
    pub(crate) fn submit(&self, op: &mut Op<'_, A>, publish: &impl Publish<A>) -> Option<u64> {
        // Uncontended: take the flag and apply our delta with whatever else is pending.
        let parks = op.delta.len() * std::mem::size_of::<A>() >= PARK_BYTES;
        if self.ops.try_lock() {
            self.hold(Some(erase(op)), parks, publish);
            // Relaxed: we set it ourselves, in `hold`.
            return decode(op.outcome.load(Ordering::Relaxed));
        }
        if parks {
            op.waiter = Some(current_thread()); // published with the op by `push`
        }
        // SAFETY: `op` lives on our stack, and we do not return before its outcome is set.
        unsafe { self.ops.push(erase(op)) };
        // The writer's half of the Dekker check: every look at the flag below comes after
        // the push in the single SeqCst order (module docs).
        fence(Ordering::SeqCst);
        let (mut spins, mut backoff) = (0, Backoff::default());
        loop {
            // Acquire: pairs with the combiner's Release, so its commit happens-before our
            // return (a read right after `assign_add` sees our own delta).
            let outcome = op.outcome.load(Ordering::Acquire);
            if outcome != WAITING {
                return decode(outcome);
            }
            if self.ops.try_lock() {
                self.hold(None, parks, publish);
            } else if !parks {
                backoff.snooze();
            } else if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
            } else {
                park(); // the combiner that applies our op, or makes us its heir, unparks us
            }
        }
    }

    /// Runs combining passes while holding the flag, then lets go of it without stranding
    /// an announced op (see the module docs).
    ///
    /// `parks` says whether this variable's waiters park (its deltas are large; every delta
    /// of a combined variable has its shape). Waiters that spin take the flag themselves once
    /// it is free, so then the look-again after letting go, and its fence, are not needed.
    fn hold(&self, mut mine: Option<*mut Op<'static, A>>, parks: bool, publish: &impl Publish<A>) {
        let mut passes = 0;
        loop {
            let flag = Flag(self); // ours now; dropping it lets go, also on unwind
            let top = loop {
                self.combine(mine.take(), publish);
                passes += 1;
                let top = self.ops.newest();
                if top.is_null() || passes >= PASSES {
                    break top;
                }
            };
            if !top.is_null() {
                // SAFETY: a pending op is valid until its outcome is set, which only a holder
                // of the flag does, and we hold it until `flag` drops.
                let heir = unsafe { (*top).waiter.clone() };
                drop(flag);
                // The heir takes the flag next; a writer without a handle is spinning and
                // takes it by itself.
                if let Some(heir) = heir {
                    heir.unpark();
                }
                return;
            }
            drop(flag);
            if !parks {
                return;
            }
            // None was pending when we looked, but a writer may have pushed since and seen
            // the flag still held, and parked: look again now that it is free. The fence is
            // the combiner's half of the Dekker check.
            fence(Ordering::SeqCst);
            if self.ops.looks_empty() || !self.ops.try_lock() {
                return;
            }
        }
    }

    /// Runs one combining pass; the caller holds the flag.
    fn combine(&self, mine: Option<*mut Op<'static, A>>, publish: &impl Publish<A>) {
        let mut first = self.ops.take();
        if let Some(mine) = mine {
            // SAFETY: our own op, never pushed: its link is ours.
            unsafe { (*mine).next = first };
            first = mine;
        }
        // Whatever happens in `publish` (even a panic), every op gets an outcome, so no writer
        // waits forever.
        let mut finish = Finish {
            first,
            outcome: ALONE,
        };
        // Inline for the usual handful of deltas: no allocation on the write path.
        let mut deltas: SmallVec<[Delta<'_, A>; 8]> = SmallVec::new();
        let mut op = first;
        while !op.is_null() {
            // SAFETY: a taken op is valid until its outcome is set, by `finish`.
            let taken = unsafe { &*op };
            deltas.push(Delta {
                data: taken.delta,
                sign: taken.sign,
            });
            op = taken.next;
        }
        // A waiter whose op a previous pass already applied may take the flag and find
        // nothing pending: publishing then would commit a copy nobody asked for.
        if deltas.is_empty() {
            return;
        }
        if let Some(version) = publish.publish(&deltas) {
            finish.outcome = version + APPLIED;
        }
    }
}

/// Hands every op of a batch (a list linked through `next`) its outcome, also on unwind.
struct Finish<A: 'static> {
    first: *mut Op<'static, A>,
    outcome: u64,
}

impl<A: 'static> Drop for Finish<A> {
    fn drop(&mut self) {
        let mut op = self.first;
        while !op.is_null() {
            // SAFETY: valid until its outcome is stored, below; read what we need first.
            let (next, waiter) = unsafe { ((*op).next, (*op).waiter.clone()) };
            // Release: the commit (and the pass) happen-before the writer's return. This is
            // the last access to `op`: its writer may return and free it right after.
            // SAFETY: valid until this very store.
            unsafe { (*op).outcome.store(self.outcome, Ordering::Release) };
            if let Some(waiter) = waiter {
                waiter.unpark();
            }
            op = next;
        }
    }
}

/// The combiner flag, held; dropping it lets go.
struct Flag<'c, A: 'static>(&'c Combiner<A>);

impl<A: 'static> Drop for Flag<'_, A> {
    fn drop(&mut self) {
        let combiner = self.0;
        if !std::thread::panicking() {
            // `hold` then makes the combiner's half of the Dekker check.
            combiner.ops.unlock();
            return;
        }
        // A pass panicked, and nobody may be left parked behind us: every op still pending
        // is told to apply its delta alone, until none arrives between our letting go and our
        // last look. (If `hold` runs in a destructor during some other unwind, this runs too:
        // "alone" is always a correct outcome.)
        loop {
            drop(Finish {
                first: combiner.ops.take(),
                outcome: ALONE,
            });
            combiner.ops.unlock();
            fence(Ordering::SeqCst); // as in `hold`
            if combiner.ops.looks_empty() || !combiner.ops.try_lock() {
                return;
            }
        }
    }
}

/// Forgets an op's borrow lifetime for the stack (see [`Combiner`]).
fn erase<A: 'static>(op: &mut Op<'_, A>) -> *mut Op<'static, A> {
    (op as *mut Op<'_, A>).cast()
}

fn decode(outcome: u64) -> Option<u64> {
    debug_assert_ne!(outcome, WAITING);
    outcome.checked_sub(APPLIED)
}
