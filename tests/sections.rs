//! Critical sections: ticket-order serial execution, all-or-nothing commits, no deadlock,
//! no poisoning, typed conflicts. The scenarios follow tf.CriticalSection's documentation.

use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};

use mvtensor::{CriticalSection, Error, Variable};
use ndarray::{arr0, ArrayD, IxDyn};

use crate::common;
use common::scaled;

fn scalar(x: f64) -> Variable<f64> {
    Variable::new(arr0(x).into_dyn())
}

/// 100 concurrent executions that each return the old value and add 2.0: exactly
/// {0, 2, ..., 198}, as seen serially.
#[test]
fn concurrent_executions_see_the_serial_answer() {
    let n = scaled(6, 100);
    let v = scalar(0.0);
    let cs = CriticalSection::builder().resource(&v).build().unwrap();
    let olds: Vec<f64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|_| {
                s.spawn(|| {
                    cs.execute(|tx| {
                        let old = tx.read(&v)?[[]];
                        tx.assign_add(&v, &arr0(2.0).into_dyn())?;
                        Ok::<_, Error>(old)
                    })
                    .unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let seen: BTreeSet<i64> = olds.iter().map(|&x| x as i64).collect();
    let expected: BTreeSet<i64> = (0..n as i64).map(|i| 2 * i).collect();
    assert_eq!(seen, expected);
    assert_eq!(v.read()[[]], 2.0 * n as f64);
}

/// 1,000 chained executions, 25 in flight, each feeding what it read into what it writes.
#[test]
fn chained_executions_end_at_the_count() {
    let (threads, each) = (scaled(3, 25), scaled(3, 40));
    let v = scalar(0.0);
    let cs = CriticalSection::builder()
        .name("chain")
        .resource(&v)
        .build()
        .unwrap();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..each {
                    cs.execute(|tx| {
                        let next = &*tx.read(&v)? + 1.0;
                        tx.assign(&v, next)
                    })
                    .unwrap();
                }
            });
        }
    });
    assert_eq!(v.read()[[]], (threads * each) as f64);
    // One version per batch of executions that arrived together.
    let versions = v.version();
    assert!(
        versions >= 1 && versions <= (threads * each) as u64,
        "{versions}"
    );
}

