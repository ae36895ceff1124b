//! Shared training metrics (a running loss, examples seen, a step counter) that every thread
//! updates on every step, without all of them writing one cache line.
//!
//! A metric is split into shards, each a `std::sync::Mutex` on a cache line of its own; a thread always records
//! into the same shard (threads are spread over the shards in the order they first record),
//! so threads on different cores rarely touch the same line. A read locks every shard in
//! order and adds them up: it sees every record that finished before it began and none
//! that began after it ended, and a [`Mean`]'s count and sum come from the same moment. Reads
//! are for logging, not for the hot path: they wait for a record in progress (a few
//! nanoseconds), and records wait for a read in progress.
//!
//! ```
//! use mvtensor::metrics::Mean;
//!
//! let loss = Mean::new();
//! std::thread::scope(|s| {
//!     for t in 0..4 {
//!         let loss = &loss;
//!         s.spawn(move || (0..100).for_each(|i| loss.record((t * 100 + i) as f64)));
//!     }
//! });
//! let now = loss.read();
//! assert_eq!(now.count, 400);
//! assert_eq!(now.mean(), Some(199.5));
//! ```

use std::cell::Cell;

use std::sync::{Mutex, MutexGuard};

use crate::sync::{lock_std, next_thread_number};

/// Shards per metric: enough that the threads of a big machine rarely share one.
const SHARDS: usize = 16;

/// One shard, alone on its cache lines (128 bytes: two lines, for adjacent-line prefetch).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard<T>(Mutex<T>);

impl<T> Shard<T> {
    /// The shard's lock. A panic while it was held cannot leave a half-made record (a
    /// record is two plain adds), so a poisoned lock is used as it is.
    fn lock(&self) -> MutexGuard<'_, T> {
        lock_std(&self.0)
    }
}

/// The shard this thread records into, drawn once per thread: consecutive threads get
/// consecutive shards. (Not from the variables' ids, which variables created between two
/// threads' first records would skip: two trainers could share a shard.)
fn my_shard() -> usize {
    thread_local! {
        static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    SHARD.with(|s| {
        if s.get() == usize::MAX {
            s.set((next_thread_number() % SHARDS as u64) as usize);
        }
        s.get()
    })
}

/// The sum of many threads' contributions, and how many there were: a count of examples, a
/// total of something. `add(1)` from every thread is a counter.
#[derive(Debug)]
pub struct Sum {
    shards: [Shard<(f64, u64)>; SHARDS],
}

/// A [`Mean`]'s or [`Sum`]'s value at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Reading {
    /// The total of the values recorded.
    pub sum: f64,
    /// How many values were recorded.
    pub count: u64,
}

impl Reading {
    /// `sum / count`, or `None` before the first record.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }
}

impl Default for Sum {
    fn default() -> Self {
        Self::new()
    }
}

impl Sum {
    /// Zero.
    pub fn new() -> Self {
        Self {
            shards: std::array::from_fn(|_| Shard::default()),
        }
    }

    /// Adds `value` (and one to the count).
    pub fn add(&self, value: f64) {
        let mut shard = self.shards[my_shard()].lock();
        shard.0 += value;
        shard.1 += 1;
    }

    /// The total and count of every add so far, at one moment (see the module docs).
    pub fn read(&self) -> Reading {
        let guards: Vec<_> = self.shards.iter().map(Shard::lock).collect();
        guards.iter().fold(Reading::default(), |r, g| Reading {
            sum: r.sum + g.0,
            count: r.count + g.1,
        })
    }

    /// Reads and resets to zero at the same moment (a logging interval's total).
    pub fn take(&self) -> Reading {
        let mut guards: Vec<_> = self.shards.iter().map(Shard::lock).collect();
        guards.iter_mut().fold(Reading::default(), |r, g| {
            let (sum, count) = std::mem::take(&mut **g);
            Reading {
                sum: r.sum + sum,
                count: r.count + count,
            }
        })
    }
}

/// A running mean (a training loss): every thread records its values, a reader gets the mean
/// of all of them, count and sum from one moment.
#[derive(Debug, Default)]
pub struct Mean {
    sum: Sum,
}

impl Mean {
    /// No values yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one value.
    pub fn record(&self, value: f64) {
        self.sum.add(value);
    }

    /// The sum and count so far ([`Reading::mean`] is their ratio).
    pub fn read(&self) -> Reading {
        self.sum.read()
    }

    /// Reads and resets at the same moment: the mean over the last logging interval.
    pub fn take(&self) -> Reading {
        self.sum.take()
    }
}

#[cfg(all(test, not(mvtensor_loom)))]
mod tests {
    use super::*;

    /// Trainer threads started one after another record into different shards, however many
    /// variables each creates before its first record (each draws an id: drawn here, as
    /// creating one would, without pinning crossbeam-epoch in a short-lived thread, which
    /// miri's Stacked Borrows rejects in crossbeam's own code).
    #[test]
    fn consecutive_threads_record_into_different_shards() {
        let shards: Vec<usize> = (0..SHARDS)
            .map(|_| {
                std::thread::spawn(|| {
                    let _model = crate::sync::next_id();
                    my_shard()
                })
                .join()
                .unwrap()
            })
            .collect();
        let mut distinct = shards.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), SHARDS, "shards drawn: {shards:?}");
    }
}
