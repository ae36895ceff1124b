//! A reclamation domain: the slot nodes of every thread that reads its objects.
//!
//! A store owns a domain (standalone variables share [`Domain::standalone`]), so that the scan
//! a writer makes reads only the nodes of threads that used that store. Each thread that reads
//! in a domain owns one [`Node`] of it: [`SLOTS`] hazard slots in a block of two cache lines (the
//! adjacent-line prefetcher pairs them), so that its reads and other threads' scans share a
//! line with nothing else.
//!
//! **The list** only grows: a node is pushed on first use and never unlinked; a thread that
//! exits holding nothing gives its node back (the owner flag), and the next new thread takes
//! it. **Ownership** is counted as an `Arc`'s would be: the domain's list holds one reference
//! to each node, the thread using it another. So a thread may exit after its domain was dropped
//! (its thread-local cache frees the node), and a domain may be dropped while threads still
//! cache its node (the domain drops its reference; the thread frees the node on its next
//! registration, or at exit).
//!
//! **The lookup** on the read path is a thread-local access and one compare: domain ids are
//! never reused in the process, so a cached `(id, node)` pair is never mistaken for another
//! domain's, even after its domain is gone.

use std::cell::{Cell, RefCell};
use std::ptr::{self, NonNull};
use std::sync::Arc;

use crate::sync::{next_id, thread_local, AtomicBool, AtomicPtr, AtomicUsize, Ordering};

/// Slots per node: how many objects one thread protects at once in one domain before its reads
/// take counts instead. Loom models use two, so that a third read takes the counted path.
pub(crate) const SLOTS: usize = if cfg!(mvtensor_loom) { 2 } else { 8 };

/// One thread's slots in one domain.
#[repr(align(128))]
pub(crate) struct Node {
    /// Each null or the object its thread protects; written only by the owning thread.
    pub(super) slots: [AtomicPtr<()>; SLOTS],
    /// Whether a live thread owns the node.
    owned: AtomicBool,
    /// References to the node: the domain's list while the domain lives, the thread's cache
    /// while a thread owns it.
    refs: AtomicUsize,
    /// The next node on the list: set before the node is published, never changed.
    next: *const Node,
}

#[cfg(not(mvtensor_loom))]
const _: () = assert!(
    std::mem::size_of::<Node>() == 128,
    "a node is two cache lines"
);

// SAFETY: the slots, flag and count are atomics; `next` is immutable once published.
unsafe impl Sync for Node {}
// SAFETY: as above.
unsafe impl Send for Node {}

/// Gives up one reference to `node`, freeing it if that was the last.
///
/// # Safety
/// The caller holds one of the node's references and gives it up.
unsafe fn release(node: NonNull<Node>) {
    // SAFETY: our reference keeps it alive until this decrement. Release: our uses of the node
    // happen-before the free by whoever drops the last reference.
    if unsafe { node.as_ref() }
        .refs
        .fetch_sub(1, Ordering::Release)
        == 1
    {
        // Acquire: the other holder's uses (its scans, its slot stores) happen-before the free.
        // A load of the count our decrement wrote rather than a fence, which ThreadSanitizer
        // does not see.
        // SAFETY: still alive: nobody else holds a reference to free it.
        unsafe { node.as_ref() }.refs.load(Ordering::Acquire);
        // SAFETY: the last reference: nobody else can reach the node.
        drop(unsafe { Box::from_raw(node.as_ptr()) });
    }
}

/// The nodes of the threads that read one store's (or the standalone variables') objects.
pub(crate) struct Domain {
    /// Unique in the process, never reused: what a thread's cache matches on.
    id: u64,
    nodes: AtomicPtr<Node>,
}

