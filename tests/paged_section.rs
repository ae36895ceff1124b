//! Paged variables as critical-section resources: rows staged in an execution commit
//! together with the section's other writes, plain writes wait for the section's tickets,
//! and a failed execution leaves nothing. (Pages coming back: `paged_section_memory.rs`.)

use crate::common;

use common::scaled;
use mvtensor::{CriticalSection, Error, PagedVariable, Store, Variable};
use ndarray::{arr0, Array2, Ix0};

fn ones(rows: usize, width: usize) -> Array2<i64> {
    Array2::ones((rows, width))
}

fn sum(table: &PagedVariable<i64>) -> i64 {
    table.read().to_array().sum()
}

#[test]
fn an_execution_sees_its_staged_rows_and_commits_them_with_a_dense_write() {
    let table = PagedVariable::builder(Array2::<i64>::zeros((10, 3)))
        .rows_per_page(4)
        .build()
        .unwrap();
    let steps = Variable::new(arr0(0i64));
    let section = common::table_and_counter(&table, &steps);
    section
        .execute(|tx| {
            tx.scatter_add(&table, &[1, 9, 1], &ones(3, 3))?;
            tx.scatter_update(&table, &[5], &(ones(1, 3) * 7))?;
            tx.scatter_scaled_add(&table, 3, &[5, 9], &ones(2, 3))?;
            let seen = tx.gather(&table, &[1, 5, 9, 0, 1])?;
            assert_eq!(
                seen.index_axis(ndarray::Axis(1), 0)
                    .iter()
                    .copied()
                    .collect::<Vec<_>>(),
                vec![2, 10, 4, 0, 2]
            );
            assert_eq!(table.read().row(1)?[[0]], 0, "not committed yet");
            tx.assign_add(&steps, &arr0(1))?;
            Ok::<_, Error>(())
        })
        .unwrap();
    let after = table.read();
    assert_eq!(after.version(), 1, "one table for the whole batch");
    assert_eq!(
        after
            .gather(&[1, 5, 9])
            .unwrap()
            .index_axis(ndarray::Axis(1), 2)
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        vec![2, 10, 4]
    );
    assert_eq!(steps.read()[[]], 1);
}

#[test]
fn a_failed_execution_stages_nothing_and_bad_rows_are_refused() {
    let table = PagedVariable::new(Array2::<i64>::zeros((4, 2))).unwrap();
    let other = PagedVariable::new(Array2::<i64>::zeros((4, 2))).unwrap();
    let section = CriticalSection::builder().paged(&table).build().unwrap();
    let failed = section.execute(|tx| {
        tx.scatter_add(&table, &[0], &ones(1, 2))?;
        Err::<(), _>(Error::Reentrant {
            running: "a test".into(),
            attempted: "to fail".into(),
        })
    });
    assert!(failed.is_err());
    section
        .execute(|tx| {
            assert!(matches!(
                tx.scatter_add(&table, &[4], &ones(1, 2)),
                Err(Error::IndexOutOfRange {
                    index: 4,
                    bound: 4,
                    ..
                })
            ));
            assert!(matches!(
                tx.scatter_add(&table, &[1], &ones(1, 3)),
                Err(Error::ShapeMismatch { .. })
            ));
            assert!(matches!(
                tx.scatter_add(&other, &[1], &ones(1, 2)),
                Err(Error::NotInResourceSet { .. })
            ));
            assert_eq!(tx.gather(&other, &[1])?[[0, 0]], 0, "read outside the set");
            tx.scatter_add(&table, &[3], &ones(1, 2))?;
            Ok::<_, Error>(())
        })
        .unwrap();
    let after = table.read().to_array();
    assert_eq!(
        after
            .index_axis(ndarray::Axis(1), 0)
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        vec![0, 0, 0, 1],
        "only the second execution"
    );
    assert_eq!(table.version(), 1);
}

#[test]
fn a_direct_write_inside_an_execution_is_refused_only_while_a_section_holds_the_table() {
    let table = PagedVariable::new(Array2::<i64>::zeros((4, 2))).unwrap();
    let counter = Variable::new(arr0(0i64));
    let outer = CriticalSection::builder()
        .resource(&counter)
        .build()
        .unwrap();
    outer
        .execute(|_| table.scatter_add(&[0], &ones(1, 2)).map(drop))
        .unwrap();
    let holder = CriticalSection::builder().paged(&table).build().unwrap();
    let refused = outer.execute(|_| table.scatter_add(&[0], &ones(1, 2)).map(drop));
    assert!(
        matches!(refused, Err(Error::Reentrant { .. })),
        "{refused:?}"
    );
    table.scatter_add(&[0], &ones(1, 2)).unwrap(); // outside: waits its ticket
    drop(holder);
    outer
        .execute(|_| table.scatter_add(&[0], &ones(1, 2)).map(drop))
        .unwrap();
    assert_eq!(table.read().row(0).unwrap()[[0]], 3);
}

