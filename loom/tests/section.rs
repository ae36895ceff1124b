//! Models of the commit queue: ticket order and hand-off, all-or-nothing visibility, and
//! plain writes queuing behind an execution.

#![cfg(mvtensor_loom)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use loom::sync::mpsc;

use common::{run_model, scalar, spawn_transfer, value, writes_get_their_versions_back};
use loom::thread;
use mvtensor::{CriticalSection, Error, Variable};

/// Increments `v` in a working copy changed in place (the even calls: `tx.write`) or
/// replaced (the odd ones: `tx.assign`), and checks what the caller is promised.
fn count(cs: &CriticalSection, v: &Variable<i64>) -> i64 {
    let old = cs
        .execute(|tx| {
            let old = tx.read(v)?[[]];
            if old % 2 == 0 {
                tx.write(v)?[[]] += 1;
            } else {
                tx.assign(v, value(old + 1))?;
            }
            assert_eq!(tx.read(v)?[[]], old + 1, "sees its own write");
            // Before the commit others see the value as it was before this execution, or
            // before the batch it runs in: never this execution's write.
            assert!(v.read()[[]] <= old, "others see nothing before the commit");
            Ok::<_, Error>(old)
        })
        .unwrap();
    // When `execute` returns, its write is committed and visible to its caller.
    assert!(
        v.read()[[]] > old,
        "the caller sees its own execution's write"
    );
    old
}

/// Two executions of `count` (TensorFlow's example): each sees a distinct old value, whether
/// handed over from one ticket holder to the next or run by one thread as a batch.
#[test]
fn executions_are_serial() {
    static BATCHED: AtomicBool = AtomicBool::new(false);
    run_model("executions_are_serial", || {
        let v = scalar(0);
        let cs = CriticalSection::builder().resource(&v).build().unwrap();
        let other = {
            let (cs, v) = (cs.clone(), v.clone());
            thread::spawn(move || count(&cs, &v))
        };
        let mine = count(&cs, &v);
        let theirs = other.join().unwrap();
        assert_eq!(mine + theirs, 1, "old values 0 and 1, once each");
        assert_eq!(v.read()[[]], 2);
        let (batches, version) = (cs.stats().batches, v.version());
        assert!(
            batches == version && (1..=2).contains(&version),
            "{version}"
        );
        if batches == 1 {
            BATCHED.store(true, Ordering::Relaxed);
        }
    });
    assert!(
        BATCHED.load(Ordering::Relaxed),
        "the model never ran both in one batch"
    );
}

/// A failing execution and a counting one, possibly in one batch: the failure is rolled back
/// alone (its write is never visible, not even to the execution after it), the other commits.
#[test]
fn a_failure_in_a_batch_is_rolled_back_alone() {
    run_model("a_failure_in_a_batch_is_rolled_back_alone", || {
        let v = scalar(0);
        let cs = CriticalSection::builder().resource(&v).build().unwrap();
        let failing = {
            let (cs, v) = (cs.clone(), v.clone());
            thread::spawn(move || {
                cs.execute(|tx| {
                    tx.assign(&v, value(100))?;
                    Err::<(), _>(Error::NotFound {
                        name: "refused".into(),
                    })
                })
                .unwrap_err()
            })
        };
        assert_eq!(count(&cs, &v), 0, "never sees the failed write");
        assert!(matches!(failing.join().unwrap(), Error::NotFound { .. }));
        assert_eq!(v.read()[[]], 1);
    });
}

/// A plain write to a resource queues behind an execution instead of changing the value
/// under it, and is not lost.
#[test]
fn plain_writes_queue_behind_executions() {
    run_model("plain_writes_queue_behind_executions", || {
        let v = scalar(0);
        let cs = CriticalSection::builder().resource(&v).build().unwrap();
        let plain = {
            let v = v.clone();
            thread::spawn(move || v.assign_add(&value(10)).unwrap())
        };
        let old = cs
            .execute(|tx| {
                let first = tx.read(&v)?[[]];
                tx.assign(&v, value(first + 1))?;
                Ok::<_, Error>(first)
            })
            .unwrap();
        plain.join().unwrap();
        assert!(old == 0 || old == 10, "saw {old}");
        assert_eq!(v.read()[[]], 11);
    });
}

