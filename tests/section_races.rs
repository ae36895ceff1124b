//! Sections racing everything else at once: executions (some failing, some reading a
//! variable outside the section), sections built and dropped around the same variables
//! (their claims set and clear the queued mark), plain writers of every kind to a small and
//! a large variable, and readers. Executions run their closures unpinned and plain writers
//! wait for tickets unpinned; still nothing may be lost, doubled, torn or seen
//! half-committed.
//! Store snapshots, checkpoints and restores race sections too: each sees, or commits, a
//! consistent cut.

use mvtensor::checkpoint::Restore;
use mvtensor::{CriticalSection, Store, Variable};
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

/// What every consistent cut of [`store_snapshots_and_restores_race_sections`]' store
/// satisfies: `a + b == TOTAL`, and every element of `large` equals `a`.
const TOTAL: i64 = 1_000;

/// Checks the cut `(a, b, large)`; returns `a`.
fn consistent(a: i64, b: i64, large: &ndarray::ArrayRef<i64, IxDyn>) -> i64 {
    assert_eq!(a + b, TOTAL, "a cut with a = {a}, b = {b}");
    assert_eq!(
        level(large),
        a,
        "a cut with a = {a} and large at another level"
    );
    a
}

/// Sections move one unit from `b` to `a` (and back) while raising (lowering) every element
/// of a large variable with it; meanwhile store snapshots are taken (and saved as bytes, and
/// loaded back), and a checkpoint of one cut is restored again and again, which commits all
/// three variables in one execution of its own (a section that shares the claims). Every
/// snapshot, every file and the end state are consistent cuts; snapshot timestamps never go
/// back.
#[test]
#[cfg_attr(miri, ignore = "file system I/O (miri isolates it)")]
fn store_snapshots_and_restores_race_sections() {
    let rounds = scaled(3, 2_000) as i64;
    let store = Store::new();
    let a: Variable<i64, Ix0> = store.variable("a", ndarray::arr0(TOTAL / 2)).unwrap();
    let b: Variable<i64, Ix0> = store.variable("b", ndarray::arr0(TOTAL / 2)).unwrap();
    let large: Variable<i64> = store
        .variable("large", ArrayD::from_elem(IxDyn(&[LARGE]), TOTAL / 2))
        .unwrap();
    let outside: Variable<i64, Ix0> = store.variable("outside", ndarray::arr0(0)).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let cut = scratch.path().join("cut.safetensors");
    store.save(&cut).unwrap();
    let ones = ArrayD::<i64>::ones(IxDyn(&[LARGE]));
    let transfer = CriticalSection::builder()
        .resource(&a)
        .resource(&b)
        .resource(&large)
        .exclusive(false) // a restore claims them too
        .build()
        .unwrap();
    std::thread::scope(|s| {
        for sign in [1, -1] {
            let (transfer, a, b, large, ones) = (&transfer, &a, &b, &large, &ones);
            s.spawn(move || {
                for _ in 0..rounds {
                    transfer
                        .execute(|tx| {
                            tx.write(a)?[[]] += sign;
                            tx.write(b)?[[]] -= sign;
                            tx.scaled_add(large, sign, ones)
                        })
                        .unwrap();
                }
            });
        }
        s.spawn(|| {
            for _ in 0..rounds / 4 {
                // Every variable of the store is in the file: `outside` is set back too.
                assert_eq!(store.restore(&cut, Restore::default()).unwrap(), 4);
            }
        });
        s.spawn(|| {
            for _ in 0..rounds {
                outside.fetch_add(1).unwrap();
            }
        });
        s.spawn(|| {
            let mut last = 0;
            for i in 0..rounds {
                let snapshot = store.snapshot();
                assert!(snapshot.timestamp() >= last, "a store snapshot went back");
                last = snapshot.timestamp();
                let get = |name| snapshot.get::<i64, Ix0>(name).unwrap()[[]];
                let large = snapshot.get::<i64, IxDyn>("large").unwrap();
                consistent(get("a"), get("b"), &large);
                if i % 8 == 0 {
                    let saved = Store::load_bytes(&snapshot.to_bytes().unwrap()).unwrap();
                    let get = |name| saved.get::<i64, Ix0>(name).unwrap().get();
                    let large = saved.get::<i64, IxDyn>("large").unwrap().read();
                    consistent(get("a"), get("b"), &large);
                }
            }
        });
    });
    consistent(a.get(), b.get(), &large.read());
    assert!(outside.get() <= rounds, "restores only set it back");
}
