//! The engine's bottom layer: one reclamation scheme, hazard slots with a counted fallback in
//! the head word, for every object a variable publishes.
//!
//! * [`domain`]: a store's reclamation domain (standalone variables share one): the slot nodes
//!   of the threads that read in it, and a thread's cached lookup of its own node.
//! * [`slots`]: protecting an object through a slot, and the scan that tells which objects any
//!   slot holds.
//!
//! Imports run one way: `slots` -> `domain`.

// The public types move onto this layer next; until then only its tests use it.
#![cfg_attr(not(test), allow(dead_code))]

mod domain;
mod slots;

#[cfg(all(test, not(mvtensor_loom)))]
#[path = "tests/slot_tests.rs"]
mod slot_tests;
