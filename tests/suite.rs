//! The integration tests that share one test binary: each file is a module here.
//!
//! One binary instead of one per file, because each test crate compiles (monomorphizes) the
//! library's generic write paths again: twenty files built as twenty crates took ~155 s of
//! CPU of a cold `cargo test` build, and every sanitizer and miri build paid it again.
//!
//! A file stays a binary of its own (`[[test]]` in Cargo.toml) when what it checks belongs
//! to the whole process: a global allocator that counts, resident memory, live versions or
//! pooled buffers (crossbeam-epoch's grace periods are shared by every thread of the
//! process, so another test's pinned thread would hold them back), CPU time, or a child
//! process run from its own executable.

mod common;

mod api;
mod checkpoint;
mod checkpoint_hostile;
mod checkpoint_periodic;
mod combining;
mod half;
mod linearizability;
mod metrics;
mod optim;
mod pacing;
mod packed;
mod packed_state;
mod paged;
mod paged_section;
mod paged_store;
mod pipeline;
mod promises;
mod queue;
mod queued_updates;
mod rayon;
mod replicas;
mod replicas_async;
mod rewrite;
mod rows;
mod schedule;
mod section_races;
mod sections;
mod sparse_adam;
mod store;
mod variable;
