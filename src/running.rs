//! What ticket-holding work, if any, the current thread is inside.
//!
//! Waiting for a ticket while holding tickets is how deadlocks are made. A thread inside an
//! execution, or inside the `update` closure of a queued variable (which runs while the
//! write holds that variable's ticket), may therefore not start an execution nor write a
//! queued variable directly: both return [`Error::Reentrant`] at once. (Writes inside an
//! execution go through its `Txn`.)

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

use crate::error::Error;
use crate::sync::thread_local;

/// What a thread holding tickets is doing.
#[derive(Clone)]
pub(crate) enum Inside {
    /// An execution of the named section (the thread may be running a whole batch).
    Execution(Arc<str>),
    /// The closure of an `update`/`fetch_update` of the named queued variable.
    QueuedUpdate(Arc<str>),
}

impl fmt::Display for Inside {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Inside::Execution(section) => write!(f, "an execution of section `{section}`"),
            Inside::QueuedUpdate(variable) => write!(
                f,
                "the update closure of `{variable}`, which holds its ticket (it belongs to a \
                 critical section)"
            ),
        }
    }
}

#[cfg(not(mvtensor_loom))]
thread_local! {
    static RUNNING: RefCell<Option<Inside>> = const { RefCell::new(None) };
}

#[cfg(mvtensor_loom)] // loom's thread_local! has no `const` form
thread_local! {
    static RUNNING: RefCell<Option<Inside>> = RefCell::new(None);
}

/// Marks this thread as inside ticket-holding work until dropped.
pub(crate) struct Running(());

impl Running {
    /// Enters `inside`, or explains why this thread may not (it is inside something already;
    /// `attempted` says what it tried).
    pub(crate) fn enter(inside: Inside, attempted: impl FnOnce() -> String) -> Result<Self, Error> {
        RUNNING.with(|running| {
            let mut running = running.borrow_mut();
            if let Some(outer) = running.as_ref() {
                return Err(Error::Reentrant {
                    running: outer.to_string(),
                    attempted: attempted(),
                });
            }
            *running = Some(inside);
            Ok(Running(()))
        })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.with(|running| running.borrow_mut().take());
    }
}

/// `Err(Reentrant)` if this thread is inside ticket-holding work; `what` describes the attempt.
pub(crate) fn check_outside(what: impl FnOnce() -> String) -> Result<(), Error> {
    RUNNING.with(|running| match running.borrow().as_ref() {
        Some(outer) => Err(Error::Reentrant {
            running: outer.to_string(),
            attempted: what(),
        }),
        None => Ok(()),
    })
}

/// Whether this thread is inside ticket-holding work.
pub(crate) fn inside() -> bool {
    RUNNING.with(|running| running.borrow().is_some())
}
