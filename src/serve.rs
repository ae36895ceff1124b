//! Serving announced requests: the flag-and-finish protocol of flat combining, written once
//! for dense deltas ([`combine`](crate::combine)) and critical-section executions
//! ([`section`](crate::section)).
//!
//! A caller wraps its work in a [`Request`], announces it on a stack
//! ([`announce`](crate::announce)) and races for the flag. The holder takes every pending
//! request, serves them as one *batch* (in arrival order, its own request last), gives each
//! the batch's outcome, wakes the ones that park, and lets go. A caller returns once its
//! request has an outcome.
//!
//! **Waiting.** A caller that expects a short wait ([`Wait::Spin`]) spins and yields; one
//! that expects a long one ([`Wait::Park`]) spins briefly and then parks until the holder
//! that serves it (or makes it the next holder) unparks it. With more waiters than cores,
//! waiters that spin or yield take the cores the holder needs (a large combining pass slows
//! several times over); but waking a parked thread costs more than a pass over a small
//! tensor; [`Wait::YieldThenPark`] sits between the two. Every caller of one [`Server`]
//! is submitted the same way (a variable's deltas all have its size; a section's executions
//! all wait as [`Wait::SpinIfCoresFree`]). That one spins while fewer callers spin than
//! there are cores beside the holder's ([`Spinning`]), else yields, then parks: with cores
//! to spare a spinning waiter costs nobody anything, and the holder wakes nobody, which
//! matters most for a section's short executions (an optimizer's steps). Combining writers
//! of mid-sized deltas do not spin: their passes are long enough that spinning waiters take
//! more from the holder than a yield costs them.
//!
//! **Nobody is stranded.** A parked caller is never woken by a timer, so some flag holder
//! must see every announced request:
//! * a holder runs up to [`PASSES`] batches while requests keep arriving;
//! * when it lets go with requests still pending, it unparks the caller of the newest one
//!   (its *heir*), which takes the flag next; a spinning heir takes it by itself;
//! * when none are pending, it looks once more *after* letting go, and takes the flag back
//!   if one arrived meanwhile. A caller announces and then looks at the flag before it
//!   parks; the holder lets go and then looks at the stack. A `SeqCst` fence sits between
//!   the two steps on each side, so at least one side sees the other (Dekker). Only servers
//!   whose callers park need this.
//!
//! The same release runs when a batch panics (from the flag's destructor), so a panic
//! strands nobody either: the requests of the panicking batch get the server's
//! [`UNWOUND`](Serve::UNWOUND) outcome, and pending ones a new holder.
//!
//! A request lives on its caller's stack: the caller does not return before its outcome is
//! set, and setting it is the holder's last access. (The unpark that follows may reach a
//! caller that has already returned: it leaves a token, and that thread's next
//! `std::thread::park` returns at once, which std allows as a spurious wake.)

use std::ptr;

use smallvec::SmallVec;

use crate::announce::{Announcements, Linked};
use crate::sync::{
    current_thread, fence, park, yield_now, AtomicU64, AtomicUsize, Backoff, Handoff, Ordering,
    Thread,
};

/// No outcome yet; every other value is the server's to define.
const WAITING: u64 = 0;
/// Spins before a parking caller parks (or starts yielding).
const SPINS: u32 = 64;
/// A spinning caller looks at the flag once every this many turns. Each look takes the
/// flag's line from a holder that writes it, so looking every turn slows the holder's small
/// passes noticeably. Under loom, every turn.
const SPIN_LOOKS: u32 = if cfg!(mvtensor_loom) { 1 } else { 4 };
/// Yields of a [`Wait::YieldThenPark`] caller before it parks.
const YIELDS: u32 = if cfg!(mvtensor_loom) { 1 } else { 32 };
/// Batches a holder runs at most before handing the flag to the caller of a pending request.
/// Under loom, one: so that two callers already reach the hand-off.
const PASSES: usize = if cfg!(mvtensor_loom) { 1 } else { 4 };

