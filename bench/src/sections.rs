//! Workload 5: critical sections with a tiny body. A scalar counter (increment, returning
//! the old value) and a transfer between two accounts, against one lock guarding both.

use std::sync::{Arc, Mutex, RwLock};

use arc_swap::ArcSwap;
use mvtensor::{CriticalSection, Error, Private, Variable};
use ndarray::{arr0, ArrayD};

use super::{drive, Budget, Throughput};

/// The state a section protects: a counter and two account balances.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Accounts {
    pub counter: i64,
    pub a: i64,
    pub b: i64,
}

/// Opening balances: large, so no transfer ever overdraws.
pub const OPENING: i64 = 1 << 40;

/// A variant of the critical-section workload.
pub trait Section: Sync + Sized {
    const NAME: &'static str;
    /// Whether it can move money between two accounts atomically.
    const TRANSFER: bool = true;
    /// Counter 0, both accounts at [`OPENING`].
    fn new() -> Self;
    /// Adds one to the counter; returns the value it replaced.
    fn increment(&self) -> i64;
    /// Moves `amount` from `a` to `b` (or back), both changes at once.
    fn transfer(&self, a_to_b: bool, amount: i64);
    fn accounts(&self) -> Accounts;
}

/// mvtensor: a counter variable and two account variables (0-d `i64` tensors), each set
/// driven by a [`CriticalSection`] (`execute` changes the working copies in place, as a
/// user would write it).
pub struct MvSections {
    counter: Variable<i64>,
    counter_cs: CriticalSection,
    a: Variable<i64>,
    b: Variable<i64>,
    bank_cs: CriticalSection,
}

fn scalar(x: i64) -> ArrayD<i64> {
    arr0(x).into_dyn()
}

impl Section for MvSections {
    const NAME: &'static str = "mvtensor CriticalSection";
    fn new() -> Self {
        let counter = Variable::new(scalar(0));
        let a = Variable::new(scalar(OPENING));
        let b = Variable::new(scalar(OPENING));
        let counter_cs = CriticalSection::builder()
            .resource(&counter)
            .build()
            .expect("a fresh variable is unclaimed");
        let bank_cs = CriticalSection::builder()
            .resource(&a)
            .resource(&b)
            .build()
            .expect("fresh variables are unclaimed");
        MvSections {
            counter,
            counter_cs,
            a,
            b,
            bank_cs,
        }
    }
    fn increment(&self) -> i64 {
        self.counter_cs
            .execute(|tx| {
                let mut c = tx.write(&self.counter)?;
                c[[]] += 1;
                Ok::<_, Error>(c[[]] - 1)
            })
            .expect("the counter execution cannot fail")
    }
    fn transfer(&self, a_to_b: bool, amount: i64) {
        let (from, to) = if a_to_b {
            (&self.a, &self.b)
        } else {
            (&self.b, &self.a)
        };
        self.bank_cs
            .execute(|tx| {
                tx.write(from)?[[]] -= amount;
                tx.write(to)?[[]] += amount;
                Ok::<_, Error>(())
            })
            .expect("the transfer execution cannot fail");
    }
    fn accounts(&self) -> Accounts {
        Accounts {
            counter: self.counter.read()[[]],
            a: self.a.read()[[]],
            b: self.b.read()[[]],
        }
    }
}

/// mvtensor: the same sections over private state ([`Private`]: 0-d `i64` tensors changed in
/// place, no version per commit), as an optimizer keeps its step count.
pub struct MvPrivate {
    counter: Private<i64>,
    counter_cs: CriticalSection,
    a: Private<i64>,
    b: Private<i64>,
    bank_cs: CriticalSection,
}

impl Section for MvPrivate {
    const NAME: &'static str = "mvtensor CriticalSection, private state";
    fn new() -> Self {
        let counter = Private::new("counter", scalar(0));
        let a = Private::new("a", scalar(OPENING));
        let b = Private::new("b", scalar(OPENING));
        let counter_cs = CriticalSection::builder()
            .private(&counter)
            .build()
            .expect("fresh state is unclaimed");
        let bank_cs = CriticalSection::builder()
            .private(&a)
            .private(&b)
            .build()
            .expect("fresh state is unclaimed");
        MvPrivate {
            counter,
            counter_cs,
            a,
            b,
            bank_cs,
        }
    }
    fn increment(&self) -> i64 {
        self.counter_cs
            .execute(|tx| {
                let mut c = tx.private_mut(&self.counter)?;
                c[[]] += 1;
                Ok::<_, Error>(c[[]] - 1)
            })
            .expect("the counter execution cannot fail")
    }
    fn transfer(&self, a_to_b: bool, amount: i64) {
        let (from, to) = if a_to_b {
            (&self.a, &self.b)
        } else {
            (&self.b, &self.a)
        };
        self.bank_cs
            .execute(|tx| {
                tx.private_mut(from)?[[]] -= amount;
                tx.private_mut(to)?[[]] += amount;
                Ok::<_, Error>(())
            })
            .expect("the transfer execution cannot fail");
    }
    fn accounts(&self) -> Accounts {
        let read = |cs: &CriticalSection, state: &Private<i64>| {
            cs.execute(|tx| Ok::<_, Error>(tx.private(state)?[[]]))
                .expect("a read cannot fail")
        };
        Accounts {
            counter: read(&self.counter_cs, &self.counter),
            a: read(&self.bank_cs, &self.a),
            b: read(&self.bank_cs, &self.b),
        }
    }
}

