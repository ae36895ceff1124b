//! Recorded concurrent histories, checked for linearizability against
//! sequential models: a register (`set` / `get`), a counter (`fetch_add`), compare-and-set,
//! and a two-account transfer in a critical section read with `read_all`. The checker is
//! shown to fail: a counter that reads, then writes, is rejected.

#[path = "linearizability/checker.rs"]
mod checker;

use checker::{linearizable, Clock, Model, Op};
use mvtensor::{read_all, CriticalSection, Error, Variable};
use ndarray::arr0;

/// Runs `threads` threads of `ops` operations each, `op(thread, i)` choosing and running one
/// through the clock; returns the merged history. The threads start together, each waiting
/// until all have arrived (spawned one by one, each ran its few operations before the next
/// began).
fn history<I: Clone + Send, O: Send>(
    threads: usize,
    ops: usize,
    op: impl Fn(&Clock, usize, usize) -> Op<I, O> + Sync,
) -> Vec<Op<I, O>> {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let (clock, arrived) = (Clock::default(), AtomicUsize::new(0));
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (clock, op, arrived) = (&clock, &op, &arrived);
                s.spawn(move || {
                    arrived.fetch_add(1, SeqCst);
                    while arrived.load(SeqCst) < threads {
                        std::thread::yield_now(); // one still to arrive may need the core
                    }
                    (0..ops).map(|i| op(clock, t, i)).collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    })
}

/// Counts the histories whose operations overlap in time (so that the check has orders to
/// choose between); a test whose every history was sequential could not fail.
#[derive(Default)]
struct Overlaps(usize);

impl Overlaps {
    fn count<I, O>(&mut self, history: &[Op<I, O>]) {
        let overlap = |a: &Op<I, O>, b: &Op<I, O>| a.call < b.call && b.call < a.ret;
        self.0 += usize::from(
            history
                .iter()
                .any(|a| history.iter().any(|b| overlap(a, b))),
        );
    }

    /// Some history overlapped.
    fn check(&self) {
        assert!(self.0 > 0, "no history had operations that overlap");
    }
}

fn rounds() -> usize {
    if cfg!(miri) {
        2
    } else {
        300
    }
}

// ---- a register -------------------------------------------------------------------------

#[derive(Clone)]
enum Reg {
    Set(i64),
    Get,
}

struct Register;

impl Model for Register {
    type State = i64;
    type Input = Reg;
    type Output = Option<i64>;
    fn init(&self) -> i64 {
        0
    }
    fn step(&self, s: &i64, input: &Reg, output: &Option<i64>) -> Option<i64> {
        match (input, output) {
            (Reg::Set(v), None) => Some(*v),
            (Reg::Get, Some(v)) if v == s => Some(*s),
            _ => None,
        }
    }
}

#[test]
fn set_and_get_form_a_linearizable_register() {
    let mut overlaps = Overlaps::default();
    for round in 0..rounds() {
        let r = Variable::scalar(0i64);
        let h = history(3, 6, |clock, t, i| {
            let input = if (t + i) % 2 == 0 {
                Reg::Set((t * 100 + i) as i64)
            } else {
                Reg::Get
            };
            clock.record(input, |input| match input {
                Reg::Set(v) => {
                    r.set(*v).unwrap();
                    None
                }
                Reg::Get => Some(r.get()),
            })
        });
        overlaps.count(&h);
        assert!(
            linearizable(&Register, &h),
            "round {round}: not linearizable"
        );
    }
    overlaps.check();
}

// ---- a counter --------------------------------------------------------------------------

struct Counter;

impl Model for Counter {
    type State = i64;
    type Input = ();
    type Output = i64;
    fn init(&self) -> i64 {
        0
    }
    fn step(&self, s: &i64, _: &(), old: &i64) -> Option<i64> {
        (old == s).then_some(s + 1)
    }
}

#[test]
fn fetch_add_is_a_linearizable_counter() {
    let mut overlaps = Overlaps::default();
    for round in 0..rounds() {
        let c = Variable::scalar(0i64);
        let h = history(4, 8, |clock, _, _| {
            clock.record((), |_| c.fetch_add(1).unwrap())
        });
        overlaps.count(&h);
        assert!(linearizable(&Counter, &h), "round {round}");
    }
    overlaps.check();
}

