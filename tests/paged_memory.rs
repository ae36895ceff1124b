//! A paged variable's memory, counted in pages (not time): with no snapshot held it owns its
//! table, the pages its last few writes replaced, and a bounded pool of spares; an owned
//! snapshot keeps what it needs until it is dropped.

use crate::common;

use common::scaled;
use mvtensor::PagedVariable;
use ndarray::Array2;

#[test]
fn a_paged_variable_keeps_its_table_and_a_few_writes_of_pages() {
    alone!();
    let (rows, width, k) = (scaled(100, 100_000), 64, 32);
    let table = PagedVariable::new(Array2::<f32>::zeros((rows, width))).unwrap();
    let stats = table.stats();
    assert_eq!(stats.pages_allocated, stats.table_pages);
    let grads = Array2::<f32>::ones((k, width));
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut write = || {
        let ids: Vec<usize> = (0..k)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                (state >> 33) as usize % rows
            })
            .collect();
        table.scatter_add(&ids, &grads).unwrap();
    };
    // The bound of `PagedVariable`'s docs: the table, about three writes waiting out the
    // grace period (the write in progress counted too), and `3k + 8` spares, for `k` pages
    // replaced per write. Here `k` is at most 32, and every bound is checked on every write.
    let bound = stats.table_pages + 4 * k + (3 * k + 8);
    let mut peak = 0;
    for _ in 0..scaled(30, 20_000) {
        write();
        peak = peak.max(table.stats().pages_allocated);
    }
    assert!(peak <= bound, "peak {peak} pages, bound {bound}");

    // An owned snapshot holds its version: every page of it replaced since stays
    // allocated...
    let held = table.read_owned();
    let before = held.to_array();
    for _ in 0..scaled(20, 50) {
        write();
    }
    let holding = table.stats().pages_allocated;
    assert!(
        holding <= bound + stats.table_pages,
        "{holding} pages while a snapshot is held, bound {bound} + {}",
        stats.table_pages
    );
    assert_eq!(held.to_array(), before, "a held snapshot changed");
    // ...but nothing the writes made after it: however many writes pass (here, pages
    // replaced many times the table over), two held snapshots keep at most their own
    // pages. (Were tables reused oldest first only, a held one would keep every page every
    // later write replaced.)
    let writes = scaled(20, 10_000);
    let mut second = None;
    let mut peak = 0;
    for i in 0..writes {
        write();
        if i == writes / 2 {
            let held = table.read_owned();
            second = Some((held.to_array(), held));
        }
        peak = peak.max(table.stats().pages_allocated);
    }
    assert!(
        peak <= bound + 2 * stats.table_pages,
        "peak {peak} pages with two snapshots held, bound {bound} + 2 x {}",
        stats.table_pages
    );
    assert_eq!(held.to_array(), before, "a held snapshot changed");
    let (second_before, second) = second.expect("taken halfway");
    assert_eq!(second.to_array(), second_before, "a held snapshot changed");
    // ...and once they are dropped, they come back within a few writes.
    drop((held, second));
    for _ in 0..4 {
        write();
    }
    let after = table.stats().pages_allocated;
    assert!(
        after <= bound,
        "{after} pages after the snapshot was dropped, bound {bound}"
    );
}
