//! A lock-free, multi-version (MVCC) tensor store for programs where many threads read and
//! update the same tensors at once.
//!
//! A [`Variable`] holds an immutable [`ndarray`] tensor. Writers never change a published
//! tensor: each write builds a new *version* and swaps one atomic pointer to it, and old
//! versions are reclaimed through [crossbeam-epoch] once no reader can see them. So readers
//! always see a stable value and never wait, and there is no torn value or lost update to
//! defend against.
//!
//! # A first example
//!
//! What a trainer does: threads read the parameters, compute a gradient, and apply it; no
//! reader ever waits. (A whole trainer is `examples/trainer.rs`; the [`docs::trainer_guide`]
//! says which read to use in a step and how to run an optimizer in a critical section.)
//!
//! ```
//! use mvtensor::{read_all, Variable};
//! use ndarray::{Array1, Array2};
//!
//! let w = Variable::new(Array2::<f32>::zeros((4, 3))); // a Variable<f32, Ix2>
//! let b = Variable::new(Array1::<f32>::zeros(3));
//! std::thread::scope(|s| {
//!     for _ in 0..4 {
//!         s.spawn(|| {
//!             for _ in 0..100 {
//!                 let (w_now, b_now) = read_all((&w, &b)); // one consistent set, wait-free
//!                 let _logits = Array1::<f32>::ones(4).dot(&*w_now) + &*b_now;
//!                 let grad = Array2::from_elem((4, 3), 1.0f32); // (the backward pass)
//!                 w.scaled_add(-0.5, &grad).unwrap(); // combined: no lost update
//!                 b.scaled_add(-0.5, &Array1::ones(3)).unwrap();
//!             }
//!         });
//!     }
//!     s.spawn(|| {
//!         let snapshot = w.read(); // never changes while we look at it
//!         let first = snapshot[[0, 0]];
//!         assert!(snapshot.iter().all(|&x| x == first), "never a torn value");
//!     });
//! });
//! assert!(w.read().iter().all(|&x| x == -200.0));
//! // Concurrent updates were combined: 400 of them in at most 400 versions.
//! assert_eq!(w.stats().combined_deltas, 400);
//! assert!(w.version() <= 400);
//! ```
//!
//! # What you get
//!
//! * **Wait-free reads.** [`Variable::read`] is an epoch pin, one acquire load and a store
//!   to a slot of its own thread. It takes no lock and never waits for a writer, and writes
//!   no shared cache line while its thread holds at most 8 `read()` snapshots at once
//!   (from the 9th, each takes a count on its version: one atomic increment). The
//!   [`Snapshot`] it returns never changes, and keeps only its own version, however long it
//!   lives. [`Variable::read_owned`] returns a reference-counted
//!   [`OwnedSnapshot`] that can cross threads.
//! * **Lock-free writes.** [`assign`](Variable::assign), [`update`](Variable::update),
//!   [`fetch_update`](Variable::fetch_update) and
//!   [`compare_and_set`](Variable::compare_and_set) publish with one compare-and-swap.
//!   Every write returns its version number: 0 at creation, +1 per commit.
//! * **Linearizable read-modify-write.** `fetch_update` hands out each value exactly once,
//!   so an atomic counter works, which TensorFlow documents as impossible for `tf.Variable`.
//! * **Bounded memory, no allocation per write.** Versions are pooled: a write builds its
//!   value in a version its variable used before. With no snapshot held, a large variable
//!   keeps 3 versions (4-5 while several threads write it, more while a writer is
//!   descheduled mid-write); a small one about three batches of retired versions per writing
//!   thread (~192 KiB each), which wait for the epoch a batch at a time; writes that are
//!   not combined (`assign`, `update`, `fetch_add`) wait once a variable holds 4 MiB of
//!   versions. Snapshots add only the versions they show. A reader's pin never frees memory.
//! * **Any ndarray in, typed arrays out.** Deltas and gradients may be any array or view of
//!   any dimension (one not in standard layout, such as a transposed product, is copied into
//!   order first); `assign` and `compare_and_set` take the new value as an owned array;
//!   a `Variable<f32, Ix2>`'s snapshots are 2-d arrays (`dot` works). Scalars have their
//!   own API ([`Variable::scalar`], `get`, `fetch_add`), and [`read_all`](fn@read_all) reads several
//!   variables at one point of the commit order.
//! * **Combined updates.** Concurrent [`assign_add`](Variable::assign_add)s and
//!   [`scaled_add`](Variable::scaled_add)s to one variable are summed into one pass and one
//!   version: k updates cost one copy of the tensor, and no
//!   work is thrown away by a lost compare-and-swap. [`Variable::stats`] shows the batches.
//! * **Critical sections.** A [`CriticalSection`] runs closures over a set of variables one
//!   at a time, first come first served, and commits each one's writes all-or-nothing. A
//!   nested `execute` is an error, not a deadlock; a panic commits nothing and poisons
//!   nothing; sections sharing a variable non-exclusively are still serializable. Inside,
//!   the [`Txn`] lends private working copies to change in place, several at once (an
//!   optimizer step over parameters and moments), checked like a `RefCell`; or, with
//!   [`Txn::rewrite`], a fresh one to compute from the current value in one sweep. State that
//!   only a section touches (a step count, an optimizer's moments) can be [`Private`] to it:
//!   changed in place, with no version per commit.
//! * **Consistent snapshots.** [`Store::snapshot`] shows every variable as of one point in
//!   the commit order, never half an execution, and never waits for a writer (only for the
//!   running batch of a section whose private state the store holds, to copy it).
//! * **Optimizers and rows.** [`optim::Optimizer`] applies SGD, momentum or Adam(W) to a
//!   whole parameter set in one execution; [`Variable::scatter_add`] and
//!   [`Variable::gather`] update and read rows.
//! * **Paged variables for large tables.** A [`PagedVariable`] (embeddings, sparse models)
//!   keeps each version as a two-level table of pages: a row update copies the pages it
//!   touches, not the tensor, and readers still get immutable, wait-free snapshots;
//!   [`optim::SparseAdam`] is lazy Adam over its rows.
//! * **Checkpoints while training.** [`Store::save`] writes a consistent snapshot as one
//!   safetensors file, crash-safe, without blocking a writer; [`Store::restore`] sets every
//!   variable of a file in one commit ([`checkpoint`]).
//! * **Typed errors.** Wrong shape (never broadcast), wrong dtype, unknown or duplicate
//!   name, stale version, conflicting claim, re-entrant call: each is an [`Error`] naming
//!   the variable (or section) and what did not fit. An operation that fails has applied
//!   nothing.
//!
//! # How it works
//!
//! Each variable has a *head*: one atomic pointer to its newest version. A version holds
//! the tensor, its number, and a *commit record*. A write of one variable reads its
//! timestamp from the commit clock and installs its new version, already committed, with a
//! compare-and-swap on the head. Readers only show committed versions: while a critical
//! section's versions are installed but not yet committed, readers fall back to the one
//! before each, which the new version keeps reachable until its record commits.
//!
//! A variable that belongs to a critical section has its head marked *queued*: every write
//! to it then takes a ticket on the variable's FIFO queue. An execution takes its tickets in
//! variable-id order (so no cycle of waits can form), installs all its writes under one
//! shared commit record and commits that record once, so they become visible together.
//! Executions of one section that arrive together run back to back on one thread, under one
//! set of tickets and one commit (a *batch*), so a crowd of threads does not wait for the
//! scheduler to hand the section from one to the next. A
//! store snapshot reads the clock once and picks, for each variable, the newest version
//! committed by then; a write caught mid-commit is pushed past the snapshot instead of
//! waited for.
//!
//! The design chapter, `docs/design.md`, walks through every step, its linearization point,
//! why nothing can deadlock, and the reason for each memory ordering; `docs/guarantees.md`
//! maps every promise to the test or loom model that checks it.
//!
//! # Trade-offs
//!
//! * Every write copies the tensor (that is what makes reads free). For a single writer
//!   updating in place with nobody reading, a plain `&mut` array is faster.
//! * A writer pins the epoch while it writes: one that the OS deschedules mid-write holds
//!   back the reuse of versions retired meanwhile by every thread (a snapshot does not).
//! * Combined `assign_add` callers may wait for the thread that applies their delta, and
//!   critical sections are FIFO queues: a descheduled batch holder delays those behind it (a
//!   mutex lets others barge ahead). Readers never wait.
//! * A critical-section closure may run on another thread (the one running its batch), so
//!   it must be `Send`, and readers never see the state between two executions of a batch.
//!
//! [crossbeam-epoch]: https://docs.rs/crossbeam-epoch

