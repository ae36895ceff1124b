//! The pacing helpers of `common` make a failed look fail its test, never hang it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use crate::common::while_looking;

/// A look that panics lets the writers run to the end, and the panic reaches the test. (In
/// release builds a failed look once hung its test instead: the writers waited for
/// `looks + window` to grow, and it had wrapped around at `usize::MAX`.) A hang fails this
/// test after a minute rather than hanging it: the run is on a thread of its own.
#[test]
fn a_failed_look_fails_its_test_instead_of_hanging() {
    let (writers, ops) = (2, 64);
    let (sent, outcome) = mpsc::channel();
    std::thread::spawn(move || {
        let calls = AtomicUsize::new(0);
        // SeqCst: a count, read after the writers are joined.
        let op = |_| {
            calls.fetch_add(1, Ordering::SeqCst);
        };
        let mut looks = 0;
        let failed = catch_unwind(AssertUnwindSafe(|| {
            while_looking(&vec![&op as &(dyn Fn(usize) + Sync); writers], ops, || {
                looks += 1;
                assert!(looks < 3, "the look fails on its third call");
            })
        }));
        sent.send((failed.is_err(), looks, calls.load(Ordering::SeqCst)))
            .expect("the test waits for the outcome");
    });
    let outcome = outcome.recv_timeout(Duration::from_secs(60));
    let (failed, looks, calls) = outcome.expect("while_looking hung after a failed look");
    assert!(failed, "the look's panic reaches the caller");
    assert_eq!(looks, 3);
    assert_eq!(calls, writers * ops, "every writer ran to its end");
}

/// A writer that panics counts as done: the looker stops when the others are, and the panic
/// reaches the caller. (Else the looker would wait forever for it, and a test whose writer
/// fails would hang instead of failing.) As above, a hang fails after a minute.
#[test]
fn a_failed_writer_fails_its_test_instead_of_hanging() {
    let ops = 64;
    let (sent, outcome) = mpsc::channel();
    std::thread::spawn(move || {
        let fine = |_| {};
        let failing = |i| assert!(i < 10, "the writer fails on its eleventh call");
        let failed = catch_unwind(AssertUnwindSafe(|| {
            while_looking(&[&fine, &failing], ops, || {})
        }));
        sent.send(failed.is_err())
            .expect("the test waits for the outcome");
    });
    let failed = outcome.recv_timeout(Duration::from_secs(60));
    assert!(
        failed.expect("while_looking hung after a failed writer"),
        "the writer's panic reaches the caller"
    );
}
