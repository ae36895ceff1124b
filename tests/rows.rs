//! Row operations (scatter_add, scatter_scaled_add, scatter_update,
//! gather) on variables whose first axis is rows, also inside critical sections, combined
//! with concurrent writes; bad indices and shapes are typed errors that apply nothing.

use mvtensor::{CriticalSection, Error, Variable};
use ndarray::{arr2, s, Array1, Array2, Array3, ArrayD, Axis, IxDyn};

/// A small deterministic stream of numbers.
fn lcg(seed: &mut u64) -> u64 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *seed >> 33
}

#[test]
fn row_operations_match_a_sequential_model() {
    let (rows, cols, steps) = if cfg!(miri) {
        (5, 3, 30)
    } else {
        (50, 8, 2000)
    };
    let table = Variable::new(Array2::<i64>::zeros((rows, cols)));
    let mut model = Array2::<i64>::zeros((rows, cols));
    let mut seed = 7;
    for step in 0..steps {
        let k = 1 + lcg(&mut seed) as usize % 6;
        let ids: Vec<usize> = (0..k).map(|_| lcg(&mut seed) as usize % rows).collect();
        let vals =
            Array2::from_shape_fn((k, cols), |(i, j)| (step * 7 + i * 3 + j) as i64 % 11 - 5);
        match lcg(&mut seed) % 3 {
            0 => {
                table.scatter_add(&ids, &vals).unwrap();
                for (i, &id) in ids.iter().enumerate() {
                    let mut row = model.row_mut(id);
                    row += &vals.row(i);
                }
            }
            1 => {
                table.scatter_scaled_add(-3, &ids, &vals).unwrap();
                for (i, &id) in ids.iter().enumerate() {
                    model.row_mut(id).scaled_add(-3, &vals.row(i));
                }
            }
            _ => {
                table.scatter_update(&ids, &vals).unwrap();
                for (i, &id) in ids.iter().enumerate() {
                    model.row_mut(id).assign(&vals.row(i)); // the last of a repeated index wins
                }
            }
        }
        let probe: Vec<usize> = (0..3).map(|_| lcg(&mut seed) as usize % rows).collect();
        assert_eq!(
            table.gather(&probe).unwrap(),
            model.select(Axis(0), &probe),
            "step {step}"
        );
    }
    assert_eq!(*table.read(), model);
}

#[test]
fn rows_of_any_rank_and_layout() {
    let cubes = Variable::new(Array3::<f32>::zeros((3, 2, 2)));
    let one = Array3::from_shape_fn((1, 2, 2), |(_, i, j)| (i * 2 + j) as f32);
    cubes.scatter_add(&[2], &one).unwrap();
    assert_eq!(cubes.read().slice(s![2, .., ..]), one.slice(s![0, .., ..]));
    // Rows given as a transposed (non-standard) view are read in logical order.
    let table = Variable::new(Array2::<f32>::zeros((3, 2)));
    let src = arr2(&[[1.0f32, 2.0], [3.0, 4.0]]);
    table.scatter_update(&[0, 2], &src.t()).unwrap();
    assert_eq!(*table.read(), arr2(&[[1.0, 3.0], [0.0, 0.0], [2.0, 4.0]]));
}

#[test]
fn bad_indices_and_shapes_are_typed_errors_that_apply_nothing() {
    let table = Variable::builder(Array2::<f32>::zeros((4, 3)))
        .name("emb")
        .build();
    let two = Array2::<f32>::ones((2, 3));
    assert_eq!(
        table.scatter_add(&[1, 4], &two).unwrap_err(),
        Error::IndexOutOfRange {
            variable: "emb".into(),
            index: 4,
            bound: 4
        }
    );
    assert_eq!(
        table.scatter_update(&[1], &two).unwrap_err(),
        Error::ShapeMismatch {
            variable: "emb".into(),
            expected: vec![1, 3],
            found: vec![2, 3]
        }
    );
    assert!(matches!(
        table.gather(&[0, 9]),
        Err(Error::IndexOutOfRange { index: 9, .. })
    ));
    assert_eq!(table.version(), 0, "nothing applied");
    let scalar = Variable::new(ArrayD::<f32>::zeros(IxDyn(&[])));
    assert!(matches!(
        scalar.gather(&[]),
        Err(Error::RankMismatch { .. })
    ));
    assert!(matches!(
        scalar.scatter_add(&[0], &Array1::<f32>::ones(1)),
        Err(Error::RankMismatch { .. })
    ));
    let err = table
        .scatter_add(&[7], &Array2::<f32>::ones((1, 3)))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "index out of range on variable `emb`: row 7, but it has 4 rows"
    );
}

#[test]
fn concurrent_row_and_dense_updates_are_combined_without_losing_one() {
    let (threads, writes) = if cfg!(miri) { (2, 10) } else { (4, 3000) };
    let table = Variable::new(Array2::<i64>::zeros((16, 4)));
    std::thread::scope(|s| {
        for t in 0..threads {
            let table = &table;
            s.spawn(move || {
                let one_row = Array2::<i64>::ones((1, 4));
                let dense = Array2::<i64>::ones((16, 4));
                for i in 0..writes {
                    if t % 2 == 0 {
                        table.scatter_add(&[(t + i) % 16], &one_row).unwrap();
                    } else {
                        table.assign_add(&dense).unwrap();
                    }
                }
            });
        }
    });
    let dense_total = (threads / 2 * writes * 16 * 4) as i64;
    let row_total = (threads.div_ceil(2) * writes * 4) as i64;
    assert_eq!(table.read().sum(), dense_total + row_total);
    assert_eq!(table.stats().combined_deltas, (threads * writes) as u64);
}