/// A transfer installs two versions before committing either. A reader that sees the new
/// value of one variable must see the new value of the other.
#[test]
fn an_execution_becomes_visible_all_at_once() {
    run_model("an_execution_becomes_visible_all_at_once", || {
        let a = scalar(10);
        let b = scalar(0);
        let writer = spawn_transfer(&a, &b, 3);
        let seen_a = a.read()[[]];
        let seen_b = b.read()[[]];
        if seen_a == 7 {
            assert_eq!(seen_b, 3, "saw half a transfer");
        }
        writer.join().unwrap();
        assert_eq!((a.read()[[]], b.read()[[]]), (7, 3));
    });
}

/// Two executions that each read a variable outside the section, then write it directly:
/// batched or not, the second sees the first one's write (the batch reads it afresh).
#[test]
fn a_batch_reads_outside_variables_afresh() {
    run_model("a_batch_reads_outside_variables_afresh", || {
        let inside = scalar(0);
        let outside = scalar(0);
        let cs = CriticalSection::builder()
            .resource(&inside)
            .build()
            .unwrap();
        let step = |cs: &CriticalSection, inside: &Variable<i64>, outside: &Variable<i64>| {
            cs.execute(|tx| {
                let seen = tx.read(outside)?[[]];
                outside.assign_add(&value(1))?;
                tx.assign_add(inside, &value(1))?;
                Ok::<_, Error>(seen)
            })
            .unwrap()
        };
        let other = {
            let (cs, inside, outside) = (cs.clone(), inside.clone(), outside.clone());
            thread::spawn(move || step(&cs, &inside, &outside))
        };
        let mine = step(&cs, &inside, &outside);
        let theirs = other.join().unwrap();
        assert_eq!(mine + theirs, 1, "saw 0 and 1, once each");
        assert_eq!((inside.read()[[]], outside.read()[[]]), (2, 2));
    });
}

/// An execution's closure runs unpinned: while one waits inside its closure, another thread
/// writing a variable outside the section gets every version back after two grace steps,
/// as a lone writer does (`version.rs`: `a_lone_writer_reuses_two_versions`). With a
/// `queued` write, a third thread adds 10 to the section's variable, waiting for its ticket
/// meanwhile, unpinned too. When the closure, or the queued write, was pinned, the epoch
/// could not pass it, and the writer's versions piled up.
fn nothing_held_back_beside_an_execution(queued: Option<fn(&Variable<i64>)>) {
    let v = scalar(0);
    let w = scalar(0);
    let cs = CriticalSection::builder().resource(&v).build().unwrap();
    let (inside, wait_inside) = mpsc::channel();
    let (done, wait_done) = mpsc::channel::<()>();
    let executing = {
        let (cs, v) = (cs.clone(), v.clone());
        thread::spawn(move || {
            cs.execute(move |tx| {
                tx.write(&v)?[[]] += 1;
                inside.send(()).unwrap();
                wait_done.recv().unwrap(); // until the writer is done
                Ok::<_, Error>(())
            })
            .unwrap();
        })
    };
    wait_inside.recv().unwrap();
    let plain = queued.map(|write| {
        let v = v.clone();
        thread::spawn(move || write(&v))
    });
    writes_get_their_versions_back(&w, "the execution");
    done.send(()).unwrap();
    executing.join().unwrap();
    if let Some(plain) = plain {
        plain.join().unwrap();
    }
    assert_eq!(v.read()[[]], if queued.is_some() { 11 } else { 1 });
}

#[test]
fn an_execution_in_its_closure_holds_back_no_other_version() {
    run_model(
        "an_execution_in_its_closure_holds_back_no_other_version",
        || nothing_held_back_beside_an_execution(None),
    );
}

/// A combined write (`assign_add`: its pass takes the ticket, `write_queued`).
#[test]
fn a_combined_write_queued_behind_an_execution_holds_back_no_other_version() {
    run_model(
        "a_combined_write_queued_behind_an_execution_holds_back_no_other_version",
        || {
            nothing_held_back_beside_an_execution(Some(|v| {
                v.assign_add(&value(10)).unwrap();
            }))
        },
    );
}

/// A compare-and-swap write (`update`: under loom every such write is counted, and its
/// queued branch takes the ticket, `write_counted`).
#[test]
fn a_cas_write_queued_behind_an_execution_holds_back_no_other_version() {
    run_model(
        "a_cas_write_queued_behind_an_execution_holds_back_no_other_version",
        || {
            nothing_held_back_beside_an_execution(Some(|v| {
                v.update(|x| x + 10).unwrap();
            }))
        },
    );
}
