//! Unit tests of domains and slots on their own: protection, the failed validation that clears
//! its slot, running out of slots, and scans that see other threads' slots.

use std::sync::mpsc;
use std::thread;

use super::domain::{Domain, SLOTS};
use super::slots::{after_unlink, held, holds, protect};

/// Distinct addresses to protect (never dereferenced by the slots).
fn addresses() -> [*mut (); 3] {
    static THINGS: [u64; 3] = [1, 2, 3];
    std::array::from_fn(|i| std::ptr::from_ref(&THINGS[i]).cast_mut().cast())
}

#[test]
fn a_validated_slot_is_seen_until_it_drops() {
    let domain = Domain::new();
    let [a, b, _] = addresses();
    let slot = protect(&domain, a, || true).expect("a free slot, validated");
    // A writer's scan, as after its unlink.
    after_unlink();
    assert!(holds(&domain, a.cast_const()));
    assert!(!holds(&domain, b.cast_const()));
    assert_eq!(held(&domain, &[b.cast_const(), a.cast_const()]), 0b10);
    drop(slot);
    assert!(!holds(&domain, a.cast_const()));
}

#[test]
fn a_failed_validation_leaves_no_slot_taken() {
    let domain = Domain::new();
    let [a, _, _] = addresses();
    assert!(protect(&domain, a, || false).is_none());
    assert!(!holds(&domain, a.cast_const()), "the slot was cleared");
    // All slots are free again: a full set can be taken.
    let all: Vec<_> = (0..SLOTS).map(|_| protect(&domain, a, || true)).collect();
    assert!(all.iter().all(Option::is_some));
}

#[test]
fn slots_run_out() {
    let domain = Domain::new();
    let [a, b, _] = addresses();
    let all: Vec<_> = (0..SLOTS)
        .map(|_| protect(&domain, a, || true).expect("a free slot"))
        .collect();
    assert!(protect(&domain, b, || true).is_none(), "no slot left");
    assert!(!holds(&domain, b.cast_const()));
    drop(all);
    assert!(protect(&domain, b, || true).is_some());
}

#[test]
fn a_scan_sees_every_threads_slots() {
    let domain = Domain::new();
    let [a, b, c] = addresses();
    let (a, b) = (a as usize, b as usize);
    let (held_tx, held_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    thread::scope(|s| {
        let domain = &domain;
        s.spawn(move || {
            let _a = protect(domain, a as *mut (), || true).expect("a free slot");
            held_tx.send(()).unwrap();
            done_rx.recv().unwrap();
        });
        held_rx.recv().unwrap();
        let _b = protect(domain, b as *mut (), || true).expect("a free slot");
        let candidates = [a as *const (), b as *const (), c.cast_const()];
        assert_eq!(held(domain, &candidates), 0b011);
        assert_eq!(domain.node_count(), 2, "one node per thread");
        done_tx.send(()).unwrap();
    });
    assert!(!holds(&domain, a as *const ()));
}

#[test]
fn domains_are_independent() {
    let (first, second) = (Domain::new(), Domain::new());
    let [a, _, _] = addresses();
    let _slot = protect(&first, a, || true).expect("a free slot");
    assert!(holds(&first, a.cast_const()));
    assert!(
        !holds(&second, a.cast_const()),
        "a slot of one domain is not another's"
    );
    assert_eq!(second.node_count(), 0, "nobody read in the second domain");
}

#[test]
fn a_thread_caches_one_node_per_domain() {
    thread::spawn(|| {
        let [a, _, _] = addresses();
        let before = super::domain::cached_domains();
        let (first, second) = (Domain::new(), Domain::standalone());
        for _ in 0..3 {
            drop(protect(&first, a, || true).expect("a free slot"));
            drop(protect(&second, a, || true).expect("a free slot"));
        }
        assert_eq!(super::domain::cached_domains(), before + 2);
        assert_eq!(first.node_count(), 1);
    })
    .join()
    .unwrap();
}
