//! Promise 7 with a paged snapshot held: a `PagedSnapshot` from `read()` keeps its table in
//! a hold slot, as a dense `Snapshot` does, not by a pin.

use std::sync::mpsc;

use mvtensor::{PagedVariable, Variable};
use ndarray::{Array2, ArrayD, IxDyn};

use crate::common;
use common::scaled;

/// A `PagedSnapshot` from `read()` holds its table the same way: held across thousands of
/// writes of a dense variable and of the paged one, it holds back neither (the dense
/// variable keeps its working set; the paged one its bound plus the held table's pages),
/// its rows never change, and it passes to an owned snapshot that outlives it; once dropped,
/// its table's pages come back within a few writes. (Were the snapshot pinned for its life,
/// the dense variable would keep a version per write: its replaced versions would wait for
/// an epoch the reader's pin held back.)
#[test]
fn a_held_paged_snapshot_holds_back_no_other_version() {
    alone!();
    let len = scaled(16, 16 * 1024); // 64 KiB: reclaimed before each write returns
    let exact = !cfg!(miri);
    let writes = scaled(64, 47 * 64); // whole rounds of the rows
    let (rows, width) = (64, 16);
    let dense = Variable::new(ArrayD::<f32>::zeros(IxDyn(&[len])));
    let paged = PagedVariable::new(Array2::<f32>::zeros((rows, width))).unwrap();
    let one = ArrayD::<f32>::ones(IxDyn(&[len]));
    let row = Array2::<f32>::ones((1, width));
    let (to_reader, reader_gets) = mpsc::channel::<()>();
    let (to_writer, writer_gets) = mpsc::channel::<()>();
    let (mut most, mut most_pages) = (0, 0);
    let owned = std::thread::scope(|s| {
        let paged = &paged;
        let reader = s.spawn(move || {
            let snapshot = paged.read();
            assert_eq!(snapshot.version(), 0);
            to_writer.send(()).unwrap();
            reader_gets.recv().unwrap(); // the writer has written meanwhile
            let all = snapshot.to_array();
            assert!(all.iter().all(|&x| x == 0.0), "a held table changed");
            let owned = snapshot.to_owned_snapshot();
            drop(snapshot);
            owned
        });
        writer_gets.recv().unwrap(); // the reader holds its snapshot
        for i in 0..writes {
            dense.assign_add(&one).unwrap();
            paged.scatter_add(&[i % rows], &row).unwrap();
            most = most.max(dense.stats().live_versions);
            most_pages = most_pages.max(paged.stats().pages_allocated);
        }
        to_reader.send(()).unwrap();
        let owned = reader.join().unwrap();
        for i in 0..writes {
            paged.scatter_add(&[i % rows], &row).unwrap();
        }
        assert!(
            owned.to_array().iter().all(|&x| x == 0.0),
            "an owned table changed"
        );
        owned
    });
    eprintln!("at most {most} live dense versions, {most_pages} pages, a paged snapshot held");
    assert!(
        !exact || most <= 2,
        "{most} live versions of the dense variable: the paged snapshot held them back"
    );
    // The paged bound (`tests/paged_memory.rs`: the table, four writes of one page, 3 + 8
    // spares) and the held table's own pages.
    let table_pages = paged.stats().table_pages;
    assert!(
        !exact || most_pages <= 2 * table_pages + 4 + 11,
        "{most_pages} pages with one table held"
    );
    // Once both are dropped, the table's last count (parked on the held list while the
    // snapshot held it, then the owned one's) goes, and its pages come back within a few
    // writes.
    drop(owned);
    for i in 0..8 {
        paged.scatter_add(&[i % rows], &row).unwrap();
    }
    let after = paged.stats().pages_allocated;
    assert!(
        !exact || after <= table_pages + 4 + 11,
        "{after} pages once the snapshots are gone: the held table was never given back"
    );
    let expected = (2 * writes / rows) as f32;
    let now = paged.read().to_array();
    for (r, values) in now.rows().into_iter().enumerate() {
        let want = expected + if r < 8 { 1.0 } else { 0.0 }; // the 8 writes after
        assert!(values.iter().all(|&x| x == want), "row {r}: {values}");
    }
    // The same with the hold alone: held while every page is replaced, then dropped. (A
    // recheck that never released a parked table would pass everything else.)
    let snapshot = paged.read();
    for i in 0..rows {
        paged.scatter_add(&[i], &row).unwrap();
    }
    assert_eq!(snapshot.to_array(), now, "a held table changed");
    drop(snapshot);
    for i in 0..8 {
        paged.scatter_add(&[i], &row).unwrap();
    }
    let after = paged.stats().pages_allocated;
    assert!(
        !exact || after <= table_pages + 4 + 11,
        "{after} pages once the snapshot is gone: the held table was never given back"
    );
}
