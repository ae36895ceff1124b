//! Component models of the engine's counts: the counted fallback against the head word's
//! compare-and-swap (b), and a slot turned into a count against a scan (d). Values go through
//! loom cells (`loom_harness.rs`), so a reuse while a reader reads fails the model. Under loom
//! the word moves its counts into the object from two counts on, so the drain runs here too.

use loom::thread;

use super::loom_harness::{home, increment};
use crate::loom_model::{run_model, run_model_at_least};

/// (b) A count taken on the word keeps its object: a writer that replaces the word moves the
/// count into the object, and the object is not reused until the count is dropped.
#[test]
fn loom_engine_b_a_count_on_the_word_moves_with_the_swap() {
    run_model("engine: the counted fallback against the head swap", || {
        let home = home();
        let reader = {
            let home = home.clone();
            thread::spawn(move || {
                // The second count reaches the drain threshold: it moves both into the object.
                let first = home.word().read_counted();
                let second = home.word().read_counted();
                let (a, b) = (first.get(), second.get());
                assert!(a <= b && b <= 2, "published values, in order: {a}, {b}");
                drop(first);
                assert_eq!(second.get(), b, "the snapshot changed");
            })
        };
        let mut made = 0;
        increment(&home, &mut made);
        increment(&home, &mut made);
        reader.join().unwrap();
        assert_eq!(home.read().get(), 2);
        let before = made;
        increment(&home, &mut made);
        assert_eq!(made, before, "every count came back");
    });
}

/// (b') Two writers: each protects its base with a count (no ABA: a counted base is never
/// reused, so an unchanged address is an unchanged object), and the loser's count, moved by
/// the winner into the object it unlinked, is released by the loser.
#[test]
fn loom_engine_b_two_writers_count_their_bases() {
    run_model("engine: two writers' counted bases", || {
        let home = home();
        // The queued mark rides along: each swap carries over the tag of the word it replaces.
        home.word().set_queued(true);
        let other = {
            let home = home.clone();
            thread::spawn(move || increment(&home, &mut 0))
        };
        let mine = increment(&home, &mut 0);
        let theirs = other.join().unwrap();
        let mut both = [mine, theirs];
        both.sort_unstable();
        assert_eq!(
            both,
            [1, 2],
            "each write built on the other's or the first value"
        );
        assert_eq!(home.read().get(), 2);
        assert!(home.word().is_queued(), "the mark survived both swaps");
    });
}

/// (d) A reader turns its slot into a count while a writer unlinks and scans: the count comes
/// first and the slot's clear after, so the scan sees one or the other.
#[test]
fn loom_engine_d_a_slot_turned_into_a_count_against_a_scan() {
    run_model("engine: slot-to-count conversion against a scan", || {
        let home = home();
        let reader = {
            let home = home.clone();
            thread::spawn(move || {
                let counted = home.read().into_counted();
                let seen = counted.get();
                assert!(seen <= 2, "a published value, not a spare's {seen}");
                assert_eq!(counted.get(), seen, "the snapshot changed");
            })
        };
        let mut made = 0;
        increment(&home, &mut made);
        increment(&home, &mut made);
        reader.join().unwrap();
        assert_eq!(home.read().get(), 2);
    });
}

/// (e) Two writers and a counted reader. A writer whose base count reaches the drain threshold
/// moves every count, the other writer's among them, into the object; the other writer's swap
/// then reads the drain's release sequence (the Acquire of the fence after it) before it looks
/// at the count. And an
/// object the reader's drop frees goes through the free list from one writer to the other,
/// whose Release and Acquire are then what orders the reader's reads before its reuse.
#[test]
fn loom_engine_e_two_writers_and_a_counted_reader() {
    run_model_at_least("engine: two writers and a counted reader", 3, || {
        let home = home();
        let reader = {
            let home = home.clone();
            thread::spawn(move || {
                let read = home.word().read_counted();
                let seen = read.get();
                assert!(seen <= 3, "a published value, not a spare's {seen}");
                assert_eq!(read.get(), seen, "the snapshot changed");
            })
        };
        let other = {
            let home = home.clone();
            thread::spawn(move || increment(&home, &mut 0))
        };
        increment(&home, &mut 0);
        increment(&home, &mut 0);
        other.join().unwrap();
        reader.join().unwrap();
        assert_eq!(home.read().get(), 3);
    });
}
