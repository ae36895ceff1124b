//! Who may write a paged variable, and when: the book's lock, and the ticket queue of a
//! variable that belongs to a critical section.
//!
//! Every write touches the [book](super::book) (it builds the next table from the head), so
//! every write holds the book's lock: a combining pass (one per batch of plain writes) or a
//! section's commit. The lock is held only for that, never while waiting for anything else.
//!
//! While the variable is *queued* (a [`CriticalSection`](crate::CriticalSection) claims it),
//! a write must also hold the variable's ticket, taken *before* the lock, so that an
//! execution, which holds the ticket from its start to its commit, sees the variable
//! unchanged. The mark is set and cleared under the lock, and a writer reads it under the
//! lock: one that took the lock without a ticket and finds the mark lets the lock go, takes
//! a ticket and locks again. A pass in progress when a section claims the variable is
//! therefore over before the mark is set, and none starts without a ticket afterwards.
//!
//! No deadlock: a ticket is never awaited while holding the lock, and a thread inside an
//! execution never waits for a ticket (it gets [`Error::Reentrant`](crate::Error::Reentrant)),
//! as with dense variables. The combiner flag's holder may wait for the ticket while it holds
//! the flag, as a dense variable's does: no ticket holder ever waits for the flag.

use super::Inner;
use crate::error::Result;
use crate::running;
use crate::section::{Claims, Resource};
use crate::sync::{MutexGuard, Ordering};
use crate::ticket::Ticket;
use crate::Element;

/// The right to touch the book: the lock, and the ticket if the variable is queued then.
pub(crate) struct Access<'v> {
    // Fields drop in order: the lock before the ticket, so that the next ticket holder does
    // not find the lock still held.
    _lock: MutexGuard<'v, ()>,
    _ticket: Option<Ticket<'v>>,
}

impl<A: Element> Inner<A> {
    /// Takes the right to write, for a thread that holds no ticket of this variable.
    ///
    /// # Errors
    /// [`Error::Reentrant`](crate::Error::Reentrant) if the variable is queued and this
    /// thread is inside an execution (it may not wait for a ticket).
    pub(super) fn access(&self) -> Result<Access<'_>> {
        let mut ticket = None;
        loop {
            // Relaxed: a hint; the mark is read again under the lock, which orders it.
            if ticket.is_none() && self.queued.load(Ordering::Relaxed) {
                running::check_outside(|| {
                    format!(
                        "a direct write to `{}`, which a critical section holds",
                        self.layout.name
                    )
                })?;
                ticket = Some(self.queue.enter());
            }
            let lock = self.lock.lock();
            // Relaxed: set and cleared under the lock we hold.
            if ticket.is_some() || !self.queued.load(Ordering::Relaxed) {
                return Ok(Access {
                    _lock: lock,
                    _ticket: ticket,
                });
            }
        }
    }

    /// The right to write for the holder of the variable's ticket (a section's commit).
    pub(crate) fn access_with_ticket(&self) -> MutexGuard<'_, ()> {
        self.lock.lock()
    }
}

impl<A: Element> Resource for Inner<A> {
    fn id(&self) -> u64 {
        self.id
    }
    fn name(&self) -> &str {
        &self.layout.name
    }
    fn queue(&self) -> &crate::ticket::TicketQueue {
        &self.queue
    }
    fn claims(&self) -> &Claims {
        &self.claims
    }
    fn set_queued(&self, queued: bool) {
        let _lock = self.lock.lock();
        // Relaxed: read under the same lock.
        self.queued.store(queued, Ordering::Relaxed);
    }
    fn reclaimed(&self) {}
}
