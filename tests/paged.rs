//! Paged variables: a sequential model of every write, snapshots that never change, typed
//! errors that apply nothing, no lost update under concurrent sparse writers, and what a
//! `read()` snapshot's hold keeps (past its variable, its thread, its thread's slots).

use std::cell::RefCell;

use crate::common;

use common::scaled;
use mvtensor::{Error, PagedSnapshot, PagedVariable, Variable};
use ndarray::{s, Array1, Array2, ArrayD, Axis, IxDyn};

/// xorshift64*: reproducible indices without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Every write against a plain array, for several page sizes (one row per page, a size that
/// does not divide the rows, more rows per page than rows); every snapshot taken on the way
/// still shows the value it was taken at.
#[test]
fn paged_writes_match_a_dense_model_and_snapshots_never_change() {
    let (rows, width) = (scaled(37, 203), 3);
    for rows_per_page in [1, 5, 64, 1000] {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ rows_per_page as u64);
        let init = Array2::from_shape_fn((rows, width), |(r, c)| (r * width + c) as i64);
        let table = PagedVariable::builder(init.clone())
            .name("model")
            .rows_per_page(rows_per_page)
            .build()
            .unwrap();
        let mut model = init;
        let mut kept = Vec::new();
        for step in 0..scaled(24, 300) {
            let k = 1 + rng.below(6);
            let ids: Vec<usize> = (0..k).map(|_| rng.below(rows)).collect();
            let vals = Array2::from_shape_fn((k, width), |_| rng.below(100) as i64 - 50);
            let version = match rng.below(6) {
                0 => {
                    ids.iter().zip(vals.rows()).for_each(|(&i, v)| {
                        model.row_mut(i).assign(&v);
                    });
                    table.scatter_update(&ids, &vals)
                }
                1 => {
                    ids.iter().zip(vals.rows()).for_each(|(&i, v)| {
                        model.row_mut(i).scaled_add(3, &v);
                    });
                    table.scatter_scaled_add(3, &ids, &vals)
                }
                2 if step % 10 == 0 => {
                    let dense = Array2::from_elem((rows, width), step as i64);
                    model += &dense;
                    table.assign_add(&dense)
                }
                _ => {
                    ids.iter().zip(vals.rows()).for_each(|(&i, v)| {
                        let mut row = model.row_mut(i);
                        row += &v;
                    });
                    table.scatter_add(&ids, &vals)
                }
            }
            .unwrap();
            let snapshot = table.read_owned();
            assert_eq!(snapshot.version(), version);
            assert_eq!(snapshot.to_array(), model.clone().into_dyn(), "step {step}");
            assert_eq!(
                snapshot.gather(&ids).unwrap(),
                model.select(Axis(0), &ids).into_dyn()
            );
            if step % 7 == 0 {
                kept.push((snapshot, model.clone()));
            }
        }
        for (snapshot, then) in &kept {
            assert_eq!(
                snapshot.to_array(),
                then.clone().into_dyn(),
                "a snapshot changed"
            );
            let mid = rows / 2;
            assert_eq!(
                snapshot.rows(1..mid).unwrap(),
                then.slice(s![1..mid, ..]).into_dyn()
            );
            assert_eq!(
                snapshot.row(rows - 1).unwrap(),
                then.row(rows - 1).into_dyn()
            );
        }
    }
}

/// A gather copies its rows a group of paths at a time into one array: more indices than a
/// group (repeats included), rows of one and of several pages, and a table of more than two
/// axes (whose array is built the general way) all match ndarray's `select`.
#[test]
fn a_gather_of_many_rows_and_of_a_3d_table_matches_select() {
    let mut rng = Rng(7);
    let ids: Vec<usize> = (0..75).map(|_| rng.below(50)).collect();
    for rows_per_page in [1, 4] {
        let value =
            ArrayD::from_shape_fn(IxDyn(&[50, 2, 3]), |i| (i[0] * 6 + i[1] * 3 + i[2]) as i64);
        let table = PagedVariable::builder(value.clone())
            .rows_per_page(rows_per_page)
            .build()
            .unwrap();
        let snapshot = table.read();
        assert_eq!(snapshot.gather(&ids).unwrap(), value.select(Axis(0), &ids));
        let matrix = value.into_shape_with_order((50, 6)).unwrap();
        let table = PagedVariable::builder(matrix.clone())
            .rows_per_page(rows_per_page)
            .build()
            .unwrap();
        let gathered = table.read().gather(&ids).unwrap();
        assert_eq!(gathered, matrix.select(Axis(0), &ids).into_dyn());
        assert_eq!(table.read().gather(&[]).unwrap().shape(), &[0, 6]);
    }
}

