//! Section commits give a paged variable's replaced pages back as plain writes do: after
//! many executions, its pages are within the bound of `paged_memory.rs`. Counted in pages,
//! not time.

use crate::common;

use common::scaled;
use mvtensor::{PagedVariable, Variable};
use ndarray::{arr0, Array2};

#[test]
fn section_commits_keep_pages_bounded() {
    alone!();
    let (rows, width, k) = (scaled(200, 20_000), 16, 8);
    let table = PagedVariable::new(Array2::<f32>::zeros((rows, width))).unwrap();
    let steps = Variable::new(arr0(0i64));
    let section = common::table_and_counter(&table, &steps);
    let table_pages = table.stats().table_pages;
    // `paged_memory.rs`'s bound: the table, about four writes' worth of replaced pages
    // waiting out the grace period, and `3k + 8` spares.
    let bound = table_pages + 4 * k + (3 * k + 8);
    let grads = Array2::<f32>::ones((k, width));
    for i in 0..scaled(100, 10_000) {
        let ids: Vec<usize> = (0..k).map(|j| (i + j * 97) % rows).collect();
        section
            .execute(|tx| {
                // Pending with the counter's record: each commit goes through the chain.
                tx.scatter_scaled_add(&table, -0.1, &ids, &grads)?;
                tx.assign_add(&steps, &arr0(1))
            })
            .unwrap();
    }
    let after = table.stats().pages_allocated;
    assert!(after <= bound, "{after} pages, bound {bound}");
    assert_eq!(table.stats().version, scaled(100, 10_000) as u64);
}
