//! The cost table: each row's median, its ratios to the same run's references, and the
//! targets, as costs (this row's ns ÷ the reference's: above 1.00x it costs more).

use super::{Costs, Op, SMALL};
use crate::{size_label, SIZES};

/// A cost target, as a ratio of CPU costs.
#[derive(Debug, Clone)]
pub struct Target {
    /// E.g. `<= 1.15x kernel`.
    pub text: String,
    /// The measured cost ratio the target is about.
    pub ratio: f64,
    pub met: bool,
}

/// One row: CPU ns per operation, its ratios to references, the targets that apply.
#[derive(Debug, Clone)]
pub struct CostRow {
    pub name: String,
    pub ns: f64,
    /// (reference, this row's ns ÷ the reference's).
    pub ratios: Vec<(String, f64)>,
    pub targets: Vec<Target>,
}

impl CostRow {
    /// Adds the ratio to a reference that costs `ns`.
    fn vs(mut self, of: &str, ns: f64) -> Self {
        self.ratios.push((of.to_string(), self.ns / ns));
        self
    }

    /// The last ratio must be at most `limit`.
    fn at_most(mut self, limit: f64, of: &str) -> Self {
        let (_, x) = self.ratios.last().expect("a ratio to check");
        let met = *x <= limit;
        let text = format!("<= {limit:.2}x {of}");
        let ratio = *x;
        self.targets.push(Target { text, ratio, met });
        self
    }

    /// Some targets are stated as speeds: `>= s x` the reference's operations per
    /// second, which is a cost of at most `1 / s` times the reference's.
    fn speed_at_least(mut self, s: f64, of: &str) -> Self {
        let (_, x) = self.ratios.last().expect("a ratio to check");
        let met = 1.0 / x >= s;
        let text = format!("<= {:.2}x {of} (speed >= {s}x)", 1.0 / s);
        let ratio = *x;
        self.targets.push(Target { text, ratio, met });
        self
    }
}

impl Costs {
    /// A table of medians measured elsewhere, by operation (the report's tests render one
    /// from made-up figures). Every [`Op`] of [`rows`](Self::rows) must be there.
    pub fn from_medians(plan: super::CostPlan, ns: std::collections::HashMap<Op, f64>) -> Costs {
        Costs { plan, ns }
    }

    /// CPU ns per operation, median of the rounds.
    pub fn ns(&self, op: Op) -> f64 {
        self.ns[&op]
    }

    /// The faster in-place lock of size `n`: its name and ns per update.
    pub fn best_lock(&self, n: usize) -> (&'static str, f64) {
        let (std, pl) = (self.ns(Op::StdMutex(n)), self.ns(Op::PlMutex(n)));
        if pl <= std {
            ("parking_lot Mutex", pl)
        } else {
            ("std Mutex", std)
        }
    }

    fn row(&self, name: impl Into<String>, op: Op) -> CostRow {
        CostRow {
            name: name.into(),
            ns: self.ns(op),
            ratios: Vec::new(),
            targets: Vec::new(),
        }
    }

    /// The table: for each size the floor, then `assign_add`; then the scalar counter, the
    /// read and the two-thread write, each after its reference.
    pub fn rows(&self) -> Vec<CostRow> {
        let mut rows = Vec::new();
        for n in SIZES {
            let size = size_label(n);
            let k = self.ns(Op::Kernel(n));
            let (lock, l) = self.best_lock(n);
            let best = format!("best lock ({lock})");
            rows.push(self.row(format!("add kernel in place {size}"), Op::Kernel(n)));
            let out = self.row(format!("add out of place {size}"), Op::OutOfPlace(n));
            rows.push(out.vs("kernel", k).vs(&best, l));
            for (name, op) in [("std", Op::StdMutex(n)), ("parking_lot", Op::PlMutex(n))] {
                let row = self.row(format!("{name} Mutex in place {size}"), op);
                rows.push(row.vs("kernel", k));
            }
            let mv = self.row(format!("assign_add {size}"), Op::AssignAdd(n));
            rows.push(match n {
                1024 => mv
                    .vs("kernel", k)
                    .at_most(1.15, "kernel")
                    .vs(&best, l)
                    .speed_at_least(0.9, "best lock"),
                65536 => mv
                    .vs("kernel", k)
                    .vs(&best, l)
                    .speed_at_least(0.95, "best lock"),
                _ => mv
                    .vs("kernel", k)
                    .vs(&best, l)
                    .speed_at_least(0.65, "best lock"),
            });
        }

        let lock = self.ns(Op::PlMutexI64);
        rows.push(self.row("parking_lot Mutex<i64> += 1", Op::PlMutexI64));
        let mv = self.row("fetch_update(|c| c + 1), 0-d i64", Op::FetchUpdate);
        rows.push(
            mv.vs("parking_lot Mutex", lock)
                .at_most(3.0, "parking_lot Mutex"),
        );
        let mv = self.row("fetch_add(1), Variable::scalar(0i64)", Op::FetchAdd);
        rows.push(
            mv.vs("parking_lot Mutex", lock)
                .at_most(3.0, "parking_lot Mutex"),
        );

        let lock = self.ns(Op::PlRwLockRead);
        rows.push(self.row("parking_lot RwLock read + unlock, 1K", Op::PlRwLockRead));
        let mv = self.row("read() + drop, 1K", Op::Read);
        rows.push(
            mv.vs("parking_lot RwLock", lock)
                .at_most(0.75, "parking_lot RwLock"),
        );

        let one = self.ns(Op::PlMutex(SMALL));
        let two = self.row(
            "2 threads, own parking_lot Mutex 1K each",
            Op::PlMutexTwoThreads,
        );
        rows.push(two.vs("1 thread", one));
        let one = self.ns(Op::AssignAdd(SMALL));
        let two = self.row(
            "2 threads, own variable 1K each: assign_add",
            Op::AssignAddTwoThreads,
        );
        rows.push(two.vs("1 thread", one).at_most(1.2, "1 thread"));
        rows
    }
}
