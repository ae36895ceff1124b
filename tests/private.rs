//! Section-private state: changed in place by its section's executions only, all or nothing,
//! held by one section at a time, never lent to another section's executions; copied into
//! store snapshots and checkpoints as a cut with the variables, and restored in place.

use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};

use mvtensor::checkpoint::Restore;
use mvtensor::{CriticalSection, Error, Private, Store, Variable, VariableKind};
use ndarray::{arr0, arr1, Array1, Ix0, Ix1};

use crate::common::{scaled, steps_while_looking};

/// An execution's own failure.
#[derive(Debug, PartialEq)]
enum Failed {
    Asked,
    Lib(Error),
}

impl From<Error> for Failed {
    fn from(error: Error) -> Self {
        Failed::Lib(error)
    }
}

fn count(section: &CriticalSection, steps: &Private<i64, Ix0>) -> i64 {
    section
        .execute(|tx| Ok::<_, Error>(tx.private(steps)?[[]]))
        .unwrap()
}

/// Threads hand out numbers from a private counter: each number once, none skipped, and the
/// counter ends at their total (the serial answer).
#[test]
fn a_private_counter_hands_out_each_number_once() {
    let (threads, each) = (4, scaled(10, 2_000));
    let counter = Private::new("counter", arr0(0i64));
    let section = CriticalSection::builder()
        .private(&counter)
        .build()
        .unwrap();
    let seen: Vec<i64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    (0..each)
                        .map(|_| {
                            section
                                .execute(|tx| {
                                    let mut c = tx.private_mut(&counter)?;
                                    c[[]] += 1;
                                    Ok::<_, Error>(c[[]] - 1)
                                })
                                .unwrap()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let total = (threads * each) as i64;
    let distinct: BTreeSet<i64> = seen.iter().copied().collect();
    assert_eq!(distinct.len(), seen.len(), "a number handed out twice");
    assert_eq!(distinct, (0..total).collect(), "a number skipped");
    assert_eq!(count(&section, &counter), total);
}

/// An execution that writes its private state and then fails, or panics, leaves the state
/// as it was; the next execution sees the last committed value and goes on from there.
#[test]
fn a_failed_or_panicking_execution_leaves_the_state_as_it_was() {
    let state = Private::new("state", arr1(&[1.0f32, 2.0, 3.0]));
    let steps = Private::new("steps", arr0(0i64));
    let section = CriticalSection::builder()
        .private(&state)
        .private(&steps)
        .build()
        .unwrap();
    let failed = section.execute(|tx| {
        tx.private_mut(&state)?.fill(-1.0);
        tx.private_mut(&steps)?[[]] += 1;
        Err::<(), _>(Failed::Asked)
    });
    assert_eq!(failed, Err(Failed::Asked));
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        section.execute(|tx| {
            tx.private_mut(&state)?.fill(-2.0);
            panic!("inside an execution");
            #[allow(unreachable_code)]
            Ok::<_, Error>(())
        })
    }));
    assert!(panicked.is_err());
    // Written twice in one execution (one copy aside, however many borrows), then kept.
    section
        .execute(|tx| {
            tx.private_mut(&state)?.mapv_inplace(|x| x * 10.0);
            tx.private_mut(&state)?.mapv_inplace(|x| x + 1.0);
            tx.private_mut(&steps)?[[]] += 1;
            Ok::<_, Error>(())
        })
        .unwrap();
    let now = section
        .execute(|tx| Ok::<_, Error>(tx.private(&state)?.to_owned()))
        .unwrap();
    assert_eq!(now, arr1(&[11.0f32, 21.0, 31.0]));
    assert_eq!(count(&section, &steps), 1);
}

