//! Model of combining: announced deltas are applied exactly once, whoever combines them.

#![cfg(loom)]

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
