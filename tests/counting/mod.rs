//! A global allocator that counts, for the tests that check what a piece of work allocates:
//! that a steady write allocates nothing, that a save allocates nothing of a tensor's size,
//! that a hostile checkpoint is refused before its sizes are allocated. The allocation count
//! and the largest request are for the whole process, so each test that reads them is alone
//! in its file (`mod counting;`) or allows for what its siblings allocate; the bytes requested
//! are also counted per thread ([`bytes_allocated_by`]), which siblings do not disturb.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
static LARGEST: AtomicUsize = AtomicUsize::new(0);

thread_local! {
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
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations so far, by every thread.
#[allow(dead_code, reason = "not every binary that has this module uses it")]
pub fn allocations() -> usize {
    // Relaxed: a count read by the thread that made the allocations it compares.
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// The largest single request while `work` runs, by any thread (the test allows for what
/// other threads of its binary request meanwhile).
#[allow(dead_code, reason = "not every binary that has this module uses it")]
pub fn largest_allocation(work: impl FnOnce()) -> usize {
    // Relaxed: a maximum read after the measured work, by the thread that did it.
    LARGEST.store(0, Ordering::Relaxed);
    work();
    LARGEST.load(Ordering::Relaxed)
}

/// The bytes this thread requests while `work` runs (what it frees is not subtracted), and
/// what `work` returns. Other threads' requests do not count.
#[allow(dead_code, reason = "not every binary that has this module uses it")]
pub fn bytes_allocated_by<T>(work: impl FnOnce() -> T) -> (usize, T) {
    let before = THREAD_BYTES.with(Cell::get);
    let result = work();
    (THREAD_BYTES.with(Cell::get).wrapping_sub(before), result)
}
