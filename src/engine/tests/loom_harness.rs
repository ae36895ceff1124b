//! What the engine's loom models share: a payload that loom sees, and the write every model
//! makes (the production path of [`Home`]: a spare, a counted base, the compare-and-swap, the
//! retire step).
//!
//! The payload is a loom `UnsafeCell`: a reader reads it through its guard, a writer writes its
//! spare's. So a spare handed to a writer while a reader still reads it (its reuse not ordered
//! after the read) is a reported causality violation, and no model can pass over it.

use std::sync::Arc;

use loom::cell::UnsafeCell;

use super::domain::Domain;
use super::retire::Home;

/// An object's value, seen by loom.
pub(super) struct Payload(UnsafeCell<u64>);

// SAFETY: the cell is read by whoever holds the object and written by the writer that owns it
// as a spare; that those accesses never overlap is what the models check.
unsafe impl Sync for Payload {}

impl Payload {
    pub(super) fn new(value: u64) -> Self {
        Self(UnsafeCell::new(value))
    }

    /// Reads the value (a tracked read).
    pub(super) fn get(&self) -> u64 {
        // SAFETY: the guard we read through keeps the object from reuse (what loom checks).
        self.0.with(|value| unsafe { *value })
    }

    /// Writes the value (a tracked write).
    pub(super) fn set(&mut self, value: u64) {
        // SAFETY: an owned spare: nobody else may touch it (what loom checks).
        self.0.with_mut(|slot| unsafe { *slot = value });
    }
}

/// A home in a domain of its own, showing 0.
pub(super) fn home() -> Arc<Home<Payload>> {
    home_in(Domain::new())
}

/// A home in `domain`, showing 0.
pub(super) fn home_in(domain: Arc<Domain>) -> Arc<Home<Payload>> {
    Arc::new(Home::new(domain, Payload::new(0)).expect("an addressable allocation"))
}

/// Publishes the current value plus one; returns what it published. `made` counts the objects
/// the write had to allocate.
pub(super) fn increment(home: &Home<Payload>, made: &mut usize) -> u64 {
    let mut new = home
        .spare(|| {
            *made += 1;
            Payload::new(u64::MAX)
        })
        .expect("an addressable allocation");
    loop {
        let base = home.base();
        let next = base.get() + 1;
        new.set(next);
        match home.publish(base, new) {
            Ok(()) => return next,
            Err(back) => new = back,
        }
    }
}