/// How a caller waits for its request to be served (see the module docs).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Wait {
    /// Spin, then yield: for batches shorter than a wake-up.
    Spin,
    /// Spin briefly, then park until the holder that serves us unparks us.
    Park,
    /// Spin, then yield a few times, then park: for batches usually shorter than a wake-up
    /// that may now and then run long.
    YieldThenPark,
    /// [`Spin`](Self::Spin) while fewer callers of the server spin than there are cores
    /// beside the holder's, else [`YieldThenPark`](Self::YieldThenPark): critical sections,
    /// whose executions are short but whose callers may outnumber the cores.
    SpinIfCoresFree,
}

/// One caller's announced work and the outcome the batch that served it gives it.
pub(crate) struct Request<P> {
    payload: P,
    next: *mut Request<P>,
    outcome: AtomicU64,
    /// The caller to unpark once the outcome is set; only a caller that may park sets it,
    /// so the uncontended path clones no thread handle.
    waiter: Option<Thread>,
    /// What the batch did for the caller (its payload's effects) passes here, with the
    /// outcome: loom checks that the caller only looks after the outcome's Acquire.
    handoff: Handoff,
}

impl<P> Request<P> {
    pub(crate) fn new(payload: P) -> Self {
        Self {
            payload,
            next: ptr::null_mut(),
            outcome: AtomicU64::new(WAITING),
            waiter: None,
            handoff: Handoff::default(),
        }
    }
}

impl<P> Linked for Request<P> {
    fn next(&mut self) -> &mut *mut Self {
        &mut self.next
    }
}

/// What a flag holder does with a batch.
pub(crate) trait Serve<P> {
    /// The outcome of every request in a batch whose `serve` panicked. Not 0.
    const UNWOUND: u64;
    /// Serves a batch (arrival order) and returns the outcome every request in it gets. Not 0.
    /// `waiters` wakes the batch's parked callers, for a server that wants their help.
    fn serve(&self, batch: &mut [&mut P], waiters: &Waiters<'_>) -> u64;
    /// Called by a caller that may park (not [`Wait::Spin`]) before it yields or parks: a
    /// server may give it part of the batch in progress to compute ([`help`](crate::help)).
    fn help(&self) {}
}

/// Wakes the callers of a batch that may be parked (see [`Serve::serve`]).
pub(crate) struct Waiters<'b>(&'b dyn Fn());

impl Waiters<'_> {
    /// None: a batch of the holder's own request alone.
    pub(crate) const NONE: Waiters<'static> = Waiters(&|| {});

    /// Unparks every caller of the batch that may park (a spurious wake-up for one that is
    /// not parked: it looks again).
    pub(crate) fn wake(&self) {
        (self.0)();
    }
}

/// The pending requests of one variable or section, and the flag of the thread serving them.
pub(crate) struct Server<P> {
    requests: Announcements<Request<P>>,
    /// [`Wait::SpinIfCoresFree`] callers spinning now ([`Spinning`]).
    spinning: AtomicUsize,
}

impl<P> Default for Server<P> {
    fn default() -> Self {
        Self {
            requests: Announcements::default(),
            spinning: AtomicUsize::new(0),
        }
    }
}

