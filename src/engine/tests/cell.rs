//! A tiny versioned cell built on the engine's layer, for its unit tests: every write builds
//! the next value out of place in a spare of the cell's home (a reused buffer) and publishes it
//! on the head word. Each value counts itself, so a test can bound the live objects.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::domain::Domain;
use super::object::Owned;
use super::retire::Home;
use super::word::Read;

/// A value: its version number and elements.
pub(super) struct Data {
    pub(super) number: u64,
    pub(super) values: Vec<f32>,
    _live: Live,
}

/// Counts the cell's values alive (allocated and not yet dropped).
struct Live(Arc<Counts>);

#[derive(Default)]
pub(super) struct Counts {
    /// Values alive now.
    pub(super) live: AtomicUsize,
    /// Values ever made.
    pub(super) made: AtomicUsize,
}

impl Live {
    fn new(counts: &Arc<Counts>) -> Self {
        // Relaxed: statistics, read after the threads are joined.
        counts.live.fetch_add(1, Ordering::Relaxed);
        counts.made.fetch_add(1, Ordering::Relaxed);
        Self(Arc::clone(counts))
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        // Relaxed: as above.
        self.0.live.fetch_sub(1, Ordering::Relaxed);
    }
}

pub(super) struct TestCell {
    pub(super) home: Home<Data>,
    pub(super) counts: Arc<Counts>,
    len: usize,
}

impl TestCell {
    pub(super) fn new(domain: Arc<Domain>, values: Vec<f32>) -> Self {
        let counts = Arc::new(Counts::default());
        let len = values.len();
        let first = Data {
            number: 0,
            values,
            _live: Live::new(&counts),
        };
        Self {
            home: Home::new(domain, first).expect("an addressable allocation"),
            counts,
            len,
        }
    }

    pub(super) fn zeros(len: usize) -> Self {
        Self::new(Domain::standalone(), vec![0.0; len])
    }

    #[inline]
    pub(super) fn read(&self) -> Read<'_, Data> {
        self.home.read()
    }

    /// Adds `delta` to every element; returns the new version number.
    pub(super) fn assign_add(&self, delta: &[f32]) -> u64 {
        self.write(|old, new| {
            for ((out, a), d) in new.values.iter_mut().zip(&old.values).zip(delta) {
                *out = a + d;
            }
        })
        .1
    }

    /// Adds `d` to element 0; returns its value before.
    pub(super) fn fetch_add(&self, d: f32) -> f32 {
        self.write(|old, new| {
            new.values.copy_from_slice(&old.values);
            new.values[0] = old.values[0] + d;
        })
        .0
    }

    /// Builds the next value with `f(old, new)` until it publishes; returns element 0 of the
    /// value it replaced and the new version number.
    fn write(&self, f: impl Fn(&Data, &mut Data)) -> (f32, u64) {
        let mut new = self.spare();
        loop {
            let base = self.home.base();
            f(&base, &mut new);
            new.number = base.number + 1;
            let done = (base.values[0], new.number);
            match self.home.publish(base, new) {
                Ok(()) => return done,
                Err(back) => new = back,
            }
        }
    }

    /// A value to build the next one in: a spare, or a new one.
    pub(super) fn spare(&self) -> Owned<Data> {
        self.home
            .spare(|| Data {
                number: 0,
                values: vec![0.0; self.len],
                _live: Live::new(&self.counts),
            })
            .expect("an addressable allocation")
    }

    /// Values alive now. Relaxed, here and below: a statistic, read after the threads that
    /// changed it were joined or by the one thread that did.
    pub(super) fn live(&self) -> usize {
        self.counts.live.load(Ordering::Relaxed)
    }

    /// Values ever made.
    pub(super) fn made(&self) -> usize {
        self.counts.made.load(Ordering::Relaxed)
    }
}
