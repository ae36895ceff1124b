//! Store snapshots are consistent cuts: every variable as of one point in the commit order.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use mvtensor::{CriticalSection, DType, Error, Store};
use ndarray::{arr0, ArrayD, IxDyn};

use crate::common;
use common::{scaled, thread_cpu_time, Over};

/// Two accounts whose sum every execution preserves; 4 writer threads transfer between them
/// while readers take 100,000 snapshots. The sum holds in every one.
#[test]
fn transfers_preserve_the_sum_in_every_snapshot() {
    alone!();
    let store = Store::new();
    let a = store.variable("a", arr0(1000i64).into_dyn()).unwrap();
    let b = store.variable("b", arr0(0i64).into_dyn()).unwrap();
    let bank = CriticalSection::builder()
        .resource(&a)
        .resource(&b)
        .build()
        .unwrap();
    let snapshots_wanted = scaled(20, 100_000);
    let transfers_each = scaled(5, 250);
    let taken = AtomicUsize::new(0);
    let writers_done = AtomicBool::new(false);
    let (a, b, bank) = (&a, &b, &bank);

    let transferred = AtomicUsize::new(0);
    let transfer = |t: i64| {
        let transferred = &transferred;
        move |i: usize| {
            let amount = arr0((i as i64 + t) % 7 - 3).into_dyn();
            bank.execute(|tx| {
                tx.assign_sub(a, &amount)?;
                tx.assign_add(b, &amount)
            })
            .unwrap();
            transferred.fetch_add(1, Ordering::SeqCst);
        }
    };
    let writers: Vec<_> = (0..4).map(transfer).collect();
    let writers: Vec<&(dyn Fn(usize) + Sync)> = writers.iter().map(|w| w as _).collect();

    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let mut last = 0;
                // Until both the snapshots are taken and the transfers are done, so that
                // snapshots race transfers all along.
                while taken.fetch_add(1, Ordering::Relaxed) < snapshots_wanted
                    || !writers_done.load(Ordering::Acquire)
                {
                    let snap = store.snapshot();
                    let sum = snap.get::<i64, IxDyn>("a").unwrap()[[]]
                        + snap.get::<i64, IxDyn>("b").unwrap()[[]];
                    assert_eq!(sum, 1000, "a snapshot saw part of a transfer");
                    assert!(snap.timestamp() >= last, "snapshots move forward");
                    last = snap.timestamp();
                }
            });
        }
        // One more reader, in lockstep with the transfers: it sees them in progress. The
        // transfers are over when it returns, or fails (then the readers above stop too).
        let _over = Over(&writers_done);
        let mut mid_way = 0;
        common::while_looking(&writers, transfers_each, || {
            let done = transferred.load(Ordering::SeqCst);
            let snap = store.snapshot();
            let sum =
                snap.get::<i64, IxDyn>("a").unwrap()[[]] + snap.get::<i64, IxDyn>("b").unwrap()[[]];
            assert_eq!(sum, 1000, "a snapshot saw part of a transfer");
            mid_way += usize::from(done > 0 && done < 4 * transfers_each);
        });
        assert!(mid_way > 0, "no snapshot while the transfers ran");
    });
    assert_eq!(a.read()[[]] + b.read()[[]], 1000);
    assert!(taken.load(Ordering::Relaxed) >= snapshots_wanted);
    // One version per batch of transfers, and both variables commit every batch together.
    assert!(a.version() >= 1 && a.version() <= 4 * transfers_each as u64);
    assert_eq!(a.version(), b.version());
    eprintln!(
        "{} snapshots raced {} transfers in {} batches",
        taken.load(Ordering::Relaxed),
        4 * transfers_each,
        a.version()
    );
}