/// mvtensor's lock-free counter: `fetch_update` (no section). It has no atomic two-variable
/// transfer, so it only runs the counter.
pub struct MvFetchUpdate(Variable<i64>);

impl Section for MvFetchUpdate {
    const NAME: &'static str = "mvtensor fetch_update";
    const TRANSFER: bool = false;
    fn new() -> Self {
        MvFetchUpdate(Variable::new(scalar(0)))
    }
    fn increment(&self) -> i64 {
        self.0
            .fetch_update(|c| c + 1)
            .expect("the shape does not change")[[]]
    }
    fn transfer(&self, _: bool, _: i64) {
        unreachable!("{} runs no transfer", Self::NAME)
    }
    fn accounts(&self) -> Accounts {
        Accounts {
            counter: self.0.read()[[]],
            a: OPENING,
            b: OPENING,
        }
    }
}

fn opening() -> Accounts {
    Accounts {
        counter: 0,
        a: OPENING,
        b: OPENING,
    }
}

fn apply_transfer(acc: &mut Accounts, a_to_b: bool, amount: i64) {
    let amount = if a_to_b { amount } else { -amount };
    acc.a -= amount;
    acc.b += amount;
}

fn bump(acc: &mut Accounts) -> i64 {
    acc.counter += 1;
    acc.counter - 1
}

impl Section for Mutex<Accounts> {
    const NAME: &'static str = "std Mutex";
    fn new() -> Self {
        Mutex::new(opening())
    }
    fn increment(&self) -> i64 {
        bump(&mut self.lock().unwrap())
    }
    fn transfer(&self, a_to_b: bool, amount: i64) {
        apply_transfer(&mut self.lock().unwrap(), a_to_b, amount);
    }
    fn accounts(&self) -> Accounts {
        *self.lock().unwrap()
    }
}

impl Section for RwLock<Accounts> {
    const NAME: &'static str = "std RwLock";
    fn new() -> Self {
        RwLock::new(opening())
    }
    fn increment(&self) -> i64 {
        bump(&mut self.write().unwrap())
    }
    fn transfer(&self, a_to_b: bool, amount: i64) {
        apply_transfer(&mut self.write().unwrap(), a_to_b, amount);
    }
    fn accounts(&self) -> Accounts {
        *self.read().unwrap()
    }
}

impl Section for parking_lot::Mutex<Accounts> {
    const NAME: &'static str = "parking_lot Mutex";
    fn new() -> Self {
        parking_lot::Mutex::new(opening())
    }
    fn increment(&self) -> i64 {
        bump(&mut self.lock())
    }
    fn transfer(&self, a_to_b: bool, amount: i64) {
        apply_transfer(&mut self.lock(), a_to_b, amount);
    }
    fn accounts(&self) -> Accounts {
        *self.lock()
    }
}

impl Section for parking_lot::RwLock<Accounts> {
    const NAME: &'static str = "parking_lot RwLock";
    fn new() -> Self {
        parking_lot::RwLock::new(opening())
    }
    fn increment(&self) -> i64 {
        bump(&mut self.write())
    }
    fn transfer(&self, a_to_b: bool, amount: i64) {
        apply_transfer(&mut self.write(), a_to_b, amount);
    }
    fn accounts(&self) -> Accounts {
        *self.read()
    }
}

impl ArcSwapAccounts {
    /// Load, copy and change, compare-and-swap; retry if another writer won.
    fn rcu<R>(&self, f: impl Fn(&mut Accounts) -> R) -> R {
        loop {
            let current = self.0.load();
            let mut next = **current;
            let out = f(&mut next);
            let previous = self.0.compare_and_swap(&current, Arc::new(next));
            if Arc::ptr_eq(&previous, &current) {
                return out;
            }
        }
    }
}

/// An arc-swap RCU cell holding all the state.
pub struct ArcSwapAccounts(ArcSwap<Accounts>);

impl Section for ArcSwapAccounts {
    const NAME: &'static str = "arc-swap RCU";
    fn new() -> Self {
        ArcSwapAccounts(ArcSwap::from_pointee(opening()))
    }
    fn increment(&self) -> i64 {
        self.rcu(bump)
    }
    fn transfer(&self, a_to_b: bool, amount: i64) {
        self.rcu(|acc| apply_transfer(acc, a_to_b, amount));
    }
    fn accounts(&self) -> Accounts {
        **self.0.load()
    }
}