/// `private_rewrite` lends the value beside an array to fill: the next value computed from
/// the last, kept on success, undone on failure or panic, and a second rewrite in one
/// execution (or a write after one) sees what the first wrote.
#[test]
fn a_rewrite_computes_the_next_state_and_is_undone_like_a_write() {
    let m = Private::new("m", arr1(&[1.0f64, 2.0, 3.0]));
    let section = CriticalSection::builder().private(&m).build().unwrap();
    let halve = |tx: &mut mvtensor::Txn<'_>| -> Result<(), Error> {
        let mut m = tx.private_rewrite(&m)?;
        let (old, new) = m.split();
        ndarray::Zip::from(new)
            .and(old)
            .for_each(|n, &o| *n = o / 2.0);
        Ok(())
    };
    let value = || {
        section
            .execute(|tx| Ok::<_, Error>(tx.private(&m)?.to_owned()))
            .unwrap()
    };
    section.execute(|tx| halve(tx)).unwrap();
    assert_eq!(value(), arr1(&[0.5, 1.0, 1.5]));
    // Twice in one execution, then a write on top: each sees the one before.
    section
        .execute(|tx| {
            halve(tx)?;
            halve(tx)?;
            tx.private_mut(&m)?.mapv_inplace(|x| x + 1.0);
            Ok::<_, Error>(())
        })
        .unwrap();
    assert_eq!(value(), arr1(&[1.125, 1.25, 1.375]));
    let failed = section.execute(|tx| {
        halve(tx)?;
        Err::<(), _>(Failed::Asked)
    });
    assert_eq!(failed, Err(Failed::Asked));
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        section.execute(|tx| {
            tx.private_mut(&m)?.fill(0.0);
            halve(tx)?;
            panic!("inside an execution");
            #[allow(unreachable_code)]
            Ok::<_, Error>(())
        })
    }));
    assert!(panicked.is_err());
    assert_eq!(value(), arr1(&[1.125, 1.25, 1.375]));
}

/// Executions that arrive while another runs are batched on one thread; when some of them
/// fail, each failure is undone alone and every kept execution's write survives.
#[test]
fn in_a_batch_each_failed_execution_is_undone_alone() {
    let (threads, each) = (4, scaled(6, 500));
    let sum = Private::new("sum", arr0(0i64));
    let section = CriticalSection::builder().private(&sum).build().unwrap();
    let kept: i64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (section, sum) = (&section, &sum);
                s.spawn(move || {
                    let mut kept = 0;
                    for i in 0..each {
                        let add = (t * each + i) as i64 + 1;
                        let fail = i % 3 == 0;
                        let result = section.execute(|tx| {
                            tx.private_mut(sum)?[[]] += add;
                            if fail {
                                return Err(Failed::Asked);
                            }
                            Ok::<_, Failed>(())
                        });
                        assert_eq!(result.is_ok(), !fail);
                        if !fail {
                            kept += add;
                        }
                    }
                    kept
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let total = section
        .execute(|tx| Ok::<_, Error>(tx.private(&sum)?[[]]))
        .unwrap();
    assert_eq!(total, kept);
}

/// Private state and a shared variable change together: an invariant between them (the
/// variable holds the sum of the deltas, the state their count) holds after every commit,
/// as every execution sees it.
#[test]
fn private_state_and_resources_commit_together() {
    let (threads, each) = (2, scaled(10, 1_000));
    let total = Variable::new(arr0(0.0f64));
    let adds = Private::new("adds", arr0(0i64));
    let section = CriticalSection::builder()
        .resource(&total)
        .private(&adds)
        .build()
        .unwrap();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..each {
                    section
                        .execute(|tx| {
                            let mut n = tx.private_mut(&adds)?;
                            assert_eq!(tx.read(&total)?[[]], n[[]] as f64, "a torn pair");
                            n[[]] += 1;
                            tx.assign_add(&total, &arr0(1.0))?;
                            Ok::<_, Error>(())
                        })
                        .unwrap();
                }
            });
        }
    });
    assert_eq!(count(&section, &adds), (threads * each) as i64);
    assert_eq!(total.read()[[]], (threads * each) as f64);
}

/// One section at a time holds a private state, however the builders ask; once it is dropped
/// another may take it over, with the value it left.
#[test]
fn one_section_holds_a_private_state_at_a_time() {
    let steps = Private::new("steps", arr0(0i64));
    let first = CriticalSection::builder()
        .name("first")
        .exclusive(false)
        .private(&steps)
        .build()
        .unwrap();
    first
        .execute(|tx| {
            tx.private_mut(&steps)?[[]] = 7;
            Ok::<_, Error>(())
        })
        .unwrap();
    let refused = CriticalSection::builder()
        .name("second")
        .exclusive(false)
        .private(&steps)
        .build()
        .unwrap_err();
    match refused {
        Error::ResourceConflict {
            resource, held_by, ..
        } => assert_eq!((resource.as_str(), held_by.as_str()), ("steps", "first")),
        other => panic!("{other:?}"),
    }
    drop(first);
    let second = CriticalSection::builder()
        .name("second")
        .private(&steps)
        .build()
        .unwrap();
    assert_eq!(count(&second, &steps), 7);
}

