//! Shared by the integration tests.

/// `big` normally, `small` under miri (which runs these tests too, slowly).
pub fn scaled(small: usize, big: usize) -> usize {
    if cfg!(miri) {
        small
    } else {
        big
    }
}
