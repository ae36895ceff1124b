//! A scalar write allocates nothing of its own. A counting allocator (one test per
//! file: it counts for the whole process) checks that steady `fetch_add`s allocate far less
//! than once per call. What remains is crossbeam-epoch's own bookkeeping: a bag node each
//! time a batch of retired versions is handed to it (one per 32 writes here).

use crate::counting;

use counting::allocations;
use mvtensor::Variable;

#[test]
fn steady_scalar_writes_do_not_allocate() {
    alone!();
    let writes = if cfg!(miri) { 400 } else { 20_000 };
    let step = Variable::scalar(0i64);
    for _ in 0..writes {
        step.fetch_add(1).unwrap(); // warm: the pool fills
    }
    let before = allocations();
    for _ in 0..writes {
        step.fetch_add(1).unwrap();
        step.set(7).unwrap();
    }
    let per_write = (allocations() - before) as f64 / (2 * writes) as f64;
    assert_eq!(step.get(), 7);
    // An array per write would be at least 1.0 (`fetch_update` allocates 2).
    assert!(per_write < 0.1, "{per_write} allocations per scalar write");
    eprintln!("{per_write:.4} allocations per scalar write");
}
