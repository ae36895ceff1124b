//! Sections racing everything else at once: executions (some failing, some reading a
//! variable outside the section), sections built and dropped around the same variables
//! (their claims set and clear the queued mark), plain writers of every kind to a small and
//! a large variable, and readers. Since executions run their closures unpinned and plain
//! writers wait for tickets unpinned (2026-11-27), nothing may be lost, doubled, torn or
//! seen half-committed. (A helper session's review stressed these paths; this keeps it.)

use mvtensor::{CriticalSection, Variable};
use ndarray::{ArrayD, Ix0, IxDyn};

use crate::common::scaled;

/// An execution's own failure, or the crate's.
type Failed = Box<dyn std::error::Error + Send + Sync>;

/// 128 KiB of i64: a large variable (its plain writes compute unpinned, on a counted base).
const LARGE: usize = 16 * 1024;

/// Every element of a version of `large` is the same: no torn or half-applied write.
fn level(large: &ndarray::ArrayRef<i64, IxDyn>) -> i64 {
    let first = large[[0]];
    assert!(large.iter().all(|&x| x == first), "a torn version");
    first
}

#[test]
fn sections_and_plain_writers_of_small_and_large_variables_lose_nothing() {
    let rounds = scaled(3, 200) as i64;
    let small: Variable<i64, Ix0> = Variable::scalar(0);
    let large = Variable::new(ArrayD::<i64>::zeros(IxDyn(&[LARGE])));
    let outside = Variable::scalar(0i64);
    let ones = ArrayD::<i64>::ones(IxDyn(&[LARGE]));
    // Shared claims, so that other sections may be built over the same variables meanwhile.
    let steady = CriticalSection::builder()
        .resource(&small)
        .resource(&large)
        .exclusive(false)
        .build()
        .unwrap();
    std::thread::scope(|s| {
        // Executions: both variables move together; every third one fails after writing.
        for _ in 0..2 {
            s.spawn(|| {
                for i in 0..rounds {
                    let result = steady.execute(|tx| -> Result<(), Failed> {
                        let seen = tx.read(&outside)?[[]];
                        let before = tx.read(&small)?[[]];
                        tx.write(&small)?[[]] += 1;
                        tx.assign_add(&large, &ones)?;
                        assert_eq!(tx.read(&small)?[[]], before + 1, "its own write");
                        if i % 3 == 2 {
                            return Err(format!("rolled back, outside at {seen}").into());
                        }
                        Ok(())
                    });
                    assert_eq!(result.is_err(), i % 3 == 2);
                }
            });
        }
        // Sections built, run once and dropped: claims come and go under the writers.
        s.spawn(|| {
            for _ in 0..rounds / 4 {
                let passing = CriticalSection::builder()
                    .resource(&large)
                    .exclusive(false)
                    .build()
                    .unwrap();
                passing
                    .execute(|tx| tx.assign_add(&large, &ones).map(|_| ()))
                    .unwrap();
            }
        });
        // Plain writers of every kind, racing the claims.
        s.spawn(|| {
            for _ in 0..rounds {
                small.fetch_add(1).unwrap();
                small.update(|x| x + 1).unwrap();
                large.assign_add(&ones).unwrap();
                large.update(|x| x + 1).unwrap();
                outside.fetch_add(1).unwrap();
            }
        });
        // A reader: versions are whole, and never go backwards.
        s.spawn(|| {
            let mut last = 0;
            for _ in 0..rounds * 4 {
                let now = level(&large.read());
                assert!(now >= last, "{now} after {last}");
                last = now;
            }
        });
    });
    let committed = 2 * (rounds - rounds / 3); // two executors, every third one failed
    assert_eq!(small.get(), committed + 2 * rounds, "small");
    assert_eq!(
        level(&large.read()),
        committed + rounds / 4 + 2 * rounds,
        "large"
    );
    assert_eq!(outside.get(), rounds);
}
