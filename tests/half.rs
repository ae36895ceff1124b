//! Half-precision elements (`half` feature): f16 and bf16 variables behave like the others,
//! in the store, in combined updates and in critical sections mixed with f32.

#![cfg(feature = "half")]

use mvtensor::half::{bf16, f16};
use mvtensor::{CriticalSection, DType, Error, Store, Variable};
use ndarray::{ArrayD, IxDyn};

use crate::common;
use common::scaled;

#[test]
fn concurrent_bf16_adds_are_exact_on_small_integers() {
    // bf16 has 8 significant bits: every integer up to 256 is exact.
    let (threads, each) = (scaled(2, 4), scaled(3, 50));
    let v = Variable::new(ArrayD::from_elem(IxDyn(&[4, 8]), bf16::ZERO));
    let one = ArrayD::from_elem(IxDyn(&[4, 8]), bf16::ONE);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..each {
                    v.assign_add(&one).unwrap();
                }
            });
        }
    });
    let expected = bf16::from_f32((threads * each) as f32);
    assert!(v.read().iter().all(|&x| x == expected), "{:?}", v.read());
}

#[test]
fn the_store_names_half_dtypes_in_listings_and_errors() -> Result<(), Error> {
    let store = Store::new();
    store.variable("w16", ArrayD::from_elem(IxDyn(&[2]), f16::from_f32(1.5)))?;
    store.variable("wb", ArrayD::from_elem(IxDyn(&[3]), bf16::from_f32(-2.0)))?;
    let listed: Vec<(String, DType)> = store
        .list()
        .into_iter()
        .map(|i| (i.name, i.dtype))
        .collect();
    assert!(listed.contains(&("w16".into(), DType::F16)));
    assert!(listed.contains(&("wb".into(), DType::BF16)));

    let err = store.get::<f32, IxDyn>("wb").unwrap_err();
    assert_eq!(
        err,
        Error::DTypeMismatch {
            variable: "wb".into(),
            expected: DType::F32,
            found: DType::BF16,
        }
    );
    assert!(err.to_string().contains("bf16"), "{err}");
    let w16 = store.get::<f16, IxDyn>("w16")?;
    w16.assign_sub(&ArrayD::from_elem(IxDyn(&[2]), f16::from_f32(0.5)))?;
    assert!(w16.read().iter().all(|&x| x == f16::ONE));
    Ok(())
}

#[test]
fn a_section_mixes_f32_and_bf16_resources() -> Result<(), Error> {
    let master = Variable::new(ArrayD::from_elem(IxDyn(&[3]), 1.0f32));
    let shadow = Variable::new(ArrayD::from_elem(IxDyn(&[3]), bf16::ONE));
    let cs = CriticalSection::builder()
        .resource(&master)
        .resource(&shadow)
        .build()?;
    // Update the f32 master weights and refresh their bf16 copy in one atomic step.
    cs.execute(|tx| {
        tx.assign_add(&master, &ArrayD::from_elem(IxDyn(&[3]), 0.25f32))?;
        let refreshed = tx.read(&master)?.mapv(bf16::from_f32);
        tx.assign(&shadow, refreshed)
    })?;
    assert!(master.read().iter().all(|&x| x == 1.25));
    assert!(shadow.read().iter().all(|&x| x == bf16::from_f32(1.25)));
    Ok(())
}

/// ndarray's constructors that need `num_traits::Zero`/`One` build half-precision arrays:
/// the `half` dependency has its `num-traits` feature on (without it
/// `Array1::<f16>::zeros` does not compile).
#[test]
fn half_arrays_come_from_ndarrays_own_constructors() {
    let v = Variable::new(ndarray::Array2::<f16>::zeros((2, 3)));
    v.assign_add(&ndarray::Array2::<f16>::ones((2, 3))).unwrap();
    assert!(v.read().iter().all(|&x| x == f16::ONE));
    let b = Variable::new(ndarray::Array1::<bf16>::ones(4));
    assert_eq!(b.read().sum(), bf16::from_f32(4.0));
}