#[test]
fn bad_input_is_a_typed_error_and_applies_nothing() {
    let table = PagedVariable::builder(Array2::<f32>::zeros((10, 4)))
        .name("emb")
        .build()
        .unwrap();
    let err = table
        .scatter_add(&[1, 10], &Array2::ones((2, 4)))
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::IndexOutOfRange {
                index: 10,
                bound: 10,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("emb"), "{err}");
    let err = table.scatter_add(&[1], &Array2::ones((1, 3))).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { .. }), "{err}");
    let err = table.assign_add(&Array2::ones((10, 3))).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { .. }), "{err}");
    let snapshot = table.read();
    assert!(matches!(
        snapshot.row(10),
        Err(Error::IndexOutOfRange { .. })
    ));
    assert!(matches!(
        snapshot.gather(&[0, 11]),
        Err(Error::IndexOutOfRange { .. })
    ));
    // The first index past the rows is the one named, not the largest.
    assert!(matches!(
        snapshot.gather(&[3, 12, 0, 40, 10]),
        Err(Error::IndexOutOfRange {
            index: 12,
            bound: 10,
            ..
        })
    ));
    assert!(matches!(
        snapshot.rows(3..11),
        Err(Error::IndexOutOfRange { .. })
    ));
    #[allow(clippy::reversed_empty_ranges)]
    let backwards = snapshot.rows(5..4);
    // Not an index past the rows (it reported one, with a wrong bound): a range refused.
    assert!(matches!(
        backwards,
        Err(Error::InvalidSetting {
            setting: "rows",
            ..
        })
    ));
    assert_eq!(snapshot.version(), 0, "nothing was applied");
    assert_eq!(snapshot.to_array(), ArrayD::<f32>::zeros(IxDyn(&[10, 4])));
    let scalar = PagedVariable::new(ndarray::arr0(1.0f32));
    assert!(matches!(scalar, Err(Error::RankMismatch { .. })));
    // An empty table and empty rows are fine.
    let empty = PagedVariable::new(Array2::<f32>::zeros((0, 4))).unwrap();
    assert_eq!(empty.scatter_add(&[], &Array2::zeros((0, 4))).unwrap(), 0); // no version
    let narrow = PagedVariable::new(Array2::<f32>::zeros((3, 0))).unwrap();
    assert_eq!(
        narrow.scatter_add(&[2, 2], &Array2::zeros((2, 0))).unwrap(),
        1
    );
    // A page size past the rows (even one whose page length would overflow) is one page.
    let whole = PagedVariable::builder(Array2::<f32>::zeros((100, 64)))
        .rows_per_page((1 << 58) + 1)
        .build()
        .unwrap();
    whole.scatter_add(&[99], &Array2::ones((1, 64))).unwrap();
    assert_eq!(whole.read().to_array().sum(), 64.0);
    assert_eq!(whole.stats().table_pages, 1);
}

/// Threads add ones to random rows (Zipf-like: low rows far more often), all at once, while a
/// reader in lockstep with them (`common::while_looking`) checks that each snapshot is a state
/// some prefix of the writes produced: every write adds 1 to two rows, so the table's sum is
/// even and never decreases, and some snapshots fall between the first write and the last. At
/// the end each row holds exactly the number of times it was hit: no update lost. Pages of one
/// row (each copied fused with its first add, then added to by later deltas of the same pass)
/// and of four.
#[test]
fn concurrent_sparse_writes_lose_nothing() {
    for rows_per_page in [1, 4] {
        sparse_writers_and_a_reader(rows_per_page);
    }
}

