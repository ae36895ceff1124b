//! A linearizability checker (Wing & Gong's search, with Lowe's memoisation of visited
//! configurations): is there an order of the operations of a concurrent history that
//! respects real time (an operation that returned before another was called comes first)
//! and that a sequential model accepts, outputs included?

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};

/// A sequential specification.
pub trait Model {
    type State: Clone + Eq + Hash;
    type Input: Clone;
    type Output: Clone + PartialEq;
    fn init(&self) -> Self::State;
    /// The state after `input` if the object may answer `output` in `state`, else `None`.
    fn step(
        &self,
        state: &Self::State,
        input: &Self::Input,
        output: &Self::Output,
    ) -> Option<Self::State>;
}

/// One completed operation: its input and output, and when it was called and returned on
/// the recorder's clock.
#[derive(Debug, Clone)]
pub struct Op<I, O> {
    pub call: u64,
    pub ret: u64,
    pub input: I,
    pub output: O,
}

/// A clock for call and return times: one SeqCst counter, so that its order extends the
/// real-time order of the operations (a return that happens before a call reads less).
#[derive(Debug, Default)]
pub struct Clock(AtomicU64);

impl Clock {
    /// Runs `f(input)` and records it. Between the call's time and `f`, the thread yields:
    /// an operation of a few nanoseconds otherwise began and ended before any other thread
    /// got to run (on 2 loaded cores, every history of 300 rounds was sequential), and a
    /// wider interval is still a sound one (the operation takes effect inside it).
    pub fn record<I: Clone, O>(&self, input: I, f: impl FnOnce(&I) -> O) -> Op<I, O> {
        let call = self.0.fetch_add(1, Ordering::SeqCst);
        std::thread::yield_now();
        let output = f(&input);
        let ret = self.0.fetch_add(1, Ordering::SeqCst);
        Op {
            call,
            ret,
            input,
            output,
        }
    }
}

/// Whether `history` (at most 64 operations) is linearizable with respect to `model`.
pub fn linearizable<M: Model>(model: &M, history: &[Op<M::Input, M::Output>]) -> bool {
    assert!(history.len() <= 64, "a history of at most 64 operations");
    let mut seen = HashSet::new();
    search(model, history, 0, model.init(), &mut seen)
}

/// Depth-first: `done` is the set of operations linearized so far, `state` the model's.
fn search<M: Model>(
    model: &M,
    history: &[Op<M::Input, M::Output>],
    done: u64,
    state: M::State,
    seen: &mut HashSet<(u64, M::State)>,
) -> bool {
    if done.count_ones() as usize == history.len() {
        return true;
    }
    if !seen.insert((done, state.clone())) {
        return false; // this configuration was explored already
    }
    // An operation may go next only if no pending one returned before it was called.
    let earliest_return = pending(history, done)
        .map(|(_, op)| op.ret)
        .min()
        .expect("some pending");
    for (i, op) in pending(history, done) {
        if op.call > earliest_return {
            continue;
        }
        if let Some(next) = model.step(&state, &op.input, &op.output) {
            if search(model, history, done | (1 << i), next, seen) {
                return true;
            }
        }
    }
    false
}

fn pending<I, O>(history: &[Op<I, O>], done: u64) -> impl Iterator<Item = (usize, &Op<I, O>)> {
    history
        .iter()
        .enumerate()
        .filter(move |(i, _)| done & (1 << i) == 0)
}
