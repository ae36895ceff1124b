//! An execution's closure runs unpinned, however long it takes: the versions other threads
//! retire meanwhile come back to their variables' pools. (Its own file: nothing else may
//! hold the epoch back while it runs.)

use mvtensor::{CriticalSection, Error, Variable};

/// A counter's room (`limbo::room`): 4 MiB of versions, each counted as its 8 bytes and 256.
const COUNTER_ROOM: usize = (4 << 20) / (8 + 256);

/// While one execution is in its closure, another thread increments a counter outside the
/// section tens of thousands of times. Before executions ran their closures unpinned, the
/// execution's pin held back every version retired meanwhile: the counter filled its room
/// (15,887 versions) and its writer then yielded 64 times a write (a 20 ms closure cut
/// another thread's `fetch_add` from ~8.7 M/s to ~0.2 M/s on 2 cores).
#[test]
fn a_long_execution_holds_back_no_other_variables_versions() {
    let writes: i64 = if cfg!(miri) { 200 } else { 40_000 };
    let w = Variable::scalar(0i64);
    let counter = Variable::scalar(0i64);
    let section = CriticalSection::builder().resource(&w).build().unwrap();
    let peak = section
        .execute(|tx| {
            tx.write(&w)?[[]] += 1; // the resource is loaded and written: the batch is under way
            let peak = std::thread::scope(|s| {
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
            });
            Ok::<_, Error>(peak)
        })
        .unwrap();
    eprintln!("peak {peak} live versions of the counter during the execution");
    assert_eq!((w.get(), counter.get()), (1, writes));
    assert!(
        peak <= COUNTER_ROOM / 4,
        "{peak} live versions of a counter written beside an execution (room {COUNTER_ROOM})"
    );
}
