//! The three ways to hold a [`Version`]: reachable under a pinned guard ([`Pinned`]), by an
//! owned count ([`VersionRef`]), or exclusively while it is built ([`Building`]).

use std::marker::PhantomData;
use std::ptr::NonNull;

use super::Version;
use crate::sync::Ordering;
use crate::Element;

/// A version reachable while a guard (lifetime `'g`) is pinned: a pointer that keeps the
/// provenance of the allocation it was loaded from, so that a count taken through it
/// ([`to_ref`](Self::to_ref)) may later hand the version back (and so write to it). A
/// `&Version` cannot: memory reached through a shared reference is read-only to the borrow
/// checker's models, and miri (Tree Borrows) flags a write through one.
pub(crate) struct Pinned<'g, A: Element> {
    ptr: NonNull<Version<A>>,
    _guard: PhantomData<&'g Version<A>>,
}

impl<A: Element> Clone for Pinned<'_, A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A: Element> Copy for Pinned<'_, A> {}

impl<'g, A: Element> Pinned<'g, A> {
    /// # Safety
    /// `ptr` must come from a version's allocation (heads and links hold such pointers), and
    /// the version must stay allocated, unreused, for `'g` (reachable while the guard is
    /// pinned, or counted).
    pub(crate) unsafe fn new(ptr: *const Version<A>) -> Self {
        Self {
            ptr: NonNull::new(ptr.cast_mut()).expect("a reachable version is not null"),
            _guard: PhantomData,
        }
    }

    /// The version, borrowed for as long as the guard is pinned.
    pub(crate) fn get(self) -> &'g Version<A> {
        // SAFETY: `new`'s contract: allocated for `'g`.
        unsafe { self.ptr.as_ref() }
    }

    /// The pointer, with its provenance, for a holder of the guard (a [`Snapshot`]) that
    /// cannot name the guard's lifetime.
    ///
    /// [`Snapshot`]: crate::Snapshot
    pub(crate) fn as_ptr(self) -> *const Version<A> {
        self.ptr.as_ptr()
    }

    /// A new count on this version, owned by the caller.
    pub(crate) fn to_ref(self) -> VersionRef<A> {
        self.add_count();
        // SAFETY: the count just added is the caller's.
        unsafe { VersionRef::from_count(self.ptr.as_ptr()) }
    }

    /// Adds a count for a link about to be stored.
    pub(super) fn add_count(self) {
        // Relaxed: a new count needs no ordering (like `Arc::clone`): the version is alive
        // (reachable while we are pinned, through a link or a head that holds a count, whose
        // release after a grace period our pin outlasts), so the count is not zero.
        self.get().refs.fetch_add(1, Ordering::Relaxed);
    }
}

impl<A: Element> std::ops::Deref for Pinned<'_, A> {
    type Target = Version<A>;
    fn deref(&self) -> &Version<A> {
        self.get()
    }
}

/// One owned count of a version: it stays as it is (and allocated) while this lives.
pub(crate) struct VersionRef<A: Element> {
    ptr: NonNull<Version<A>>,
}

// SAFETY: a counted version is immutable and its count is atomic; `Version<A>`'s parts are
// `Send + Sync` for `A: Element` (which is `Send + Sync`).
unsafe impl<A: Element> Send for VersionRef<A> {}
// SAFETY: as above.
unsafe impl<A: Element> Sync for VersionRef<A> {}

impl<A: Element> VersionRef<A> {
    /// # Safety
    /// The caller owns one count of the version at `ptr` and hands it to the new value.
    pub(crate) unsafe fn from_count(ptr: *const Version<A>) -> Self {
        Self {
            ptr: NonNull::new(ptr.cast_mut()).expect("a counted version is not null"),
        }
    }

    /// Gives up the count without releasing it (it moves into a link).
    pub(crate) fn into_raw(self) -> *mut Version<A> {
        let ptr = self.ptr.as_ptr();
        std::mem::forget(self);
        ptr
    }

    /// The version, pinned by our count rather than a guard.
    pub(crate) fn pinned(&self) -> Pinned<'_, A> {
        // SAFETY: our count keeps it allocated and unreused while `self` is borrowed.
        unsafe { Pinned::new(self.ptr.as_ptr()) }
    }
}

impl<A: Element> Clone for VersionRef<A> {
    fn clone(&self) -> Self {
        self.pinned().to_ref()
    }
}

impl<A: Element> std::ops::Deref for VersionRef<A> {
    type Target = Version<A>;
    fn deref(&self) -> &Version<A> {
        // SAFETY: our count keeps it allocated and unreused.
        unsafe { self.ptr.as_ref() }
    }
}

impl<A: Element> Drop for VersionRef<A> {
    fn drop(&mut self) {
        // SAFETY: we own one count, and give it up.
        unsafe { Version::release(self.ptr.as_ptr()) };
    }
}

/// A version that only its builder can see (taken from the pool or just allocated), with one
/// count: it may be changed freely until it is installed.
pub(crate) struct Building<A: Element> {
    /// Set by [`Version::allocate`] too.
    pub(super) ptr: NonNull<Version<A>>,
}

// SAFETY: exclusively owned; the version's parts are `Send` for `A: Element`.
unsafe impl<A: Element> Send for Building<A> {}

impl<A: Element> Building<A> {
    /// # Safety
    /// The version at `ptr` must be a pooled one: unreachable by anyone else, no count.
    pub(crate) unsafe fn from_pooled(ptr: *mut Version<A>) -> Self {
        // SAFETY: the caller's contract: exclusively ours.
        let version = unsafe { &mut *ptr };
        // Relaxed: exclusively ours; whoever we publish it to synchronises with the install.
        version.refs.store(1, Ordering::Relaxed);
        // Relaxed: exclusive access.
        debug_assert!(version.prev.load(Ordering::Relaxed).is_null());
        Self {
            ptr: NonNull::new(ptr).expect("a pooled version is not null"),
        }
    }

    /// Takes back a version that [`into_raw`](Self::into_raw) gave away and nobody saw.
    ///
    /// # Safety
    /// `ptr` comes from `into_raw`, and nobody else has seen it since.
    pub(crate) unsafe fn from_raw(ptr: *mut Version<A>) -> Self {
        Self {
            ptr: NonNull::new(ptr).expect("a built version is not null"),
        }
    }

    /// Gives the version (and its count) to whoever stores the pointer.
    pub(crate) fn into_raw(self) -> *mut Version<A> {
        let ptr = self.ptr.as_ptr();
        std::mem::forget(self);
        ptr
    }
}

impl<A: Element> std::ops::Deref for Building<A> {
    type Target = Version<A>;
    fn deref(&self) -> &Version<A> {
        // SAFETY: exclusively ours.
        unsafe { self.ptr.as_ref() }
    }
}

impl<A: Element> std::ops::DerefMut for Building<A> {
    fn deref_mut(&mut self) -> &mut Version<A> {
        // SAFETY: exclusively ours.
        unsafe { self.ptr.as_mut() }
    }
}

impl<A: Element> Drop for Building<A> {
    /// A version that was never published goes straight back to its pool.
    fn drop(&mut self) {
        // Never seen by anyone: no grace period needed.
        // SAFETY: our count is the only one.
        unsafe { Version::release(self.ptr.as_ptr()) };
    }
}