/// Executions that arrive together run as one batch on one thread. A failing or panicking
/// one is rolled back alone, its own error or panic reaches its own caller, and the others
/// commit (each having seen the writes of those before it).
#[test]
fn failures_in_a_batch_roll_back_alone() {
    #[derive(Debug, PartialEq)]
    enum Refusal {
        Mine(usize, usize),
        Store,
    }
    impl From<Error> for Refusal {
        fn from(_: Error) -> Self {
            Refusal::Store
        }
    }
    let (threads, each) = (scaled(2, 8), scaled(6, 300));
    let v = scalar(0.0);
    let cs = CriticalSection::builder().resource(&v).build().unwrap();
    let committed: usize = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (v, cs) = (&v, &cs);
                s.spawn(move || {
                    let mut committed = 0;
                    for i in 0..each {
                        let (panics, refuses) = (i % 40 == 7, i % 3 == 1);
                        let result = catch_unwind(AssertUnwindSafe(|| {
                            cs.execute(|tx| {
                                let before = tx.read(v)?[[]];
                                tx.assign_add(v, &arr0(1.0).into_dyn())?;
                                assert_eq!(tx.read(v)?[[]], before + 1.0, "sees its own write");
                                if panics {
                                    panic!("execution {t}/{i} panics");
                                }
                                if refuses {
                                    return Err(Refusal::Mine(t, i));
                                }
                                Ok(before)
                            })
                        }));
                        match result {
                            Err(panic) => {
                                assert!(panics, "{t}/{i} panicked");
                                let message = panic.downcast_ref::<String>().unwrap();
                                assert_eq!(message, &format!("execution {t}/{i} panics"));
                            }
                            Ok(Err(refusal)) => {
                                assert!(refuses && !panics);
                                assert_eq!(refusal, Refusal::Mine(t, i), "someone else's error");
                            }
                            Ok(Ok(_)) => {
                                assert!(!refuses && !panics);
                                committed += 1;
                            }
                        }
                    }
                    committed
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    assert_eq!(
        v.read()[[]],
        committed as f64,
        "exactly the kept executions"
    );
    let stats = cs.stats();
    assert_eq!(stats.executions, (threads * each) as u64);
    assert!(stats.batches <= stats.executions && stats.max_batch <= threads as u64);
    eprintln!("{stats:?}");
}

/// Inside an execution the resources never change, even while other threads hammer them
/// with plain writes (which queue behind the execution's tickets).
#[test]
fn resources_do_not_change_under_an_execution() {
    let x = Variable::new(ArrayD::<i64>::zeros(IxDyn(&[16])));
    let cs = CriticalSection::builder().resource(&x).build().unwrap();
    let (writers, writes) = (2, scaled(5, 300));
    let write = |_| {
        x.assign_add(&ArrayD::ones(IxDyn(&[16]))).unwrap();
    };
    let mut mid_way = 0; // executions between the first write and the last
    common::while_looking(
        &vec![&write as &(dyn Fn(usize) + Sync); writers],
        writes,
        || {
            cs.execute(|tx| {
                let first = tx.read(&x)?.to_owned();
                for _ in 0..10 {
                    drop(std::hint::black_box(x.read())); // plain reads never wait either
                    assert_eq!(*tx.read(&x)?, first, "a resource changed mid-execution");
                }
                mid_way += usize::from(first[0] > 0 && first[0] < (writers * writes) as i64);
                Ok::<_, Error>(())
            })
            .unwrap();
        },
    );
    assert!(mid_way > 0, "no execution while the writes ran");
    assert!(x.read().iter().all(|&e| e == (writers * writes) as i64));
}

#[test]
fn a_failed_execution_commits_nothing_and_reaches_only_its_caller() {
    let a = scalar(1.0);
    let b = scalar(2.0);
    let cs = CriticalSection::builder()
        .name("pair")
        .resource(&a)
        .resource(&b)
        .build()
        .unwrap();

    let err = cs
        .execute(|tx| {
            tx.assign(&a, arr0(100.0).into_dyn())?;
            tx.assign_add(&b, &ArrayD::zeros(IxDyn(&[3])))?; // wrong shape: fails here
            Ok::<_, Error>(())
        })
        .unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { ref variable, .. } if variable == b.name()));
    assert_eq!((a.read()[[]], b.read()[[]]), (1.0, 2.0), "nothing applied");
    assert_eq!((a.version(), b.version()), (0, 0));

    #[derive(Debug, PartialEq)]
    enum Mine {
        Refused,
        Store(Error),
    }
    impl From<Error> for Mine {
        fn from(e: Error) -> Self {
            Mine::Store(e)
        }
    }
    let err = cs
        .execute(|tx| {
            tx.assign(&a, arr0(100.0).into_dyn())?;
            Err::<(), _>(Mine::Refused)
        })
        .unwrap_err();
    assert_eq!(err, Mine::Refused);
    assert_eq!(a.read()[[]], 1.0);

    // The section is still usable, and commits both writes together.
    cs.execute(|tx| {
        tx.assign(&a, arr0(10.0).into_dyn())?;
        tx.assign(&b, arr0(20.0).into_dyn())
    })
    .unwrap();
    assert_eq!((a.read()[[]], b.read()[[]]), (10.0, 20.0));
    assert_eq!(
        a.read().timestamp(),
        b.read().timestamp(),
        "one commit, one timestamp"
    );
}

#[test]
fn a_panicking_execution_commits_nothing_and_does_not_poison() {
    let v = scalar(0.0);
    let cs = CriticalSection::builder().resource(&v).build().unwrap();
    let result = catch_unwind(AssertUnwindSafe(|| {
        cs.execute(|tx| {
            tx.assign(&v, arr0(5.0).into_dyn())?;
            panic!("boom");
            #[allow(unreachable_code)]
            Ok::<_, Error>(())
        })
    }));
    assert!(result.is_err(), "the panic reaches the caller");
    assert_eq!(v.read()[[]], 0.0);
    // Other threads and later executions proceed: no poison, no hang.
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                cs.execute(|tx| tx.assign_add(&v, &arr0(1.0).into_dyn()))
                    .unwrap()
            });
        }
    });
    v.assign_add(&arr0(1.0).into_dyn()).unwrap();
    assert_eq!(v.read()[[]], 3.0);
}

#[test]
fn nested_execution_is_refused_at_once_and_the_outer_one_commits() {
    let v = scalar(0.0);
    let w = scalar(0.0);
    let outer = CriticalSection::builder()
        .name("outer")
        .resource(&v)
        .build()
        .unwrap();
    let other = CriticalSection::builder()
        .name("other")
        .resource(&w)
        .build()
        .unwrap();
    outer
        .execute(|tx| {
            let same = outer.execute(|_| Ok::<_, Error>(()));
            assert!(matches!(same, Err(Error::Reentrant { ref running, .. })
                    if running == "an execution of section `outer`"));
            let different = other.execute(|_| Ok::<_, Error>(()));
            assert!(matches!(different, Err(Error::Reentrant { .. })));
            // A direct write to a queued variable would wait on our own ticket.
            let direct = v.assign_add(&arr0(1.0).into_dyn());
            assert!(matches!(direct, Err(Error::Reentrant { .. })), "{direct:?}");
            let direct = w.assign(arr0(1.0).into_dyn());
            assert!(matches!(direct, Err(Error::Reentrant { .. })), "{direct:?}");
            tx.assign(&v, arr0(7.0).into_dyn())
        })
        .unwrap();
    assert_eq!(v.read()[[]], 7.0);
    // Free variables stay writable from inside an execution.
    let free = scalar(0.0);
    outer
        .execute(|_| free.assign_add(&arr0(1.0).into_dyn()))
        .unwrap();
    assert_eq!(free.read()[[]], 1.0);
}