impl Domain {
    /// A domain of its own (a store's).
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            id: next_id(),
            nodes: AtomicPtr::new(ptr::null_mut()),
        })
    }

    /// The domain that standalone variables share: a process-wide static.
    #[cfg(not(mvtensor_loom))]
    pub(crate) fn standalone() -> Arc<Self> {
        static STANDALONE: std::sync::OnceLock<Arc<Domain>> = std::sync::OnceLock::new();
        Arc::clone(STANDALONE.get_or_init(Domain::new))
    }

    /// Under loom, one per execution: a static would outlive the execution whose loom atomics
    /// it holds. Loom's lazy statics are per execution; one reference is leaked so that the
    /// domain is never dropped while loom tears the execution down.
    #[cfg(mvtensor_loom)]
    pub(crate) fn standalone() -> Arc<Self> {
        loom::lazy_static! {
            static ref STANDALONE: Arc<Domain> = {
                let domain = Domain::new();
                std::mem::forget(Arc::clone(&domain));
                domain
            };
        }
        Arc::clone(&STANDALONE)
    }

    /// This thread's node, registered on first use; `None` while the thread is exiting (its
    /// reads then take counts).
    #[inline]
    pub(crate) fn node(&self) -> Option<&Node> {
        let node = CACHE
            .try_with(|cache| {
                let (id, node) = cache.recent[0].get();
                if id == self.id {
                    node
                } else {
                    cache.find(self)
                }
            })
            .ok()?;
        // SAFETY: a node this thread owns in this domain: the domain's list keeps it alive for
        // as long as `&self` does.
        unsafe { node.as_ref() }
    }

    /// Every node, newest first.
    pub(crate) fn nodes(&self) -> impl Iterator<Item = &Node> {
        // Acquire: pairs with the Release that published each node, so its `next` and its
        // slots' first nulls are seen.
        let mut node = self.nodes.load(Ordering::Acquire).cast_const();
        std::iter::from_fn(move || {
            // SAFETY: nodes on the list live as long as the domain, which `&self` borrows.
            let this = unsafe { node.as_ref() }?;
            node = this.next;
            Some(this)
        })
    }

    /// A node for the calling thread: one an exited thread gave back, or a new one.
    #[cold]
    fn register(&self) -> NonNull<Node> {
        // Walked through the list's own pointers, not `nodes()`'s references: the node we
        // return may be freed through it (`release`), which needs the allocation's provenance.
        // Acquire: as in `nodes`.
        let mut next = self.nodes.load(Ordering::Acquire);
        while let Some(node) = NonNull::new(next) {
            // SAFETY: on the list, alive while the domain is.
            let this = unsafe { node.as_ref() };
            // Relaxed pre-check: most nodes are owned. Acquire on the claim: pairs with the
            // exiting owner's Release, so its clears of the slots happen-before our use.
            if !this.owned.load(Ordering::Relaxed)
                && this
                    .owned
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                // Relaxed: as `Arc::clone`: the list's reference keeps the node meanwhile.
                this.refs.fetch_add(1, Ordering::Relaxed);
                return node;
            }
            next = this.next.cast_mut();
        }
        let node = NonNull::from(Box::leak(Box::new(Node {
            slots: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            owned: AtomicBool::new(true),
            refs: AtomicUsize::new(2),
            next: ptr::null(),
        })));
        // Relaxed: the compare-and-swap below publishes.
        let mut head = self.nodes.load(Ordering::Relaxed);
        loop {
            // SAFETY: not published yet: ours alone.
            unsafe { (*node.as_ptr()).next = head.cast_const() };
            // Release: the node (its `next`, its null slots) is complete for scanners.
            match self.nodes.compare_exchange_weak(
                head,
                node.as_ptr(),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return node,
                Err(now) => head = now,
            }
        }
    }

    /// How many nodes the list holds.
    #[cfg(all(test, not(mvtensor_loom)))]
    pub(crate) fn node_count(&self) -> usize {
        self.nodes().count()
    }
}

impl Drop for Domain {
    /// Drops the list's reference to every node; a node a thread still caches lives on until
    /// that thread lets it go.
    fn drop(&mut self) {
        // Relaxed: exclusive; every registration happened-before the last `Arc` went.
        let mut node = self.nodes.load(Ordering::Relaxed);
        while let Some(this) = NonNull::new(node) {
            // SAFETY: the list's reference keeps it until `release`.
            node = unsafe { this.as_ref() }.next.cast_mut();
            // SAFETY: the list's reference, given up.
            unsafe { release(this) };
        }
    }
}

