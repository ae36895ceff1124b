//! Component model of a variable's pool (`Home`): versions handed back from one thread
//! while two others take, through both lists (`free` and the `cache` a taker parks the rest
//! of its list on) and the push of a displaced list.
//!
//! Each version has a plain cell (a loom `UnsafeCell`) standing for its contents: whoever
//! has the version (its releaser before the hand-back, its taker after the take) writes it.
//! So a version handed to two takers at once, or a take not ordered after the releaser's
//! last use, is a reported causality violation. What a caller is promised when a call
//! returns: `take` returns a version nobody else has, with everything its last user did
//! visible; every version handed back is taken exactly once, and none is lost.

use std::sync::Arc;

use loom::cell::UnsafeCell;
use loom::thread;
use ndarray::arr0;

use super::Home;
use crate::version::{Building, Version};

use crate::loom_model::run_model;

/// A version we have (one count). Dropping it releases the count (back to the pool), except
/// while unwinding from a failed check: loom runs no atomic operation then, so it is leaked.
struct Had(Option<Building<i64>>);

impl Drop for Had {
    fn drop(&mut self) {
        if std::thread::panicking() {
            std::mem::forget(self.0.take());
        }
    }
}

impl std::ops::Deref for Had {
    type Target = Building<i64>;
    fn deref(&self) -> &Building<i64> {
        self.0.as_ref().expect("had until dropped")
    }
}

/// Versions of one pool, and a cell standing for each one's contents.
struct Versions {
    home: Arc<Home<i64>>,
    /// The versions' addresses, as `usize` (the model's threads pass them around).
    addresses: Vec<usize>,
    contents: Vec<UnsafeCell<u64>>,
}

// SAFETY: a version's cell is touched only by whoever has the version; that the pool
// gives it to one at a time is what the model checks.
unsafe impl Sync for Versions {}

impl Versions {
    /// `n` new versions, each owned by its `Building` (one count).
    fn new(n: usize) -> (Arc<Self>, Vec<Had>) {
        let home = Arc::new(Home::default());
        let built: Vec<_> = (0..n)
            .map(|i| Had(Some(Version::allocate(arr0(i as i64).into_dyn(), &home))))
            .collect();
        let versions = Self {
            home,
            addresses: built.iter().map(|v| address(v)).collect(),
            contents: (0..n).map(|_| UnsafeCell::new(0)).collect(),
        };
        (Arc::new(versions), built)
    }

    fn index(&self, version: &Building<i64>) -> usize {
        let address = address(version);
        self.addresses
            .iter()
            .position(|&a| a == address)
            .expect("a version of this pool")
    }

    /// Uses a version we have: writes its cell.
    fn use_it(&self, version: &Building<i64>) {
        self.contents[self.index(version)].with_mut(|uses| {
            // SAFETY: only the version's holder touches its cell (what the model checks).
            unsafe { *uses += 1 }
        });
    }

    /// Uses a version, then releases its last count: back to the pool.
    fn give_back(&self, version: Had) {
        self.use_it(&version);
        drop(version);
    }

    /// The pool's versions once every thread is done: each must be found exactly once,
    /// taken (`found`) or still pooled. Then closes the pool.
    fn check_all_found(&self, mut found: Vec<Had>) {
        // At most one more than there are versions: a broken pool may hand them out forever.
        while found.len() <= self.addresses.len() {
            let Some(version) = self.take() else { break };
            found.push(version);
        }
        let mut indices: Vec<_> = found.iter().map(|v| self.index(v)).collect();
        indices.sort_unstable();
        let all: Vec<_> = (0..self.addresses.len()).collect();
        assert_eq!(indices, all, "each version once: none lost, none twice");
        drop(found);
        self.home.close();
    }

    /// Takes a version, if the pool has one, and uses it.
    fn take(&self) -> Option<Had> {
        let version = Had(Some(self.home.take()?));
        self.use_it(&version);
        Some(version)
    }
}

fn address(version: &Building<i64>) -> usize {
    std::ptr::from_ref::<Version<i64>>(version) as usize
}

/// Two versions pooled at the start, two handed back one at a time by one thread while two
/// others take (one takes three times: a list it parks and another taker displaces comes
/// back to it through `free`); then every version is found exactly once, taken or still
/// pooled.
#[test]
fn versions_handed_back_are_taken_once_each_and_seen_whole() {
    run_model("pool: one giver, two takers", || {
        let (versions, mut built) = Versions::new(4);
        let later: Vec<_> = built.split_off(2);
        for version in built {
            versions.give_back(version);
        }
        let giver = {
            let versions = Arc::clone(&versions);
            // The versions are the giver's until it hands them back.
            thread::spawn(move || {
                for version in later {
                    versions.give_back(version);
                }
            })
        };
        let taker = {
            let versions = Arc::clone(&versions);
            thread::spawn(move || (0..3).filter_map(|_| versions.take()).collect::<Vec<_>>())
        };
        let mine = versions.take();
        // Two versions were pooled before any take: the first take finds a list.
        let theirs = taker.join().unwrap();
        assert!(
            mine.is_some() || !theirs.is_empty(),
            "every take found the pool empty"
        );
        giver.join().unwrap();
        versions.check_all_found(mine.into_iter().chain(theirs).collect());
    });
}

/// A trim that appends the versions handed back to the parked list and parks the whole,
/// while a taker holding the rest of an earlier list parks it and so displaces the trimmed
/// list (which it pushes back on `free`), and a third thread takes. The displacing taker
/// walks the trimmed list's links: it must see the trim's append, or a version is lost.
#[test]
fn a_list_trimmed_and_parked_is_seen_whole_by_the_taker_it_displaces() {
    run_model("pool: a trim between two takes", || {
        let (versions, mut built) = Versions::new(5);
        let mut pooled = built.drain(..4);
        for version in pooled.by_ref().take(3) {
            versions.give_back(version);
        }
        // `cache` holds [1, 0], `free` [3, 2].
        let second = versions.take().expect("three pooled");
        versions.give_back(second);
        versions.give_back(pooled.next().unwrap());
        drop(pooled);
        let late = built.pop().unwrap();
        let trimmer = {
            let versions = Arc::clone(&versions);
            thread::spawn(move || {
                versions.give_back(late);
                versions.home.trim(8); // keeps all: appends `free` to `cache`
            })
        };
        let taker = {
            let versions = Arc::clone(&versions);
            thread::spawn(move || versions.take())
        };
        let mine = versions.take();
        let theirs = taker.join().unwrap();
        trimmer.join().unwrap();
        // Either take may find the pool empty: the trim holds both lists for a moment (the
        // writer then allocates); what is promised is that nothing is lost or shared.
        versions.check_all_found(mine.into_iter().chain(theirs).collect());
    });
}