/// A variable outside the section is read as it is when an execution first reads it, also
/// when executions run as a batch: each one here sees the direct writes of those before it,
/// so the values seen are all distinct, as if they had run one by one.
#[test]
fn batched_executions_read_outside_variables_afresh() {
    let (threads, each) = (scaled(2, 8), scaled(4, 200));
    let inside = scalar(0.0);
    let outside = scalar(0.0); // free: written directly from inside the executions
    let cs = CriticalSection::builder()
        .resource(&inside)
        .build()
        .unwrap();
    let seen: Vec<f64> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    (0..each)
                        .map(|_| {
                            cs.execute(|tx| {
                                let seen = tx.read(&outside)?[[]];
                                outside.assign_add(&arr0(1.0).into_dyn())?;
                                tx.assign_add(&inside, &arr0(1.0).into_dyn())?;
                                Ok::<_, Error>(seen)
                            })
                            .unwrap()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    let distinct: BTreeSet<u64> = seen.iter().map(|&x| x as u64).collect();
    assert_eq!(
        distinct.len(),
        threads * each,
        "two executions saw the same value"
    );
    assert_eq!(inside.read()[[]], (threads * each) as f64);
    eprintln!("{:?}", cs.stats());
}

/// The closure of `update` on a queued variable runs while the write holds that variable's
/// ticket. Starting an execution or writing a queued variable from there would wait on a
/// ticket while holding one (a deadlock if the other side waits for ours): refused at once.
#[test]
fn an_update_closure_holding_a_ticket_may_not_wait_for_another() {
    let v = Variable::builder(arr0(0.0f64).into_dyn()).name("v").build();
    let w = scalar(0.0);
    let cs = CriticalSection::builder()
        .name("both")
        .resource(&v)
        .resource(&w)
        .build()
        .unwrap();
    let free = scalar(0.0);
    v.update(|x| {
        let nested = cs.execute(|_| Ok::<_, Error>(()));
        assert!(
            matches!(&nested, Err(Error::Reentrant { running, .. }) if running.contains("`v`")),
            "{nested:?}"
        );
        let queued = w.assign_add(&arr0(1.0).into_dyn());
        assert!(matches!(queued, Err(Error::Reentrant { .. })), "{queued:?}");
        free.assign_add(&arr0(1.0).into_dyn()).unwrap(); // no ticket: allowed
        x + 1.0
    })
    .unwrap();
    assert_eq!(
        (v.read()[[]], w.read()[[]], free.read()[[]]),
        (1.0, 0.0, 1.0)
    );
    // Outside the closure, all is usable again.
    cs.execute(|tx| tx.assign_add(&w, &arr0(2.0).into_dyn()))
        .unwrap();
    assert_eq!(w.read()[[]], 2.0);
}

#[test]
fn exclusive_claims_conflict_with_typed_errors() {
    let v = Variable::builder(arr0(0.0f32).into_dyn()).name("v").build();
    let first = CriticalSection::builder()
        .name("first")
        .resource(&v)
        .build()
        .unwrap();
    let err = CriticalSection::builder()
        .name("second")
        .resource(&v)
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        Error::ResourceConflict {
            resource: "v".into(),
            held_by: "first".into(),
            held: "exclusively",
            requested_by: "second".into(),
            requested: "exclusively",
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("`v`") && msg.contains("`first`") && msg.contains("`second`"),
        "{msg}"
    );
    let err = CriticalSection::builder()
        .resource(&v)
        .exclusive(false)
        .build()
        .unwrap_err();
    assert!(matches!(
        err,
        Error::ResourceConflict {
            requested: "shared",
            ..
        }
    ));
    drop(first);
    // Dropping a section releases its claims.
    let shared = CriticalSection::builder()
        .name("s1")
        .resource(&v)
        .exclusive(false)
        .build()
        .unwrap();
    let _also = CriticalSection::builder()
        .name("s2")
        .resource(&v)
        .exclusive(false)
        .build()
        .unwrap();
    let err = CriticalSection::builder()
        .name("x")
        .resource(&v)
        .build()
        .unwrap_err();
    assert!(matches!(
        err,
        Error::ResourceConflict {
            held: "shared",
            requested: "exclusively",
            ..
        }
    ));
    drop(shared);
}

#[test]
fn a_failed_build_claims_nothing() {
    let a = scalar(0.0);
    let b = scalar(0.0);
    let _holds_b = CriticalSection::builder().resource(&b).build().unwrap();
    assert!(CriticalSection::builder()
        .resource(&a)
        .resource(&b)
        .build()
        .is_err());
    // `a` was claimed first and must have been released again.
    CriticalSection::builder().resource(&a).build().unwrap();
}

/// tf.CriticalSection's documented failure: two non-exclusive sections running
/// `accumulate` "may return 0.0". Ours are serialised on the shared variable.
#[test]
fn non_exclusive_sections_sharing_a_resource_stay_serializable() {
    let v = scalar(0.0);
    let one = CriticalSection::builder()
        .resource(&v)
        .exclusive(false)
        .build()
        .unwrap();
    let two = CriticalSection::builder()
        .resource(&v)
        .exclusive(false)
        .build()
        .unwrap();
    let each = scaled(5, 500);
    let accumulate = |cs: &CriticalSection| {
        (0..each)
            .map(|_| {
                cs.execute(|tx| {
                    let x = tx.read(&v)?[[]];
                    tx.assign_add(&v, &arr0(1.0).into_dyn())?;
                    Ok::<_, Error>(x as i64)
                })
                .unwrap()
            })
            .collect::<Vec<_>>()
    };
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| accumulate(&one));
        let b = s.spawn(|| accumulate(&two));
        (a.join().unwrap(), b.join().unwrap())
    });
    let all: BTreeSet<i64> = a.into_iter().chain(b).collect();
    assert_eq!(
        all.len(),
        2 * each,
        "every old value distinct: no interleaving"
    );
    assert_eq!(v.read()[[]], (2 * each) as f64);
}