/// This thread's nodes, one per domain it read in.
struct Cache {
    /// The two domains this thread used last, newest first: `(id, node)`, id 0 for none (ids
    /// start at 1).
    recent: [Cell<(u64, *const Node)>; 2],
    /// Every node this thread owns, with its domain's id; each holds one reference.
    owned: RefCell<Vec<(u64, NonNull<Node>)>>,
}

impl Cache {
    /// The node for `domain`, not the most recent one.
    #[cold]
    fn find(&self, domain: &Domain) -> *const Node {
        let [first, second] = &self.recent;
        let (id, node) = second.get();
        if id != domain.id {
            let Ok(mut owned) = self.owned.try_borrow_mut() else {
                return ptr::null();
            };
            let known = owned.iter().find(|(id, _)| *id == domain.id).map(|e| e.1);
            let node = match known {
                Some(node) => node,
                None => {
                    // Registration allocates, so this is where nodes of gone domains go too.
                    self.prune(&mut owned);
                    let node = domain.register();
                    owned.push((domain.id, node));
                    node
                }
            };
            second.set(first.get());
            first.set((domain.id, node.as_ptr()));
            return node.as_ptr();
        }
        second.set(first.get());
        first.set((id, node));
        node
    }

    /// Frees the nodes whose domain is gone (only our reference is left).
    fn prune(&self, owned: &mut Vec<(u64, NonNull<Node>)>) {
        owned.retain(|&(id, node)| {
            // SAFETY: our reference keeps it. Acquire: pairs with the domain's Release
            // decrement, so every scan of the node happens-before our free.
            let gone = unsafe { node.as_ref() }.refs.load(Ordering::Acquire) == 1;
            if gone {
                for recent in &self.recent {
                    if recent.get().0 == id {
                        recent.set((0, ptr::null()));
                    }
                }
                // SAFETY: the only reference left, ours.
                drop(unsafe { Box::from_raw(node.as_ptr()) });
            }
            !gone
        });
    }

    /// How many domains this thread holds a node of.
    #[cfg(all(test, not(mvtensor_loom)))]
    fn len(&self) -> usize {
        self.owned.borrow().len()
    }
}

impl Drop for Cache {
    /// A thread that exits gives back every node whose slots are all empty, and drops its
    /// references. (A node with a slot still taken, by a guard kept in another thread-local
    /// that outlives this one, stays owned for good: its guard clears the slot later.)
    fn drop(&mut self) {
        // Not under loom: loom runs a thread's thread-local destructors in no fixed order, so
        // an atomic access here would make the models nondeterministic; the nodes of an
        // execution are left to it.
        if cfg!(mvtensor_loom) {
            return;
        }
        for (_, node) in self.owned.get_mut().drain(..) {
            // SAFETY: our reference keeps it alive until `release`.
            let this = unsafe { node.as_ref() };
            // Relaxed: only this thread writes its own slots.
            if this
                .slots
                .iter()
                .all(|slot| slot.load(Ordering::Relaxed).is_null())
            {
                // Release: our clears of the slots happen-before the next owner's use.
                this.owned.store(false, Ordering::Release);
            }
            // SAFETY: the thread's reference, given up.
            unsafe { release(node) };
        }
    }
}

#[cfg(not(mvtensor_loom))]
thread_local! {
    static CACHE: Cache = const {
        Cache {
            recent: [const { Cell::new((0, ptr::null())) }; 2],
            owned: RefCell::new(Vec::new()),
        }
    };
}

#[cfg(mvtensor_loom)] // loom's thread_local! has no `const` form
thread_local! {
    static CACHE: Cache = Cache {
        recent: [Cell::new((0, ptr::null())), Cell::new((0, ptr::null()))],
        owned: RefCell::new(Vec::new()),
    };
}

/// How many domains the calling thread holds a node of.
#[cfg(all(test, not(mvtensor_loom)))]
pub(crate) fn cached_domains() -> usize {
    CACHE.with(Cache::len)
}
