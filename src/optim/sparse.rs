//! [`SparseAdam`]: lazy Adam over the rows of a [`PagedVariable`], PyTorch's `SparseAdam`.

use ndarray::{arr0, ArrayD, ArrayRef, Dimension, Ix0, IxDyn, NdFloat};

use super::check_finite;
use super::rule::{apply, Rule, State, Update};
use super::valid::{invalid_moments, next_step};
#[cfg(doc)]
use crate::error::Error; // the docs' links
use crate::error::{check_rows, Result};
use crate::kernel::standard_elements;
use crate::{CriticalSection, Element, PagedVariable, Store, Variable};

/// Lazy Adam over the rows of an embedding table (a [`PagedVariable`]): a step takes the rows
/// a batch touched and their gradients, and updates those rows and their moments alone, as
/// PyTorch's `SparseAdam` does. Each touched row gets the dense [`Optimizer`]'s Adam
/// arithmetic, bit for bit, with the bias corrections of the optimizer's step count (one
/// count for the table: the number of steps taken, as PyTorch's); a row no batch touched
/// keeps its value and its moments.
///
/// A row given twice in one step gets the sum of its gradients (coalesced, in the order
/// given), as PyTorch's sparse gradients are. Each step is one execution of a critical
/// section over the table, both moment tables and the step count: steps from any thread are
/// serial, and a reader of the three (a store snapshot, a checkpoint) sees every row and
/// moment of one step or of the next. A step copies the pages of the rows it touches in
/// each of the three tables (three gathers and three scatters), and memory is three tables,
/// as for dense Adam.
///
/// The state may come from a checkpoint or an assignment, so a step checks what it reads of
/// it before it writes anything: the step count, and the moments of the rows it touches
/// where they make the step non-finite (see [`step`](SparseAdam::step)'s errors).
///
/// [`Optimizer`]: super::Optimizer
///
/// ```
/// use mvtensor::optim::SparseAdam;
/// use mvtensor::PagedVariable;
/// use ndarray::{Array2, Axis};
///
/// let table = PagedVariable::new(Array2::<f32>::ones((1000, 8)))?;
/// let adam = SparseAdam::builder(0.1).build(&table)?;
/// let ids = [3, 7, 3];
/// let grads = Array2::<f32>::ones((ids.len(), 8)); // row 3 gets 1 + 1
/// assert_eq!(adam.step(&ids, &grads)?, 1);
/// let rows = table.gather(&[3, 7, 8])?;
/// assert!(rows[[0, 0]] < 1.0 && rows[[1, 0]] < 1.0); // Adam's first step: -lr each
/// assert!(rows.index_axis(Axis(0), 2).iter().all(|&x| x == 1.0)); // untouched
/// # Ok::<(), mvtensor::Error>(())
/// ```
#[derive(Debug)]
pub struct SparseAdam<A: Element> {
    rule: Rule<A>,
    table: PagedVariable<A>,
    /// Both moments, row for row with the table (same page size), each row's first moment
    /// then its second: shape `[rows, 2, ..]`. One table, not two: a step walks, copies and
    /// installs each table it writes (three tables made a 32-row step ~1.3x as costly).
    moments: PagedVariable<A>,
    steps: Variable<i64, Ix0>,
    section: CriticalSection,
    error_if_nonfinite: bool,
}

/// Options for a [`SparseAdam`]: [`SparseAdam::builder`].
#[derive(Debug, Clone)]
#[must_use = "call .build(&table) to create the optimizer"]
pub struct SparseAdamBuilder<A> {
    lr: A,
    betas: (A, A),
    eps: A,
    name: Option<String>,
    error_if_nonfinite: bool,
}

impl<A: Element + NdFloat> SparseAdamBuilder<A> {
    /// The moments' decays (0.9 and 0.999 by default).
    pub fn betas(mut self, beta1: A, beta2: A) -> Self {
        self.betas = (beta1, beta2);
        self
    }

    /// Added to the denominator (1e-8 by default).
    pub fn eps(mut self, eps: A) -> Self {
        self.eps = eps;
        self
    }

