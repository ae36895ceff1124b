//! Where a benchmark's buffers lie: clear of 4K aliasing, so that a loop's loads never wait
//! for stores they only seem to depend on (which would make a cell measure where the
//! allocator happened to put a buffer).

use super::Subject;

/// Whether a loop that stores to `stores` while it loads from `loads` runs clear of 4K
/// aliasing: a load whose address matches an earlier store's in its low 12 bits waits for
/// that store. Two 4 KiB allocations in a row put the second 16 bytes past the first modulo
/// 4 KiB, so a tensor allocated right after its delta would make every load of the delta
/// wait, and a cell would time the allocator's placement rather than the update. Clear when
/// the stores are not up to 1 KiB ahead of the loads modulo 4 KiB.
pub fn clear_of_aliasing(stores: *const f32, loads: *const f32) -> bool {
    let ahead = (stores as usize).wrapping_sub(loads as usize) % 4096;
    ahead == 0 || ahead >= 1024
}

/// Whether two buffers of `bytes` each lie in different 128-byte blocks. Two threads that
/// each write their own buffer still pass a line back and forth when the buffers touch one
/// block: the L2's spatial prefetcher fetches a line's 128-byte buddy with it. So two 1K
/// tensors allocated back to back by one thread would make two threads, each updating its
/// own, cost each other a line transfer per update whatever guards them.
pub fn apart(a: *const f32, b: *const f32, bytes: usize) -> bool {
    let block = |p: *const f32| (p as usize / 128, (p as usize + bytes - 1) / 128);
    let ((a_first, a_last), (b_first, b_last)) = (block(a), block(b));
    a_last < b_first || b_last < a_first
}

/// A value from `make` whose buffer is clear of aliasing (see
/// [`clear_of_aliasing`]) with each buffer of `stores_to` (which a loop stores to while
/// it loads from the new one) and each of `loads_from` (loaded while it stores to the new
/// one).
pub fn placed<T>(
    make: impl FnMut() -> T,
    at: impl Fn(&T) -> *const f32,
    stores_to: &[*const f32],
    loads_from: &[*const f32],
) -> T {
    placed_where(make, at, |p| {
        stores_to.iter().all(|&s| clear_of_aliasing(s, p))
            && loads_from.iter().all(|&l| clear_of_aliasing(p, l))
    })
}

/// A value from `make` whose buffer passes `fits`. Allocates until one does (the rejected
/// ones are held meanwhile, so that the next try gets another address).
pub fn placed_where<T>(
    mut make: impl FnMut() -> T,
    at: impl Fn(&T) -> *const f32,
    fits: impl Fn(*const f32) -> bool,
) -> T {
    let mut rejected = Vec::new();
    for _ in 0..64 {
        let candidate = make();
        if fits(at(&candidate)) {
            return candidate;
        }
        rejected.push(candidate);
    }
    rejected.pop().expect("64 tries")
}

/// The tensor a [`Subject`] updates now (for mvtensor, its current version: later versions
/// come from its pool, wherever they lie).
pub fn tensor_of<S: Subject>(s: &S) -> *const f32 {
    s.read_with(|a| a.as_ptr())
}
