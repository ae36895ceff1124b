//! A stack of announced requests and the flag of the thread serving them: the data structure
//! under [`serve`](crate::serve)'s protocol.
//!
//! A thread announces a request by pushing it (a Treiber stack; requests live on their
//! owners' stacks and link to each other), then races for the flag. The flag's holder takes
//! the whole stack at once, serves every request, and lets go. What a holder owes the
//! requests it took (an outcome each, a wake-up) is `serve`'s protocol; this module only
//! moves the pointers, with the orderings that hand a request's contents over.

use std::ptr;

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicBool, AtomicPtr, Ordering};

/// A request that can sit on the stack: it links to the one announced before it.
pub(crate) trait Linked {
    /// The link field.
    fn next(&mut self) -> &mut *mut Self;
}

pub(crate) struct Announcements<T> {
    /// The newest request, linked to older ones. Requests live on their owners' stacks and
    /// stay valid until their owner is told its outcome, which only a flag holder does.
    pending: AtomicPtr<T>,
    /// On a line of its own: waiters look at it while they spin, and with `pending` beside
    /// it every look would take the line from the holder between its `take`s and its stores.
    busy: CachePadded<AtomicBool>,
}

impl<T> Default for Announcements<T> {
    fn default() -> Self {
        Self {
            pending: AtomicPtr::new(ptr::null_mut()),
            busy: CachePadded::new(AtomicBool::new(false)),
        }
    }
}

impl<T: Linked> Announcements<T> {
    /// Announces `request`.
    ///
    /// # Safety
    /// `request` must be valid, used by nobody else, and stay valid until a flag holder has
    /// taken it and told its owner the outcome.
    pub(crate) unsafe fn push(&self, request: *mut T) {
        // Relaxed: the CAS below reloads with Relaxed on failure; only its success publishes.
        let mut top = self.pending.load(Ordering::Relaxed);
        loop {
            // SAFETY: the caller's contract: ours until pushed, and nobody else sees it yet.
            unsafe { *(*request).next() = top };
            // Release: publishes the request (its fields and link) to the holder's `take`.
            match self.pending.compare_exchange_weak(
                top,
                request,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(current) => top = current,
            }
        }
    }

    /// Takes the flag if it is free.
    pub(crate) fn try_lock(&self) -> bool {
        // Relaxed pre-check: keeps waiters off the line while a holder works (a protocol
        // that needs this look ordered after a store issues its own SeqCst fence). Acquire
        // on success: the previous holder's work happens-before ours.
        !self.busy.load(Ordering::Relaxed)
            && self
                .busy
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    /// Lets go of the flag.
    pub(crate) fn unlock(&self) {
        // Release: our work happens-before the next holder's.
        self.busy.store(false, Ordering::Release);
    }

    /// Takes every announced request: the newest first, linked to older ones (null if none).
    /// The caller holds the flag.
    pub(crate) fn take(&self) -> *mut T {
        // Acquire: pairs with each push, so the taken requests are fully visible.
        self.pending.swap(ptr::null_mut(), Ordering::Acquire)
    }

    /// The newest announced request, left on the stack (null if none). Only a flag holder
    /// may look inside it.
    pub(crate) fn newest(&self) -> *mut T {
        // Acquire: pairs with the push, so the request's fields are visible.
        self.pending.load(Ordering::Acquire)
    }

    /// Whether no request is announced; a hint only, ordered by the caller's fences.
    pub(crate) fn looks_empty(&self) -> bool {
        // Relaxed: only null-ness is used, and a `take` that follows acquires.
        self.pending.load(Ordering::Relaxed).is_null()
    }
}
