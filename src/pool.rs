//! Each variable's pool: the versions nobody holds any more, ready for its next write.
//!
//! Versions come back here when their last count is released (see
//! [`Version::release`](crate::version::Version::release)), from any thread, with one
//! compare-and-swap: a reader that happens to release the last count never frees memory,
//! takes a lock or runs a destructor. Writers take them out and build the next value in the
//! same struct and buffer, so a steady-state write allocates nothing (a fresh large buffer
//! also costs a first-touch page fault on every page, which can triple a write's time).
//!
//! Two lock-free lists make a take one swap in the usual case without the ABA problem of a
//! Treiber pop: returns are pushed on `free` (pushes are ABA-safe), and a writer takes a
//! whole list with a swap, keeps one version, and parks the rest on `cache` with another
//! swap for the next writer. Once the variable is dropped the pool is *closed*: versions that
//! come back later go to a global list of orphans, which writers free.

use std::marker::PhantomData;

mod writers;

pub(crate) use writers::Writers;

use crate::holds::Held;
use crate::stats::Counters;
use crate::sync::{AtomicPtr, Ordering};
use crate::version::{Building, Version};
use crate::Element;

/// The first field of every version (`#[repr(C)]`): what lets pools, the orphan list and
/// the held list ([`holds`](crate::holds)) hold versions of any element type.
pub(crate) struct Link {
    next: AtomicPtr<Link>,
    /// Frees the version this link heads (its `Box`).
    free: unsafe fn(*mut Link),
    /// Releases one count of the version this link heads, checking holds against a `Held`.
    release: unsafe fn(*mut Link, &Held),
}

impl Link {
    /// The link of a `Box<V>` whose first field it is, and which is never counted or held
    /// (a paged book).
    pub(crate) fn new<V>() -> Self {
        Self::counted::<V>(never_held)
    }

    /// The link of a counted `Box<V>` (a version) whose first field it is.
    pub(crate) fn counted<V>(release: unsafe fn(*mut Link, &Held)) -> Self {
        Self {
            next: AtomicPtr::new(std::ptr::null_mut()),
            free: free_boxed::<V>,
            release,
        }
    }

    /// Detaches the rest of a list from `link` and returns it.
    ///
    /// # Safety
    /// `link` is on a list that is exclusively the caller's.
    pub(crate) unsafe fn take_next(link: *mut Link) -> *mut Link {
        // SAFETY: the caller's contract: ours alone, so a load and a store (Relaxed), not a
        // read-modify-write (a locked instruction).
        unsafe { detach_next(link) }
    }

    /// Releases one count of the version or paged table `link` heads (see
    /// `holds::release_count`).
    ///
    /// # Safety
    /// The caller owns one count of that version, and gives it up.
    pub(crate) unsafe fn release(link: *mut Link, held: &Held) {
        // SAFETY: the caller's contract; `release` was made for the version's type.
        unsafe { ((*link).release)(link, held) }
    }
}

/// The `release` of a link whose owner is never counted: never called.
unsafe fn never_held(_: *mut Link, _: &Held) {
    debug_assert!(false, "only versions are counted");
}

/// # Safety
/// `link` heads a leaked `Box<V>` that nobody else uses.
unsafe fn free_boxed<V>(link: *mut Link) {
    // SAFETY: the caller's contract; `Link` is `V`'s first field, so the pointers coincide.
    drop(unsafe { Box::from_raw(link.cast::<V>()) });
}

/// Detaches and returns what follows `link` on its list.
///
/// # Safety
/// `link` and its list are exclusively the caller's: a plain load and store suffice
/// (Relaxed), where a swap would cost a locked instruction.
unsafe fn detach_next(link: *mut Link) -> *mut Link {
    // SAFETY: the caller's contract.
    let next = unsafe { &(*link).next };
    let rest = next.load(Ordering::Relaxed);
    if !rest.is_null() {
        next.store(std::ptr::null_mut(), Ordering::Relaxed);
    }
    rest
}

/// The marker a closed pool's lists hold; never dereferenced.
fn closed() -> *mut Link {
    static MARK: u8 = 0;
    std::ptr::from_ref(&MARK).cast::<Link>().cast_mut()
}

/// A variable's pool and counters; every version holds an `Arc` of it.
pub(crate) struct Home<A: Element> {
    /// Versions handed back, newest first.
    free: AtomicPtr<Link>,
    /// The rest of a list a writer took, parked for the next writer.
    cache: AtomicPtr<Link>,
    /// Versions that only the holder of the variable's combiner flag takes (see
    /// [`take_held`](Self::take_held)): a combined pass takes one with no atomic RMW.
    held: AtomicPtr<Link>,
    pub(crate) counters: Counters,
    /// The large delta writes under way, for a third spare while there are several
    /// ([`writers`]).
    pub(crate) writers: Writers,
    _versions: PhantomData<Version<A>>,
}

impl<A: Element> Default for Home<A> {
    fn default() -> Self {
        Self {
            free: AtomicPtr::new(std::ptr::null_mut()),
            cache: AtomicPtr::new(std::ptr::null_mut()),
            held: AtomicPtr::new(std::ptr::null_mut()),
            counters: Counters::default(),
            writers: Writers::default(),
            _versions: PhantomData,
        }
    }
}

