//! Chapters of documentation, no code: the trainer's guide, the design and the promises.
//!
//! The same files are in the repository's `docs/` directory; here they are on docs.rs, and
//! their examples run as doctests.

#[doc = include_str!("../docs/trainer-guide.md")]
pub mod trainer_guide {}

#[doc = include_str!("../docs/design.md")]
pub mod design {}

#[doc = include_str!("../docs/guarantees.md")]
pub mod guarantees {}
