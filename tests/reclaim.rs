//! A lone writer of a large variable gets each replaced version back in its pool before its
//! write returns, so its passes alternate between two buffers (the cache-friendly case).

use mvtensor::Error;

use crate::common;
use common::large_with_section;

#[test]
#[cfg_attr(
    miri,
    ignore = "needs 64 KiB versions: minutes under miri, and no unsafe code of its own"
)]
fn a_lone_writer_reuses_what_it_replaced() -> Result<(), Error> {
    alone!(Ok(()));
    let len = 64 * 1024;
    let (v, delta, section) = large_with_section(len); // 256 KiB of f32: large enough to be reclaimed eagerly
    for i in 1..=50u64 {
        match i % 3 {
            0 => {
                let next = v.read().map(|x| x + 1.0); // the snapshot unpins here
                v.assign(next).map(drop)?
            }
            1 => v.assign_add(&delta).map(drop)?,
            _ => section.execute(|tx| tx.assign_add(&v, &delta))?,
        }
        // The current version and the one it replaced, back in the pool.
        assert_eq!(v.stats().live_versions, 2, "after write {i}");
        assert_eq!(v.read()[[len - 1]], i as f32);
    }
    // Every dense pass found the buffer its predecessor's pass had read from; only the
    // first two had to allocate.
    assert!(
        v.stats().fresh_buffers <= 2,
        "dense passes allocated {} fresh buffers",
        v.stats().fresh_buffers
    );
    Ok(())
}
