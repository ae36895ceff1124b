//! Deep trees on small tables: every shape of the radix tree, checked against a dense model
//! (the integration tests reach only the shapes the cost model picks for their sizes).

use ndarray::{Array2, Axis};

use super::PagedVariable;

#[test]
fn every_tree_shape_matches_a_dense_model() {
    let width = 2;
    for (shift, levels) in [(1, 1), (1, 4), (2, 3), (3, 2)] {
        for (rows, rows_per_page) in [(1, 1), (5, 2), (37, 1)] {
            let init = Array2::from_shape_fn((rows, width), |(r, c)| (r * width + c) as i64);
            let table = PagedVariable::builder(init.clone())
                .rows_per_page(rows_per_page)
                .tree(shift, levels)
                .build()
                .unwrap();
            let mut model = init;
            let before = table.read_owned();
            let mut state = 0x9e37_79b9_u64 ^ (shift as u64 * 31 + rows as u64);
            for step in 0..12 {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                let ids: Vec<usize> = (0..3)
                    .map(|i| (state >> (8 * i + 16)) as usize % rows)
                    .collect();
                let vals = Array2::from_elem((3, width), step as i64 + 1);
                if step % 4 == 3 {
                    ids.iter()
                        .zip(vals.rows())
                        .for_each(|(&i, v)| model.row_mut(i).assign(&v));
                    table.scatter_update(&ids, &vals).unwrap();
                } else {
                    ids.iter().zip(vals.rows()).for_each(|(&i, v)| {
                        let mut row = model.row_mut(i);
                        row += &v;
                    });
                    table.scatter_add(&ids, &vals).unwrap();
                }
                let now = table.read();
                let what = format!("shift {shift}, levels {levels}, rows {rows}, step {step}");
                assert_eq!(now.to_array(), model.clone().into_dyn(), "{what}");
                assert_eq!(
                    now.gather(&ids).unwrap(),
                    model.select(Axis(0), &ids).into_dyn()
                );
            }
            let first = Array2::from_shape_fn((rows, width), |(r, c)| (r * width + c) as i64);
            assert_eq!(
                before.to_array(),
                first.into_dyn(),
                "a snapshot never changes"
            );
        }
    }
}

/// What the chain of `book::chain` does, step by step, with a store snapshot's registration
/// made by hand (so that the interleavings are fixed, not raced).
mod chain {
    use ndarray::Array2;

    use crate::horizon::Registration;
    use crate::paged::{PagedTable, PagedVariable};
    use crate::sync::{epoch, Ordering};

    /// The horizon is global: these tests register snapshots by hand, so they run one at a
    /// time (no other unit test registers one).
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn table() -> PagedVariable<i64> {
        PagedVariable::builder(Array2::zeros((4, 1)))
            .rows_per_page(1)
            .build()
            .unwrap()
    }

    fn add(v: &PagedVariable<i64>) {
        v.scatter_add(&[0], &Array2::ones((1, 1))).unwrap();
    }

    /// A store snapshot in progress at the clock's current value.
    fn in_progress() -> Registration {
        let registration = Registration::begin();
        registration.at(crate::record::tick());
        registration
    }

    fn prev(t: &PagedTable<i64>) -> *mut PagedTable<i64> {
        t.prev.load(Ordering::Relaxed)
    }

    /// Lets crossbeam-epoch run what is deferred: every grace period passes.
    fn settle() {
        for _ in 0..8 {
            epoch::pin().flush();
        }
    }

    /// A table a snapshot kept (its count held, as a store snapshot held for a checkpoint
    /// holds it) keeps its link only while a snapshot is in progress: the first write that
    /// finds none cuts it, so later writes do not carry it (nor scan for it).
    #[test]
    fn a_held_tables_link_is_cut_once_no_snapshot_is_in_progress() {
        let _serial = serial();
        let v = table();
        let snapshot = in_progress();
        add(&v); // committed after the snapshot's tick: links to version 0
        let held = v.read_owned();
        assert!(!prev(&held).is_null(), "a write during a snapshot links");
        drop(snapshot);
        add(&v);
        assert!(
            prev(&held).is_null(),
            "the link survived a write with no snapshot"
        );
        assert!(prev(&v.read()).is_null());
    }