/// Plain writers and executions of the same table: an execution sees the table unchanged
/// from its start to its commit, and no update is lost.
#[test]
fn plain_writes_wait_for_the_sections_tickets() {
    let rounds = scaled(20, 2000);
    let table = PagedVariable::new(Array2::<i64>::zeros((64, 4))).unwrap();
    let section = CriticalSection::builder().paged(&table).build().unwrap();
    use std::sync::atomic::{AtomicUsize, Ordering};
    let written = AtomicUsize::new(0);
    let write = |i: usize| {
        table.scatter_add(&[i % 64, 0], &ones(2, 4)).unwrap();
        written.fetch_add(1, Ordering::SeqCst);
    };
    let (mut executions, mut mid_way) = (0, 0);
    common::while_looking(&[&write], rounds, || {
        let i = executions;
        let writes = written.load(Ordering::SeqCst);
        mid_way += usize::from(writes > 0 && writes < rounds);
        section
            .execute(|tx| {
                let before = tx.gather(&table, &[0, i % 64])?;
                // A plain write between these two reads would show here.
                for _ in 0..50 {
                    std::hint::spin_loop();
                }
                assert_eq!(tx.gather(&table, &[0, i % 64])?, before);
                tx.scatter_add(&table, &[i % 64], &ones(1, 4))?;
                Ok::<_, Error>(())
            })
            .unwrap();
        executions += 1;
    });
    assert!(mid_way > 0, "no execution while the plain writes ran");
    let expected = 4 * (2 * rounds + executions) as i64;
    assert_eq!(sum(&table), expected, "a lost update");
}

/// A reader that sees a section's rows must see its dense write too: the table is read
/// first, the counter after, and the counter is never behind the table.
#[test]
fn readers_see_a_sections_rows_and_counter_together() {
    let rounds = scaled(20, 3000);
    let table = PagedVariable::new(Array2::<i64>::zeros((16, 2))).unwrap();
    let steps = Variable::new(arr0(0i64));
    let section = common::table_and_counter(&table, &steps);
    let step = |i: usize| {
        section
            .execute(|tx| {
                tx.scatter_add(&table, &[i % 16], &ones(1, 2))?;
                tx.assign_add(&steps, &arr0(1))
            })
            .unwrap();
    };
    let mut mid_way = 0; // looks between the first step and the last
    common::while_looking(&[&step], rounds, || {
        let rows = sum(&table) / 2;
        let counted = steps.read()[[]];
        assert!(
            counted >= rows,
            "the table showed {rows} steps, the counter {counted}"
        );
        mid_way += usize::from(rows > 0 && rows < rounds as i64);
    });
    assert!(mid_way > 0, "no look while the steps ran");
    assert_eq!(sum(&table), 2 * rounds as i64);
}

/// Store snapshots cut a section's commit whole: the counter equals the table's rows.
#[test]
fn store_snapshots_show_a_sections_commit_whole() {
    let rounds = scaled(20, 2000);
    let store = Store::new();
    let table = store.paged("emb", Array2::<i64>::zeros((32, 2))).unwrap();
    let steps = store.variable("steps", arr0(0i64)).unwrap();
    let section = common::table_and_counter(&table, &steps);
    let step = |i: usize| {
        section
            .execute(|tx| {
                tx.scatter_add(&table, &[i % 32, (i * 7) % 32], &ones(2, 2))?;
                tx.assign_add(&steps, &arr0(1))
            })
            .unwrap();
    };
    let mut mid_way = 0; // cuts between the first commit and the last
    common::while_looking(&[&step], rounds, || {
        let snapshot = store.snapshot();
        let rows = snapshot.get_paged::<i64>("emb").unwrap().to_array().sum();
        let counted = snapshot.get::<i64, Ix0>("steps").unwrap()[[]];
        assert_eq!(rows, 4 * counted, "a cut through a section's commit");
        mid_way += usize::from(counted > 0 && counted < rounds as i64);
    });
    assert!(mid_way > 0, "no cut while the sections ran");
}

/// Row operations take a variable, a reference to one or an `Arc` of one, dense or paged.
#[test]
fn row_operations_take_references_and_arcs() {
    let table = std::sync::Arc::new(PagedVariable::new(Array2::<i64>::zeros((4, 2))).unwrap());
    let dense = std::sync::Arc::new(Variable::new(Array2::<i64>::zeros((4, 2))));
    let section = CriticalSection::builder()
        .paged(&table)
        .resource(&dense)
        .build()
        .unwrap();
    let by_ref: &Variable<i64, ndarray::Ix2> = &dense;
    section
        .execute(|tx| {
            tx.scatter_add(&table, &[1], &ones(1, 2))?;
            tx.scatter_add(&dense, &[2], &ones(1, 2))?;
            tx.scatter_update(&by_ref, &[3], &ones(1, 2))?;
            assert_eq!(tx.gather(&*table, &[1])?[[0, 0]], 1);
            assert_eq!(tx.gather(by_ref, &[2, 3])?.sum(), 4);
            Ok::<_, Error>(())
        })
        .unwrap();
    assert_eq!((sum(&table), dense.read().sum()), (2, 4));
}

