//! [`Gate`]: the barrier of [`Replicas`](super::Replicas), which can be broken.
//!
//! `std::sync::Barrier` waits for ever: a worker that panics or returns before the others
//! leaves them waiting, and a trainer's `thread::scope` then never ends, its panic never
//! printed. A broken gate lets every waiter go with an error instead.

use std::sync::{Condvar, Mutex};

use crate::sync::lock_std as lock;

/// A barrier for `parties` threads that [`break_open`](Self::break_open) releases for good.
#[derive(Debug)]
pub(super) struct Gate {
    parties: usize,
    state: Mutex<State>,
    turned: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// Arrivals in the current round.
    arrived: usize,
    /// Rounds completed: a waiter leaves when it moves.
    round: u64,
    broken: bool,
}

/// Why [`Gate::wait`] let a thread go without its round completing.
#[derive(Debug)]
pub(super) struct Broken;

impl Gate {
    pub(super) fn new(parties: usize) -> Self {
        Self {
            parties,
            state: Mutex::new(State::default()),
            turned: Condvar::new(),
        }
    }

    /// Waits until all parties have arrived in this round. `Ok(true)` for one of them (the
    /// last to arrive, before the others are let go: its leader). `Err(Broken)` if the gate is
    /// broken before the round completes, or was already; the round then never completes.
    pub(super) fn wait(&self) -> Result<bool, Broken> {
        self.arrive(true)
    }

    /// [`wait`](Self::wait) for a round that every party is sure to reach (each is past an
    /// earlier round and runs no caller's code before this one): it completes, broken or not.
    pub(super) fn wait_whole(&self) {
        // Unbreakable: it returns `Ok`, and no caller needs to know whether it led.
        let _ = self.arrive(false);
    }

    fn arrive(&self, breakable: bool) -> Result<bool, Broken> {
        let mut state = lock(&self.state);
        if breakable && state.broken {
            return Err(Broken);
        }
        state.arrived += 1;
        if state.arrived == self.parties {
            state.arrived = 0;
            state.round += 1;
            self.turned.notify_all();
            return Ok(true);
        }
        let round = state.round;
        while state.round == round && !(breakable && state.broken) {
            state = self
                .turned
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        // A round that completed counts even if the gate broke just after.
        if state.round == round {
            Err(Broken)
        } else {
            Ok(false)
        }
    }

    /// Breaks the gate: every waiter, and every later [`wait`](Self::wait), gets `Broken`.
    pub(super) fn break_open(&self) {
        lock(&self.state).broken = true;
        self.turned.notify_all();
    }

    /// Whether [`break_open`](Self::break_open) was called since the last
    /// [`mend`](Self::mend).
    pub(super) fn is_broken(&self) -> bool {
        lock(&self.state).broken
    }

    /// A whole gate again, with nobody waiting. For a caller that knows no thread is at the
    /// gate (the start of a [`Replicas::run`](super::Replicas::run), which owns every party).
    /// The round number goes on: it never repeats.
    pub(super) fn mend(&self) {
        let mut state = lock(&self.state);
        (state.arrived, state.broken) = (0, false);
    }
}
