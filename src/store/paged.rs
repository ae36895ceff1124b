//! Paged variables in a store: registered, looked up and captured by store snapshots (and so
//! by checkpoints) like dense ones. A store snapshot holds one counted table per paged
//! variable; what that keeps in memory is said in [`PagedVariable`]'s memory bound.

use std::io;
use std::sync::Arc;

use ndarray::{Array, Dimension};

use super::snapshot::{Captured, SnapshotEntry};
use super::{At, Entry, ErasedVariable, Store, StoreSnapshot, VariableInfo};
use crate::error::{Error, Result};
use crate::paged::{Inner, TableAt};
use crate::sync::epoch;
use crate::{DType, Element, OwnedPagedSnapshot, PagedVariable, VariableKind};

impl<A: Element> ErasedVariable for Inner<A> {
    fn kind(&self) -> VariableKind {
        VariableKind::Paged
    }
    fn dtype(&self) -> DType {
        A::DTYPE
    }
    fn info(&self) -> VariableInfo {
        VariableInfo {
            name: self.layout.name.to_string(),
            dtype: A::DTYPE,
            shape: self.layout.shape.clone(),
            version: self.read().version(),
            kind: VariableKind::Paged,
        }
    }
    fn version_at(&self, at: u64, guard: &epoch::Guard) -> At {
        match self.table_at(at, guard) {
            TableAt::Table(table) => At::Version(Captured::paged(table)),
            TableAt::NotYetCreated => At::NotYetCreated,
            TableAt::Unlinked => At::Unlinked,
        }
    }
}

impl Captured {
    fn paged<A: Element>(table: OwnedPagedSnapshot<A>) -> Self {
        Self {
            // A checkpoint writes the table as one tensor, streamed page by page from the
            // pages the snapshot holds: no buffer of the table.
            write: |captured, out| {
                let table = paged_table::<A>(captured).ok_or_else(|| {
                    io::Error::other("a table of another element type (a broken invariant)")
                })?;
                let layout = &table.layout;
                for page in 0..layout.pages {
                    let rows = &table.page(page)[..layout.rows_in(page) * layout.width];
                    crate::checkpoint::write_le(rows, out)?;
                }
                Ok(())
            },
            kind: VariableKind::Paged,
            rows_per_page: Some(table.rows_per_page()),
            layout: None,
            dtype: A::DTYPE,
            shape: table.shape().to_vec(),
            number: table.version(),
            version: Arc::new(table),
        }
    }
}

fn paged_table<A: Element>(captured: &Captured) -> Option<&OwnedPagedSnapshot<A>> {
    captured.version.downcast_ref::<OwnedPagedSnapshot<A>>()
}

impl Store {
    /// Creates a paged variable named `name` holding `init` (version 0, default pages) and
    /// registers it: store snapshots and checkpoints include it. For another page size, build
    /// it ([`PagedVariable::builder`]) and [`register_paged`](Self::register_paged) it.
    ///
    /// ```
    /// use mvtensor::Store;
    /// use ndarray::{Array1, Array2};
    ///
    /// let store = Store::new();
    /// let embeddings = store.paged("emb", Array2::<f32>::zeros((10_000, 16)))?;
    /// let bias = store.variable("bias", Array1::<f32>::zeros(16))?;
    /// embeddings.scatter_add(&[3, 7], &Array2::ones((2, 16)))?;
    /// bias.assign_add(&Array1::ones(16))?;
    ///
    /// let cut = store.snapshot(); // one point in the commit order, paged tables included
    /// assert_eq!(cut.get_paged::<f32>("emb")?.row(7)?[[0]], 1.0);
    /// assert_eq!(cut.get::<f32, ndarray::Ix1>("bias")?[0], 1.0);
    /// # Ok::<(), mvtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::NameTaken`] if the store already has a variable of that name;
    /// [`Error::RankMismatch`] for a 0-d `init` (it has no rows).
    pub fn paged<A: Element, D: Dimension>(
        &self,
        name: &str,
        init: Array<A, D>,
    ) -> Result<PagedVariable<A>> {
        let variable = PagedVariable::builder(init).name(name).build()?;
        self.register_paged(&variable)?;
        Ok(variable)
    }

    /// Registers an existing paged variable under its own name.
    ///
    /// # Errors
    /// [`Error::NameTaken`] if the store already has a variable of that name.
    pub fn register_paged<A: Element>(&self, variable: &PagedVariable<A>) -> Result<()> {
        self.insert(
            variable.name(),
            Entry {
                any: variable.inner.clone(),
                erased: variable.inner.clone(),
            },
        )
    }

    /// The paged variable named `name`.
    ///
    /// # Errors
    /// [`Error::NotFound`] if there is none; [`Error::KindMismatch`] if it is a dense
    /// variable ([`get`](Self::get)); [`Error::DTypeMismatch`] if it holds another element
    /// type than `A`.
    pub fn get_paged<A: Element>(&self, name: &str) -> Result<PagedVariable<A>> {
        let inner = self.typed::<A, Inner<A>>(name, VariableKind::Paged)?;
        Ok(PagedVariable { inner })
    }
}

impl StoreSnapshot {
    /// The paged variable named `name`, as of this snapshot: a counted table, read as
    /// [`PagedVariable::read_owned`]'s is (`row`, `gather`, `rows`, `to_array`).
    ///
    /// # Errors
    /// [`Error::NotFound`] if the snapshot has no such variable; [`Error::KindMismatch`] for
    /// a dense one ([`get`](Self::get)); [`Error::DTypeMismatch`] if it holds another
    /// element type than `A`.
    pub fn get_paged<A: Element>(&self, name: &str) -> Result<OwnedPagedSnapshot<A>> {
        self.entry(name)?.get_paged()
    }
}

impl SnapshotEntry<'_> {
    /// A paged variable's table in this snapshot (see [`StoreSnapshot::get_paged`]).
    ///
    /// # Errors
    /// [`Error::KindMismatch`] for a dense variable's entry; [`Error::DTypeMismatch`] if it
    /// holds another element type than `A`.
    pub fn get_paged<A: Element>(&self) -> Result<OwnedPagedSnapshot<A>> {
        self.check_kind(VariableKind::Paged)?;
        paged_table::<A>(self.entry)
            .cloned()
            .ok_or_else(|| Error::DTypeMismatch {
                variable: self.name.to_owned(),
                expected: A::DTYPE,
                found: self.entry.dtype,
            })
    }

    /// `Ok` if this entry is of `kind`.
    pub(crate) fn check_kind(&self, kind: VariableKind) -> Result<()> {
        if self.entry.kind == kind {
            return Ok(());
        }
        Err(Error::KindMismatch {
            variable: self.name.to_owned(),
            expected: kind,
            found: self.entry.kind,
        })
    }
}
