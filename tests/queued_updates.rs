//! `update` and `fetch_update` on a variable that critical sections claim and let go of over
//! and over, while their closures run unpinned holding the variable's ticket: no increment
//! may be lost or seen twice, and a failed or panicking closure gives its ticket back.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use mvtensor::{CriticalSection, Error, Variable};
use ndarray::{arr1, Ix0};

use crate::common::scaled;

#[test]
fn updates_racing_sections_that_come_and_go_lose_nothing() {
    let v: Variable<i64, Ix0> = Variable::scalar(0);
    let per_thread = scaled(20, 3_000) as i64;
    let stop = AtomicBool::new(false);
    let by_sections = AtomicI64::new(0);
    let olds = std::thread::scope(|s| {
        // Sections over `v` built, executed and dropped in a loop: the variable goes from
        // queued to free and back under the updaters.
        let churn = s.spawn(|| {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let cs = CriticalSection::builder().resource(&v).build().unwrap();
                for _ in 0..(n % 3) {
                    cs.execute(|tx| {
                        tx.write(&v)?[[]] += 1;
                        Ok::<_, Error>(())
                    })
                    .unwrap();
                    by_sections.fetch_add(1, Ordering::Relaxed);
                }
                drop(cs);
                n += 1;
            }
        });
        let adder = s.spawn(|| {
            for _ in 0..per_thread {
                v.fetch_add(1).unwrap();
            }
        });
        let fetchers: Vec<_> = (0..2)
            .map(|t| {
                let v = &v;
                s.spawn(move || {
                    let mut olds = Vec::new();
                    for i in 0..per_thread {
                        let old = v
                            .fetch_update(|x| {
                                if i % 64 == t {
                                    std::thread::yield_now(); // a slow closure, unpinned
                                }
                                x + 1
                            })
                            .unwrap();
                        olds.push(old[[]]);
                    }
                    olds
                })
            })
            .collect();
        let updater = s.spawn(|| {
            for i in 0..per_thread {
                v.update(|x| {
                    if i % 50 == 0 {
                        // A slower closure still (work, not a wait for anyone).
                        std::thread::sleep(std::time::Duration::from_micros(50));
                    }
                    x + 1
                })
                .unwrap();
            }
        });
        let mut olds: Vec<i64> = fetchers
            .into_iter()
            .flat_map(|f| f.join().unwrap())
            .collect();
        adder.join().unwrap();
        updater.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        churn.join().unwrap();
        olds.sort_unstable();
        olds
    });
    let total = 4 * per_thread + by_sections.load(Ordering::Relaxed);
    assert_eq!(v.get(), total, "an increment was lost");
    let mut distinct = olds.clone();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        olds.len(),
        "fetch_update saw one value twice"
    );
}

/// A queued variable's update whose closure fails (a shape the variable does not take) or
/// panics gives the ticket back: the section's next execution and a plain write go on.
/// Inside the closure (the ticket held), the variable's own write, another section's
/// execution and a plain write to another section's variable are refused at once.
#[test]
fn a_failed_or_panicking_update_of_a_sections_variable_gives_its_ticket_back() {
    let v = Variable::new(arr1(&[1i64, 2]));
    let cs = CriticalSection::builder().resource(&v).build().unwrap();
    let wrong = v.update(|_| arr1(&[1i64, 2, 3]));
    assert!(
        matches!(wrong, Err(Error::ShapeMismatch { .. })),
        "{wrong:?}"
    );
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        v.fetch_update(|_| -> ndarray::Array1<i64> { panic!("in the closure") })
    }));
    assert!(panicked.is_err());
    let other = Variable::scalar(0i64);
    let other_cs = CriticalSection::builder().resource(&other).build().unwrap();
    v.update(|x| {
        assert!(matches!(
            v.assign_add(&arr1(&[1, 1])),
            Err(Error::Reentrant { .. })
        ));
        assert!(matches!(
            other_cs.execute(|_| Ok::<_, Error>(())),
            Err(Error::Reentrant { .. })
        ));
        assert!(matches!(other.fetch_add(1), Err(Error::Reentrant { .. })));
        x + 1
    })
    .unwrap();
    cs.execute(|tx| {
        tx.assign_add(&v, &arr1(&[10i64, 10]).into_dyn())?;
        Ok::<_, Error>(())
    })
    .unwrap();
    v.assign_add(&arr1(&[100, 100])).unwrap();
    assert_eq!(v.read().as_slice(), Some(&[112i64, 113][..]));
}
