//! The engine's bottom layer: one reclamation scheme, hazard slots with a counted fallback in
//! the head word, for every object a variable publishes.
//!
//! * [`domain`]: a store's reclamation domain (standalone variables share one): the slot nodes
//!   of the threads that read in it, and a thread's cached lookup of its own node.
//! * [`slots`]: protecting an object through a slot, and the scan that tells which objects any
//!   slot holds.
//! * [`object`]: a reclaimable object (its count and list link) and the ways to own one.
//! * [`word`]: the head word (address, counts, a tag bit): wait-free reads, the writers'
//!   compare-and-swap that moves the word's counts into the object it unlinks.
//! * [`link`]: a pending object's link to the object it replaced, read like the head word.
//! * [`retire`]: a variable's home: its word and domain, the free list and the retired list.
//! * [`pending`]: a section's install of a pending object, the read that sees past it, and the
//!   release of the replaced object once it commits.
//!
//! Imports run one way: `pending` -> `retire` -> `link` -> `word` -> `slots` -> `domain`, and
//! each of `pending`, `retire`, `link` and `word` -> `object`; `object` and `domain` import no
//! other engine module. docs/design.md, "Engine:
//! reclamation by hazard slots", says why each ordering is what it is.

// The public types move onto this layer next; until then only its tests use it.
#![cfg_attr(not(test), allow(dead_code))]

mod domain;
mod link;
mod object;
mod pending;
mod retire;
mod slots;
mod word;

#[cfg(all(test, not(mvtensor_loom)))]
#[path = "tests/slot_tests.rs"]
mod slot_tests;

#[cfg(all(test, not(mvtensor_loom)))]
#[path = "tests/cell.rs"]
mod cell;

#[cfg(all(test, not(mvtensor_loom)))]
#[path = "tests/unit.rs"]
mod tests;

#[cfg(all(test, not(mvtensor_loom)))]
#[path = "tests/pending.rs"]
mod pending_tests;

#[cfg(all(test, not(mvtensor_loom)))]
#[path = "tests/threads.rs"]
mod threads;

#[cfg(all(test, not(mvtensor_loom), not(miri)))]
#[path = "tests/measure.rs"]
mod measure;

#[cfg(all(test, mvtensor_loom))]
#[path = "tests/loom_harness.rs"]
mod loom_harness;

#[cfg(all(test, mvtensor_loom))]
#[path = "tests/loom_engine_slots.rs"]
mod loom_engine_slots;

#[cfg(all(test, mvtensor_loom))]
#[path = "tests/loom_engine_counts.rs"]
mod loom_engine_counts;

#[cfg(all(test, mvtensor_loom))]
#[path = "tests/loom_engine_pending.rs"]
mod loom_engine_pending;
