//! Component model of the ticket queue: three threads each take a ticket and, while holding
//! it, bump a plain counter (a loom `UnsafeCell`, so that two holders at once, or a holder
//! not ordered after the one before it, is a reported causality violation).
//!
//! What `enter` promises when it returns ticket `n`: the holders of tickets `0..n` have all
//! dropped theirs, and everything they did happens-before the caller's next step. So the
//! counter the holder of ticket `n` finds is exactly `n`: FIFO service in ticket order,
//! mutual exclusion and the hand-off's ordering, in one assertion.

use std::sync::Arc;

use loom::cell::UnsafeCell;
use loom::thread;

use super::TicketQueue;
use crate::loom_model::run_model;

#[derive(Default)]
struct Shared {
    queue: TicketQueue,
    /// Tickets served and dropped so far; touched only by a ticket's holder.
    served: UnsafeCell<u64>,
}

// SAFETY: the counter is touched only by a ticket's holder; that this excludes every other
// access is what the model checks.
unsafe impl Sync for Shared {}

/// Takes a ticket, checks it is this ticket's turn, and returns its number.
fn hold(shared: &Shared) -> u64 {
    let ticket = shared.queue.enter();
    let number = ticket.number();
    shared.served.with_mut(|served| {
        // SAFETY: only a ticket's holder touches the counter, one at a time (what the model
        // checks: loom reports a violation if two accesses are not ordered).
        let before = unsafe { *served };
        assert_eq!(
            before, number,
            "ticket {number} entered after {before} holders"
        );
        // SAFETY: as above.
        unsafe { *served = before + 1 };
    });
    number
}

#[test]
fn three_holders_are_served_alone_and_in_ticket_order() {
    run_model("ticket: three holders", || {
        let shared = Arc::new(Shared::default());
        let others: Vec<_> = (0..2)
            .map(|_| {
                let shared = Arc::clone(&shared);
                thread::spawn(move || hold(&shared))
            })
            .collect();
        let mut numbers = vec![hold(&shared)];
        numbers.extend(others.into_iter().map(|t| t.join().unwrap()));
        numbers.sort_unstable();
        assert_eq!(numbers, [0, 1, 2], "each ticket taken once");
        // Every holder has dropped its ticket: the next one is served at once.
        assert_eq!(hold(&shared), 3);
    });
}