/// The checker can fail: a counter that reads, then writes, loses increments, and some
/// history shows it.
#[test]
fn a_read_then_write_counter_is_rejected() {
    let attempts = if cfg!(miri) { 20 } else { 2000 };
    let rejected = (0..attempts).any(|_| {
        let c = Variable::scalar(0i64);
        let h = history(3, 6, |clock, _, _| {
            clock.record((), |_| {
                let old = c.get();
                std::thread::yield_now(); // widen the window the bug needs
                c.set(old + 1).unwrap();
                old
            })
        });
        !linearizable(&Counter, &h)
    });
    assert!(
        rejected,
        "the checker accepted every history of a broken counter"
    );
}

// ---- compare-and-set --------------------------------------------------------------------

#[derive(Clone)]
enum Cas {
    Swap { expected: u64, value: i64 },
    Read,
}

#[derive(Clone, PartialEq)]
enum CasOut {
    Swapped(u64),
    Conflict(u64),
    Seen(u64, i64),
}

struct Versioned;

impl Model for Versioned {
    type State = (u64, i64);
    type Input = Cas;
    type Output = CasOut;
    fn init(&self) -> (u64, i64) {
        (0, 0)
    }
    fn step(
        &self,
        &(version, value): &(u64, i64),
        input: &Cas,
        output: &CasOut,
    ) -> Option<(u64, i64)> {
        match (input, output) {
            (Cas::Swap { expected, value: v }, CasOut::Swapped(new))
                if *expected == version && *new == version + 1 =>
            {
                Some((version + 1, *v))
            }
            (Cas::Swap { expected, .. }, CasOut::Conflict(actual))
                if *expected != version && *actual == version =>
            {
                Some((version, value))
            }
            (Cas::Read, CasOut::Seen(ver, val)) if (*ver, *val) == (version, value) => {
                Some((version, value))
            }
            _ => None,
        }
    }
}

#[test]
fn compare_and_set_is_linearizable() {
    let mut overlaps = Overlaps::default();
    for round in 0..rounds() {
        let v = Variable::new(arr0(0i64));
        let h = history(3, 6, |clock, t, i| {
            let input = if i % 3 == 2 {
                Cas::Read
            } else {
                Cas::Swap {
                    expected: (i / 2) as u64,
                    value: (t * 10 + i) as i64,
                }
            };
            clock.record(input, |input| match input {
                Cas::Swap { expected, value } => match v.compare_and_set(*expected, arr0(*value)) {
                    Ok(new) => CasOut::Swapped(new),
                    Err(Error::VersionConflict { actual, .. }) => CasOut::Conflict(actual),
                    Err(e) => panic!("{e}"),
                },
                Cas::Read => {
                    let s = v.read();
                    CasOut::Seen(s.version(), s[()])
                }
            })
        });
        overlaps.count(&h);
        assert!(linearizable(&Versioned, &h), "round {round}");
    }
    overlaps.check();
}

// ---- a transfer between two accounts ----------------------------------------------------

#[derive(Clone)]
enum Bank {
    Move(i64),
    Audit,
}

struct Accounts;

impl Model for Accounts {
    type State = (i64, i64);
    type Input = Bank;
    type Output = Option<(i64, i64)>;
    fn init(&self) -> (i64, i64) {
        (100, 0)
    }
    fn step(
        &self,
        &(a, b): &(i64, i64),
        input: &Bank,
        output: &Option<(i64, i64)>,
    ) -> Option<(i64, i64)> {
        match (input, output) {
            (Bank::Move(x), None) => Some((a - x, b + x)),
            (Bank::Audit, Some(seen)) if *seen == (a, b) => Some((a, b)),
            _ => None,
        }
    }
}

#[test]
fn transfers_and_read_all_are_linearizable() {
    let mut overlaps = Overlaps::default();
    for round in 0..rounds() {
        let (a, b) = (Variable::scalar(100i64), Variable::scalar(0i64));
        let cs = CriticalSection::builder()
            .resource(&a)
            .resource(&b)
            .build()
            .unwrap();
        let h = history(3, 6, |clock, t, i| {
            let input = if (t + i) % 3 == 0 {
                Bank::Audit
            } else {
                Bank::Move((t + 1) as i64)
            };
            clock.record(input, |input| match input {
                Bank::Move(x) => {
                    cs.execute(|tx| {
                        tx.write(&a)?[()] -= x;
                        tx.write(&b)?[()] += x;
                        Ok::<_, Error>(())
                    })
                    .unwrap();
                    None
                }
                Bank::Audit => {
                    let (sa, sb) = read_all((&a, &b));
                    Some((sa[()], sb[()]))
                }
            })
        });
        overlaps.count(&h);
        assert!(linearizable(&Accounts, &h), "round {round}");
    }
    overlaps.check();
}
