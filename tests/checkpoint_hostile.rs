//! Hostile and large checkpoints on the load path: tensors are typed only if they are used;
//! registering and loading N tensors costs no more than N log N.

use std::collections::HashMap;
use std::time::Duration;

use crate::common;

use mvtensor::checkpoint::Restore;
use mvtensor::{Error, Store};
use ndarray::{arr0, Array1, Array2};
use safetensors::tensor::{Dtype, TensorView};

/// The problem of a checkpoint error, or a failure naming what came instead.
fn problem<T>(result: mvtensor::Result<T>) -> String {
    match result {
        Err(Error::Checkpoint { problem, .. }) => problem,
        Err(other) => panic!("not a checkpoint error: {other}"),
        Ok(_) => panic!("accepted"),
    }
}

/// A file written by safetensors with tensors of dtypes mvtensor lacks (as Python's
/// trainers write: a boolean mask, byte token ids, an FP8 copy): a lenient restore ignores
/// them untyped; a load, which would make them variables, and a restore into a variable of
/// their name refuse them by name and dtype.
#[test]
#[cfg_attr(miri, ignore = "file system I/O (miri isolates it)")]
fn tensors_of_dtypes_mvtensor_lacks_are_typed_only_if_used() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("from_python.safetensors");
    let weights: Vec<u8> = [1.5f32, -2.0, 0.25, 4.0]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let (mask, ids, fp8) = ([1u8, 0, 1], [7u8, 8, 9, 10, 11], [0x38u8, 0xb8]);
    let tensors = [
        (
            "w",
            TensorView::new(Dtype::F32, vec![2, 2], &weights).unwrap(),
        ),
        (
            "mask",
            TensorView::new(Dtype::BOOL, vec![3], &mask).unwrap(),
        ),
        ("ids", TensorView::new(Dtype::U8, vec![5], &ids).unwrap()),
        (
            "w_fp8",
            TensorView::new(Dtype::F8_E4M3, vec![2], &fp8).unwrap(),
        ),
    ];
    safetensors::serialize_to_file(tensors, None::<HashMap<String, String>>, &path).unwrap();

    let store = Store::new();
    let w = store.variable("w", Array2::<f32>::zeros((2, 2))).unwrap();
    assert_eq!(store.restore(&path, Restore::lenient()).unwrap(), 1);
    assert_eq!(w.read().as_slice().unwrap(), [1.5, -2.0, 0.25, 4.0]);
    let strict = problem(store.restore(&path, Restore::default()));
    assert!(
        strict.contains("the store has no variable `ids`"),
        "{strict}"
    );

    let refused = problem(Store::load(&path));
    assert!(
        refused.contains("tensor `ids` holds U8, which has no mvtensor element type"),
        "{refused}"
    );
    // A variable of that name: the tensor is used, and its dtype does not fit.
    store.variable("mask", Array1::<i32>::zeros(3)).unwrap();
    w.assign(Array2::zeros((2, 2))).unwrap();
    let misfit = problem(store.restore(&path, Restore::lenient()));
    assert!(misfit.contains("tensor `mask` holds BOOL"), "{misfit}");
    assert_eq!(w.read()[[0, 0]], 0.0, "nothing applied");
}

/// A safetensors file of `count` one-element f32 tensors, `t00000`, `t00001`, ...
fn many_tensors(count: usize) -> Vec<u8> {
    let data: Vec<[u8; 4]> = (0..count).map(|i| (i as f32).to_le_bytes()).collect();
    let tensors: Vec<(String, TensorView<'_>)> = data
        .iter()
        .enumerate()
        .map(|(i, bytes)| {
            let view = TensorView::new(Dtype::F32, vec![1], bytes).expect("4 bytes, one f32");
            (format!("t{i:05}"), view)
        })
        .collect();
    safetensors::serialize(tensors, None).expect("a small header")
}

/// The least thread CPU time of `runs` runs of `work` (the least is the one an interrupt or
/// a page fault disturbed least).
fn least_cpu_time(runs: usize, mut work: impl FnMut()) -> Duration {
    (0..runs)
        .map(|_| {
            let start = common::thread_cpu_time();
            work();
            common::thread_cpu_time() - start
        })
        .min()
        .expect("at least one run")
}

/// Four times the variables cost about four times as much (N log N: ~4.6x from 10,000 to
/// 40,000), far from the sixteen times of a registry copied at every registration.
#[test]
#[cfg_attr(
    miri,
    ignore = "no per-thread CPU clock under miri, and 50,000 variables"
)]
fn registering_and_loading_cost_grows_linearly_with_the_tensors() {
    const N: usize = 10_000;
    let register = |count: usize| {
        let store = Store::new();
        for i in 0..count {
            store.variable(&format!("v{i:05}"), arr0(i as f32)).unwrap();
        }
        assert_eq!(store.len(), count);
    };
    let small = least_cpu_time(3, || register(N));
    let large = least_cpu_time(3, || register(4 * N));
    let ratio = large.as_secs_f64() / small.as_secs_f64();
    assert!(
        ratio < 8.0,
        "store.variable: {N} took {small:?}, {} took {large:?} ({ratio:.1}x)",
        4 * N
    );

    let (small_file, large_file) = (many_tensors(N), many_tensors(4 * N));
    let load = |bytes: &[u8], count: usize| {
        let store = Store::load_bytes(bytes).unwrap();
        assert_eq!(store.len(), count);
    };
    let small = least_cpu_time(3, || load(&small_file, N));
    let large = least_cpu_time(3, || load(&large_file, 4 * N));
    let ratio = large.as_secs_f64() / small.as_secs_f64();
    assert!(
        ratio < 8.0,
        "Store::load_bytes: {N} tensors took {small:?}, {} took {large:?} ({ratio:.1}x)",
        4 * N
    );
    let store = Store::load_bytes(&large_file).unwrap();
    let last = store.get::<f32, ndarray::Ix1>(&format!("t{:05}", 4 * N - 1));
    assert_eq!(last.unwrap().read()[0], (4 * N - 1) as f32);
}

/// Registrations from several threads at once: none is lost, and every name is found.
#[test]
fn concurrent_registrations_are_all_kept() {
    let (threads, each) = (4, common::scaled(20, 2_000));
    let store = Store::new();
    std::thread::scope(|s| {
        for t in 0..threads {
            let store = &store;
            s.spawn(move || {
                for i in 0..each {
                    store
                        .variable(&format!("t{t}.{i}"), Array1::from_elem(1, i as i64))
                        .unwrap();
                }
            });
        }
    });
    assert_eq!(store.len(), threads * each);
    let names: Vec<String> = store.list().into_iter().map(|info| info.name).collect();
    assert!(names.windows(2).all(|w| w[0] < w[1]), "sorted, no repeats");
    for t in 0..threads {
        let v = store.get::<i64, ndarray::Ix1>(&format!("t{t}.{}", each - 1));
        assert_eq!(v.unwrap().read()[0], (each - 1) as i64);
    }
    assert_eq!(store.snapshot().len(), threads * each);
}
