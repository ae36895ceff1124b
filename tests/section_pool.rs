//! A steady stream of executions allocates nothing once its pool is full. (Alone: another
//! test's thread descheduled while pinned would hold the epoch back, so the versions the
//! executions retire meanwhile could not come back, and the pool would run dry.)

use mvtensor::{CriticalSection, Variable};
use ndarray::ArrayD;

/// A steady stream of executions reuses pooled versions: no new buffer per execution.
#[test]
fn steady_executions_reuse_pooled_versions() {
    alone!();
    let len = if cfg!(miri) { 4 } else { 256 };
    let x = Variable::new(ArrayD::<f32>::zeros(vec![len]));
    let cs = CriticalSection::builder().resource(&x).build().unwrap();
    let d = ArrayD::from_elem(vec![len], 1.0f32);
    let run = |n: usize| {
        for _ in 0..n {
            cs.execute(|tx| tx.assign_add(&x, &d)).unwrap();
        }
    };
    // Enough to fill the pool (three batches of small versions in flight) and then some.
    let n = if cfg!(miri) { 300 } else { 1_000 };
    run(n);
    let before = x.stats().fresh_buffers;
    run(n);
    assert_eq!(x.stats().fresh_buffers, before, "{:?}", x.stats());
    assert_eq!(x.read()[0], 2.0 * n as f32);
}
