//! The horizon: store snapshots in progress, as the writers see them.
//!
//! A store snapshot at clock value `S` needs, for every variable, the newest version committed
//! at or before `S`, however many commits that variable takes while the snapshot walks the
//! store. So while a snapshot is in progress, writers keep that version linked (see
//! [`Version::release_prev`](crate::version::Version::release_prev)) instead of unlinking it
//! the moment it is replaced; once no snapshot is in progress they unlink as before.
//!
//! A snapshot registers here *before* it ticks the clock, and leaves once it has captured
//! every variable. A writer reads the horizon *after* its commit has read the clock. So if a
//! writer does not see a snapshot, its commit read the clock before that snapshot's tick (the
//! tick releases the registration to every clock read that comes after it), and its new
//! version has a timestamp `<= S`: the snapshot needs that version or a newer one, never an
//! older one, and unlinking older ones is safe.

use crate::sync::{AtomicU64, AtomicUsize, Ordering};

/// Snapshots that can announce their clock value; more at once are counted as `overflow`.
const SLOTS: usize = if cfg!(mvtensor_loom) { 2 } else { 64 };
/// A free slot.
const FREE: u64 = 0;
/// A slot whose snapshot has registered but not read the clock yet.
const STARTING: u64 = u64::MAX;

struct Horizon {
    /// Snapshots registered and not yet done: writers skip the slots while it is 0.
    in_progress: AtomicUsize,
    /// Registered snapshots that found no free slot: their clock value is unknown to writers.
    overflow: AtomicUsize,
    /// `FREE`, `STARTING`, or `S + 1` for a snapshot at clock value `S`.
    slots: [AtomicU64; SLOTS],
}

#[cfg(not(mvtensor_loom))]
fn horizon() -> &'static Horizon {
    static HORIZON: Horizon = Horizon {
        in_progress: AtomicUsize::new(0),
        overflow: AtomicUsize::new(0),
        slots: [const { AtomicU64::new(FREE) }; SLOTS],
    };
    &HORIZON
}

#[cfg(mvtensor_loom)]
fn horizon() -> &'static Horizon {
    loom::lazy_static! {
        static ref HORIZON: Horizon = Horizon {
            in_progress: AtomicUsize::new(0),
            overflow: AtomicUsize::new(0),
            slots: std::array::from_fn(|_| AtomicU64::new(FREE)),
        };
    }
    &HORIZON
}

/// A snapshot's place in the horizon, from before its clock tick until it is dropped.
pub(crate) struct Registration {
    slot: Option<usize>,
}

impl Registration {
    /// Registers a snapshot that is about to tick the clock. Never waits: with every slot
    /// taken it registers as "clock value unknown", and writers then keep every version they
    /// replace linked until it is done.
    pub(crate) fn begin() -> Self {
        let h = horizon();
        // Relaxed: a free slot only needs to be claimed once; the claim (and the counts below)
        // reach writers through the clock tick that follows, which releases them.
        let slot = (0..SLOTS).find(|&i| {
            h.slots[i]
                .compare_exchange(FREE, STARTING, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        });
        if slot.is_none() {
            // Relaxed: released by the tick, as above.
            h.overflow.fetch_add(1, Ordering::Relaxed);
        }
        // Relaxed: released by the tick, as above.
        h.in_progress.fetch_add(1, Ordering::Relaxed);
        Self { slot }
    }

    /// Announces the clock value the snapshot ticked to.
    pub(crate) fn at(&self, snapshot: u64) {
        if let Some(i) = self.slot {
            // Relaxed: a writer that still reads `STARTING` keeps more than it must, never less.
            horizon().slots[i].store(snapshot + 1, Ordering::Relaxed);
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let h = horizon();
        // Release (all three): the snapshot's walk over the versions happens-before a writer
        // that sees it gone unlinks them.
        match self.slot {
            Some(i) => h.slots[i].store(FREE, Ordering::Release),
            None => {
                h.overflow.fetch_sub(1, Ordering::Release);
            }
        }
        h.in_progress.fetch_sub(1, Ordering::Release);
    }
}

/// What the snapshots in progress need, as a writer sees them after its commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Oldest {
    /// No snapshot in progress: a committed version's predecessors may all be unlinked.
    Nobody,
    /// Some snapshot's clock value is not known yet: keep every boundary version.
    Unknown,
    /// The smallest clock value of a snapshot in progress.
    At(u64),
}

/// The oldest snapshot in progress. One load of a line that only snapshots write, unless a
/// snapshot is in progress.
pub(crate) fn oldest() -> Oldest {
    let h = horizon();
    // Acquire: pairs with the decrements' Release (see `Registration::drop`).
    if h.in_progress.load(Ordering::Acquire) == 0 {
        return Oldest::Nobody;
    }
    // Acquire: as above.
    if h.overflow.load(Ordering::Acquire) > 0 {
        return Oldest::Unknown;
    }
    let mut oldest = Oldest::Nobody;
    for slot in &h.slots {
        // Acquire: a slot seen FREE must order its snapshot's walk before our unlinking.
        match slot.load(Ordering::Acquire) {
            FREE => {}
            STARTING => return Oldest::Unknown,
            s => {
                let s = s - 1;
                oldest = match oldest {
                    Oldest::At(m) if m <= s => Oldest::At(m),
                    _ => Oldest::At(s),
                };
            }
        }
    }
    oldest
}

#[cfg(all(test, mvtensor_loom))]
#[path = "tests/loom_horizon.rs"]
mod loom_horizon;
