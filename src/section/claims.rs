//! Which sections hold a variable, and how: the bookkeeping behind `ResourceConflict`.

use std::sync::Arc;

use crate::error::Error;
use crate::sync::Mutex;

/// One section's hold on a variable.
#[derive(Debug, Clone)]
struct Claim {
    section: u64,
    section_name: Arc<str>,
    exclusive: bool,
}

/// The claims on one variable. Taken only when a section is built or dropped.
#[derive(Debug)]
pub(crate) struct Claims {
    list: Mutex<Vec<Claim>>,
}

impl Default for Claims {
    fn default() -> Self {
        Self {
            list: Mutex::new(Vec::new()),
        }
    }
}

/// A section asking for a variable.
pub(crate) struct Request<'a> {
    pub(crate) section: u64,
    pub(crate) section_name: &'a Arc<str>,
    pub(crate) exclusive: bool,
}

fn how(exclusive: bool) -> &'static str {
    if exclusive {
        "exclusively"
    } else {
        "shared"
    }
}

impl Claims {
    /// Adds the claim unless it conflicts (exclusive + anything, anything + exclusive).
    /// `on_first` runs, under the lock, when the variable goes from free to claimed.
    pub(crate) fn claim(
        &self,
        resource: &str,
        request: Request<'_>,
        on_first: impl FnOnce(),
    ) -> Result<(), Error> {
        let mut list = self.list.lock();
        if let Some(held) = list.iter().find(|c| c.exclusive || request.exclusive) {
            return Err(Error::ResourceConflict {
                resource: resource.to_owned(),
                held_by: held.section_name.to_string(),
                held: how(held.exclusive),
                requested_by: request.section_name.to_string(),
                requested: how(request.exclusive),
            });
        }
        list.push(Claim {
            section: request.section,
            section_name: Arc::clone(request.section_name),
            exclusive: request.exclusive,
        });
        if list.len() == 1 {
            on_first();
        }
        Ok(())
    }

    /// Removes `section`'s claim. `on_last` runs, under the lock, when the variable is free.
    pub(crate) fn release(&self, section: u64, on_last: impl FnOnce()) {
        let mut list = self.list.lock();
        list.retain(|c| c.section != section);
        if list.is_empty() {
            on_last();
        }
    }
}