/// Another section's executions cannot reach the state, and borrows follow `RefCell`'s rules:
/// typed errors naming the state and the section, never a panic.
#[test]
fn other_sections_and_conflicting_borrows_get_typed_errors() {
    let mine = Private::new("mine", Array1::<f32>::zeros(2));
    let owner = CriticalSection::builder()
        .name("owner")
        .private(&mine)
        .build()
        .unwrap();
    let other = CriticalSection::builder().name("other").build().unwrap();
    let err = other
        .execute(|tx| tx.private(&mine).map(|_| ()))
        .unwrap_err();
    assert_eq!(
        err,
        Error::NotInResourceSet {
            variable: "mine".into(),
            section: "other".into()
        }
    );
    let errors = owner
        .execute(|tx| {
            let write = tx.private_mut(&mine)?;
            let read = tx.private(&mine).map(|_| ()).unwrap_err();
            let again = tx.private_mut(&mine).map(|_| ()).unwrap_err();
            drop(write);
            let shared = tx.private(&mine)?;
            let under_read = tx.private_mut(&mine).map(|_| ()).unwrap_err();
            drop(shared);
            Ok::<_, Error>([read, again, under_read])
        })
        .unwrap();
    let expected = |mutably| Error::Borrowed {
        variable: "mine".into(),
        section: "owner".into(),
        mutably,
    };
    assert_eq!(errors, [expected(true), expected(true), expected(false)]);
    let typed: Private<f32, Ix1> = mine.clone();
    assert_eq!(typed.shape(), &[2]);
}

/// A section that counts its additions to a variable in private state, both in one store.
/// The variable is shared (a restore takes it as a section of its own would); the private
/// state stays the section's alone.
fn counted_total(store: &Store) -> (CriticalSection, Variable<f64, Ix0>, Private<i64, Ix0>) {
    let total = store.variable("total", arr0(0.0f64)).unwrap();
    let adds = store.private("adds", arr0(0i64)).unwrap();
    let section = CriticalSection::builder()
        .exclusive(false)
        .resource(&total)
        .private(&adds)
        .build()
        .unwrap();
    (section, total, adds)
}

fn add_one(section: &CriticalSection, total: &Variable<f64, Ix0>, adds: &Private<i64, Ix0>) {
    section
        .execute(|tx| {
            tx.private_mut(adds)?[[]] += 1;
            tx.assign_add(total, &arr0(1.0))?;
            Ok::<_, Error>(())
        })
        .unwrap();
}

/// Store snapshots taken while sections run copy the private state as a cut with the
/// variables: the count of additions always equals the total, and both only grow.
#[test]
fn store_snapshots_copy_private_state_as_a_cut() {
    let (threads, each) = (2, scaled(6, 1_000));
    let store = Store::new();
    let (section, total, adds) = counted_total(&store);
    let mut last = 0;
    let mut look = || {
        let snapshot = store.snapshot();
        let entry = snapshot.iter().find(|e| e.name() == "adds").unwrap();
        assert_eq!(entry.kind(), VariableKind::Private);
        let n = snapshot.get::<i64, Ix0>("adds").unwrap()[[]];
        let sum = snapshot.get::<f64, Ix0>("total").unwrap()[[]];
        assert_eq!(n as f64, sum, "private state and a variable out of step");
        assert!(n >= last, "{n} after {last}");
        last = n;
    };
    steps_while_looking(
        threads,
        each,
        || add_one(&section, &total, &adds),
        &mut look,
    );
    look();
    assert_eq!(last, (threads * each) as i64);
}

/// A checkpoint holds private state; a restore sets it in place, in the same commit as the
/// variables, between two executions of its section (which keeps its claim).
#[test]
#[cfg_attr(miri, ignore = "file system I/O (miri isolates it)")]
fn checkpoints_save_and_restore_private_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ckpt");
    let store = Store::new();
    let (section, total, adds) = counted_total(&store);
    for _ in 0..3 {
        add_one(&section, &total, &adds);
    }
    store.save(&path).unwrap();
    for _ in 0..4 {
        add_one(&section, &total, &adds);
    }
    assert_eq!(store.restore(&path, Restore::default()).unwrap(), 2);
    assert_eq!(count(&section, &adds), 3);
    assert_eq!(total.read()[[]], 3.0);
    add_one(&section, &total, &adds);
    assert_eq!(count(&section, &adds), 4);
    // A store loaded from the file holds the state as a variable.
    let loaded = Store::load(&path).unwrap();
    assert_eq!(loaded.get::<i64, Ix0>("adds").unwrap().read()[[]], 3);
}