impl<P> Server<P> {
    /// Serves `request`, alone or in a batch with others, and returns its outcome.
    ///
    /// # Safety
    /// Every request of this server must be submitted with the same `serve` behaviour (the
    /// holder serves the others' requests with the `server` *it* was given), and any
    /// lifetime erased from `P` must outlive this call.
    pub(crate) unsafe fn submit(
        &self,
        request: &mut Request<P>,
        wait: Wait,
        server: &impl Serve<P>,
    ) -> u64 {
        let request: *mut Request<P> = request;
        if self.requests.try_lock() {
            return self.hold(request, wait, server);
        }
        // How this caller waits: as submitted, or spinning while there are cores to spare.
        // (The flag, if we take it, still lets go as `wait` asks: other callers may park.)
        let spinning = (wait == Wait::SpinIfCoresFree)
            .then(|| Spinning::enter(&self.spinning))
            .flatten();
        let mine = match wait {
            Wait::SpinIfCoresFree if spinning.is_some() => Wait::Spin,
            Wait::SpinIfCoresFree => Wait::YieldThenPark,
            other => other,
        };
        if mine != Wait::Spin {
            // SAFETY: not announced yet: ours alone. `push` publishes the handle with it.
            unsafe { (*request).waiter = Some(current_thread()) };
        }
        // SAFETY: `request` lives on our caller's stack, and we do not return before its
        // outcome is set.
        unsafe { self.requests.push(request) };
        // The caller's half of the Dekker check: every look at the flag below comes after
        // the push in the single SeqCst order (module docs).
        fence(Ordering::SeqCst);
        let (mut spins, mut backoff, mut turn) = (0, Backoff::default(), 0u32);
        loop {
            // Acquire: pairs with the holder's Release, so the batch's commit happens-before
            // our return (a read right after the call sees our own write).
            // SAFETY: valid (ours); only its atomic outcome is shared now.
            let outcome = unsafe { (*request).outcome.load(Ordering::Acquire) };
            if outcome != WAITING {
                // SAFETY: ours, and the batch is done with it.
                unsafe { (*request).handoff.touch() };
                return outcome;
            }
            // A spinning caller looks at the flag only every few turns (its request is usually
            // in the holder's batch already); one that may park looks on every turn, so that
            // it never parks without having looked since it last woke.
            turn = turn.wrapping_add(1);
            let look = mine != Wait::Spin || turn.is_multiple_of(SPIN_LOOKS);
            if look && self.requests.try_lock() {
                self.hold(ptr::null_mut(), wait, server); // our request is pending: served now
            } else if mine == Wait::Spin {
                backoff.snooze();
            } else if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
            } else if mine == Wait::YieldThenPark && spins < SPINS + YIELDS {
                spins += 1;
                server.help();
                yield_now();
            } else {
                // Before each park (and so after each wake-up, which a holder sends when it
                // has a job for us): part of a large batch to compute, if there is one.
                server.help();
                park(); // the holder that serves us, or makes us its heir, unparks us
            }
        }
    }

    /// Holding the flag: runs batches (the first with `mine`, if not null) while requests
    /// keep arriving, then lets go without stranding any (the flag's destructor). Returns
    /// `mine`'s outcome (0 for none).
    fn hold(&self, mine: *mut Request<P>, wait: Wait, server: &impl Serve<P>) -> u64 {
        let _flag = Flag { server: self, wait };
        let outcome = if mine.is_null() {
            self.batch(ptr::null_mut(), server);
            WAITING
        } else if (wait == Wait::Spin || !cfg!(mvtensor_loom)) && self.requests.looks_empty() {
            // Alone: serve our own request as a batch of one, with none of a batch's
            // bookkeeping (nobody else's request to take, finish or wake), a sizeable part of
            // a small write or a tiny execution. Requests that arrive meanwhile are
            // served by the passes below, as in a batch. (Under loom only spinning callers
            // take it: with it, the section models never explored two executions in one
            // batch, even at preemption bound 3; the combining models cover this path.)
            // SAFETY: ours, and not announced: nobody else sees it.
            server.serve(&mut [unsafe { &mut (*mine).payload }], &Waiters::NONE)
        } else {
            self.batch(mine, server);
            // Relaxed: we set it ourselves, in `batch`.
            // SAFETY: our own request; its batch is over.
            unsafe { (*mine).outcome.load(Ordering::Relaxed) }
        };
        for _ in 0..PASSES.saturating_sub(1) {
            if self.requests.looks_empty() {
                break;
            }
            self.batch(ptr::null_mut(), server);
        }
        outcome
    }

    /// Serves every pending request, then `mine` (if not null), as one batch.
    fn batch<S: Serve<P>>(&self, mine: *mut Request<P>, server: &S) {
        let mut taken: SmallVec<[*mut Request<P>; 8]> = SmallVec::new();
        let mut request = self.requests.take();
        while !request.is_null() {
            taken.push(request);
            // SAFETY: a taken request is valid until its outcome is set, by `finish` below.
            request = unsafe { (*request).next };
        }
        taken.reverse(); // the stack is newest first
        if !mine.is_null() {
            taken.push(mine);
        }
        // A waiter whose request an earlier batch served may take the flag and find nothing.
        if taken.is_empty() {
            return;
        }
        // Whatever happens in `serve` (even a panic), every request gets an outcome, so no
        // caller waits forever.
        let mut finish = Finish {
            taken: &taken,
            outcome: S::UNWOUND,
        };
        let mut payloads: SmallVec<[&mut P; 8]> = taken
            .iter()
            // SAFETY: valid until `finish` sets the outcome; nobody else touches a taken
            // request's payload (its caller only reads the outcome).
            .map(|&r| unsafe { &mut (*r).payload })
            .collect();
        let wake = || {
            for &request in &taken {
                // SAFETY: valid until `finish` sets its outcome, after `serve`.
                if let Some(waiter) = unsafe { &(*request).waiter } {
                    waiter.unpark();
                }
            }
        };
        finish.outcome = server.serve(&mut payloads, &Waiters(&wake));
        debug_assert_ne!(finish.outcome, WAITING);
    }
}

