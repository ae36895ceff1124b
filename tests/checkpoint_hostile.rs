//! Hostile and large checkpoints on the load path: every size a header declares is checked
//! against the file and a memory budget before anything is allocated; tensors are typed only
//! if they are used; registering and loading N tensors costs no more than N log N.

use std::time::Duration;

use crate::common;

use mvtensor::Store;
use ndarray::{arr0, Array1};
use safetensors::tensor::{Dtype, TensorView};

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