    /// Names the optimizer: its section, and its state (`<name>.moments`, `<name>.steps`).
    /// By default `<table>.adam`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Refuses a step whose gradients hold a NaN or an infinity ([`Error::NonFinite`]),
    /// applying nothing, as
    /// [`OptimizerBuilder::error_if_nonfinite`](super::OptimizerBuilder::error_if_nonfinite).
    pub fn error_if_nonfinite(mut self) -> Self {
        self.error_if_nonfinite = true;
        self
    }

    /// The optimizer over `table`, with zero moments (a paged table of zeros with two rows'
    /// worth a row, the table's page size) and a step count of 0.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] naming the setting out of range (PyTorch's ranges: a
    /// finite rate and epsilon of at least 0, betas at least 0 and below 1).
    pub fn build(self, table: &PagedVariable<A>) -> Result<SparseAdam<A>> {
        let name = match self.name {
            Some(name) => name,
            None => format!("{}.adam", table.name()),
        };
        let rule = Rule::Adam {
            lr: self.lr,
            beta1: self.betas.0,
            beta2: self.betas.1,
            eps: self.eps,
            weight_decay: A::zero(),
        };
        rule.check(&format!("optimizer `{name}`"))?;
        let mut shape = table.shape().to_vec();
        shape.insert(1, 2);
        let moments = PagedVariable::builder(ArrayD::<A>::zeros(IxDyn(&shape)))
            .name(format!("{name}.moments"))
            .rows_per_page(table.read().rows_per_page())
            .build()?;
        let steps = Variable::builder(arr0(0i64))
            .name(format!("{name}.steps"))
            .build();
        let section = CriticalSection::builder()
            .name(name)
            // Shared, as the dense optimizer's: `Store::restore` writes the state through a
            // section of its own.
            .exclusive(false)
            .paged(table)
            .paged(&moments)
            .resource(&steps)
            .build()?;
        Ok(SparseAdam {
            rule,
            table: table.clone(),
            moments,
            steps,
            section,
            error_if_nonfinite: self.error_if_nonfinite,
        })
    }
}

impl<A: Element + NdFloat> SparseAdam<A> {
    /// Options, starting from the learning rate `lr`.
    pub fn builder(lr: A) -> SparseAdamBuilder<A> {
        let f = |x: f64| A::from(x).expect("a float type holds Adam's defaults");
        SparseAdamBuilder {
            lr,
            betas: (f(0.9), f(0.999)),
            eps: f(1e-8),
            name: None,
            error_if_nonfinite: false,
        }
    }

    /// The table it updates.
    pub fn table(&self) -> &PagedVariable<A> {
        &self.table
    }

    /// The optimizer's name: its section's.
    pub fn name(&self) -> &str {
        self.section.name()
    }

    /// The number of steps taken so far.
    pub fn steps(&self) -> i64 {
        self.steps.read()[()]
    }

    /// Registers the state in `store` (the moments as the paged variable `<name>.moments`
    /// of shape `[rows, 2, ..]`, the count as `<name>.steps`), so that its checkpoints hold
    /// it and a restore resumes the moments and the bias corrections where they were.
    /// Register the table too ([`Store::register_paged`]).
    ///
    /// # Errors
    /// [`Error::NameTaken`] if a name is in use; the state registered before it stays.
    pub fn register_state(&self, store: &Store) -> Result<()> {
        store.register_paged(&self.moments)?;
        store.register(&self.steps)
    }

