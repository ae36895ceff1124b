//! Shared metrics updated from many threads, read consistently.

use crate::common;

use mvtensor::metrics::{Mean, Sum};

#[test]
fn every_record_is_counted_once() {
    let (threads, records) = if cfg!(miri) { (3, 20) } else { (8, 20_000) };
    let examples = Sum::new();
    let loss = Mean::new();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (examples, loss) = (&examples, &loss);
            s.spawn(move || {
                for i in 0..records {
                    examples.add(32.0);
                    loss.record(((t + i) % 4) as f64);
                }
            });
        }
    });
    let n = (threads * records) as u64;
    assert_eq!(
        examples.read(),
        mvtensor::metrics::Reading {
            sum: 32.0 * n as f64,
            count: n
        }
    );
    let l = loss.read();
    assert_eq!(l.count, n);
    assert_eq!(l.mean(), Some(1.5));
}

/// A reading is one moment of every shard together: thread B records 1000 only after
/// thread A's record of 1 that came before it, so no moment holds more of B's records than
/// of A's. (Both shards are always self-consistent: a reading that added up each shard at
/// another moment could show B's record without A's, which only a cut across the shards
/// rules out. Every record adding the same value, as this test did before, could not tell.)
#[test]
fn a_reading_has_count_and_sum_from_one_moment() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let pairs = if cfg!(miri) { 20 } else { 20_000 };
    let m = Mean::new();
    let a_done = AtomicUsize::new(0);
    let a = |_| {
        m.record(1.0);
        a_done.fetch_add(1, Ordering::SeqCst);
    };
    let b = |i: usize| {
        while a_done.load(Ordering::SeqCst) <= i {
            std::thread::yield_now(); // A may need this core
        }
        m.record(1000.0);
    };
    let (mut last, mut mid_way) = (0, 0);
    common::while_looking(&[&a, &b], pairs, || {
        let r = m.read();
        let bs = (r.sum - r.count as f64) / 999.0; // sum = as + 1000 bs, count = as + bs
        assert_eq!(
            bs.fract(),
            0.0,
            "count and sum from different moments: {r:?}"
        );
        let bs = bs as u64;
        assert!(
            bs <= r.count - bs,
            "B's record without A's before it: {r:?}"
        );
        assert!(r.count >= last, "readings never go back");
        last = r.count;
        mid_way += usize::from(r.count > 0 && r.count < 2 * pairs as u64);
    });
    assert!(mid_way > 0, "no reading while the records ran");
}

#[test]
fn take_resets_at_the_moment_it_reads() {
    let (threads, records) = if cfg!(miri) { (2, 20) } else { (4, 20_000) };
    let m = Mean::new();
    assert_eq!(m.read().mean(), None);
    let (mut taken, mut nonempty) = (0, 0);
    let record = |_| m.record(1.0);
    common::while_looking(
        &vec![&record as &(dyn Fn(usize) + Sync); threads],
        records,
        || {
            let r = m.take();
            assert_eq!(r.sum, r.count as f64);
            taken += r.count;
            nonempty += usize::from(r.count > 0);
        },
    );
    assert!(nonempty > 1, "no take while the records ran");
    taken += m.take().count;
    assert_eq!(
        taken,
        (threads * records) as u64,
        "every record in exactly one interval"
    );
    assert_eq!(m.read().count, 0);
}
