//! The single-variable promises of docs/guarantees.md, each checked under real contention.
//! Sizes shrink under miri, which runs every test here too.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;

use mvtensor::Variable;
use ndarray::{arr0, ArrayD, IxDyn};

use crate::common;
use common::scaled;

/// Promise 1: a snapshot never changes, whatever writers do (10,000 writes while held).
#[test]
fn a_snapshot_never_changes_while_writers_run() {
    let len = scaled(8, 4096);
    let writes = scaled(20, 10_000);
    let v = Variable::new(ArrayD::from_shape_fn(IxDyn(&[len]), |i| i[0] as f32));
    let held = v.read();
    let held_owned = v.read_owned();
    let expected = held.to_owned();
    std::thread::scope(|s| {
        for t in 0..2 {
            let v = v.clone();
            s.spawn(move || {
                let delta = ArrayD::from_elem(IxDyn(&[len]), t as f32 + 1.0);
                for _ in 0..writes / 2 {
                    v.assign_add(&delta).unwrap();
                }
            });
        }
    });
    // Concurrent deltas may be combined into one version: count deltas, not versions.
    let stats = v.stats();
    assert_eq!(stats.combined_deltas, (writes / 2 * 2) as u64);
    assert!(v.version() <= writes as u64 && v.version() == stats.commits);
    assert_eq!(*held, expected);
    assert_eq!(*held_owned, expected);
    assert_eq!((held.version(), held_owned.version()), (0, 0));
}

/// Promise 2a: no lost update. 20 threads each add ones once to a [1024, 1024] tensor.
#[test]
fn concurrent_assign_add_loses_nothing() {
    let side = scaled(4, 1024);
    let threads = scaled(4, 20);
    let v = Variable::new(ArrayD::<f32>::zeros(IxDyn(&[side, side])));
    let start = Barrier::new(threads);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let ones = ArrayD::ones(IxDyn(&[side, side]));
                start.wait();
                v.assign_add(&ones).unwrap();
            });
        }
    });
    let value = v.read();
    assert!(
        value.iter().all(|&x| x == threads as f32),
        "a delta was lost or doubled"
    );
    // Deltas may be combined: `threads` deltas, in at most `threads` versions.
    assert_eq!(v.stats().combined_deltas, threads as u64);
    assert!(v.version() >= 1 && v.version() <= threads as u64);
}

/// Promise 2b: no torn value. 20 threads each assign `i * ones`; readers never see a mix,
/// and the final tensor is one writer's value throughout.
#[test]
fn concurrent_assign_never_tears() {
    let side = scaled(4, 1024);
    let threads = scaled(4, 20);
    let v = Variable::new(ArrayD::<f32>::zeros(IxDyn(&[side, side])));
    let done = AtomicBool::new(false);
    let start = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        s.spawn(|| {
            start.wait();
            let mut seen = 0;
            while !done.load(Ordering::Acquire) || seen == 0 {
                let snap = v.read();
                let first = snap[[0, 0]];
                assert!(
                    snap.iter().all(|&x| x == first),
                    "torn read at {}",
                    snap.version()
                );
                seen += 1;
            }
        });
        let writers: Vec<_> = (0..threads)
            .map(|i| {
                let (v, start) = (&v, &start);
                s.spawn(move || {
                    let value = ArrayD::from_elem(IxDyn(&[side, side]), i as f32 + 1.0);
                    start.wait();
                    v.assign(value).unwrap();
                })
            })
            .collect();
        writers.into_iter().for_each(|w| w.join().unwrap());
        done.store(true, Ordering::Release);
    });
    let value = v.read();
    let first = value[[0, 0]];
    assert!((1.0..=threads as f32).contains(&first));
    assert!(value.iter().all(|&x| x == first));
    assert_eq!(v.version(), threads as u64);
}

/// Promise 3: `fetch_update` is linearizable. 8 threads x 10,000 increments of a scalar
/// counter see every value 0..80,000 exactly once (impossible with tf.Variable).
#[test]
fn fetch_update_hands_out_every_value_exactly_once() {
    let threads = scaled(3, 8);
    let per_thread = scaled(5, 10_000);
    let counter = Variable::new(arr0(0i64).into_dyn());
    let seen: Vec<Vec<i64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    (0..per_thread)
                        .map(|_| counter.fetch_update(|c| c + 1).unwrap()[[]])
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for values in &seen {
        assert!(
            values.windows(2).all(|w| w[0] < w[1]),
            "one thread's values must increase"
        );
    }
    let mut all: Vec<i64> = seen.into_iter().flatten().collect();
    all.sort_unstable();
    let total = (threads * per_thread) as i64;
    assert_eq!(
        all,
        (0..total).collect::<Vec<_>>(),
        "each value exactly once"
    );
    assert_eq!(counter.read()[[]], total);
    assert_eq!(counter.version(), total as u64);
}

/// `compare_and_set` as a building block: optimistic increments never double-apply.
#[test]
fn compare_and_set_retries_make_a_correct_counter() {
    let threads = scaled(2, 4);
    let per_thread = scaled(5, 2_000);
    let counter = Variable::new(arr0(0i64).into_dyn());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..per_thread {
                    loop {
                        let snap = counter.read();
                        let next = arr0(snap[[]] + 1).into_dyn();
                        match counter.compare_and_set(snap.version(), next) {
                            Ok(_) => break,
                            Err(mvtensor::Error::VersionConflict { .. }) => continue,
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
            });
        }
    });
    assert_eq!(counter.read()[[]], (threads * per_thread) as i64);
}