    /// One step: for each distinct row of `indices`, the sum of its rows of `grads` (shape
    /// `[indices.len(), ..]` with the table's other axes) is the gradient, and that row and
    /// its moments are updated. Returns the step's number (1 for the first). A step with no
    /// rows counts as a step.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] naming the table and the first index past its rows;
    /// [`Error::ShapeMismatch`] unless `grads` has the shape above; [`Error::NonFinite`] if
    /// asked ([`SparseAdamBuilder::error_if_nonfinite`]); [`Error::Reentrant`] from inside
    /// another execution; [`Error::InvalidValue`] naming `<name>.steps` if the step count
    /// (restored from a checkpoint, or assigned) is negative or `i64::MAX` (the next step's
    /// number would overflow), or `<name>.moments` if a touched row's step is not finite
    /// because its moments hold a NaN or an infinity or its second moment is negative. The
    /// touched rows alone are checked, as the dense [`Optimizer::step`](super::Optimizer::step)
    /// checks its state (the sweep's updates, then the moments where one is not finite),
    /// before anything is written: a row no step touches is never read. Nothing is applied
    /// then.
    pub fn step<E: Dimension>(&self, indices: &[usize], grads: &ArrayRef<A, E>) -> Result<i64> {
        let shape = self.table.shape();
        check_rows(self.table.name(), shape, indices, grads.shape())?;
        let grads = standard_elements(grads);
        if self.error_if_nonfinite {
            check_finite(self.name(), [&*grads], |_| self.table.name().to_owned())?;
        }
        let width = shape[1..].iter().product();
        let (rows, g) = coalesce(indices, &grads, width);
        self.section.execute(|tx| {
            let steps = tx.read(&self.steps)?[()];
            let (t, corrections) = next_step(&self.rule, steps, self.steps.name())?;
            let (p, mv) = (
                tx.gather(&self.table, &rows)?,
                tx.gather(&self.moments, &rows)?,
            );
            let (mut p_out, mut mv_out) = (ArrayD::zeros(p.raw_dim()), ArrayD::zeros(mv.raw_dim()));
            // Row by row (`chunks` of at least 1: a table of empty rows has no elements).
            let (w, w2) = (width.max(1), 2 * width.max(1));
            let rows_in = standard(&p)
                .chunks(w)
                .zip(standard(&mv).chunks(w2))
                .zip(g.chunks(w));
            let rows_out = standard_mut(&mut p_out)
                .chunks_mut(w)
                .zip(standard_mut(&mut mv_out).chunks_mut(w2));
            for ((((p, mv), g), (p_out, mv_out)), &row) in rows_in.zip(rows_out).zip(&rows) {
                let (m, v) = mv.split_at(width);
                let (m_out, v_out) = mv_out.split_at_mut(width);
                // The dense optimizer's sweep, one row at a time, into buffers of the step's
                // own: a row whose moments are invalid fails the execution before any
                // scatter writes the tables.
                let finite = apply(Update {
                    rule: self.rule,
                    corrections,
                    scale: A::one(),
                    values: (p, p_out),
                    state: State {
                        before: [m, v],
                        after: [m_out, v_out],
                    },
                    g,
                });
                if !finite {
                    let (name, of) = (self.moments.name(), format!("row {row}"));
                    if let Some(e) = invalid_moments(&self.rule, name, &of, [m, v]) {
                        return Err(e);
                    }
                }
            }
            tx.scatter_update(&self.table, &rows, &p_out)?;
            tx.scatter_update(&self.moments, &rows, &mv_out)?;
            tx.assign(&self.steps, arr0(t))?;
            Ok(t)
        })
    }
}

/// The distinct rows of `indices`, ascending, and the gradient of each: the sum of its rows
/// of `grads` (`width` elements each), added in the order given.
fn coalesce<A: NdFloat>(indices: &[usize], grads: &[A], width: usize) -> (Vec<usize>, Vec<A>) {
    let mut order: Vec<usize> = (0..indices.len()).collect();
    order.sort_by_key(|&i| indices[i]); // stable: a row's repeats stay in the order given
    let mut rows = Vec::with_capacity(indices.len());
    let mut sums = Vec::with_capacity(grads.len());
    for i in order {
        let grad = &grads[i * width..(i + 1) * width];
        if rows.last() == Some(&indices[i]) {
            let last = sums.len() - width;
            for (sum, &x) in sums[last..].iter_mut().zip(grad) {
                *sum += x;
            }
        } else {
            rows.push(indices[i]);
            sums.extend_from_slice(grad);
        }
    }
    (rows, sums)
}

/// A gather's elements, in order (a gather builds its array in standard layout).
fn standard<A>(rows: &ArrayD<A>) -> &[A] {
    rows.as_slice().expect("a gather is in standard layout")
}

/// [`standard`], to write.
fn standard_mut<A>(rows: &mut ArrayD<A>) -> &mut [A] {
    rows.as_slice_mut().expect("a gather is in standard layout")
}
