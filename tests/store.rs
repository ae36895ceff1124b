//! The named store: mixed dtypes, lookups, listing, and its errors.

use mvtensor::{DType, Error, Store, Variable};
use ndarray::{ArrayD, IxDyn};

#[test]
fn a_store_holds_mixed_dtypes_and_lists_them_sorted() {
    let store = Store::new();
    store
        .variable("w", ArrayD::<f32>::zeros(IxDyn(&[2, 3])))
        .unwrap();
    store
        .variable("b", ArrayD::<f64>::zeros(IxDyn(&[3])))
        .unwrap();
    store
        .variable("step", ArrayD::<i64>::zeros(IxDyn(&[])))
        .unwrap();
    store
        .variable("mask", ArrayD::<i32>::ones(IxDyn(&[4])))
        .unwrap();
    store
        .get::<i64, IxDyn>("step")
        .unwrap()
        .assign_add(&ArrayD::ones(IxDyn(&[])))
        .unwrap();

    let listed: Vec<_> = store
        .list()
        .into_iter()
        .map(|i| (i.name, i.dtype, i.shape, i.version))
        .collect();
    assert_eq!(
        listed,
        vec![
            ("b".to_string(), DType::F64, vec![3], 0),
            ("mask".to_string(), DType::I32, vec![4], 0),
            ("step".to_string(), DType::I64, vec![], 1),
            ("w".to_string(), DType::F32, vec![2, 3], 0),
        ]
    );
    assert_eq!(store.len(), 4);
    assert!(store.contains("w") && !store.contains("nope"));
}

#[test]
fn get_returns_the_same_variable_not_a_copy() {
    let store = Store::new();
    let w = store
        .variable("w", ArrayD::<f32>::zeros(IxDyn(&[2])))
        .unwrap();
    let again = store.get::<f32, IxDyn>("w").unwrap();
    again.assign_add(&ArrayD::ones(IxDyn(&[2]))).unwrap();
    assert_eq!(w.read()[[1]], 1.0);
    assert_eq!(w.id(), again.id());
}

#[test]
fn lookups_fail_with_typed_errors_that_name_the_variable() {
    let store = Store::new();
    store
        .variable("w", ArrayD::<f32>::zeros(IxDyn(&[2])))
        .unwrap();

    let err = store.get::<f32, IxDyn>("v").unwrap_err();
    assert_eq!(err, Error::NotFound { name: "v".into() });

    let err = store.get::<i64, IxDyn>("w").unwrap_err();
    assert_eq!(
        err,
        Error::DTypeMismatch {
            variable: "w".into(),
            expected: DType::I64,
            found: DType::F32
        }
    );
    assert_eq!(
        err.to_string(),
        "dtype mismatch on variable `w`: it holds f32, i64 was asked for"
    );

    let err = store
        .variable("w", ArrayD::<i32>::zeros(IxDyn(&[7])))
        .unwrap_err();
    assert_eq!(
        err,
        Error::NameTaken {
            name: "w".into(),
            dtype: DType::F32,
            shape: vec![2]
        }
    );
    // The duplicate left the original alone.
    assert_eq!(store.get::<f32, IxDyn>("w").unwrap().shape(), vec![2]);
    assert_eq!(store.len(), 1);
}

#[test]
fn registering_a_built_variable_keeps_its_options() {
    let store = Store::new();
    let buf = Variable::builder(ArrayD::<f32>::zeros(IxDyn(&[1])))
        .name("buf")
        .dynamic_shape()
        .build();
    store.register(&buf).unwrap();
    store
        .get::<f32, IxDyn>("buf")
        .unwrap()
        .assign(ArrayD::zeros(IxDyn(&[5])))
        .unwrap();
    assert_eq!(buf.shape(), vec![5]);
    assert!(matches!(store.register(&buf), Err(Error::NameTaken { .. })));
}

#[test]
fn concurrent_registration_of_one_name_has_exactly_one_winner() {
    let store = Store::new();
    let threads = if cfg!(miri) { 3 } else { 8 };
    let wins: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let store = &store;
                s.spawn(move || {
                    store
                        .variable("shared", ArrayD::<i64>::from_elem(IxDyn(&[1]), i))
                        .is_ok() as usize
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(wins, 1);
    assert_eq!(store.len(), 1);
}
