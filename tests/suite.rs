//! The integration tests that share one test binary: each file is a module here.
//!
//! One binary instead of one per file, because each test crate compiles (monomorphizes) the
//! library's generic write paths again, and every sanitizer and miri build pays for it again.
//! What checks the whole process (a global allocator that counts, resident memory, live
//! versions or pooled buffers, CPU time) is in tests/alone.rs instead, whose tests each run
//! in a process of their own.

mod common;

mod api;
mod checkpoint;
mod checkpoint_crash;
mod checkpoint_hostile;
mod checkpoint_periodic;
mod checkpoint_python;
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
mod private;
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