impl<A: Element> Home<A> {
    /// A version nobody holds, to build the next value in; `None` if the pool is empty.
    /// Its data keeps whatever shape and values it had.
    pub(crate) fn take(&self) -> Option<Building<A>> {
        let list = self.take_list()?;
        // SAFETY: the swap made the whole list ours.
        let rest = unsafe { detach_next(list) };
        if !rest.is_null() {
            // AcqRel: Release parks the rest for the next taker; Acquire takes what another
            // writer parked meanwhile, which goes back on `free`.
            let displaced = self.cache.swap(rest, Ordering::AcqRel);
            if !displaced.is_null() {
                self.push_list(displaced);
            }
        }
        // SAFETY: taken off the lists, nobody else holds it, and its count is the one the
        // last release left at zero: a pooled version has no count, a building one has one.
        Some(unsafe { Building::from_pooled(list.cast::<Version<A>>()) })
    }

    /// Like [`take`](Self::take), for the holder of the variable's combiner flag: from a list
    /// only flag holders use, refilled with a swap when it runs dry (keeping at most `keep`
    /// versions, freeing the rest). So a combined pass usually takes a version with a load and
    /// a store.
    ///
    /// # Safety
    /// The caller holds the variable's combiner flag (whose Acquire/Release hand `held` from
    /// one holder to the next).
    pub(crate) unsafe fn take_held(&self, keep: usize) -> Option<Building<A>> {
        // Relaxed (both): only flag holders touch `held`, ordered by the flag.
        let mut list = self.held.load(Ordering::Relaxed);
        if list.is_null() {
            list = self.take_list()?;
            // SAFETY: swapped out, the list is ours.
            unsafe { keep_first(list, keep.max(1)) };
        }
        // SAFETY: the list is ours (the flag's). Relaxed: ours alone.
        let rest = unsafe { detach_next(list) };
        self.held.store(rest, Ordering::Relaxed);
        // SAFETY: as in `take`.
        Some(unsafe { Building::from_pooled(list.cast::<Version<A>>()) })
    }

    /// Whether no version is pooled (`held`, the flag holder's list, aside): a hint, read
    /// without ordering.
    pub(crate) fn is_dry(&self) -> bool {
        // Relaxed (both): a hint for `Inner::make_room`, which takes nothing on its strength.
        self.free.load(Ordering::Relaxed).is_null() && self.cache.load(Ordering::Relaxed).is_null()
    }

    /// A whole list of pooled versions, ours now: the parked rest of an earlier take, else
    /// everything handed back since; `None` if both are empty.
    fn take_list(&self) -> Option<*mut Link> {
        // Acquire (both): pairs with the Release that parked or pushed the list, so its
        // versions (and the uses their releasers made of them) are ours to see.
        let mut list = self.cache.swap(std::ptr::null_mut(), Ordering::Acquire);
        if list.is_null() {
            list = self.free.swap(std::ptr::null_mut(), Ordering::Acquire);
        }
        debug_assert_ne!(list, closed(), "a live variable's pool is open");
        (!list.is_null()).then_some(list)
    }

    /// Hands back a version whose last count was just released.
    ///
    /// # Safety
    /// `version` must be exclusively the caller's (no count, unreachable).
    pub(crate) unsafe fn give_back(version: *mut Version<A>) {
        // SAFETY: exclusively ours: its home lives at least as long as it does.
        let home: &Home<A> = unsafe { (*version).home() };
        let link = version.cast::<Link>();
        // SAFETY: ours; a one-version chain.
        if !unsafe { push(&home.free, link, link) } {
            // SAFETY: ours, and the variable is gone: nobody will take it.
            unsafe { orphan(link) };
        }
    }

    /// Puts a whole list (ours) back on `free`.
    fn push_list(&self, list: *mut Link) {
        // SAFETY: the list is ours. A live variable's pool is never closed.
        let pushed = unsafe { push(&self.free, list, tail(list)) };
        debug_assert!(pushed, "a live variable's pool is open");
    }

    /// Frees pooled versions beyond the first `keep` (the pool grows while reclamation is
    /// held up, by a pinned reader say, and shrinks back here). A writer calls it after its
    /// commit; what is in use or in flight is untouched. Versions that come back after a
    /// variable's last write stay pooled until its next one.
    pub(crate) fn trim(&self, keep: usize) {
        // Acquire (both): as in `take`.
        let mut list = self.cache.swap(std::ptr::null_mut(), Ordering::Acquire);
        let returned = self.free.swap(std::ptr::null_mut(), Ordering::Acquire);
        if list.is_null() {
            list = returned;
        } else if !returned.is_null() {
            // SAFETY: both lists are ours: append the returned ones.
            unsafe { (*tail(list)).next.store(returned, Ordering::Relaxed) };
        }
        let Some(first) = node(list) else {
            return;
        };
        if keep == 0 {
            // SAFETY: ours.
            unsafe { free_list(first) };
            return;
        }
        // SAFETY: ours.
        unsafe { keep_first(first, keep) };
        // AcqRel: as in `take`.
        let displaced = self.cache.swap(first, Ordering::AcqRel);
        if !displaced.is_null() {
            self.push_list(displaced);
        }
    }