/// Private state in a store: found by name and kind, typed like a variable.
#[test]
fn a_store_holds_private_state_by_name_and_kind() {
    let store = Store::new();
    let state = store.private("m", Array1::<f32>::zeros(3)).unwrap();
    assert!(matches!(
        store.get::<f32, Ix1>("m"),
        Err(Error::KindMismatch {
            expected: VariableKind::Dense,
            found: VariableKind::Private,
            ..
        })
    ));
    assert!(matches!(
        store.get_private::<f64, Ix1>("m"),
        Err(Error::DTypeMismatch { .. })
    ));
    assert!(matches!(
        store.get_private::<f32, Ix0>("m"),
        Err(Error::RankMismatch { .. })
    ));
    assert!(matches!(
        store.private("m", arr0(0i64)),
        Err(Error::NameTaken { .. })
    ));
    let again = store.get_private::<f32, Ix1>("m").unwrap();
    let section = CriticalSection::builder().private(&state).build().unwrap();
    section
        .execute(|tx| {
            tx.private_mut(&state)?.fill(2.0);
            Ok::<_, Error>(())
        })
        .unwrap();
    let seen = section
        .execute(|tx| Ok::<_, Error>(tx.private(&again)?.sum()))
        .unwrap();
    assert_eq!(seen, 6.0);
    let info = store.list().into_iter().find(|i| i.name == "m").unwrap();
    assert_eq!((info.kind, info.shape), (VariableKind::Private, vec![3]));
}

/// Inside an execution a thread may not wait for a ticket: a store snapshot there leaves
/// private state out, and a checkpoint of such a store is refused.
#[test]
fn inside_an_execution_snapshots_leave_private_state_out() {
    let store = Store::new();
    let (section, total, adds) = counted_total(&store);
    add_one(&section, &total, &adds);
    let other = CriticalSection::builder().build().unwrap();
    let (snapshot, saved) = other
        .execute(|_| Ok::<_, Error>((store.snapshot(), store.save("never-written"))))
        .unwrap();
    assert_eq!(snapshot.get::<f64, Ix0>("total").unwrap()[[]], 1.0);
    assert!(matches!(
        snapshot.get::<i64, Ix0>("adds"),
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(saved, Err(Error::Reentrant { .. })));
    // The snapshot itself knows what it lacks: a checkpoint of it is refused.
    match snapshot.to_bytes() {
        Err(Error::Checkpoint { problem, .. }) => assert!(problem.contains("`adds`"), "{problem}"),
        other => panic!("{other:?}"),
    }
    if !cfg!(miri) {
        // (Miri isolates the file system.)
        assert!(!std::path::Path::new("never-written").exists());
    }
}

/// A borrow leaked inside an execution ends with it: a failed execution is still undone,
/// and the next one borrows the state as usual.
#[test]
fn a_leaked_borrow_ends_with_its_execution() {
    let state = Private::new("state", arr0(1i64));
    let section = CriticalSection::builder().private(&state).build().unwrap();
    let failed = section.execute(|tx| {
        tx.private_mut(&state)?[[]] = 5;
        std::mem::forget(tx.private(&state)?);
        Err::<(), _>(Failed::Asked)
    });
    assert_eq!(failed, Err(Failed::Asked));
    section
        .execute(|tx| {
            std::mem::forget(tx.private_mut(&state)?);
            Ok::<_, Error>(())
        })
        .unwrap();
    let now = section.execute(|tx| Ok::<_, Error>(tx.private(&state)?[[]]));
    assert_eq!(now, Ok(1));
}

/// A periodic saver asked from inside an execution of the section that owns a store's private
/// state refuses at once, even while another save of the same saver waits for that state's
/// ticket (which the execution holds): it never waits for the saver's lock.
#[test]
#[cfg_attr(miri, ignore = "file system I/O (miri isolates it)")]
fn a_save_from_inside_the_owning_section_is_refused_not_deadlocked() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = mvtensor::checkpoint::Checkpoints::new(dir.path(), 2).unwrap();
    let store = Store::new();
    let (section, total, adds) = counted_total(&store);
    add_one(&section, &total, &adds);
    std::thread::scope(|s| {
        let inside = section
            .execute(|_| {
                // Another thread's save: it takes the saver's lock and waits for the ticket
                // this execution holds, until the execution ends.
                let other = s.spawn(|| checkpoints.save(&store));
                Ok::<_, Error>((checkpoints.save(&store), other))
            })
            .unwrap();
        let (mine, other) = inside;
        assert!(matches!(mine, Err(Error::Reentrant { .. })), "{mine:?}");
        assert!(other.join().unwrap().is_ok());
    });
    assert_eq!(checkpoints.list().unwrap().len(), 1);
}