/// Which body the workload runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Body {
    /// Increment a scalar counter.
    Counter,
    /// Move 1 between two accounts: even threads from `a` to `b`, odd ones back.
    Transfer,
}

impl Body {
    pub const ALL: [Body; 2] = [Body::Counter, Body::Transfer];
    pub fn key(self) -> &'static str {
        match self {
            Body::Counter => "counter",
            Body::Transfer => "transfer",
        }
    }
}

/// Workload 5 on `S`: `threads` threads run `body` back to back. Executions per second.
/// Panics if a count is off: the counter must hand out 0, 1, 2... increasing in each
/// thread and end at the number of increments; the transfers must all be there.
pub fn section<S: Section>(body: Body, threads: usize, budget: Budget) -> Throughput {
    let subject = S::new();
    let (elapsed, counts) = drive(threads, budget, u64::MAX, |t, ctl| {
        let a_to_b = t % 2 == 0;
        let mut done = 0;
        let mut last = -1;
        ctl.ready();
        while ctl.go(done) {
            match body {
                Body::Counter => {
                    let old = subject.increment();
                    assert!(old > last, "{}: the counter went back", S::NAME);
                    last = old;
                }
                Body::Transfer => subject.transfer(a_to_b, 1),
            }
            done += 1;
        }
        (a_to_b, done)
    });
    let total: u64 = counts.iter().map(|&(_, n)| n).sum();
    let acc = subject.accounts();
    match body {
        Body::Counter => assert_eq!(acc.counter as u64, total, "{}: LOST INCREMENTS", S::NAME),
        Body::Transfer => {
            let net: i64 = counts
                .iter()
                .map(|&(a_to_b, n)| if a_to_b { n as i64 } else { -(n as i64) })
                .sum();
            let expected = Accounts {
                counter: 0,
                a: OPENING - net,
                b: OPENING + net,
            };
            assert_eq!(acc, expected, "{}: LOST TRANSFERS", S::NAME);
        }
    }
    Throughput {
        ops: total,
        elapsed,
        mean_batch: None,
    }
}

/// Something to do with a section type; see [`SectionVariant::visit`].
pub trait VisitSection {
    type Out;
    fn visit<S: Section>(self) -> Self::Out;
}

/// Workload 5 as a [`VisitSection`].
#[derive(Debug, Clone, Copy)]
pub struct SectionRun {
    pub body: Body,
    pub threads: usize,
    pub budget: Budget,
}

impl VisitSection for SectionRun {
    type Out = Throughput;
    fn visit<S: Section>(self) -> Throughput {
        section::<S>(self.body, self.threads, self.budget)
    }
}

/// The variants of workload 5, as values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SectionVariant {
    Mvtensor,
    MvPrivate,
    MvFetchUpdate,
    StdMutex,
    StdRwLock,
    PlMutex,
    PlRwLock,
    ArcSwap,
}

impl SectionVariant {
    pub const ALL: [SectionVariant; 8] = [
        SectionVariant::Mvtensor,
        SectionVariant::MvPrivate,
        SectionVariant::MvFetchUpdate,
        SectionVariant::StdMutex,
        SectionVariant::StdRwLock,
        SectionVariant::PlMutex,
        SectionVariant::PlRwLock,
        SectionVariant::ArcSwap,
    ];

    pub fn visit<V: VisitSection>(self, v: V) -> V::Out {
        match self {
            SectionVariant::Mvtensor => v.visit::<MvSections>(),
            SectionVariant::MvPrivate => v.visit::<MvPrivate>(),
            SectionVariant::MvFetchUpdate => v.visit::<MvFetchUpdate>(),
            SectionVariant::StdMutex => v.visit::<Mutex<Accounts>>(),
            SectionVariant::StdRwLock => v.visit::<RwLock<Accounts>>(),
            SectionVariant::PlMutex => v.visit::<parking_lot::Mutex<Accounts>>(),
            SectionVariant::PlRwLock => v.visit::<parking_lot::RwLock<Accounts>>(),
            SectionVariant::ArcSwap => v.visit::<ArcSwapAccounts>(),
        }
    }

    pub fn name(self) -> &'static str {
        self.facts().0
    }

    /// Whether this variant runs `body`.
    pub fn runs(self, body: Body) -> bool {
        body == Body::Counter || self.facts().1
    }

    fn facts(self) -> (&'static str, bool) {
        struct Facts;
        impl VisitSection for Facts {
            type Out = (&'static str, bool);
            fn visit<S: Section>(self) -> (&'static str, bool) {
                (S::NAME, S::TRANSFER)
            }
        }
        self.visit(Facts)
    }

    pub fn is_lock(self) -> bool {
        matches!(
            self,
            SectionVariant::StdMutex
                | SectionVariant::StdRwLock
                | SectionVariant::PlMutex
                | SectionVariant::PlRwLock
        )
    }
}