/// Dense writes of a paged resource (`assign`, `assign_add`, `assign_sub`, `scaled_add`)
/// mixed with row writes, in executions that commit or fail: after each execution the table
/// is a sequential model's, and inside one `gather` sees the writes staged before it.
#[test]
fn dense_and_row_writes_of_a_paged_resource_match_a_sequential_model() {
    let (rows, width) = (9, 3);
    let start = Array2::from_shape_fn((rows, width), |(r, c)| (r * width + c) as i64);
    let table = PagedVariable::builder(start.clone())
        .rows_per_page(2)
        .build()
        .unwrap();
    let steps = Variable::new(arr0(0i64));
    let section = common::table_and_counter(&table, &steps);
    let mut model = start;
    let mut seed = 0x2545_f491_u64;
    let mut next = |bound: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % bound as u64) as usize
    };
    let executions = scaled(20, 200);
    let all: Vec<usize> = (0..rows).collect();
    for e in 0..executions {
        let ops: Vec<(usize, usize, i64)> = (0..1 + next(4))
            .map(|_| (next(6), next(rows), 1 + next(5) as i64))
            .collect();
        let fails = e % 5 == 4;
        let mut staged = model.clone();
        section
            .execute(|tx| {
                staged.assign(&model);
                for &(op, row, k) in &ops {
                    let delta = Array2::from_elem((rows, width), k);
                    match op {
                        0 => tx.assign_add(&table, &delta)?,
                        1 => tx.assign_sub(&table, &delta)?,
                        2 => tx.scaled_add(&table, -2, &delta)?,
                        3 => tx.assign(&table, delta.clone())?,
                        4 => tx.scatter_add(&table, &[row, row], &ones(2, width))?,
                        _ => tx.scatter_update(&table, &[row], &(ones(1, width) * k))?,
                    }
                    match op {
                        0 => staged += &delta,
                        1 => staged -= &delta,
                        2 => staged.scaled_add(-2, &delta),
                        3 => staged.assign(&delta),
                        4 => staged.row_mut(row).mapv_inplace(|x| x + 2),
                        _ => staged.row_mut(row).fill(k),
                    }
                    assert_eq!(tx.gather(&table, &all)?, staged.clone().into_dyn());
                }
                tx.assign_add(&steps, &arr0(1))?;
                if fails {
                    return Err(Error::Reentrant {
                        running: "a test".into(),
                        attempted: "to fail".into(),
                    });
                }
                Ok(())
            })
            .unwrap_or_else(|e| assert!(fails, "{e}"));
        if !fails {
            model.assign(&staged);
        }
        assert_eq!(
            table.read().to_array(),
            model.clone().into_dyn(),
            "after {e}"
        );
    }
    assert_eq!(steps.read()[[]], executions as i64 - executions as i64 / 5);
}

#[test]
fn a_dense_write_of_a_paged_resource_checks_its_shape_and_the_set() {
    let table = PagedVariable::builder(Array2::<i64>::zeros((4, 2)))
        .name("table")
        .build()
        .unwrap();
    let other = PagedVariable::new(Array2::<i64>::zeros((4, 2))).unwrap();
    let section = CriticalSection::builder().paged(&table).build().unwrap();
    section
        .execute(|tx| {
            let wrong = Array2::<i64>::ones((2, 4));
            for refused in [
                tx.assign_add(&table, &wrong),
                tx.assign_sub(&table, &wrong),
                tx.scaled_add(&table, 2, &wrong),
                tx.assign(&table, wrong.clone()),
            ] {
                match refused {
                    Err(Error::ShapeMismatch { variable, .. }) => assert_eq!(variable, "table"),
                    other => panic!("{other:?}"),
                }
            }
            assert!(matches!(
                tx.assign_add(&other, &ones(4, 2)),
                Err(Error::NotInResourceSet { .. })
            ));
            assert_eq!(
                tx.gather(&table, &[0, 3])?,
                Array2::<i64>::zeros((2, 2)).into_dyn()
            );
            tx.assign_add(&table, &ones(4, 2))
        })
        .unwrap();
    assert_eq!(table.read().to_array(), ones(4, 2).into_dyn());
    assert_eq!(table.version(), 1);
    assert_eq!(other.version(), 0);
}
