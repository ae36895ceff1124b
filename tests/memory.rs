//! Promise 7: memory stays bounded under endless writes.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use mvtensor::Variable;
use ndarray::{ArrayD, IxDyn};

use crate::common;
use common::quiesce;

const MIB: usize = 1 << 20;

/// Resident set size of this process, from /proc (Linux); `None` elsewhere, and under miri
/// (whose isolation forbids opening files).
fn rss_bytes() -> Option<usize> {
    if cfg!(miri) {
        return None;
    }
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// The writer's count of writes made, and the most made during one reader's call.
#[derive(Default)]
struct Writes {
    made: AtomicU64,
    longest: AtomicU64,
}

impl Writes {
    /// Runs a reader's call, counting the writes made meanwhile (an upper bound on those
    /// made while it was pinned).
    fn during<T>(&self, call: impl FnOnce() -> T) -> T {
        // Acquire: pairs with the writer's Release increments, so that the count read after
        // the call is at least the one read before.
        let before = self.made.load(Ordering::Acquire);
        let out = call();
        let during = self.made.load(Ordering::Acquire) - before;
        // Relaxed: read after the threads are joined.
        self.longest.fetch_max(during, Ordering::Relaxed);
        out
    }
}

/// 100,000 writes to a 1 MiB variable while a pinned reader takes short reads, an owned
/// reader sums whole snapshots and another holds each snapshot across a hundred writes (as a
/// checkpointer would): live versions stay within a small constant, and so does RSS.
///
/// Long reads use `read_owned()`, as the docs ask: a *pinned* reader that is descheduled in
/// the middle of a long read holds back the reclamation of every version retired meanwhile
/// (seen here: 60+ live versions with two pinned summing readers on two cores).
#[test]
fn hundred_thousand_writes_keep_memory_bounded() {
    alone!();
    // Under a sanitizer (bin/sanitizers.sh sets MVTENSOR_SANITIZER) a tenth of the writes:
    // 100,000 took ASan ~2 minutes of CI, and what it checks there is every access, not
    // how long the bound holds.
    let (len, writes_total) = if cfg!(miri) {
        (16, 100)
    } else if std::env::var_os("MVTENSOR_SANITIZER").is_some() {
        (MIB / 4, 10_000)
    } else {
        (MIB / 4, 100_000)
    };
    let v = Variable::new(ArrayD::<f32>::zeros(IxDyn(&[len])));
    let delta = ArrayD::<f32>::ones(IxDyn(&[len]));
    let rss_start = rss_bytes();
    let done = AtomicBool::new(false);
    let max_live = AtomicUsize::new(0);
    // A reader pins inside each call (`read`, `read_owned`, `version`), and one that loses
    // its core while pinned holds back every version retired until it runs again, for as
    // long as the scheduler chooses (a whole timeslice, longer on a loaded machine). So each
    // reader counts the writes made during its calls, and the bound allows for the longest.
    let writes = Writes::default();

    std::thread::scope(|s| {
        // A short reader: pins, looks at one element, unpins.
        let short = s.spawn(|| {
            while !done.load(Ordering::Acquire) {
                let snap = writes.during(|| v.read());
                assert_eq!(snap[[len - 1]], snap.version() as f32);
            }
        });
        // A long reader: sums whole snapshots without pinning.
        let long = s.spawn(|| {
            while !done.load(Ordering::Acquire) {
                let snap = writes.during(|| v.read_owned());
                let version = snap.version() as f32;
                assert!(snap.iter().all(|&x| x == version), "torn or stale snapshot");
            }
        });
        // A long reader: holds an owned snapshot across many writes, as a checkpointer would.
        let holder = s.spawn(|| {
            while !done.load(Ordering::Acquire) {
                let held = writes.during(|| v.read_owned());
                let version = held.version();
                while !done.load(Ordering::Acquire) && writes.during(|| v.version()) < version + 100
                {
                    std::thread::yield_now(); // polling, not synchronisation: `done` ends it
                }
                assert!(
                    held.iter().all(|&x| x == version as f32),
                    "owned snapshot changed"
                );
            }
        });
        for i in 0..writes_total {
            v.assign_add(&delta).unwrap();
            writes.made.fetch_add(1, Ordering::Release);
            if i % 64 == 0 {
                max_live.fetch_max(v.stats().live_versions, Ordering::Relaxed);
            }
        }
        done.store(true, Ordering::Release);
        // Joined, not left to the scope: see `common::quiesce`.
        for reader in [short, long, holder] {
            reader.join().unwrap();
        }
    });

    // Quiescent: nobody is pinned, so a few collections return everything retired to the
    // variable's pool, and the next write trims the pool back to two spares.
    quiesce();
    v.assign_add(&delta).unwrap();
    quiesce();
    let stats = v.stats();
    let rss_end = rss_bytes();
    assert_eq!(v.version(), writes_total as u64 + 1);
    assert_eq!(v.read()[[0]], writes_total as f32 + 1.0);
    let max_live = max_live.load(Ordering::Relaxed);
    let longest = writes.longest.load(Ordering::Relaxed) as usize;
    eprintln!(
        "{writes_total} writes of {} KiB: at most {max_live} live versions, {} at the end; \
         RSS {:?} MiB -> {:?} MiB; the longest reader's call spanned {longest} writes",
        len * 4 / 1024,
        stats.live_versions,
        rss_start.map(|b| b / MIB),
        rss_end.map(|b| b / MIB),
    );
    // 100,000 writes churn 100 GB. What stays is the current version, one per owned reader,
    // two spares in the pool, and what the epoch has not reclaimed yet: the versions retired
    // while some reader sat pinned (at most the writes made during its longest call), and
    // those of the few writes before a grace period is seen over. A constant and the
    // scheduler's longest stall, never a function of the number of writes (seen on 2 cores:
    // up to ~60 live versions, with reader calls that spanned 90-420 writes: most of a
    // call's stall is outside its pin).
    assert!(
        max_live <= (longest + 32).max(128),
        "{max_live} live versions; the longest reader's call spanned {longest} writes"
    );
    // Quiescent, after a write: the current version and two spares (one the version it replaced). (Under
    // miri the tensor is tiny, and small versions are pooled by the batch: no exact count.)
    assert!(
        cfg!(miri) || stats.live_versions <= 3,
        "{} live once quiescent",
        stats.live_versions
    );
    // Freed buffers the allocator keeps resident are bounded by the most that were live.
    if let (Some(start), Some(end)) = (rss_start, rss_end) {
        assert!(
            end <= start + (max_live + 32).max(160) * MIB,
            "RSS grew from {start} to {end} bytes"
        );
    }
}
