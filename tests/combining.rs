//! Combined dense updates: concurrent deltas applied in shared passes, none lost or doubled.

use mvtensor::{CriticalSection, Error, Stats, Variable};
use ndarray::{arr0, ArrayD, IxDyn};

use crate::common;
use common::scaled;

/// Runs `write(delta, i)` for `i` in `0..each` on `threads` threads, thread `t` holding a
/// delta of `t + 1` everywhere in `v`'s shape.
fn from_every_thread(
    v: &Variable<i64>,
    threads: usize,
    each: usize,
    write: impl Fn(&ArrayD<i64>, usize) + Sync,
) {
    std::thread::scope(|s| {
        for t in 0..threads {
            let write = &write;
            s.spawn(move || {
                let delta = ArrayD::from_elem(IxDyn(&v.shape()), t as i64 + 1);
                (0..each).for_each(|i| write(&delta, i));
            });
        }
    });
}

#[test]
fn mixed_adds_and_subs_from_many_threads_are_exact() {
    let (threads, each, len) = (scaled(3, 8), scaled(5, 500), scaled(4, 4096));
    let v = Variable::new(ArrayD::<i64>::zeros(IxDyn(&[len])));
    from_every_thread(&v, threads, each, |delta, i| {
        let version = if i % 3 == 2 {
            v.assign_sub(delta).unwrap()
        } else {
            v.assign_add(delta).unwrap()
        };
        assert!(version >= 1);
    });
    let adds = (each - each / 3) as i64;
    let subs = (each / 3) as i64;
    let expected: i64 = (1..=threads as i64).map(|d| d * (adds - subs)).sum();
    assert!(v.read().iter().all(|&x| x == expected));
    let stats = v.stats();
    assert_eq!(stats.combined_deltas, (threads * each) as u64);
    assert_eq!(stats.commits, v.version());
    assert!(
        stats.combined_batches == stats.commits,
        "every commit here is a combined pass"
    );
    assert!(stats.max_batch >= 1 && stats.max_batch <= threads as u64);
    eprintln!("{stats:?}");
}

/// `threads` threads each add `t + 1` everywhere, `each` times, to a tensor of `len` i64;
/// checks that every delta landed exactly once and that each writer saw its own version.
fn adds_land_exactly(threads: usize, each: usize, len: usize) -> Stats {
    let v = Variable::new(ArrayD::<i64>::zeros(IxDyn(&[len])));
    from_every_thread(&v, threads, each, |delta, _| {
        let version = v.assign_add(delta).unwrap();
        assert!(v.version() >= version, "the caller's version is visible");
    });
    let expected = (1..=threads as i64).sum::<i64>() * each as i64;
    assert!(v.read().iter().all(|&x| x == expected));
    let stats = v.stats();
    assert_eq!(stats.combined_deltas, (threads * each) as u64);
    stats
}

/// Large deltas make waiting writers park with no timeout: every one of them must be woken
/// (by the pass that applies its delta, or as the next combiner), or this test hangs.
#[test]
fn writers_of_large_deltas_park_and_are_all_woken() {
    adds_land_exactly(scaled(3, 6), scaled(3, 400), scaled(4, 64 * 1024));
}

/// Passes over tensors of 1 MiB and more are split into chunks that the writers waiting for
/// the pass compute too: whoever computes a chunk, every delta lands exactly once.
#[test]
fn writers_of_a_large_tensor_help_compute_the_passes_exactly() {
    // 2 MiB of i64 (the pass is split from 1 MiB; under miri, from 16 bytes).
    let stats = adds_land_exactly(scaled(2, 4), scaled(2, 60), scaled(4, 256 * 1024));
    eprintln!("{stats:?}"); // helped_chunks: how much the waiters computed (timing-dependent)
}

/// The returned version includes the caller's delta: reading right after sees it.
#[test]
fn the_returned_version_includes_the_callers_delta() {
    let v = Variable::new(arr0(0i64).into_dyn());
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let mut last = 0;
                for _ in 0..scaled(5, 1000) {
                    let version = v.assign_add(&arr0(1).into_dyn()).unwrap();
                    assert!(version > last, "versions a thread gets increase");
                    last = version;
                    let now = v.read();
                    assert!(now.version() >= version, "read-your-writes");
                }
            });
        }
    });
    assert_eq!(v.read()[[]], 4 * scaled(5, 1000) as i64);
}

/// Combined deltas on a variable a section holds queue behind executions and stay exact.
#[test]
fn combining_on_a_queued_variable_is_exact() {
    let v = Variable::new(arr0(0i64).into_dyn());
    let cs = CriticalSection::builder().resource(&v).build().unwrap();
    let n = scaled(5, 500);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                for _ in 0..n {
                    v.assign_add(&arr0(1).into_dyn()).unwrap();
                }
            });
        }
        s.spawn(|| {
            for _ in 0..n {
                cs.execute(|tx| tx.update(&v, |x| x + 10)).unwrap();
            }
        });
    });
    assert_eq!(v.read()[[]], (3 * n + 10 * n) as i64);
}

/// A bad delta fails for its caller alone; concurrent good ones are unaffected.
#[test]
fn a_bad_delta_fails_alone() {
    let v = Variable::builder(ArrayD::<f32>::zeros(IxDyn(&[4])))
        .name("v")
        .build();
    std::thread::scope(|s| {
        for t in 0..4 {
            let v = &v;
            s.spawn(move || {
                for _ in 0..scaled(5, 300) {
                    if t == 0 {
                        let err = v.assign_add(&ArrayD::ones(IxDyn(&[5]))).unwrap_err();
                        assert!(matches!(err, Error::ShapeMismatch { .. }));
                    } else {
                        v.assign_add(&ArrayD::ones(IxDyn(&[4]))).unwrap();
                    }
                }
            });
        }
    });
    assert!(v.read().iter().all(|&x| x == 3.0 * scaled(5, 300) as f32));
}

/// Dynamic-shape variables check each delta against the version it lands on.
#[test]
fn dynamic_shape_deltas_are_checked_against_the_current_shape() {
    let v = Variable::builder(ArrayD::<i32>::zeros(IxDyn(&[2])))
        .dynamic_shape()
        .build();
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                for _ in 0..scaled(5, 200) {
                    v.assign_add(&ArrayD::ones(IxDyn(&[2]))).unwrap();
                }
            });
        }
    });
    assert!(v.read().iter().all(|&x| x == 3 * scaled(5, 200) as i32));
}
