//! Differential fuzz target for `optim::SparseAdam`: arbitrary steps (row indices in or out
//! of range, repeats, empty batches, wrong row widths, NaN gradients) on paged tables of
//! arbitrary page sizes, against lazy Adam on plain arrays.
//!
//! Checked after every step: the result (the step's number, or the exact error variant) is
//! the model's (a NaN gradient applied without `error_if_nonfinite` leaves NaN moments in its
//! rows, and a later step touching one is `InvalidValue` naming the moments); a refused step
//! changes nothing (table, moments, count); the table and both
//! moments equal the model's bit for bit (the same operations in the same order: Adam's
//! sweep is the same expression in AVX2 and in the model).

#![no_main]

use std::collections::BTreeMap;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mvtensor::ndarray::{Array2, Axis};
use mvtensor::optim::SparseAdam;
use mvtensor::{Error, PagedVariable, Store};

const MAX_STEPS: usize = 32;
const LR: f32 = 0.01;
const B1: f32 = 0.9;
const B2: f32 = 0.999;
const EPS: f32 = 1e-8;

#[derive(Arbitrary, Debug)]
struct Step {
    indices: Vec<u8>,
    /// Each gradient row's first element; the others follow from it.
    values: Vec<i8>,
    wrong_width: bool,
    nan_at: Option<u8>,
}

#[derive(Arbitrary, Debug)]
struct Input {
    rows: u8,
    width: u8,
    rows_per_page: u8,
    refuse_nonfinite: bool,
    steps: Vec<Step>,
}

/// Lazy Adam on plain arrays (`p`, `m`, `v`: rows x width).
struct Model {
    p: Vec<f32>,
    m: Vec<f32>,
    v: Vec<f32>,
    t: i64,
    width: usize,
}

impl Model {
    /// Whether every moment of the rows `ids` is one a step can use: finite, the second at
    /// least 0.
    fn usable(&self, ids: &[usize]) -> bool {
        ids.iter().all(|&id| {
            let row = id * self.width..(id + 1) * self.width;
            self.m[row.clone()].iter().all(|x| x.is_finite())
                && self.v[row].iter().all(|&x| x.is_finite() && x >= 0.0)
        })
    }

    fn step(&mut self, ids: &[usize], g: &Array2<f32>) {
        self.t += 1;
        let t = i32::try_from(self.t).unwrap();
        let (c1, c2) = (1.0 - B1.powi(t), 1.0 - B2.powi(t));
        let mut sums: BTreeMap<usize, Vec<f32>> = BTreeMap::new();
        for (k, &id) in ids.iter().enumerate() {
            match sums.get_mut(&id) {
                Some(sum) => sum.iter_mut().zip(g.row(k)).for_each(|(s, x)| *s += x),
                None => drop(sums.insert(id, g.row(k).to_vec())),
            }
        }
        for (id, g) in sums {
            for (j, g) in g.into_iter().enumerate() {
                let i = id * self.width + j;
                self.m[i] = B1 * self.m[i] + (1.0 - B1) * g;
                self.v[i] = B2 * self.v[i] + (1.0 - B2) * g * g;
                self.p[i] -= LR * (self.m[i] / c1) / ((self.v[i] / c2).sqrt() + EPS);
            }
        }
    }
}

fn bits(x: impl IntoIterator<Item = f32>) -> Vec<u32> {
    x.into_iter().map(f32::to_bits).collect()
}

fuzz_target!(|input: Input| {
    let rows = usize::from(input.rows % 40) + 1;
    let width = usize::from(input.width % 5) + 1;
    let per_page = usize::from(input.rows_per_page) % rows + 1;
    let init = Array2::from_shape_fn((rows, width), |(r, c)| (r * width + c) as f32 * 0.25 - 3.0);
    let table = PagedVariable::builder(init.clone())
        .name("emb")
        .rows_per_page(per_page)
        .build()
        .unwrap();
    let builder = SparseAdam::builder(LR).betas(B1, B2).eps(EPS).name("adam");
    let builder = if input.refuse_nonfinite {
        builder.error_if_nonfinite()
    } else {
        builder
    };
    let adam = builder.build(&table).unwrap();
    let store = Store::new();
    adam.register_state(&store).unwrap();
    let n = rows * width;
    let mut model = Model {
        p: init.into_raw_vec_and_offset().0,
        m: vec![0.0; n],
        v: vec![0.0; n],
        t: 0,
        width,
    };
    for step in input.steps.iter().take(MAX_STEPS) {
        let ids: Vec<usize> = step
            .indices
            .iter()
            .map(|&i| usize::from(i) % (rows + 2))
            .collect();
        let w = if step.wrong_width { width + 1 } else { width };
        let value = |k: usize| f32::from(step.values.get(k).copied().unwrap_or(1)) * 0.125;
        let mut g = Array2::from_shape_fn((ids.len(), w), |(k, c)| value(k) - c as f32 * 0.5);
        if let Some(at) = step.nan_at {
            if let Some(x) = g.iter_mut().nth(usize::from(at)) {
                *x = f32::NAN;
            }
        }
        let got = adam.step(&ids, &g);
        let expected: Result<(), &str> = if step.wrong_width {
            Err("ShapeMismatch")
        } else if ids.iter().any(|&i| i >= rows) {
            Err("IndexOutOfRange")
        } else if input.refuse_nonfinite && g.iter().any(|x| !x.is_finite()) {
            Err("NonFinite")
        } else if !model.usable(&ids) {
            Err("InvalidValue")
        } else {
            Ok(())
        };
        match (&got, expected) {
            (Ok(t), Ok(())) => {
                model.step(&ids, &g);
                assert_eq!(*t, model.t);
            }
            (Err(Error::ShapeMismatch { variable, .. }), Err("ShapeMismatch"))
            | (Err(Error::IndexOutOfRange { variable, .. }), Err("IndexOutOfRange"))
            | (
                Err(Error::NonFinite {
                    parameter: variable,
                    ..
                }),
                Err("NonFinite"),
            ) => {
                assert_eq!(variable, "emb");
            }
            (Err(Error::InvalidValue { variable, .. }), Err("InvalidValue")) => {
                assert_eq!(variable, "adam.moments");
            }
            (got, expected) => panic!("got {got:?}, expected {expected:?}"),
        }
        assert_eq!(adam.steps(), model.t, "a refused step counts nothing");
        let snapshot = store.snapshot();
        let moments = snapshot
            .get_paged::<f32>("adam.moments")
            .unwrap()
            .to_array();
        let moment = |k: usize| bits(moments.index_axis(Axis(1), k).iter().copied());
        assert_eq!(bits(table.read().to_array()), bits(model.p.iter().copied()));
        assert_eq!(moment(0), bits(model.m.iter().copied()));
        assert_eq!(moment(1), bits(model.v.iter().copied()));
    }
});
