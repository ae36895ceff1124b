//! Issue 13, item 2: shared metrics updated from many threads, read consistently.

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

#[test]
fn a_reading_has_count_and_sum_from_one_moment() {
    // Every record adds exactly 2.0, so any consistent reading has sum == 2 * count; a
    // reading that took the count of one moment and the sum of another would not.
    let (threads, records, reads) = if cfg!(miri) {
        (2, 20, 20)
    } else {
        (4, 50_000, 20_000)
    };
    let m = Mean::new();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| (0..records).for_each(|_| m.record(2.0)));
        }
        let mut last = 0;
        for _ in 0..reads {
            let r = m.read();
            assert_eq!(
                r.sum,
                2.0 * r.count as f64,
                "count and sum from different moments"
            );
            assert!(r.count >= last, "readings never go back");
            last = r.count;
        }
    });
}

#[test]
fn take_resets_at_the_moment_it_reads() {
    let (threads, records) = if cfg!(miri) { (2, 20) } else { (4, 20_000) };
    let m = Mean::new();
    assert_eq!(m.read().mean(), None);
    let mut taken = 0;
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| (0..records).for_each(|_| m.record(1.0)));
        }
        for _ in 0..100 {
            let r = m.take();
            assert_eq!(r.sum, r.count as f64);
            taken += r.count;
        }
    });
    taken += m.take().count;
    assert_eq!(
        taken,
        (threads * records) as u64,
        "every record in exactly one interval"
    );
    assert_eq!(m.read().count, 0);
}
