//! Unit tests of the reclamation layer through the test cell (`cell.rs`): values, counter
//! linearizability, stable snapshots, bounded live objects, counted references and the count
//! drain. They run under miri too (`cargo +nightly miri test --lib engine`), with smaller sizes.

use std::sync::{mpsc, Arc, Barrier};
use std::thread;

use super::cell::TestCell;
use super::domain::{Domain, SLOTS};
use super::retire::{RECHECK_AFTER, SPARES};

/// `full` normally, `miri` under miri.
fn size(full: usize, miri: usize) -> usize {
    if cfg!(miri) {
        miri
    } else {
        full
    }
}

#[test]
fn writes_build_on_the_last_value_in_reused_buffers() {
    let cell = TestCell::new(Domain::new(), vec![1.0, 2.0, 3.0]);
    assert_eq!(cell.read().values, [1.0, 2.0, 3.0]);
    assert_eq!(cell.assign_add(&[1.0, 1.0, 1.0]), 1);
    let now = cell.read();
    assert_eq!((now.number, &now.values[..]), (1, &[2.0, 3.0, 4.0][..]));
    drop(now);
    let writes = size(1_000, 50);
    for _ in 0..writes {
        cell.assign_add(&[0.5, 0.5, 0.5]);
    }
    let now = cell.read();
    assert_eq!(now.number, 1 + writes as u64);
    assert_eq!(now.values[0], 2.0 + 0.5 * writes as f32);
    // A lone writer alternates between two objects: the first value and one more.
    assert_eq!(cell.made(), 2, "every write reused a buffer");
    assert_eq!(cell.live(), 2);
}

#[test]
fn a_counter_hands_out_each_value_once() {
    let (threads, each) = (4, size(2_000, 40));
    let cell = TestCell::zeros(1);
    let start = Barrier::new(threads);
    let mut seen: Vec<u32> = thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    (0..each)
                        .map(|_| cell.fetch_add(1.0) as u32)
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    seen.sort_unstable();
    let expected: Vec<u32> = (0..(threads * each) as u32).collect();
    assert_eq!(seen, expected, "each value exactly once");
    assert_eq!(cell.read().values[0], (threads * each) as f32);
}

#[test]
fn snapshots_never_change_and_are_never_torn() {
    let (writers, each, len) = (2, size(5_000, 30), size(256, 8));
    let cell = TestCell::zeros(len);
    let ones = vec![1.0; len];
    let start = Barrier::new(writers + 2);
    thread::scope(|s| {
        for _ in 0..writers {
            s.spawn(|| {
                start.wait();
                for _ in 0..each {
                    cell.assign_add(&ones);
                }
            });
        }
        for _ in 0..2 {
            s.spawn(|| {
                start.wait();
                let mut last = 0;
                for _ in 0..size(2_000, 30) {
                    let held = cell.read();
                    let number = held.number;
                    assert!(number >= last, "versions only grow");
                    last = number;
                    // Every write adds one to every element: a whole value is its number.
                    assert!(
                        held.values.iter().all(|&x| x == number as f32),
                        "torn value"
                    );
                    // Others read and write meanwhile; the snapshot stays what it was.
                    let other = cell.read();
                    assert!(other.number >= number);
                    drop(other);
                    assert!(held.values.iter().all(|&x| x == number as f32), "changed");
                }
            });
        }
    });
    let total = (writers * each) as f32;
    assert!(
        cell.read().values.iter().all(|&x| x == total),
        "no lost update"
    );
}

#[test]
fn live_objects_stay_bounded_with_nobody_reading() {
    let (writers, writes) = (4, size(100_000, 200));
    let cell = TestCell::zeros(size(1024, 16));
    let delta = vec![1.0; cell.read().values.len()];
    let start = Barrier::new(writers);
    thread::scope(|s| {
        for _ in 0..writers {
            s.spawn(|| {
                start.wait();
                for _ in 0..writes / writers {
                    cell.assign_add(&delta);
                }
            });
        }
    });
    assert_eq!(cell.read().values[0], writes as f32);
    assert!(
        cell.live() <= 3 + writers,
        "{} live objects after {writes} writes from {writers} threads",
        cell.live()
    );
    // A lone writer keeps within the same bound, and its spares within theirs.
    for _ in 0..size(100, 10) {
        cell.assign_add(&delta);
    }
    assert!(cell.home.listed().0 <= SPARES);
    assert!(cell.live() <= 3 + writers, "{} live objects", cell.live());
}