fn sparse_writers_and_a_reader(rows_per_page: usize) {
    let (rows, width, threads, steps) = (scaled(64, 2_000), 8, 4, scaled(30, 2_000));
    let table = PagedVariable::builder(Array2::<i64>::zeros((rows, width)))
        .rows_per_page(rows_per_page)
        .build()
        .unwrap();
    // Each writer's generator and hits, behind a lock only that writer takes.
    let state: Vec<_> = (0..threads)
        .map(|t| std::sync::Mutex::new((Rng(t as u64 + 1), Array1::<i64>::zeros(rows))))
        .collect();
    let writers: Vec<_> = state
        .iter()
        .map(|state| {
            let table = &table;
            move |_| {
                let (rng, hits) = &mut *state.lock().unwrap();
                let top = rng.below(rows) + 1;
                let a = rng.below(top); // skewed to low rows
                let b = (a + 1 + rng.below(rows - 1)) % rows;
                hits[a] += 1;
                hits[b] += 1;
                table
                    .scatter_add(&[a, b], &Array2::ones((2, width)))
                    .unwrap();
            }
        })
        .collect();
    let writers: Vec<&(dyn Fn(usize) + Sync)> = writers.iter().map(|w| w as _).collect();
    let total = (2 * width * threads * steps) as i64;
    let (mut last, mut mid_way) = (0, 0); // mid-way: looks between the first write and the last
    common::while_looking(&writers, steps, || {
        let snapshot = table.read();
        let sum = snapshot.to_array().sum();
        assert_eq!(sum % (2 * width as i64), 0, "half a write seen");
        assert!(sum >= last, "the table went back in time");
        assert_eq!(snapshot.to_array().sum(), sum, "a snapshot changed");
        mid_way += usize::from(sum > 0 && sum < total);
        last = sum;
    });
    assert!(mid_way > 0, "no look while the writes ran");
    let hits: Vec<Array1<i64>> = state
        .into_iter()
        .map(|s| s.into_inner().unwrap().1)
        .collect();
    let expected = hits
        .iter()
        .fold(Array1::<i64>::zeros(rows), |acc, h| acc + h);
    let value = table.read().to_array();
    for r in 0..rows {
        assert!(
            value
                .index_axis(Axis(0), r)
                .iter()
                .all(|&x| x == expected[r]),
            "row {r}, {rows_per_page} rows a page"
        );
    }
}

/// An owned snapshot is `Send`, keeps its version after the variable is gone, and its pages
/// are given back once it is dropped.
#[test]
fn an_owned_snapshot_outlives_its_variable() {
    let table = PagedVariable::new(Array2::<f64>::ones((50, 2))).unwrap();
    let before = table.read_owned();
    table.scatter_add(&[3], &Array2::ones((1, 2))).unwrap();
    drop(table);
    let sum = std::thread::spawn(move || before.to_array().sum())
        .join()
        .unwrap();
    assert_eq!(sum, 100.0);
}