#![warn(missing_docs, missing_debug_implementations)]

/// Invokes `$m!(T1)`, `$m!(T1, T2)`, ... up to eight: the tuple impls of `read_all`'s and
/// the optimizers' argument traits.
macro_rules! tuples_up_to_eight {
    ($m:ident) => {
        $m!(T1);
        $m!(T1, T2);
        $m!(T1, T2, T3);
        $m!(T1, T2, T3, T4);
        $m!(T1, T2, T3, T4, T5);
        $m!(T1, T2, T3, T4, T5, T6);
        $m!(T1, T2, T3, T4, T5, T6, T7);
        $m!(T1, T2, T3, T4, T5, T6, T7, T8);
    };
}

mod announce;
pub mod checkpoint;
mod combine;
mod dim;
pub mod distributed;
pub mod docs;
mod element;
mod engine;
mod error;
mod grace;
mod head;
mod help;
mod holds;
mod horizon;
mod kernel;
mod limbo;
pub mod metrics;
pub mod optim;
mod paged;
mod pool;
pub mod queue;
mod read_all;
mod record;
mod running;
mod section;
mod serve;
mod snapshot;
mod stats;
mod store;
mod sync;
mod ticket;
mod variable;
mod version;

/// `run_model` for the component loom models beside the code (`src/tests/loom_*.rs`).
#[cfg(all(test, mvtensor_loom))]
#[path = "tests/loom_model.rs"]
mod loom_model;

pub use element::{DType, Element};
pub use error::{Error, QueueProblem, Result, VariableKind};
pub use paged::{
    OwnedPagedSnapshot, PagedSnapshot, PagedStats, PagedTable, PagedVariable, PagedVariableBuilder,
};
pub use read_all::{read_all, ReadSet};
pub use section::{
    AnyVariable, CriticalSection, CriticalSectionBuilder, Private, Txn, TxnMut, TxnRef, TxnRewrite,
};
pub use snapshot::{OwnedSnapshot, Snapshot};
pub use stats::{SectionStats, Stats};
pub use store::{Entries, SnapshotEntry, Store, StoreSnapshot, VariableInfo};
pub use variable::{Variable, VariableBuilder};

/// Starts a loom execution: the loom models call it first thing in every execution (see
/// `loom/tests/common`), so that per-execution state made of loom's atomics starts afresh.
#[cfg(mvtensor_loom)]
#[doc(hidden)]
pub fn loom_new_execution() {
    holds::new_execution();
}

/// Re-exported so that users name the same `ndarray` version as mvtensor.
pub use ndarray;

/// Re-exported (with the `half` feature, on by default) for the [`f16`](half::f16) and
/// [`bf16`](half::bf16) element types.
#[cfg(feature = "half")]
pub use half;

/// The README's examples, compiled and run as doc tests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