    /// The variable is gone: frees what the pool holds, and sends what comes back later to
    /// the orphans.
    pub(crate) fn close(&self) {
        for list in [&self.free, &self.cache, &self.held] {
            // Acquire: as in `take`.
            let taken = list.swap(closed(), Ordering::Acquire);
            // SAFETY: swapped out, the list is ours.
            unsafe { free_list(taken) };
        }
    }
}

/// Pushes the chain `first ..= last` (linked through `next`) on the stack `top`, unless the
/// stack is closed: then it returns false and the chain is still the caller's. Pushes are
/// ABA-safe: a failed CAS only means another push or a take came first.
///
/// # Safety
/// The chain is exclusively the caller's.
pub(crate) unsafe fn push(top: &AtomicPtr<Link>, first: *mut Link, last: *mut Link) -> bool {
    // Relaxed: the CAS below publishes; a failure reloads.
    let mut current = top.load(Ordering::Relaxed);
    loop {
        if current == closed() {
            return false;
        }
        // SAFETY: ours until the CAS succeeds. Relaxed: published by the CAS.
        unsafe { (*last).next.store(current, Ordering::Relaxed) };
        // Release: our uses of the chain's versions happen-before whoever takes them.
        match top.compare_exchange_weak(current, first, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(now) => current = now,
        }
    }
}

/// The last node of a non-empty list that is ours.
fn tail(list: *mut Link) -> *mut Link {
    let mut tail = list;
    // SAFETY: the list is ours; walk to its end. Relaxed: ours alone.
    while let Some(next) = node(unsafe { (*tail).next.load(Ordering::Relaxed) }) {
        tail = next;
    }
    tail
}

/// A list pointer as an `Option`: null and the closed mark are the end.
fn node(link: *mut Link) -> Option<*mut Link> {
    (!link.is_null() && link != closed()).then_some(link)
}

/// Keeps the first `keep` (at least one) versions of a non-empty list and frees the rest.
///
/// # Safety
/// The list and its versions are exclusively the caller's.
unsafe fn keep_first(list: *mut Link, keep: usize) {
    let (mut last_kept, mut kept) = (list, 1);
    // SAFETY: the list is ours. Relaxed: ours alone.
    while let Some(next) = node(unsafe { (*last_kept).next.load(Ordering::Relaxed) }) {
        if kept >= keep {
            // SAFETY: ours; detach and free the rest.
            unsafe {
                (*last_kept)
                    .next
                    .store(std::ptr::null_mut(), Ordering::Relaxed);
                free_list(next);
            }
            return;
        }
        last_kept = next;
        kept += 1;
    }
}

/// Frees every version of a list (null or the closed mark: nothing).
///
/// # Safety
/// The list and its versions are exclusively the caller's.
unsafe fn free_list(mut link: *mut Link) {
    while let Some(this) = node(link) {
        // SAFETY: ours; read the link before freeing what holds it. Relaxed: ours alone.
        unsafe {
            link = (*this).next.load(Ordering::Relaxed);
            ((*this).free)(this);
        }
    }
}

/// Versions of dropped variables, waiting for a writer to free them. (Not under loom, where
/// a version holds loom's atomics and must not outlive the execution in a process-wide list:
/// there an orphan is freed at once. The list is a push and a take-all, no protocol the
/// models need.)
#[cfg(not(mvtensor_loom))]
fn orphans() -> &'static AtomicPtr<Link> {
    static ORPHANS: AtomicPtr<Link> = AtomicPtr::new(std::ptr::null_mut());
    &ORPHANS
}

/// Queues a version of a dropped variable to be freed by the next writer that calls
/// [`free_orphans`] (a reader never frees).
///
/// # Safety
/// `link` heads a version that is exclusively the caller's.
pub(crate) unsafe fn orphan(link: *mut Link) {
    #[cfg(mvtensor_loom)]
    // SAFETY: exclusively ours (see `orphans`).
    unsafe {
        ((*link).free)(link)
    };
    #[cfg(not(mvtensor_loom))]
    {
        // SAFETY: ours. The orphan list is never closed.
        let pushed = unsafe { push(orphans(), link, link) };
        debug_assert!(pushed, "the orphan list is never closed");
    }
}

/// Frees the versions of dropped variables that came back since the last call. Writers
/// call it when they seal a batch of retirements (`limbo`).
pub(crate) fn free_orphans() {
    #[cfg(not(mvtensor_loom))]
    {
        let orphans = orphans();
        // Relaxed pre-check: nearly always empty. Acquire on the swap: pairs with `push`.
        if orphans.load(Ordering::Relaxed).is_null() {
            return;
        }
        let list = orphans.swap(std::ptr::null_mut(), Ordering::Acquire);
        // SAFETY: swapped out, the list is ours.
        unsafe { free_list(list) };
    }
}

#[cfg(all(test, mvtensor_loom))]
#[path = "tests/loom_pool.rs"]
mod loom_pool;
