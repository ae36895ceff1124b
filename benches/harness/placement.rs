//! Where a benchmark's buffers lie: clear of 4K aliasing, so that a loop's loads never wait
//! for stores they only seem to depend on (which would make a cell measure where the
//! allocator happened to put a buffer).

use super::Subject;

/// Whether a loop that stores to `stores` while it loads from `loads` runs clear of 4K
/// aliasing: a load whose address matches an earlier store's in its low 12 bits waits for
/// that store. Two 4 KiB allocations in a row put the second 16 bytes past the first modulo
/// 4 KiB, so a tensor allocated right after its delta made every load of the delta wait
/// (measured: a 1K in-place add under a parking_lot mutex took ~210 ns a write instead of
/// ~120 ns). Clear when the stores are not up to 1 KiB ahead of the loads modulo 4 KiB.
pub fn clear_of_aliasing(stores: *const f32, loads: *const f32) -> bool {
    let ahead = (stores as usize).wrapping_sub(loads as usize) % 4096;
    ahead == 0 || ahead >= 1024
}

/// A value from `make` whose buffer is clear of aliasing (see
/// [`clear_of_aliasing`]) with each buffer of `stores_to` (which a loop stores to while
/// it loads from the new one) and each of `loads_from` (loaded while it stores to the new
/// one). Allocates until one is (the rejected ones are held meanwhile, so that the next try
/// gets another address).
pub fn placed<T>(
    mut make: impl FnMut() -> T,
    at: impl Fn(&T) -> *const f32,
    stores_to: &[*const f32],
    loads_from: &[*const f32],
) -> T {
    let mut rejected = Vec::new();
    for _ in 0..64 {
        let candidate = make();
        let p = at(&candidate);
        if stores_to.iter().all(|&s| clear_of_aliasing(s, p))
            && loads_from.iter().all(|&l| clear_of_aliasing(p, l))
        {
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