#[test]
fn writing_outside_the_resource_set_is_an_error_reading_is_fine() {
    let inside = scalar(1.0);
    let outside = Variable::builder(arr0(5.0f64).into_dyn())
        .name("outside")
        .build();
    let cs = CriticalSection::builder()
        .name("cs")
        .resource(&inside)
        .build()
        .unwrap();
    let err = cs
        .execute(|tx| {
            let x = tx.read(&outside)?[[]];
            tx.assign(&inside, arr0(x).into_dyn())?;
            tx.assign(&outside, arr0(0.0).into_dyn())
        })
        .unwrap_err();
    assert_eq!(
        err,
        Error::NotInResourceSet {
            variable: "outside".into(),
            section: "cs".into()
        }
    );
    assert_eq!((inside.read()[[]], outside.read()[[]]), (1.0, 5.0));
}

#[test]
fn resources_may_mix_element_types_and_see_their_own_writes() {
    let w = Variable::new(ArrayD::<f32>::zeros(IxDyn(&[2])));
    let step = Variable::new(arr0(0i64).into_dyn());
    let cs = CriticalSection::builder()
        .resource(&w)
        .resource(&step)
        .build()
        .unwrap();
    let seen = cs
        .execute(|tx| {
            tx.assign_add(&w, &ArrayD::ones(IxDyn(&[2])))?;
            tx.assign_add(&w, &ArrayD::ones(IxDyn(&[2])))?;
            tx.update(&step, |s| s + 1)?;
            Ok::<_, Error>((tx.read(&w)?[[0]], tx.read(&step)?[[]]))
        })
        .unwrap();
    assert_eq!(seen, (2.0, 1));
    assert_eq!((w.read()[[1]], step.read()[[]]), (2.0, 1));
    assert_eq!(
        (w.version(), step.version()),
        (1, 1),
        "one commit per execution"
    );
}

#[test]
fn a_section_without_resources_is_a_fifo_mutex() {
    let cs = CriticalSection::builder().build().unwrap();
    let counter = std::sync::atomic::AtomicUsize::new(0);
    let n = scaled(3, 200);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..n {
                    cs.execute(|_| {
                        // A non-atomic read-modify-write made safe by the section.
                        let x = counter.load(std::sync::atomic::Ordering::Relaxed);
                        std::hint::black_box(&x);
                        counter.store(x + 1, std::sync::atomic::Ordering::Relaxed);
                        Ok::<_, Error>(())
                    })
                    .unwrap();
                }
            });
        }
    });
    assert_eq!(counter.into_inner(), 4 * n);
}