/// Gives every request of a batch its outcome and wakes its caller, also on unwind.
struct Finish<'t, P> {
    taken: &'t [*mut Request<P>],
    outcome: u64,
}

impl<P> Drop for Finish<'_, P> {
    fn drop(&mut self) {
        for &request in self.taken {
            // SAFETY: valid until its outcome is stored, below; read the handle first.
            let waiter = unsafe {
                (*request).handoff.touch(); // the batch's effects, handed over by the store
                (*request).waiter.clone()
            };
            // Release: the batch happens-before the caller's return. This is the last access
            // to the request: its caller may return and free it right after.
            // SAFETY: valid until this very store.
            unsafe { (*request).outcome.store(self.outcome, Ordering::Release) };
            if let Some(waiter) = waiter {
                waiter.unpark();
            }
        }
    }
}

/// A [`Wait::SpinIfCoresFree`] caller that spins: counted while it waits. At most
/// [`spin_budget`] at a time per server, so that spinners never take the core the holder
/// needs (with more waiters than cores, waiters that spin slowed the holder down: the
/// module docs).
struct Spinning<'s>(&'s AtomicUsize);

impl<'s> Spinning<'s> {
    fn enter(count: &'s AtomicUsize) -> Option<Self> {
        // Relaxed: the count orders nothing (it only picks how a caller waits); being
        // read-modify-writes of one atomic, the increments and decrements still see each
        // other, so at most `spin_budget` callers count as spinning at once.
        if count.fetch_add(1, Ordering::Relaxed) < spin_budget() {
            Some(Self(count))
        } else {
            // Relaxed: as above.
            count.fetch_sub(1, Ordering::Relaxed);
            None
        }
    }
}

impl Drop for Spinning<'_> {
    fn drop(&mut self) {
        // Relaxed: as in `enter`.
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How many callers of one server may spin instead of parking: one fewer than the cores
/// this process may use (the holder needs one). Under loom, one: the models see a spinning
/// caller beside parking ones.
fn spin_budget() -> usize {
    #[cfg(not(mvtensor_loom))]
    {
        static BUDGET: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        *BUDGET
            .get_or_init(|| std::thread::available_parallelism().map_or(0, |cores| cores.get() - 1))
    }
    #[cfg(mvtensor_loom)]
    1
}

/// The flag, held; dropping it (also on unwind) lets go without stranding a request.
struct Flag<'s, P> {
    server: &'s Server<P>,
    wait: Wait,
}

impl<P> Drop for Flag<'_, P> {
    fn drop(&mut self) {
        let requests = &self.server.requests;
        loop {
            let newest = requests.newest();
            // SAFETY: a pending request is valid until its outcome is set, which only a flag
            // holder does, and we hold the flag until `unlock`.
            let heir = (!newest.is_null()).then(|| unsafe { (*newest).waiter.clone() });
            requests.unlock();
            match heir {
                // The heir takes the flag next (a spinning one needs no wake-up).
                Some(heir) => {
                    if let Some(heir) = heir {
                        heir.unpark();
                    }
                    return;
                }
                None if self.wait == Wait::Spin => return, // spinners take the flag by themselves
                None => {}
            }
            // None was pending when we looked, but a caller may have pushed since, seen the
            // flag still held, and parked: look again now that it is free. The fence is the
            // holder's half of the Dekker check.
            fence(Ordering::SeqCst);
            if requests.looks_empty() || !requests.try_lock() {
                return;
            }
        }
    }
}

#[cfg(all(test, mvtensor_loom))]
#[path = "tests/loom_serve.rs"]
mod loom_serve;
