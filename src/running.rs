//! Which critical-section execution, if any, the current thread is inside.
//!
//! Waiting for a ticket while holding tickets is how deadlocks are made, so a thread inside an
//! execution may not start another execution, nor write a queued variable directly: both
//! return [`Error::Reentrant`] at once. (Writes inside an execution go through its `Txn`.)

use std::cell::RefCell;
use std::sync::Arc;

use crate::error::Error;
use crate::sync::thread_local;

#[cfg(not(loom))]
thread_local! {
    static RUNNING: RefCell<Option<Arc<str>>> = const { RefCell::new(None) };
}

#[cfg(loom)] // loom's thread_local! has no `const` form
thread_local! {
    static RUNNING: RefCell<Option<Arc<str>>> = RefCell::new(None);
}

/// Marks this thread as inside an execution of `section` until dropped.
pub(crate) struct Running(());

impl Running {
    /// Enters `section`, or explains why this thread may not.
    pub(crate) fn enter(section: &Arc<str>) -> Result<Self, Error> {
        RUNNING.with(|running| {
            let mut running = running.borrow_mut();
            if let Some(outer) = running.as_ref() {
                return Err(Error::Reentrant {
                    running: outer.to_string(),
                    attempted: format!("execute on section `{section}`"),
                });
            }
            *running = Some(Arc::clone(section));
            Ok(Running(()))
        })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.with(|running| running.borrow_mut().take());
    }
}

/// `Err(Reentrant)` if this thread is inside an execution; `what` describes the attempt.
pub(crate) fn check_outside(what: impl FnOnce() -> String) -> Result<(), Error> {
    RUNNING.with(|running| match running.borrow().as_ref() {
        Some(outer) => Err(Error::Reentrant {
            running: outer.to_string(),
            attempted: what(),
        }),
        None => Ok(()),
    })
}

/// Whether this thread is inside an execution.
pub(crate) fn inside() -> bool {
    RUNNING.with(|running| running.borrow().is_some())
}
