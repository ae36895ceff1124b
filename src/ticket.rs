//! A ticketed serial queue: FIFO admission of one writer at a time.
//!
//! Every variable has one. While the variable belongs to a critical section, every write to
//! it (an execution of a section holding it, or a plain `assign_add`) takes a ticket here
//! and runs when its number is served, so writes are serialised in ticket order and nobody
//! starves. A section with no resources has a queue of its own.
//!
//! Holding a ticket never blocks readers: they never look at the queue.

use crate::sync::{AtomicU64, Backoff, Ordering};

#[derive(Debug, Default)]
pub(crate) struct TicketQueue {
    next: AtomicU64,
    serving: AtomicU64,
}

/// A served ticket; dropping it (also while unwinding) serves the next one.
#[must_use = "dropping the ticket lets the next writer in at once"]
pub(crate) struct Ticket<'q> {
    queue: &'q TicketQueue,
    number: u64,
}

impl TicketQueue {
    /// Takes the next ticket and waits until it is served.
    pub(crate) fn enter(&self) -> Ticket<'_> {
        // Relaxed: the number only needs to be unique, which any RMW guarantees; what the
        // ticket protects is ordered by `serving` below.
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        let mut backoff = Backoff::default();
        // Acquire: pairs with the previous holder's Release in `serve_after`, so its writes (and
        // the commit it finished) happen-before ours.
        while self.serving.load(Ordering::Acquire) != number {
            backoff.snooze();
        }
        Ticket {
            queue: self,
            number,
        }
    }

    /// Serves the ticket after the one the caller holds.
    ///
    /// # Safety
    /// The caller holds this queue's served ticket, kept with [`Ticket::keep`].
    pub(crate) unsafe fn leave(&self) {
        // Relaxed: only a holder writes `serving`, and we hold it: this reads our own number.
        let number = self.serving.load(Ordering::Relaxed);
        self.serve_after(number);
    }

    fn serve_after(&self, number: u64) {
        // Release: everything done while holding the ticket happens-before the next holder.
        self.serving.store(number + 1, Ordering::Release);
    }
}

impl Ticket<'_> {
    /// This ticket's place in the queue's order.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn number(&self) -> u64 {
        self.number
    }

    /// Keeps the ticket served without this handle: [`TicketQueue::leave`] serves the next
    /// one. For a batch holding tickets on many queues, which need not store each number.
    pub(crate) fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.queue.serve_after(self.number);
    }
}

#[cfg(all(test, mvtensor_loom))]
#[path = "tests/loom_ticket.rs"]
mod loom_ticket;

#[cfg(all(test, not(mvtensor_loom)))]
mod tests {
    use super::*;

    #[test]
    fn tickets_are_served_in_order() {
        let queue = TicketQueue::default();
        for expected in 0..3 {
            let ticket = queue.enter();
            assert_eq!(ticket.number(), expected);
        }
    }

    /// Two threads take a ticket per round in lockstep (neither starts round `i + 1` before
    /// both have arrived at round `i`), so they contend for every ticket instead of running
    /// one after the other (which, unpaced, they usually did).
    #[test]
    fn a_ticket_excludes_other_holders() {
        use std::sync::atomic::{AtomicBool, AtomicUsize};
        let queue = TicketQueue::default();
        let (inside, arrived) = (AtomicBool::new(false), AtomicUsize::new(0));
        let rounds = if cfg!(miri) { 10 } else { 300 };
        let numbers: Vec<Vec<u64>> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        let mut numbers = Vec::new();
                        for i in 0..rounds {
                            arrived.fetch_add(1, Ordering::SeqCst);
                            while arrived.load(Ordering::SeqCst) < 2 * (i + 1) {
                                std::thread::yield_now(); // the other may need this core
                            }
                            let ticket = queue.enter();
                            numbers.push(ticket.number());
                            assert!(!inside.swap(true, Ordering::Relaxed), "two holders at once");
                            for _ in 0..16 {
                                std::hint::spin_loop(); // a holder that stays a moment
                            }
                            inside.store(false, Ordering::Relaxed);
                        }
                        numbers
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        // Round `i`'s two tickets are `2i` and `2i + 1`: the threads took turns.
        for mine in &numbers {
            for (i, &n) in mine.iter().enumerate() {
                assert!(
                    n / 2 == i as u64,
                    "ticket {n} in round {i}: the threads did not take turns"
                );
            }
        }
    }
}
