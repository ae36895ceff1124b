//! Component model of helping (`Helpers`): a holder runs a job of two chunks while one or
//! two waiters call `help`, each at any point (before the job is published, while it runs,
//! after it is withdrawn).
//!
//! Each chunk is a plain cell that `work` writes once; the holder reads both after `run`
//! returns. So a chunk computed twice fails the assertion, a helper's chunk not ordered
//! before the holder's return is a reported causality violation, and a helper that looks at
//! the job after the holder has returned (the job lives on the holder's stack) is one too:
//! the job's `alive` cell is read by every claim and written by the holder when it makes
//! the job and when it returns. A third model runs two jobs one after the other, so that a
//! helper can see the first in its pre-check and meet the second: only the `Acquire` of its
//! second look shows it the second job made.

use std::sync::Arc;

use loom::cell::UnsafeCell;
use loom::thread;

use super::Helpers;
use crate::loom_model::run_model;

/// Two chunks of output, each written by the one `work` call that claimed it.
#[derive(Default)]
struct Chunks([UnsafeCell<u32>; 2]);

// SAFETY: each cell is written by the one thread that claimed its chunk (what the model
// checks) and read by the holder after `run`.
unsafe impl Sync for Chunks {}

impl Chunks {
    /// Computes chunk `i` (a method, so that a closure captures the `Sync` whole).
    fn compute(&self, i: usize) {
        // SAFETY: claimed once (what the model checks).
        self.0[i].with_mut(|c| unsafe { *c += 1 });
    }
}

/// Runs a job of two chunks on `helpers` and checks each was computed once, and handed over.
fn one_job(helpers: &Helpers) {
    let chunks = Chunks::default();
    let work = |i: usize| chunks.compute(i);
    helpers.run(2, &work, || {});
    for chunk in &chunks.0 {
        let computed = chunk.with(|c| {
            // SAFETY: every helper has left (what the model checks).
            unsafe { *c }
        });
        assert_eq!(computed, 1, "a chunk computed twice or never");
    }
}

fn model(helpers_count: usize) {
    let helpers = Arc::new(Helpers::default());
    let waiters: Vec<_> = (0..helpers_count)
        .map(|_| {
            let helpers = Arc::clone(&helpers);
            thread::spawn(move || helpers.help())
        })
        .collect();
    one_job(&helpers);
    for waiter in waiters {
        waiter.join().unwrap();
    }
}

/// One helper, anywhere in the holder's run.
#[test]
fn a_helped_pass_computes_every_chunk_once_and_outlives_its_helper() {
    run_model("help: one helper", || model(1));
}

/// Two helpers racing for the chunks and for the job's withdrawal.
#[test]
fn two_helpers_never_touch_a_withdrawn_job() {
    run_model("help: two helpers", || model(2));
}

/// Two jobs one after the other (a holder, then the next): a helper whose pre-check saw the
/// first may meet the second, and must see it made.
#[test]
fn a_helper_that_meets_the_next_job_sees_it_made() {
    run_model("help: two jobs in a row", || {
        let helpers = Arc::new(Helpers::default());
        let helper = {
            let helpers = Arc::clone(&helpers);
            thread::spawn(move || helpers.help())
        };
        one_job(&helpers);
        one_job(&helpers);
        helper.join().unwrap();
    });
}