    /// A walker standing on a table through a link that a later write cuts: the table is not
    /// reused (its count stays) until the walker unpins, however many writes follow.
    #[test]
    fn a_cut_link_waits_for_the_walkers_pinned_before_the_cut() {
        let _serial = serial();
        let v = table();
        let snapshot = in_progress();
        add(&v); // links to version 0
        settle();
        add(&v);
        settle(); // the replaced tables' head counts are released at the next write
        add(&v);
        let head = v.read();
        let walker = epoch::pin(); // a snapshot's walk, standing on the linked table
        let on: *const PagedTable<i64> = prev(&head);
        assert!(!on.is_null());
        // SAFETY: linked, so counted, and we are pinned.
        let number = unsafe { &*on }.number;
        drop(head);
        drop(snapshot);
        for _ in 0..6 {
            add(&v); // the first cuts the link; none may release it while `walker` is pinned
        }
        // SAFETY: the cut link's count keeps it alive while we are pinned.
        let refs = unsafe { &*on }.refs.load(Ordering::Relaxed);
        assert!(refs >= 1, "a cut link was released under a pinned walker");
        // SAFETY: as above; never reused while counted.
        let now = unsafe { &*on }.number;
        assert_eq!(now, number, "reused under a pinned walker");
        drop(walker);
    }

    /// A variable dropped while its tables still have links (a snapshot in progress, and a
    /// held table with a link): every count is released and the book freed, down to its last
    /// page, once the holders let go.
    #[test]
    fn a_variable_dropped_with_links_frees_its_book() {
        let _serial = serial();
        let v = table();
        let pages = std::sync::Arc::clone(&v.inner.pages);
        let snapshot = in_progress();
        add(&v);
        let held = v.read_owned();
        add(&v);
        add(&v);
        assert!(!prev(&held).is_null());
        drop(v);
        drop(snapshot);
        drop(held);
        // Until the epoch has let the last table go: other unit tests run beside this one,
        // and one descheduled while pinned holds the epoch back for as long as it is off its
        // core, so the test waits for the table, not a fixed number of rounds. A leak never
        // gets there.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            settle();
            crate::pool::free_orphans();
            if pages.load(Ordering::Relaxed) == 0 {
                return;
            }
            std::thread::yield_now(); // polling, not synchronisation: the count ends it
        }
        panic!("{} pages still allocated", pages.load(Ordering::Relaxed));
    }

    /// The links below a head, counted.
    fn chain_length(v: &PagedVariable<i64>) -> usize {
        let head = v.read();
        let mut table: &PagedTable<i64> = &head;
        let mut n = 0;
        // SAFETY: pinned by `head`, and every linked table is counted.
        while let Some(older) = unsafe { prev(table).as_ref() } {
            (table, n) = (older, n + 1);
        }
        n
    }

    /// Section commits during one store snapshot (no tick between them) keep one link, as
    /// plain writes do: `settle` moves the head's link past the tables committed at its own
    /// timestamp. (Keeping the link to the table before would make a chain of every commit,
    /// which each commit's cut then walks.)
    #[test]
    fn section_commits_during_one_snapshot_keep_one_link() {
        let _serial = serial();
        let (plain, paged) = (table(), table());
        let steps = crate::Variable::new(ndarray::arr0(0i64));
        let section = crate::CriticalSection::builder()
            .paged(&paged)
            .resource(&steps)
            .build()
            .unwrap();
        let snapshot = in_progress();
        // Under miri 40 (~8 minutes for 2,000): still four times the links allowed below.
        let commits = if cfg!(miri) { 40 } else { 2000 };
        for _ in 0..commits {
            add(&plain);
            section
                .execute(|tx| {
                    tx.scatter_add(&paged, &[0], &Array2::ones((1, 1)))?;
                    tx.assign_add(&steps, &ndarray::arr0(1))
                })
                .unwrap();
        }
        let (p, s) = (chain_length(&plain), chain_length(&paged));
        drop(snapshot);
        // One link per tick of the clock: none here, but other unit tests (record's) may
        // tick it meanwhile, a few times at most.
        assert!(s <= 10, "links: {s} (section commits), {p} (plain writes)");
        assert_eq!(paged.read().row(0).unwrap()[[0]], commits);
    }
}

/// Under Tree Borrows in CI, as the rest of this file (a section pins the real epoch).
mod section {
    use ndarray::{arr2, Array2};

    use crate::{CriticalSection, Error, PagedVariable};

    /// A whole-value write staged on a paged table (what a restore does), then rows added:
    /// a gather with repeated indices sees both, once each, at every position.
    #[test]
    fn a_gather_sees_a_staged_assignment_and_rows_once_per_position() {
        let table = PagedVariable::new(Array2::<i64>::zeros((3, 2))).unwrap();
        let section = CriticalSection::builder().paged(&table).build().unwrap();
        section
            .execute(|tx| {
                let value = arr2(&[[1, 1], [2, 2], [3, 3]]).into_dyn();
                tx.assign_paged(&table, &value)?;
                tx.scatter_add(&table, &[1], &arr2(&[[10, 10]]))?;
                let seen = tx.gather(&table, &[1, 0, 1])?;
                assert_eq!(seen, arr2(&[[12, 12], [1, 1], [12, 12]]).into_dyn());
                Ok::<_, Error>(())
            })
            .unwrap();
        assert_eq!(
            table.read().to_array(),
            arr2(&[[1, 1], [12, 12], [3, 3]]).into_dyn()
        );
    }
}
