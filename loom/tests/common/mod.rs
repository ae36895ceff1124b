//! Shared by the loom models: one way to run a model, one way to make a scalar variable,
//! one transfer between two of them.

#![allow(dead_code)] // each test file uses a different subset

use loom::thread::{self, JoinHandle};
use mvtensor::{CriticalSection, Variable};
use ndarray::{arr0, ArrayD};

/// Runs `f` under loom with a preemption bound (default 2, `LOOM_MAX_PREEMPTIONS` overrides).
///
/// Every model drives crossbeam-epoch's real pin/defer/collect code too (built with
/// `--cfg crossbeam_loom`), which is what makes unbounded exploration intractable; a bound
/// of 2 or 3 finds the interleavings that matter for protocols of two or three steps.
pub fn run_model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    check(name, builder, f);
}

/// [`run_model`], never above preemption bound `max` (as the crate's component models'
/// `run_model_at_most`): for a model that takes minutes at the bound of the others.
pub fn run_model_at_most(name: &str, max: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    let bound = builder.preemption_bound.unwrap_or(2);
    if bound > max {
        eprintln!("model {name}: preemption bound {bound} asked, {max} is this model's most");
    }
    builder.preemption_bound = Some(bound.min(max));
    check(name, builder, f);
}

/// Branches an execution may take (loom's default: 1,000): a release of a version's or a
/// table's last count looks at every hold slot (`holds::is_held`), so models of several
/// writes and snapshots take more than that.
const MAX_BRANCHES: usize = 10_000;

fn check(name: &str, mut builder: loom::model::Builder, f: impl Fn() + Sync + Send + 'static) {
    builder.max_branches = builder.max_branches.max(MAX_BRANCHES);
    eprintln!(
        "model {name}: preemption bound {:?}",
        builder.preemption_bound
    );
    let start = std::time::Instant::now();
    builder.check(move || {
        mvtensor::loom_new_execution();
        f()
    });
    say_if_capped(name, builder.max_duration, start.elapsed());
}

/// CI caps each model's exploration (`LOOM_MAX_DURATION`, see `.ci/run`): loom then stops
/// quietly after a prefix of the interleavings, so say so where it did.
fn say_if_capped(name: &str, cap: Option<std::time::Duration>, took: std::time::Duration) {
    if cap.is_some_and(|cap| took >= cap) {
        eprintln!(
            "model {name}: stopped at the LOOM_MAX_DURATION cap ({:.0} s): explored in part",
            took.as_secs_f64()
        );
    }
}

/// A 0-d i64 variable holding `x`: the scalar payload every model uses.
pub fn scalar(x: i64) -> Variable<i64> {
    Variable::new(arr0(x).into_dyn())
}

pub fn value(x: i64) -> ArrayD<i64> {
    arr0(x).into_dyn()
}

/// Two increments of `w` (holding `0`, written by nobody else), each followed by two grace
/// steps: with nobody else pinned meanwhile, the version each replaced is back and `w` has
/// two live versions after each, as a lone writer has (`version.rs`:
/// `a_lone_writer_reuses_two_versions`). `beside` names what runs meanwhile.
pub fn writes_get_their_versions_back(w: &Variable<i64>, beside: &str) {
    for i in 1..=2 {
        w.assign_add(&value(1)).unwrap();
        for _ in 0..2 {
            crossbeam_epoch::pin().flush(); // a grace step
        }
        assert_eq!(w.read()[[]], i);
        assert_eq!(
            w.stats().live_versions,
            2,
            "after write {i}: held back beside {beside}"
        );
    }
}

/// Spawns a thread that moves `amount` from `a` to `b` in one execution of a section over
/// both (built here, before the spawn).
pub fn spawn_transfer(a: &Variable<i64>, b: &Variable<i64>, amount: i64) -> JoinHandle<()> {
    let cs = CriticalSection::builder()
        .resource(a)
        .resource(b)
        .build()
        .unwrap();
    let (a, b) = (a.clone(), b.clone());
    thread::spawn(move || {
        cs.execute(|tx| {
            tx.assign_sub(&a, &value(amount))?;
            tx.assign_add(&b, &value(amount))
        })
        .unwrap();
    })
}
