//! Shared by the component loom models beside the code (`src/tests/loom_*.rs`, each declared
//! from the module it checks, so that it can drive that module's private parts): one way to
//! run a model, as `loom/tests/common` has, and the pruning that makes three waiters
//! tractable.
//!
//! Built only for `cargo test --lib` under `--cfg mvtensor_loom` (`bin/loom.sh` runs them).
//!
//! **Why prune.** Two threads that wait by yielding (a [`Backoff`](crate::sync::Backoff))
//! for a third make loom's scheduler alternate between them forever: a switch away from a
//! thread that yields is no preemption, so the bound does not stop it, and the model runs
//! into loom's branch limit (tokio-rs/loom#53). So in these models a waiter that snoozes a
//! second time in one wait stops loom from exploring alternatives for the rest of that
//! execution (`loom::skip_branch`), which then runs to its end on loom's default schedule,
//! its assertions still checked. Every loop that snoozes here does nothing in a failed
//! round but load (the ticket's `serving`, a request's outcome and the flag), so an
//! execution with a second failed round behaves, for every other thread and for the waiter
//! after it, as one without it, which loom explores in full.

/// Runs `f` under loom with a preemption bound (default 2, `LOOM_MAX_PREEMPTIONS`
/// overrides), starting each execution's per-execution state afresh.
pub(crate) fn run_model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    run_model_at_most(name, usize::MAX, f);
}

/// [`run_model`], never above preemption bound `max`: for a model that a deeper run
/// (`bin/verify-deep.sh`'s bound 3) would keep busy for hours.
pub(crate) fn run_model_at_most(name: &str, max: usize, f: impl Fn() + Sync + Send + 'static) {
    run_model_within(name, max, |bound| bound.min(max), f);
}

/// [`run_model`], never below preemption bound `min`: for a race that needs three
/// preemptions and a model small enough to explore them all.
pub(crate) fn run_model_at_least(name: &str, min: usize, f: impl Fn() + Sync + Send + 'static) {
    run_model_within(name, min, |bound| bound.max(min), f);
}

/// [`run_model`], with at least `branches` branches an execution (loom's default is 1,000;
/// `LOOM_MAX_BRANCHES` may ask for more): for a model of many writes, each with its epoch
/// flushes.
pub(crate) fn run_model_branching(
    name: &str,
    branches: usize,
    f: impl Fn() + Sync + Send + 'static,
) {
    run_model_on(
        loom::model::Builder::new(),
        name,
        usize::MAX,
        |b| b,
        |builder| {
            builder.max_branches = builder.max_branches.max(branches);
        },
        f,
    );
}

/// Runs the model at `choose(asked bound)`, saying so when that is not the bound asked.
fn run_model_within(
    name: &str,
    limit: usize,
    choose: impl Fn(usize) -> usize,
    f: impl Fn() + Sync + Send + 'static,
) {
    run_model_on(loom::model::Builder::new(), name, limit, choose, |_| {}, f);
}

/// [`run_model_within`] on `builder`, adjusted by `tweak`.
fn run_model_on(
    mut builder: loom::model::Builder,
    name: &str,
    limit: usize,
    choose: impl Fn(usize) -> usize,
    tweak: impl FnOnce(&mut loom::model::Builder),
    f: impl Fn() + Sync + Send + 'static,
) {
    tweak(&mut builder);
    let bound = builder.preemption_bound.unwrap_or(2);
    if choose(bound) != bound {
        eprintln!("model {name}: preemption bound {bound} asked, {limit} is this model's limit");
    }
    builder.preemption_bound = Some(choose(bound));
    eprintln!(
        "model {name}: preemption bound {:?}",
        builder.preemption_bound
    );
    let start = std::time::Instant::now();
    let executions = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&executions);
    builder.check(move || {
        // Relaxed: a count read after `check` returns, on this thread.
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        crate::loom_new_execution();
        f()
    });
    let took = start.elapsed();
    let capped = builder.max_duration.is_some_and(|cap| took >= cap);
    eprintln!(
        "model {name}: {} executions, {:.1} s{}",
        executions.load(std::sync::atomic::Ordering::Relaxed),
        took.as_secs_f64(),
        // CI caps each model's exploration (`LOOM_MAX_DURATION`, see `.ci/run`): loom then
        // stops quietly after a prefix of the interleavings.
        if capped {
            ", stopped at the LOOM_MAX_DURATION cap: explored in part"
        } else {
            ""
        }
    );
}

/// Called by [`Backoff::snooze`](crate::sync::Backoff::snooze) (in this test build only)
/// with the wait's count of snoozes: the second one in a wait ends exploration for this
/// execution (module docs).
pub(crate) fn snoozed(snoozes: &mut u32) {
    *snoozes += 1;
    if *snoozes >= 2 {
        loom::skip_branch();
    }
}
