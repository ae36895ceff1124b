//! Compare-and-swap writers (`fetch_add`, `assign`, `update`: the writes that are not
//! combined) from more threads than cores keep their variable's versions bounded. Each is
//! pinned for nearly all of its write, so the ones the OS deschedules hold the epoch back;
//! without the wait for room (`src/variable/counted.rs`), the running writers would
//! allocate millions of versions in a few seconds.

use std::sync::atomic::{AtomicUsize, Ordering};

use mvtensor::{CriticalSection, Error, Variable};
use ndarray::{ArrayD, IxDyn};

const THREADS: usize = 4;

/// The room a variable of `elements` elements of `bytes` each has before its writers wait:
/// 4 MiB of versions, each counted as its elements and 256 bytes (`limbo::room`; larger for
/// a pool with many spares, which these are not).
fn room(elements: usize, bytes: usize) -> usize {
    (4 << 20) / (elements * bytes + 256)
}

/// Runs `write` `per_thread` times on each of [`THREADS`] threads and returns the most live
/// versions any of them saw after a write.
fn peak_live<A: mvtensor::Element, D: ndarray::Dimension>(
    v: &Variable<A, D>,
    per_thread: usize,
    write: impl Fn(&Variable<A, D>) + Sync,
) -> usize {
    let peak = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for i in 0..per_thread {
                    write(v);
                    if i % 64 == 0 {
                        peak.fetch_max(v.stats().live_versions, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    peak.into_inner()
}

#[test]
fn counter_increments_from_more_threads_than_cores_stay_within_the_room() {
    alone!();
    let per_thread = if cfg!(miri) { 100 } else { 250_000 };
    let counter = Variable::scalar(0i64);
    let peak = peak_live(&counter, per_thread, |c| {
        c.fetch_add(1).unwrap();
    });
    eprintln!("counter: peak {peak} live versions");
    assert_eq!(
        counter.get(),
        (THREADS * per_thread) as i64,
        "lost increments"
    );
    let room = room(1, 8);
    assert!(
        peak <= 2 * room,
        "{peak} live versions of a counter, room {room}"
    );
}

#[test]
fn whole_value_writes_from_more_threads_than_cores_stay_within_the_room() {
    alone!();
    let (len, per_thread) = if cfg!(miri) { (16, 50) } else { (1024, 50_000) };
    let w = Variable::new(ArrayD::<f32>::zeros(IxDyn(&[len])));
    let value = ArrayD::<f32>::ones(IxDyn(&[len]));
    let peak = peak_live(&w, per_thread, |w| {
        w.assign(value.clone()).unwrap();
    });
    eprintln!("1K f32: peak {peak} live versions");
    assert_eq!(w.read()[[0]], 1.0);
    let room = room(len, 4);
    assert!(
        peak <= 2 * room,
        "{peak} live versions of 1K f32, room {room}"
    );
}

/// An execution pins to load its variable and again to commit, as a compare-and-swap writer
/// does: four threads each running its own section on its own counter kept 20-100 thousand
/// versions of each (when executions were pinned for all of their body) before executions
/// waited for room too.
#[test]
fn executions_from_more_threads_than_cores_stay_within_the_room() {
    alone!();
    let per_thread = if cfg!(miri) { 50 } else { 100_000 };
    let counters: Vec<_> = (0..THREADS).map(|_| Variable::scalar(0i64)).collect();
    let peak = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for counter in &counters {
            let peak = &peak;
            s.spawn(move || {
                let section = CriticalSection::builder()
                    .resource(counter)
                    .build()
                    .unwrap();
                for i in 0..per_thread {
                    section
                        .execute(|tx| {
                            tx.write(counter)?[[]] += 1;
                            Ok::<_, Error>(())
                        })
                        .unwrap();
                    if i % 64 == 0 {
                        peak.fetch_max(counter.stats().live_versions, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let peak = peak.into_inner();
    eprintln!("executions: peak {peak} live versions");
    assert!(
        counters.iter().all(|c| c.get() == per_thread as i64),
        "lost increments"
    );
    let room = room(1, 8);
    assert!(
        peak <= 2 * room,
        "{peak} live versions of a counter, room {room}"
    );
}
