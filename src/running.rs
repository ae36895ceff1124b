//! What ticket-holding work, if any, the current thread is inside.
//!
//! Waiting for a ticket while holding tickets is how deadlocks are made. A thread inside an
//! execution, or inside the `update` closure of a queued variable (which runs while the
//! write holds that variable's ticket), may therefore not start an execution nor write a
//! queued variable directly: both return [`Error::Reentrant`] at once. (Writes inside an
//! execution go through its `Txn`.)
//!
//! The same thread-local also knows which variables' `update` closures the thread is running
//! ([`updating`]): a closure that writes its own variable would make that update retry
//! forever (each attempt's write loses the compare-and-swap to the closure's own), so the
//! write returns [`Error::Reentrant`] instead.

use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::error::Error;
use crate::sync::thread_local;

/// What a thread holding tickets is doing.
#[derive(Clone, Copy)]
pub(crate) enum Inside {
    /// An execution of the named section (the thread may be running a whole batch).
    Execution,
    /// The closure of an `update`/`fetch_update` of the named queued variable.
    QueuedUpdate,
}

/// What this thread is inside, and the name of the section or variable. The name is
/// borrowed, not counted: an `Arc` clone per execution was a locked increment on a line
/// every thread of the section shares. It is valid while the [`Running`] that set it lives
/// (which borrows it), and only this thread reads it.
#[derive(Clone, Copy)]
struct Entered {
    inside: Inside,
    name: NonNull<str>,
}

impl Entered {
    fn describe(self) -> String {
        // SAFETY: set by a `Running<'n>` of this thread that is still alive (it clears the
        // cell when dropped), and `'n` covers the name.
        let name = unsafe { self.name.as_ref() };
        match self.inside {
            Inside::Execution => format!("an execution of section `{name}`"),
            Inside::QueuedUpdate => format!(
                "the update closure of `{name}`, which holds its ticket (it belongs to a \
                 critical section)"
            ),
        }
    }
}

/// One `update` closure this thread is running, on its caller's stack, linked to the one
/// it runs inside (closures of different variables may nest).
struct Update {
    variable: u64,
    outer: *const Update,
}

/// This thread's state: the ticket-holding work it is inside, and the innermost `update`
/// closure it runs (null: none). One thread-local, so that a write looks at both at once.
struct State {
    running: Cell<Option<Entered>>,
    updating: Cell<*const Update>,
}

impl State {
    const fn new() -> Self {
        Self {
            running: Cell::new(None),
            updating: Cell::new(std::ptr::null()),
        }
    }
}

#[cfg(not(mvtensor_loom))]
thread_local! {
    static RUNNING: State = const { State::new() };
}

#[cfg(mvtensor_loom)] // loom's thread_local! has no `const` form
thread_local! {
    static RUNNING: State = State::new();
}

/// Marks this thread as inside ticket-holding work until dropped.
pub(crate) struct Running<'n>(PhantomData<&'n str>);

impl<'n> Running<'n> {
    /// Enters `inside` the section or variable called `name`, or explains why this thread
    /// may not (it is inside something already; `attempted` says what it tried).
    pub(crate) fn enter(
        inside: Inside,
        name: &'n str,
        attempted: impl FnOnce() -> String,
    ) -> Result<Self, Error> {
        RUNNING.with(|state| {
            let running = &state.running;
            if let Some(outer) = running.get() {
                return Err(Error::Reentrant {
                    running: outer.describe(),
                    attempted: attempted(),
                });
            }
            running.set(Some(Entered {
                inside,
                name: NonNull::from(name),
            }));
            Ok(Running(PhantomData))
        })
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        RUNNING.with(|state| state.running.set(None));
    }
}

/// `Err(Reentrant)` if this thread is inside ticket-holding work; `what` describes the attempt.
pub(crate) fn check_outside(what: impl FnOnce() -> String) -> Result<(), Error> {
    match RUNNING.with(|state| state.running.get()) {
        Some(outer) => Err(Error::Reentrant {
            running: outer.describe(),
            attempted: what(),
        }),
        None => Ok(()),
    }
}

/// Whether this thread is inside ticket-holding work or an `update` closure: then a delta
/// is applied on its own (not combined: a combining pass may wait for other threads, and a
/// closure's write to its own variable must be seen by [`check_not_updating`]).
pub(crate) fn inside() -> bool {
    RUNNING.with(|state| state.running.get().is_some() || !state.updating.get().is_null())
}

/// Runs `f`, an `update` closure of the variable with id `variable`, marked as such.
pub(crate) fn updating<R>(variable: u64, f: impl FnOnce() -> R) -> R {
    /// Unmarks it, also on unwind.
    struct Leave(*const Update);
    impl Drop for Leave {
        fn drop(&mut self) {
            RUNNING.with(|state| state.updating.set(self.0));
        }
    }
    let outer = RUNNING.with(|state| state.updating.get());
    let update = Update { variable, outer };
    // The mark points at `update`, on this frame: `Leave` removes it before the frame ends.
    RUNNING.with(|state| state.updating.set(&update));
    let _leave = Leave(outer);
    f()
}

/// `Err(Reentrant)` if this thread is running an `update` closure of the variable with id
/// `variable` (see the module docs); `name` is the variable's. Every write asks, so the
/// common answer (no closure runs) is one load, inline, and the walk is out of line, so
/// that the check costs a scalar `fetch_add` a few instructions, not a function's worth.
#[inline]
pub(crate) fn check_not_updating(variable: u64, name: &str) -> Result<(), Error> {
    let innermost = RUNNING.with(|state| state.updating.get());
    if innermost.is_null() {
        return Ok(());
    }
    refuse_own_update(innermost, variable, name)
}

#[cold]
#[inline(never)]
fn refuse_own_update(mut update: *const Update, variable: u64, name: &str) -> Result<(), Error> {
    while !update.is_null() {
        // SAFETY: every `Update` linked from this thread's state lives on a frame of this
        // thread that `updating` is still running (its `Leave` unlinks it first).
        let current = unsafe { &*update };
        if current.variable == variable {
            return Err(Error::Reentrant {
                running: format!("the update closure of `{name}`"),
                attempted: format!(
                    "a write to `{name}` itself, which would make the update retry forever"
                ),
            });
        }
        update = current.outer;
    }
    Ok(())
}
