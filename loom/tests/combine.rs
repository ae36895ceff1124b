//! Model of combining: announced deltas are applied exactly once, whoever combines them, and
//! no writer is left parked. (Under loom every waiter parks with no timeout, and a combiner
//! hands over after one pass, so a missed wake-up or hand-off is a reported deadlock.)

#![cfg(mvtensor_loom)]

mod common;

use common::{run_model, scalar, value};
use loom::thread;

#[test]
fn no_delta_is_lost_or_applied_twice() {
    run_model("no_delta_is_lost_or_applied_twice", || {
        let v = scalar(0);
        let other = {
            let v = v.clone();
            thread::spawn(move || v.assign_add(&value(1)).unwrap())
        };
        let mine = v.assign_sub(&value(10)).unwrap();
        let theirs = other.join().unwrap();
        assert!(mine >= 1 && theirs >= 1);
        assert_eq!(v.read()[[]], -9);
        let stats = v.stats();
        assert_eq!(stats.combined_deltas, 2);
        assert_eq!(stats.commits, v.version());
        // One pass for both, or one each.
        let version = v.version();
        assert!(
            version == 1 && mine == theirs || version == 2 && mine != theirs,
            "version {version}, mine {mine}, theirs {theirs}, {stats:?}"
        );
    });
}

#[test]
fn a_writer_arriving_during_a_pass_is_served_or_takes_over() {
    run_model(
        "a_writer_arriving_during_a_pass_is_served_or_takes_over",
        || {
            let v = scalar(0);
            let other = {
                let v = v.clone();
                thread::spawn(move || {
                    let first = v.assign_add(&value(1)).unwrap();
                    let second = v.assign_add(&value(2)).unwrap();
                    assert!(second > first, "{first} then {second}");
                })
            };
            v.assign_add(&value(10)).unwrap();
            other.join().unwrap();
            assert_eq!(v.read()[[]], 13);
            assert_eq!(v.stats().combined_deltas, 3);
        },
    );
}
