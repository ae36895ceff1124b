//! A global allocator that counts, for the tests that check what a piece of work allocates:
//! that a steady write allocates nothing, that a save allocates nothing of a tensor's size,
//! that a hostile checkpoint is refused before its sizes are allocated. It is the global
//! allocator of tests/alone.rs, whose tests each run in a process of their own, so the
//! allocation count and the largest request, which are for the whole process, are the test's.
//! It also counts the bytes each thread requests ([`bytes_allocated_by`]) and the
//! tensor-sized frees of threads marked as readers ([`reader_frees`]).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
static LARGEST: AtomicUsize = AtomicUsize::new(0);

/// Frees of at least this many bytes count as freeing a tensor ([`reader_frees`]).
pub const TENSOR_BYTES: usize = 16 * 1024;

static READER_FREES: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Whether this thread only reads ([`mark_reader`]).
    static READER: Cell<bool> = const { Cell::new(false) };
    /// The bytes this thread has requested. `const` and without a destructor, so that the
    /// allocator reading it allocates nothing.
    static THREAD_BYTES: Cell<usize> = const { Cell::new(0) };
}

/// Counts one request of `size` bytes.
fn record(size: usize) {
    // Relaxed: counts read by the thread that compares them, after the work it measures.
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    LARGEST.fetch_max(size, Ordering::Relaxed);
    // A thread being torn down has no counter left: its requests count process-wide only.
    let _ = THREAD_BYTES.try_with(|bytes| bytes.set(bytes.get().wrapping_add(size)));
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // One allocation of the new size, as the default `realloc` (alloc, copy, free) counts.
        record(new_size);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // `try_with`: a thread's locals may be gone while it exits.
        if layout.size() >= TENSOR_BYTES && READER.try_with(Cell::get).unwrap_or(false) {
            // Relaxed: a count read after the readers are joined.
            READER_FREES.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations so far, by every thread.
pub fn allocations() -> usize {
    // Relaxed: a count read by the thread that made the allocations it compares.
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// The largest single request while `work` runs, by any thread (the test allows for what
/// other threads of its binary request meanwhile).
pub fn largest_allocation(work: impl FnOnce()) -> usize {
    // Relaxed: a maximum read after the measured work, by the thread that did it.
    LARGEST.store(0, Ordering::Relaxed);
    work();
    LARGEST.load(Ordering::Relaxed)
}

/// The bytes this thread requests while `work` runs (what it frees is not subtracted), and
/// what `work` returns. Other threads' requests do not count.
pub fn bytes_allocated_by<T>(work: impl FnOnce() -> T) -> (usize, T) {
    let before = THREAD_BYTES.with(Cell::get);
    let result = work();
    (THREAD_BYTES.with(Cell::get).wrapping_sub(before), result)
}

/// Marks this thread as one that only reads: its frees of [`TENSOR_BYTES`] or more count in
/// [`reader_frees`].
pub fn mark_reader() {
    READER.with(|r| r.set(true));
}

/// The frees of [`TENSOR_BYTES`] or more so far by threads marked as readers.
pub fn reader_frees() -> usize {
    // Relaxed: read after the readers are joined, which orders their frees first.
    READER_FREES.load(Ordering::Relaxed)
}
