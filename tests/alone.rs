//! The integration tests that each need a process of their own, in one test binary.
//!
//! What these tests check belongs to the whole process: a global allocator that counts,
//! resident memory, live versions or pooled buffers (crossbeam-epoch's grace periods are
//! shared by every thread of the process, so another test's pinned thread would hold them
//! back), CPU time. So each test starts with [`alone!`]: run by `cargo test`, it runs its own
//! body in a child process of this executable that runs only that test, waits for it and
//! passes or fails with it; the children run one at a time. One binary instead of one per
//! file, because each test crate compiles the library's generic write paths again (and every
//! sanitizer build would pay for each).
//!
//! Under miri, which cannot start processes, a test runs in place:
//! `bin/verify-deep.sh` runs this binary there with one test thread.

mod common;
mod counting;

/// Runs the rest of the calling test in a process of its own (see the module docs): in the
/// parent it starts the child, checks that the child ran exactly this test and that it
/// passed, and returns from the test (with the value given, for a test that returns one).
macro_rules! alone {
    () => {
        alone!(())
    };
    ($passed:expr) => {{
        fn here() {}
        if !$crate::own_process(::std::any::type_name_of_val(&here)) {
            return $passed;
        }
    }};
}

/// The environment variable that tells a child which test it runs.
const CHILD: &str = "MVTENSOR_ALONE";

/// Whether the calling test's body should run here: in the child that runs only it (or
/// under miri). In the parent, runs the child first and panics if it failed.
///
/// `here` is the type name of a function nested in the test, `alone::<module>::<test>::here`.
fn own_process(here: &str) -> bool {
    let test = here
        .strip_suffix("::here")
        .and_then(|path| path.split_once("::"))
        .map(|(_crate, test)| test)
        .unwrap_or_else(|| panic!("alone! outside a test function: {here}"));
    if cfg!(miri) || std::env::var(CHILD).is_ok_and(|child| child == test) {
        return true;
    }
    // One child at a time: a child's allocations, memory and CPU are its own, and no other
    // test's threads compete with its timing.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = std::process::Command::new(exe)
        .args(["--exact", test, "--include-ignored", "--test-threads=1"])
        .env(CHILD, test)
        .output()
        .unwrap_or_else(|e| panic!("{test}: its process did not start: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // A wrong name would select no test, and an empty run passes: demand exactly this one.
    let ran = stdout.contains(&format!("test {test} ... ok"))
        && stdout.contains("test result: ok. 1 passed;");
    assert!(
        out.status.success() && ran,
        "{test}: its process failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    false
}

mod cas_memory;
mod checkpoint_save;
mod dense_allocations;
mod held_snapshots;
mod held_store_snapshot;
mod long_closures;
mod memory;
mod paged_held;
mod paged_memory;
mod paged_section_allocations;
mod paged_section_memory;
mod paged_store_memory;
mod paged_store_stress;
mod pool_writers;
mod quiescent_pool;
mod reader_frees_nothing;
mod reclaim;
mod row_allocations;
mod scalar_allocations;
mod section_allocations;
mod section_pool;
mod snapshot_memory;
mod snapshots;
mod trainer_memory;
mod txn;
