//! The caller's closures run unpinned, however long they take (an execution's, an `update`
//! or `fetch_update` closure): the versions other threads retire meanwhile come back to
//! their variables' pools. (Nothing else may hold the epoch back while they run: a pinned
//! thread the OS deschedules holds it back for a time slice, in which the counter could
//! fill its room.)

use mvtensor::{CriticalSection, Error, Variable};
use ndarray::arr0;

/// A counter's room (`limbo::room`): 4 MiB of versions, each counted as its 8 bytes and 256.
const COUNTER_ROOM: usize = (4 << 20) / (8 + 256);

/// `writes` increments of `counter`, from a thread of its own; returns the most live
/// versions it saw.
fn increment_on_another_thread(counter: &Variable<i64, ndarray::Ix0>, writes: i64) -> usize {
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut peak = 0;
            for i in 0..writes {
                counter.fetch_add(1).unwrap();
                if i % 64 == 0 {
                    peak = peak.max(counter.stats().live_versions);
                }
            }
            peak
        })
        .join()
        .unwrap()
    })
}

/// Runs one execution over a variable of its own that, inside its closure, has another
/// thread increment a counter outside the section tens of thousands of times, and returns
/// the most live versions of the counter seen meanwhile. With `queued`, a third thread's
/// plain write to the section's variable is waiting for its ticket meanwhile: the
/// increments start once it has said it is about to write (it reaches its wait within
/// microseconds of that, where they take milliseconds). Checks that the counter kept at most
/// a quarter of its room live.
fn nothing_held_back_beside_an_execution(queued: bool) {
    let writes: i64 = if cfg!(miri) { 200 } else { 40_000 };
    let w = Variable::scalar(0i64);
    let counter = Variable::scalar(0i64);
    let section = CriticalSection::builder().resource(&w).build().unwrap();
    let peak = std::thread::scope(|s| {
        section
            .execute(|tx| {
                tx.write(&w)?[[]] += 1; // the resource is loaded and written: under way
                if queued {
                    let (writing, about_to_write) = std::sync::mpsc::channel();
                    let w = &w;
                    s.spawn(move || {
                        writing.send(()).unwrap();
                        w.assign_add(&arr0(10)).unwrap() // queued behind this execution
                    });
                    about_to_write.recv().unwrap();
                }
                Ok::<_, Error>(increment_on_another_thread(&counter, writes))
            })
            .unwrap()
    });
    let expected = if queued { 11 } else { 1 };
    assert_eq!((w.get(), counter.get()), (expected, writes));
    check_peak(
        peak,
        &format!("beside an execution, a write queued: {queued}"),
    );
}

/// Checks that the counter kept at most a quarter of its room live.
fn check_peak(peak: usize, beside: &str) {
    eprintln!("{beside}: peak {peak} live versions of the counter");
    assert!(
        peak <= COUNTER_ROOM / 4,
        "{peak} live versions of a counter (room {COUNTER_ROOM}), {beside}"
    );
}

/// Runs one `update` (or, with `fetch`, `fetch_update`) of a small variable whose closure
/// has another thread increment a counter tens of thousands of times, and checks the
/// counter's live versions meanwhile, as beside an execution. With `queued`, a critical
/// section holds the variable (the write holds its ticket while the closure runs).
fn nothing_held_back_beside_an_update(fetch: bool, queued: bool) {
    let writes: i64 = if cfg!(miri) { 200 } else { 40_000 };
    let w = Variable::new(ndarray::arr1(&[1.0f32; 16]));
    let _section = queued.then(|| CriticalSection::builder().resource(&w).build().unwrap());
    let counter = Variable::scalar(0i64);
    let (mut runs, mut peak) = (0, 0);
    let mut f = |x: &ndarray::ArrayRef1<f32>| {
        runs += 1;
        peak = peak.max(increment_on_another_thread(&counter, writes));
        x + 1.0
    };
    let old = if fetch {
        w.fetch_update(&mut f).unwrap().sum()
    } else {
        w.update(&mut f).unwrap();
        16.0
    };
    // Nobody else writes `w`: the closure ran once, on the value it replaced.
    assert_eq!((runs, old, w.read().sum()), (1, 16.0, 32.0));
    assert_eq!(counter.get(), writes);
    check_peak(
        peak,
        &format!("beside an update closure, fetch: {fetch}, queued: {queued}"),
    );
}

/// While one execution is in its closure, another thread increments a counter outside the
/// section. Were the closure pinned, its pin would hold back every version retired
/// meanwhile: the counter would fill its room and its writer then wait for room on every
/// write.
#[test]
fn a_long_execution_holds_back_no_other_variables_versions() {
    alone!();
    nothing_held_back_beside_an_execution(false);
}

/// A plain write to a section's variable waits for its ticket behind the execution holding
/// it, and waits unpinned: pinned first, it would hold back every thread's versions for as
/// long as that execution runs.
#[test]
fn a_write_queued_behind_a_long_execution_holds_back_nothing() {
    alone!();
    nothing_held_back_beside_an_execution(true);
}

/// While an `update` closure of a small variable runs, another thread increments a counter.
/// The closure runs unpinned; pinned for the whole write, as `fetch_add` is, it would keep
/// the counter's versions live for as long as it runs.
#[test]
fn a_long_update_closure_holds_back_no_other_variables_versions() {
    alone!();
    nothing_held_back_beside_an_update(false, false);
}

/// The same on a variable a critical section holds: the write waits for the variable's
/// ticket, then runs its closure holding it, unpinned.
#[test]
fn a_long_update_closure_of_a_sections_variable_holds_back_nothing() {
    alone!();
    nothing_held_back_beside_an_update(false, true);
}

/// The same for `fetch_update`, whose snapshot of the value it replaced is kept by the
/// write's count of it.
#[test]
fn a_long_fetch_update_closure_holds_back_no_other_variables_versions() {
    alone!();
    nothing_held_back_beside_an_update(true, false);
}
