//! Promise 7 with readers holding snapshots: a variable keeps at most the versions its
//! snapshots show plus a small constant. A `Snapshot` from `read()` holds its own version in a
//! hold slot and no longer pins the epoch, so a snapshot kept while a writer churns holds back
//! only itself. (Before holds, the same test kept every version the writer retired: the
//! reader's pin stopped the epoch.)

use std::sync::mpsc;

use mvtensor::Variable;
use ndarray::{ArrayD, IxDyn};

use crate::common;
use common::{quiesce, scaled};

/// A reader keeps three snapshots (taken between writes) while the writer writes thousands
/// of times: after every write the variable has at most the writer's own working set (the
/// head and one pooled spare) plus the three held versions;
/// the snapshots never change; once they are dropped, the held versions come back.
#[test]
fn snapshots_held_across_thousands_of_writes_hold_back_only_their_versions() {
    alone!();
    // 64 KiB versions: each is retired in a batch of its own and reclaimed before its write
    // returns, so the count is exact at every write (small ones come back a batch at a time).
    // Miri takes 5 minutes over those: there the tensor is tiny and the counts not checked.
    let len = scaled(16, 16 * 1024);
    let exact = !cfg!(miri);
    let writes = scaled(6, 3_000);
    let v = Variable::new(ArrayD::<f32>::zeros(IxDyn(&[len])));
    let one = ArrayD::<f32>::ones(IxDyn(&[len]));
    let (to_reader, reader_gets) = mpsc::channel::<()>();
    let (to_writer, writer_gets) = mpsc::channel::<u64>();
    let mut most = 0;
    std::thread::scope(|s| {
        let v = &v;
        let reader = s.spawn(move || {
            let mut held = Vec::new();
            for _ in 0..3 {
                let snapshot = v.read();
                to_writer.send(snapshot.version()).unwrap();
                held.push(snapshot);
                reader_gets.recv().unwrap(); // the writer has written more meanwhile
            }
            for snapshot in &held {
                let version = snapshot.version() as f32;
                assert!(
                    snapshot.iter().all(|&x| x == version),
                    "a held version changed"
                );
            }
            reader_gets.recv().unwrap(); // hold them until the writer is done
        });
        for round in 0..3 {
            writer_gets.recv().unwrap(); // the reader holds its snapshot
            for _ in 0..writes / 3 {
                v.assign_add(&one).unwrap();
                most = most.max(v.stats().live_versions);
            }
            eprintln!("after round {round}: {} live", v.stats().live_versions);
            to_reader.send(()).unwrap();
        }
        to_reader.send(()).unwrap();
        reader.join().unwrap();
    });
    eprintln!("at most {most} live versions with 3 snapshots held");
    assert!(
        !exact || most <= 2 + 3,
        "{most} live versions: the held snapshots held back more than themselves"
    );
    // Dropped: the next writes find the held versions free and the pool trims back.
    quiesce();
    for _ in 0..4 {
        v.assign_add(&one).unwrap();
    }
    quiesce();
    let after = v.stats().live_versions;
    assert!(
        !exact || after <= 3,
        "{after} live versions once the snapshots are gone"
    );
    assert_eq!(v.read()[[0]], writes as f32 / 3.0 * 3.0 + 4.0);
}
