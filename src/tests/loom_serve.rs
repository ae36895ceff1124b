//! Component model of the flag-and-finish protocol (`Server`, on the `announce` stack and
//! flag): three callers submit a request each to one server, with no variable or section
//! around it.
//!
//! The server's state (a count of batches) is a plain cell touched only by the flag's
//! holder, so two holders at once, or a holder not ordered after the one before it, is a
//! reported causality violation. Each request carries a plain cell too: its caller creates
//! it before announcing, the holder that serves it writes which batch did, and the caller
//! reads that after `submit` returns. So a request taken without the push's ordering, an
//! outcome seen without the batch's, or a request served twice, fails the model; and with
//! callers that park (no timeout under loom), a request left announced while nobody holds
//! the flag leaves its caller parked for good: loom reports the deadlock.

use std::sync::Arc;

use loom::cell::UnsafeCell;
use loom::thread;

use super::{Request, Serve, Server, Wait, Waiters};
use crate::loom_model::{run_model, run_model_at_most};
use crate::sync::Ordering;

/// A request's payload: the number of the batch that served it (0: not yet).
struct Job(UnsafeCell<u64>);

/// Serves batches, counting them.
#[derive(Default)]
struct Counter {
    batches: UnsafeCell<u64>,
}

impl Serve<Job> for Counter {
    const UNWOUND: u64 = u64::MAX;

    fn serve(&self, batch: &mut [&mut Job], _: &Waiters<'_>) -> u64 {
        assert!(!batch.is_empty(), "an empty batch");
        let number = self.batches.with_mut(|batches| {
            // SAFETY: only the flag's holder serves (what the model checks).
            unsafe {
                *batches += 1;
                *batches
            }
        });
        for job in batch {
            job.0.with_mut(|served| {
                // SAFETY: the holder that took the request has it (what the model checks).
                let earlier = unsafe { *served };
                assert_eq!(
                    earlier, 0,
                    "a request served by batches {earlier} and {number}"
                );
                // SAFETY: as above.
                unsafe { *served = number };
            });
        }
        number
    }
}

// SAFETY: only the flag's holder serves; that the flag excludes every other access is what
// the model checks.
unsafe impl Sync for Counter {}

struct Shared {
    server: Server<Job>,
    counter: Counter,
}

/// Submits one request and checks what its caller is promised on return: served exactly
/// once, by the batch whose number the outcome is, and that batch's work visible.
fn call(shared: &Shared, wait: Wait) -> u64 {
    let mut request = Request::new(Job(UnsafeCell::new(0)));
    // SAFETY: every caller serves with the same `Counter`; nothing is borrowed.
    let outcome = unsafe { shared.server.submit(&mut request, wait, &shared.counter) };
    // SAFETY: the request is ours again once `submit` returns.
    let served = request.payload.0.with(|served| unsafe { *served });
    assert_eq!(
        served, outcome,
        "the outcome names the batch that served us"
    );
    outcome
}

/// Three callers at once; then every batch served someone, and no more batches ran than
/// there were requests.
fn three_callers(wait: Wait) {
    let shared = Arc::new(Shared {
        server: Server::default(),
        counter: Counter::default(),
    });
    let others: Vec<_> = (0..2)
        .map(|_| {
            let shared = Arc::clone(&shared);
            thread::spawn(move || call(&shared, wait))
        })
        .collect();
    let mut outcomes = vec![call(&shared, wait)];
    outcomes.extend(others.into_iter().map(|t| t.join().unwrap()));
    // SAFETY: every caller has returned: no holder is left.
    let batches = shared.counter.batches.with(|b| unsafe { *b });
    outcomes.sort_unstable();
    outcomes.dedup();
    let all: Vec<_> = (1..=batches).collect();
    assert_eq!(
        outcomes, all,
        "each batch served someone, and nobody waits on another"
    );
    assert!(
        shared.server.requests.try_lock(),
        "the flag is free at the end"
    );
    // Relaxed: every caller has returned (joined).
    assert_eq!(
        shared.server.spinning.load(Ordering::Relaxed),
        0,
        "no caller counts as spinning after it returned"
    );
}

/// At most bound 2: 435,135 executions there (26 s), and bound 3 had not finished after
/// 24 minutes (each parking caller spins 64 rounds, each a branch point, before it parks).
#[test]
fn three_parking_callers_are_each_served_once_and_none_is_stranded() {
    run_model_at_most("serve: three parking callers", 2, || {
        three_callers(Wait::Park)
    });
}

#[test]
fn three_spinning_callers_are_each_served_once() {
    run_model("serve: three spinning callers", || {
        three_callers(Wait::Spin)
    });
}

/// Callers that spin while cores are free beside callers that park (under loom one may spin:
/// the first to wait spins, the next yield and park): each is served once and nobody is
/// stranded, whichever of them holds the flag. At most bound 2, as the parking model.
#[test]
fn callers_that_spin_beside_parking_ones_are_each_served_once_and_none_is_stranded() {
    run_model_at_most("serve: a spinning caller beside parking ones", 2, || {
        three_callers(Wait::SpinIfCoresFree)
    });
}