#[test]
fn sections_scatter_in_place_and_roll_back_on_error() {
    let table = Variable::new(Array2::<f32>::zeros((4, 2)));
    let cs = CriticalSection::builder().resource(&table).build().unwrap();
    cs.execute(|tx| {
        tx.scatter_add(&table, &[1, 1], &arr2(&[[1.0, 1.0], [2.0, 2.0]]))?;
        tx.write(&table)?.row_mut(0).fill(5.0);
        tx.scatter_update(&table, &[3], &arr2(&[[9.0, 9.0]]))?;
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(
        *table.read(),
        arr2(&[[5.0, 5.0], [3.0, 3.0], [0.0, 0.0], [9.0, 9.0]])
    );
    let failed = cs.execute(|tx| {
        tx.scatter_add(&table, &[0], &arr2(&[[1.0, 1.0]]))?;
        tx.scatter_add(&table, &[4], &arr2(&[[1.0, 1.0]])) // out of range: the execution fails
    });
    assert!(matches!(
        failed,
        Err(Error::IndexOutOfRange {
            index: 4,
            bound: 4,
            ..
        })
    ));
    assert_eq!(
        table.read()[[0, 0]],
        5.0,
        "the failed execution left no trace"
    );
}

/// A scatter of no rows writes nothing, dense or paged: no version (it copied the whole
/// dense tensor and made one), the current version returned; it is still checked (rows of
/// the wrong width, a 0-d variable).
#[test]
fn a_scatter_of_no_rows_writes_no_version() {
    let dense = Variable::new(Array2::<f32>::ones((50, 4)));
    let paged = mvtensor::PagedVariable::new(Array2::<f32>::ones((50, 4))).unwrap();
    dense.scatter_add(&[1], &Array2::ones((1, 4))).unwrap();
    paged.scatter_add(&[1], &Array2::ones((1, 4))).unwrap();
    let none = Array2::<f32>::zeros((0, 4));
    assert_eq!(dense.scatter_add(&[], &none).unwrap(), 1);
    assert_eq!(dense.scatter_scaled_add(2.0, &[], &none).unwrap(), 1);
    assert_eq!(dense.scatter_update(&[], &none).unwrap(), 1);
    assert_eq!(paged.scatter_add(&[], &none).unwrap(), 1);
    assert_eq!(paged.scatter_update(&[], &none).unwrap(), 1);
    assert_eq!((dense.version(), paged.version()), (1, 1));
    let wide = Array2::<f32>::zeros((0, 5));
    assert!(matches!(
        dense.scatter_add(&[], &wide),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        paged.scatter_add(&[], &wide),
        Err(Error::ShapeMismatch { .. })
    ));
    let scalar = Variable::new(ndarray::arr0(1.0f32));
    let rows = ndarray::Array1::<f32>::zeros(0);
    assert!(matches!(
        scalar.scatter_add(&[], &rows),
        Err(Error::RankMismatch { .. })
    ));
}

/// Inside an execution too, a scatter of no rows writes nothing: no working copy of the
/// dense table, nothing staged for the paged one, so their versions stay when the execution
/// commits its other writes; it is still checked (width, resource set).
#[test]
fn an_executions_scatter_of_no_rows_writes_nothing() {
    let dense = Variable::new(Array2::<f32>::ones((50, 4)));
    let paged = mvtensor::PagedVariable::new(Array2::<f32>::ones((50, 4))).unwrap();
    let steps = Variable::new(ndarray::arr0(0i64));
    let outside = Variable::new(Array2::<f32>::ones((50, 4)));
    let section = CriticalSection::builder()
        .resource(&dense)
        .paged(&paged)
        .resource(&steps)
        .build()
        .unwrap();
    let none = Array2::<f32>::zeros((0, 4));
    section
        .execute(|tx| {
            tx.scatter_add(&dense, &[], &none)?;
            tx.scatter_scaled_add(&paged, 2.0, &[], &none)?;
            tx.assign_add(&steps, &ndarray::arr0(1))
        })
        .unwrap();
    assert_eq!(
        (dense.version(), paged.version(), steps.version()),
        (0, 0, 1)
    );
    let wide = Array2::<f32>::zeros((0, 5));
    let refused = section.execute(|tx| tx.scatter_add(&dense, &[], &wide));
    assert!(
        matches!(refused, Err(Error::ShapeMismatch { .. })),
        "{refused:?}"
    );
    let refused = section.execute(|tx| tx.scatter_update(&paged, &[], &wide));
    assert!(
        matches!(refused, Err(Error::ShapeMismatch { .. })),
        "{refused:?}"
    );
    let refused = section.execute(|tx| tx.scatter_add(&outside, &[], &none));
    assert!(
        matches!(refused, Err(Error::NotInResourceSet { .. })),
        "{refused:?}"
    );
}
