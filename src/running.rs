//! What ticket-holding work, if any, the current thread is inside.
//!
//! Waiting for a ticket while holding tickets is how deadlocks are made. A thread inside an
//! execution, or inside the `update` closure of a queued variable (which runs while the
//! write holds that variable's ticket), may therefore not start an execution nor write a
//! queued variable directly: both return [`Error::Reentrant`] at once. (Writes inside an
//! execution go through its `Txn`.)

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

#[cfg(not(mvtensor_loom))]
thread_local! {
    static RUNNING: Cell<Option<Entered>> = const { Cell::new(None) };
}

#[cfg(mvtensor_loom)] // loom's thread_local! has no `const` form
thread_local! {
    static RUNNING: Cell<Option<Entered>> = Cell::new(None);
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
        RUNNING.with(|running| {
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
        RUNNING.with(|running| running.set(None));
    }
}

/// `Err(Reentrant)` if this thread is inside ticket-holding work; `what` describes the attempt.
pub(crate) fn check_outside(what: impl FnOnce() -> String) -> Result<(), Error> {
    match RUNNING.with(Cell::get) {
        Some(outer) => Err(Error::Reentrant {
            running: outer.describe(),
            attempted: what(),
        }),
        None => Ok(()),
    }
}

/// Whether this thread is inside ticket-holding work.
pub(crate) fn inside() -> bool {
    RUNNING.with(|running| running.get().is_some())
}
