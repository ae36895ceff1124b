//! Promise 7, after a stall: a large variable whose writers allocated extra versions while a
//! pinned thread held reclamation back keeps its current version and two spares once nobody
//! is pinned and it is written again, whichever way it is written.

use std::sync::mpsc;

use mvtensor::Error;

use crate::common;
use common::{large_with_section, quiesce};

#[test]
#[cfg_attr(
    miri,
    ignore = "needs 64 KiB versions: minutes under miri, and no unsafe code of its own"
)]
fn a_stalled_variable_trims_back_to_two_spares_after_a_write() -> Result<(), Error> {
    alone!(Ok(()));
    let len = 64 * 1024;
    let (v, delta, section) = large_with_section(len); // 256 KiB of f32: a large version, trimmed to two spares
    let writes: [&dyn Fn() -> Result<(), Error>; 2] = [&|| v.assign_add(&delta).map(drop), &|| {
        section.execute(|tx| tx.assign_add(&v, &delta))
    }];
    for (way, write) in writes.iter().enumerate() {
        // A thread pinned across ten writes: none of the versions they replace can come
        // back, so each write allocates a fresh one.
        let (pinned, unpin) = (mpsc::channel(), mpsc::channel::<()>());
        std::thread::scope(|s| -> Result<(), Error> {
            let pinner = s.spawn(move || {
                let _guard = crossbeam_epoch::pin();
                pinned.0.send(()).unwrap();
                unpin.1.recv().unwrap();
            });
            pinned.1.recv().unwrap();
            for _ in 0..10 {
                write()?;
            }
            assert!(v.stats().live_versions >= 10, "way {way}: {:?}", v.stats());
            unpin.0.send(()).unwrap();
            pinner.join().unwrap(); // not left to the scope: see `common::quiesce`
            Ok(())
        })?;
        // Nobody pinned: every retired version comes home, then one more write trims.
        quiesce();
        write()?;
        quiesce();
        assert!(
            v.stats().live_versions <= 3,
            "way {way}: {:?} (the current version and two spares)",
            v.stats()
        );
    }
    assert_eq!(v.read()[[len - 1]], 22.0);
    Ok(())
}