#[test]
fn a_snapshot_is_frozen_and_lists_every_variable() {
    alone!();
    let store = Store::new();
    let w = store
        .variable("w", ArrayD::<f32>::zeros(IxDyn(&[3])))
        .unwrap();
    let step = store.variable("step", arr0(0i64).into_dyn()).unwrap();
    let snap = store.snapshot();
    w.assign_add(&ArrayD::ones(IxDyn(&[3]))).unwrap();
    step.assign(arr0(9).into_dyn()).unwrap();

    assert_eq!(snap.get::<f32, IxDyn>("w").unwrap().sum(), 0.0);
    assert_eq!(snap.get::<i64, IxDyn>("step").unwrap()[[]], 0);
    let listed: Vec<_> = snap
        .iter()
        .map(|e| {
            (
                e.name().to_owned(),
                e.dtype(),
                e.shape().to_vec(),
                e.version(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        vec![
            ("step".to_owned(), DType::I64, vec![], 0),
            ("w".to_owned(), DType::F32, vec![3], 0),
        ]
    );
    let later = store.snapshot();
    assert!(later.timestamp() > snap.timestamp());
    assert_eq!(later.get::<f32, IxDyn>("w").unwrap().sum(), 3.0);
    assert_eq!(later.get::<f32, IxDyn>("w").unwrap().version(), 1);
}

#[test]
fn variables_created_after_a_snapshot_are_not_in_it() {
    alone!();
    let store = Store::new();
    store.variable("old", arr0(1.0f64).into_dyn()).unwrap();
    let snap = store.snapshot();
    store.variable("new", arr0(2.0f64).into_dyn()).unwrap();
    assert_eq!(snap.len(), 1);
    assert_eq!(
        snap.get::<f64, IxDyn>("new").unwrap_err(),
        Error::NotFound { name: "new".into() }
    );
    assert_eq!(store.snapshot().len(), 2);
}

#[test]
fn snapshot_lookups_are_typed() {
    alone!();
    let store = Store::new();
    store.variable("w", arr0(1.0f32).into_dyn()).unwrap();
    let snap = store.snapshot();
    assert_eq!(
        snap.get::<i32, IxDyn>("w").unwrap_err(),
        Error::DTypeMismatch {
            variable: "w".into(),
            expected: DType::I32,
            found: DType::F32
        }
    );
}

/// A snapshot's work is bounded by the number of variables, whatever writers do: 1,000
/// variables, one writer committing to the last one as fast as it can, and every snapshot
/// costs about what a quiet one does. (A snapshot that started over whenever the variable
/// it had not reached yet committed after its clock read would starve here.) Measured in
/// this thread's CPU time, so that waiting for a core
/// does not count, and judged by the 98th percentile of 200: a starving snapshot restarts
/// again and again, while one interrupt or page fault alone must not fail the test.
#[test]
#[cfg_attr(miri, ignore = "measures CPU time, which miri does not model")]
fn a_steady_writer_does_not_starve_snapshots() {
    alone!();
    let store = Store::new();
    let vars: Vec<_> = (0..1000)
        .map(|i| {
            store
                .variable(&format!("v{i:04}"), ArrayD::<f32>::zeros(IxDyn(&[4])))
                .unwrap()
        })
        .collect();
    let last = vars.last().unwrap();
    let timed_snapshot = || {
        let start = thread_cpu_time();
        let snap = store.snapshot();
        (thread_cpu_time() - start, snap)
    };
    let mut quiet: Vec<_> = (0..21).map(|_| timed_snapshot().0).collect();
    quiet.sort();
    let quiet = quiet[10];

    let done = AtomicBool::new(false);
    let mut took = Vec::with_capacity(200);
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let ones = ArrayD::<f32>::ones(IxDyn(&[4]));
            let mut writes = 0u64;
            while !done.load(Ordering::Acquire) {
                last.assign_add(&ones).unwrap();
                writes += 1;
            }
            writes
        });
        let over = Over(&done);
        // Timed only once the writer writes: a writer not yet started would let every
        // snapshot pass untested.
        while last.version() == 0 && !writer.is_finished() {
            std::thread::yield_now(); // polling, not synchronisation: its write ends it
        }
        for _ in 0..200 {
            let (cpu, snap) = timed_snapshot();
            took.push(cpu);
            // The last variable as of the snapshot: its value is its version number.
            let seen = snap.get::<f32, IxDyn>("v0999").unwrap();
            assert_eq!(seen[[0]], seen.version() as f32);
            assert_eq!(snap.len(), 1000);
        }
        drop(over);
        let writes = writer.join().unwrap();
        took.sort();
        let (p98, worst) = (took[195], took[199]);
        eprintln!("quiet snapshot {quiet:?}; under {writes} writes p98 {p98:?}, worst {worst:?}");
        assert!(
            p98 <= quiet * 10,
            "snapshots took {p98:?} of CPU (98th percentile) under one writer, a quiet one {quiet:?}"
        );
    });
}
