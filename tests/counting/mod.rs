//! A global allocator that counts allocations, for the tests that check a steady write
//! allocates nothing. It counts for the whole process, so each such test is alone in its file
//! (`mod counting;`), and compares the count before and after its steady writes.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
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