/// One thread keeps more `read()` snapshots than it has hold slots (eight): the first eight
/// hold their tables in slots, the rest take counts; every one keeps its version through
/// many more writes (which replace every page many times over), passes to an owned snapshot
/// that does too, and lets go when dropped, in any order.
#[test]
fn more_read_snapshots_than_hold_slots_each_keep_their_table() {
    let (rows, width) = (16, 4);
    let table = PagedVariable::builder(Array2::<i64>::zeros((rows, width)))
        .rows_per_page(1)
        .build()
        .unwrap();
    let ones = Array2::<i64>::ones((rows, width));
    let all: Vec<usize> = (0..rows).collect();
    let mut kept = Vec::new();
    for version in 0..12 {
        let snapshot = table.read();
        assert_eq!(snapshot.version(), version);
        kept.push(Some(snapshot));
        table.scatter_add(&all, &ones).unwrap();
    }
    for _ in 0..scaled(20, 500) {
        table.scatter_add(&all, &ones).unwrap();
    }
    let owned: Vec<_> = kept
        .iter()
        .flatten()
        .map(|s| s.to_owned_snapshot())
        .collect();
    for (i, snapshot) in kept.iter().flatten().enumerate() {
        assert!(
            snapshot.to_array().iter().all(|&x| x == i as i64),
            "snapshot {i} changed"
        );
    }
    // Dropped out of order: slots and counts alike.
    for i in [3, 11, 0, 9, 7, 1, 10, 2, 8, 4, 6, 5] {
        drop(kept[i].take());
    }
    for _ in 0..scaled(20, 500) {
        table.scatter_add(&all, &ones).unwrap();
    }
    for (i, o) in owned.iter().enumerate() {
        assert!(
            o.to_array().iter().all(|&x| x == i as i64),
            "owned {i} changed"
        );
    }
    let writes = 12 + 2 * scaled(20, 500) as i64;
    assert!(table.read().to_array().iter().all(|&x| x == writes));
}

fn pairs(rows: usize) -> PagedVariable<i64> {
    PagedVariable::builder(Array2::zeros((rows, 2)))
        .rows_per_page(1)
        .build()
        .unwrap()
}

fn add_all(table: &PagedVariable<i64>, rows: usize) {
    let ids: Vec<usize> = (0..rows).collect();
    table.scatter_add(&ids, &Array2::ones((rows, 2))).unwrap();
}

/// Writes of another variable: they push the epoch along (the dropped variable's deferred
/// releases run), recheck the held list and free orphaned books.
fn churn() {
    let other = Variable::new(ArrayD::<i64>::zeros(IxDyn(&[4])));
    let one = ArrayD::<i64>::ones(IxDyn(&[4]));
    for _ in 0..64 {
        other.assign_add(&one).unwrap();
    }
}

/// A `read()` snapshot holds its table past its variable's drop (the head's count, given up
/// through crossbeam, meets the hold and waits on the held list), passes to an owned
/// snapshot, and the book is freed once both are gone.
#[test]
fn a_held_snapshot_outlives_its_variable() {
    let t = pairs(4);
    add_all(&t, 4);
    let snapshot = t.read();
    let owned_before = t.read_owned();
    drop(t); // its head count goes through crossbeam, and meets the hold
    churn();
    assert_eq!(snapshot.to_array().sum(), 8, "a held table changed");
    let owned = snapshot.to_owned_snapshot();
    drop(snapshot);
    churn(); // the parked count goes; the owned one keeps the table and its book
    assert_eq!(owned.to_array().sum(), 8, "an owned table changed");
    assert_eq!(owned_before.to_array().sum(), 8);
    drop((owned, owned_before));
    churn(); // the book is orphaned and freed
}

/// A thread that exits with a `read()` snapshot in a thread-local keeps its block and the
/// table for good; writes go on, and new threads (one may get a block given back) hold
/// their own snapshots across writes.
#[test]
fn a_thread_exits_holding_a_paged_snapshot_in_a_thread_local() {
    thread_local! {
        static KEPT: RefCell<Option<PagedSnapshot<i64>>> = const { RefCell::new(None) };
    }
    let t = pairs(4);
    std::thread::scope(|s| {
        s.spawn(|| {
            let snapshot = t.read();
            KEPT.with(|k| *k.borrow_mut() = Some(snapshot));
        });
    });
    for _ in 0..8 {
        add_all(&t, 4);
    }
    churn();
    assert_eq!(t.read().to_array().sum(), 64);
    // New threads (one may get the exited thread's block) read and hold while writes go on.
    for _ in 0..4 {
        std::thread::scope(|s| {
            s.spawn(|| {
                let snapshot = t.read();
                let v = snapshot.to_array();
                add_all(&t, 4);
                add_all(&t, 4);
                churn();
                assert_eq!(snapshot.to_array(), v);
            });
        });
    }
}
