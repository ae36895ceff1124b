//! Unit tests of domains and threads: nodes given back by exiting threads, a domain dropped
//! while a thread still caches its node, a guard that outlives its thread's cache. Under miri
//! these are the tests that check the nodes' shared ownership (no use after free, no leak).

use std::cell::RefCell;
use std::sync::{mpsc, Arc};
use std::thread;

use super::cell::TestCell;
use super::domain::{cached_domains, Domain};
use super::retire::Home;
use super::word::Read;
use crate::sync::Ordering;

#[test]
fn a_thread_that_exits_gives_its_node_to_the_next() {
    let cell = TestCell::new(Domain::new(), vec![0.0]);
    let domain = cell.home.domain();
    // Joined, not left to the scope's end: a join waits for the thread's thread-local
    // destructors (which give its node back), the end of a scope does not.
    thread::scope(|s| {
        s.spawn(|| assert_eq!(cell.read().number, 0))
            .join()
            .unwrap();
    });
    assert_eq!(domain.node_count(), 1);
    thread::scope(|s| {
        s.spawn(|| assert_eq!(cell.read().number, 0))
            .join()
            .unwrap();
    });
    assert_eq!(
        domain.node_count(),
        1,
        "the second thread took the first one's node"
    );
    // Two threads at once need two nodes.
    let (ready_tx, ready_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let cell = &cell;
    thread::scope(|s| {
        s.spawn(move || {
            let held = cell.read();
            ready_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            assert_eq!(held.number, 0);
        });
        ready_rx.recv().unwrap();
        s.spawn(|| assert_eq!(cell.read().number, 0))
            .join()
            .unwrap();
        go_tx.send(()).unwrap();
    });
    assert_eq!(domain.node_count(), 2);
}

#[test]
fn a_domain_dropped_while_a_thread_caches_its_node() {
    let (ready_tx, ready_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let cell = Arc::new(TestCell::new(Domain::new(), vec![1.0]));
    let theirs = Arc::clone(&cell);
    let reader = thread::spawn(move || {
        assert_eq!(theirs.read().values[0], 1.0);
        drop(theirs);
        let before = cached_domains();
        ready_tx.send(()).unwrap();
        go_rx.recv().unwrap();
        // The domain is gone; our node of it is ours alone now, and the next registration
        // frees it.
        let other = TestCell::new(Domain::new(), vec![2.0]);
        assert_eq!(other.read().values[0], 2.0);
        assert_eq!(cached_domains(), before, "the gone domain's node was freed");
    });
    ready_rx.recv().unwrap();
    // The last reference to the cell, and with it to its domain.
    drop(Arc::into_inner(cell).expect("the reader dropped its reference"));
    go_tx.send(()).unwrap();
    reader.join().unwrap();
}

#[test]
fn a_thread_may_exit_after_its_domain_is_gone() {
    let (ready_tx, ready_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let cell = Arc::new(TestCell::new(Domain::new(), vec![1.0]));
    let theirs = Arc::clone(&cell);
    let reader = thread::spawn(move || {
        assert_eq!(theirs.read().values[0], 1.0);
        drop(theirs);
        ready_tx.send(()).unwrap();
        // Exits holding a node of a domain dropped before the exit.
        go_rx.recv().unwrap();
    });
    ready_rx.recv().unwrap();
    drop(Arc::into_inner(cell).expect("the reader dropped its reference"));
    go_tx.send(()).unwrap();
    reader.join().unwrap();
}

thread_local! {
    static KEPT: RefCell<Option<Read<'static, u64>>> = const { RefCell::new(None) };
}

#[test]
fn a_guard_kept_in_a_thread_local_outlives_the_threads_cache() {
    // Leaked so that a guard of it can live in a thread-local; freed once every thread that
    // used it has exited.
    let raw = Box::into_raw(Box::new(
        Home::new(Domain::new(), 7).expect("an addressable allocation"),
    ));
    // SAFETY: leaked until the end of the test.
    let home: &'static Home<u64> = unsafe { &*raw };
    thread::spawn(move || {
        let read = home.read();
        assert!(read.is_slot());
        // Destroyed at exit, before or after the engine's own cache: either way the slot is
        // cleared and the node is not given to another thread while it is taken.
        KEPT.with(|kept| *kept.borrow_mut() = Some(read));
    })
    .join()
    .unwrap();
    thread::spawn(move || {
        let mut new = home.spare(|| 0).expect("an addressable allocation");
        let base = home.base();
        *new = *base + 1;
        home.publish(base, new)
            .map_err(|_| ())
            .expect("no other writer");
        assert_eq!(*home.read(), 8);
    })
    .join()
    .unwrap();
    assert!(home.domain().node_count() <= 2);
    // Both threads have exited: every guard is dropped, so no slot of any node is taken.
    for node in home.domain().nodes() {
        for slot in &node.slots {
            // Relaxed: the threads that stored into it were joined.
            assert!(
                slot.load(Ordering::Relaxed).is_null(),
                "a slot outlived its thread"
            );
        }
    }
    // SAFETY: leaked above; the threads that used it have exited, their thread-locals with
    // them, so nothing borrows it any more.
    drop(unsafe { Box::from_raw(raw) });
}
