//! Deep trees on small tables: every shape of the radix tree, checked against a dense model
//! (the integration tests reach only the shapes the cost model picks for their sizes).

use ndarray::{Array2, Axis};

use super::PagedVariable;

#[test]
fn every_tree_shape_matches_a_dense_model() {
    let width = 2;
    for (shift, levels) in [(1, 1), (1, 4), (2, 3), (3, 2)] {
        for (rows, rows_per_page) in [(1, 1), (5, 2), (37, 1)] {
            let init = Array2::from_shape_fn((rows, width), |(r, c)| (r * width + c) as i64);
            let table = PagedVariable::builder(init.clone())
                .rows_per_page(rows_per_page)
                .tree(shift, levels)
                .build()
                .unwrap();
            let mut model = init;
            let before = table.read_owned();
            let mut state = 0x9e37_79b9_u64 ^ (shift as u64 * 31 + rows as u64);
            for step in 0..12 {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                let ids: Vec<usize> = (0..3)
                    .map(|i| (state >> (8 * i + 16)) as usize % rows)
                    .collect();
                let vals = Array2::from_elem((3, width), step as i64 + 1);
                if step % 4 == 3 {
                    ids.iter()
                        .zip(vals.rows())
                        .for_each(|(&i, v)| model.row_mut(i).assign(&v));
                    table.scatter_update(&ids, &vals).unwrap();
                } else {
                    ids.iter().zip(vals.rows()).for_each(|(&i, v)| {
                        let mut row = model.row_mut(i);
                        row += &v;
                    });
                    table.scatter_add(&ids, &vals).unwrap();
                }
                let now = table.read();
                let what = format!("shift {shift}, levels {levels}, rows {rows}, step {step}");
                assert_eq!(now.to_array(), model.clone().into_dyn(), "{what}");
                assert_eq!(
                    now.gather(&ids).unwrap(),
                    model.select(Axis(0), &ids).into_dyn()
                );
            }
            let first = Array2::from_shape_fn((rows, width), |(r, c)| (r * width + c) as i64);
            assert_eq!(
                before.to_array(),
                first.into_dyn(),
                "a snapshot never changes"
            );
        }
    }
}