#[test]
fn a_reader_holding_one_guard_forever_holds_back_only_its_object() {
    let writes = size(100_000, 300);
    let cell = TestCell::zeros(16);
    let (held_tx, held_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let cell = &cell;
    thread::scope(|s| {
        s.spawn(move || {
            let guard = cell.read();
            assert!(guard.is_slot(), "a first read takes a slot");
            held_tx.send(guard.number).unwrap();
            done_rx.recv().unwrap();
            // Unchanged after all those writes, and never reused meanwhile.
            assert_eq!(guard.number, 0);
            assert!(guard.values.iter().all(|&x| x == 0.0));
        });
        assert_eq!(held_rx.recv().unwrap(), 0);
        let ones = vec![1.0; 16];
        let mut peak = 0;
        for _ in 0..writes {
            cell.assign_add(&ones);
            peak = peak.max(cell.live());
        }
        // The head, the held object, the spares.
        assert!(peak <= 2 + SPARES, "{peak} live objects at the peak");
        done_tx.send(()).unwrap();
    });
    // Its reader let go: within a recheck's period of writes it is back, with no newcomer on
    // the retired list and spares on the free list all along.
    assert_eq!(
        cell.home.listed().1,
        1,
        "the held object waits on the retired list"
    );
    for _ in 0..RECHECK_AFTER {
        cell.assign_add(&[1.0; 16]);
    }
    assert_eq!(cell.home.listed().1, 0, "the retired list is empty again");
    assert!(cell.live() <= 1 + SPARES);
}

#[test]
fn slots_run_out_into_counts() {
    let cell = TestCell::zeros(1);
    let reads: Vec<_> = (0..SLOTS + 2).map(|_| cell.read()).collect();
    let slots = reads.iter().filter(|r| r.is_slot()).count();
    assert_eq!(slots, SLOTS, "the first reads take slots, the rest counts");
    assert!(!reads[SLOTS].is_slot() && !reads[SLOTS + 1].is_slot());
    assert_eq!(cell.home.word().counts(), 2);
    // A write moves the two counts into the object it unlinks, which stays held.
    cell.fetch_add(1.0);
    assert_eq!(cell.home.word().counts(), 0);
    assert_eq!(
        cell.home.listed().1,
        1,
        "the old head waits on the retired list"
    );
    drop(reads);
    cell.fetch_add(1.0);
    cell.fetch_add(1.0);
    assert_eq!(
        cell.home.listed().1,
        0,
        "rechecked once the free list ran dry"
    );
    assert!(cell.live() <= 1 + SPARES);
}

#[test]
fn a_counted_reference_crosses_threads_and_outlives_its_cell() {
    let cell = TestCell::zeros(4);
    cell.assign_add(&[2.0; 4]);
    let counted = cell.read().into_counted();
    let second = cell.read().into_counted();
    let counts = Arc::clone(&cell.counts);
    let barrier = Barrier::new(2);
    thread::scope(|s| {
        s.spawn(|| {
            barrier.wait();
            // The cell is gone by now; the counted references keep their object.
            assert_eq!((counted.number, &counted.values[..]), (1, &[2.0; 4][..]));
            let copy = counted.clone();
            drop(counted);
            assert_eq!(copy.values, [2.0; 4]);
        });
        cell.assign_add(&[1.0; 4]);
        drop(cell);
        assert_eq!(counts.live.load(std::sync::atomic::Ordering::Relaxed), 1);
        barrier.wait();
    });
    assert_eq!(second.values, [2.0; 4]);
    drop(second);
    assert_eq!(counts.live.load(std::sync::atomic::Ordering::Relaxed), 0);
}

#[test]
fn the_count_field_drains_before_it_overflows() {
    // Past 2^16 counts the field would overflow into nothing; the drain moves them at half.
    let reads = 70_000;
    let cell = TestCell::zeros(2);
    let counted: Vec<_> = (0..reads)
        .map(|_| cell.home.word().read_counted())
        .collect();
    assert!(cell.home.word().counts() <= 1 << 15, "drained at half");
    assert!(counted.iter().all(|r| r.number == 0 && !r.is_slot()));
    cell.fetch_add(1.0);
    assert_eq!(cell.home.listed().1, 1, "every count kept the old head");
    drop(counted);
    // Every count came back: the old head is free at its next look.
    cell.fetch_add(1.0);
    cell.fetch_add(1.0);
    assert_eq!(cell.home.listed(), (1, 0));
    assert_eq!(cell.live(), 2);
    assert_eq!(cell.read().values[0], 3.0);
}

#[test]
fn the_queued_mark_survives_writes() {
    let cell = TestCell::zeros(1);
    assert!(!cell.home.word().is_queued());
    cell.home.word().set_queued(true);
    cell.fetch_add(1.0);
    let held = cell.read();
    assert!(cell.home.word().is_queued());
    assert_eq!(held.values[0], 1.0);
    drop(held);
    cell.home.word().set_queued(false);
    cell.fetch_add(1.0);
    assert!(!cell.home.word().is_queued());
    assert_eq!(cell.read().values[0], 2.0);
}

#[test]
fn a_write_gives_up_when_the_queued_mark_changes_under_it() {
    let cell = TestCell::zeros(1);
    let home = &cell.home;
    // Marked after the writer took its base: the write must not publish past the mark.
    let base = home.base();
    home.word().set_queued(true);
    let back = home
        .publish(base, cell.spare())
        .expect_err("the mark changed under the write");
    // A count taken meanwhile (a read) only sends the write round again.
    let base = home.base();
    let read = home.word().read_counted();
    assert!(home.publish(base, back).is_ok(), "only counts changed");
    drop(read);
    assert!(home.word().is_queued());
    // Cleared under a writer: it gives up too.
    let base = home.base();
    home.word().set_queued(false);
    assert!(
        home.publish(base, cell.spare()).is_err(),
        "the mark changed under the write"
    );
}
