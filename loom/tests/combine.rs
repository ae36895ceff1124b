//! Model of combining: announced deltas are applied exactly once, whoever combines them, and
//! no writer is left stranded. Each model runs twice: with 8-byte deltas, whose writers park
//! (under loom with no timeout, and a combiner hands over after one pass, so a missed
//! wake-up or hand-off is a reported deadlock), and with 4-byte deltas, whose writers spin.

#![cfg(mvtensor_loom)]

mod common;

use common::run_model;
use loom::thread;
use mvtensor::{Element, Variable};
use ndarray::{arr0, ArrayD};

/// A scalar element the models can count with.
trait Count: Element + From<i8> {}
impl Count for i32 {}
impl Count for i64 {}

fn value<A: Count>(x: i8) -> ArrayD<A> {
    arr0(A::from(x)).into_dyn()
}

fn no_delta_is_lost_or_applied_twice<A: Count>() {
    let v = Variable::new(value::<A>(0));
    let other = {
        let v = v.clone();
        thread::spawn(move || v.assign_add(&value(1)).unwrap())
    };
    let mine = v.assign_sub(&value(10)).unwrap();
    let theirs = other.join().unwrap();
    assert!(mine >= 1 && theirs >= 1);
    assert_eq!(v.read()[[]], A::from(-9));
    let stats = v.stats();
    assert_eq!(stats.combined_deltas, 2);
    assert_eq!(stats.commits, v.version());
    // One pass for both, or one each.
    let version = v.version();
    assert!(
        version == 1 && mine == theirs || version == 2 && mine != theirs,
        "version {version}, mine {mine}, theirs {theirs}, {stats:?}"
    );
}

fn a_writer_arriving_during_a_pass_is_served_or_takes_over<A: Count>() {
    let v = Variable::new(value::<A>(0));
    let other = {
        let v = v.clone();
        thread::spawn(move || {
            let first = v.assign_add(&value(1)).unwrap();
            let second = v.assign_add(&value(2)).unwrap();
            assert!(second > first, "{first} then {second}");
            // A writer sees its own delta when its call returns.
            assert!(v.read().version() >= second);
        })
    };
    v.assign_add(&value(10)).unwrap();
    other.join().unwrap();
    assert_eq!(v.read()[[]], A::from(13));
    assert_eq!(v.stats().combined_deltas, 3);
}

#[test]
fn parking_writers_no_delta_is_lost_or_applied_twice() {
    run_model("parking: no_delta_is_lost_or_applied_twice", || {
        no_delta_is_lost_or_applied_twice::<i64>()
    });
}

#[test]
fn spinning_writers_no_delta_is_lost_or_applied_twice() {
    run_model("spinning: no_delta_is_lost_or_applied_twice", || {
        no_delta_is_lost_or_applied_twice::<i32>()
    });
}

#[test]
fn parking_writers_arriving_during_a_pass_are_served_or_take_over() {
    run_model("parking: a_writer_arriving_during_a_pass", || {
        a_writer_arriving_during_a_pass_is_served_or_takes_over::<i64>()
    });
}

#[test]
fn spinning_writers_arriving_during_a_pass_are_served_or_take_over() {
    run_model("spinning: a_writer_arriving_during_a_pass", || {
        a_writer_arriving_during_a_pass_is_served_or_takes_over::<i32>()
    });
}
