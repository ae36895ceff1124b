//! Hostile and large checkpoints on the load path: every size a header declares is checked
//! against the file and a memory budget, and refused by name; tensors are typed only if they
//! are used; concurrent registrations are all kept. (That a refusal comes before anything is
//! allocated, and that registering and loading N tensors allocate N log N, is counted by the
//! allocator of `tests/checkpoint_save.rs`.)

use std::collections::HashMap;

use crate::checkpoint::with_header;
use crate::common;

use mvtensor::checkpoint::Restore;
use mvtensor::{Error, Store};
use ndarray::{Array1, Array2, Ix1, Ix2};
use safetensors::tensor::{Dtype, TensorView};

/// The problem of a checkpoint error, or a failure naming what came instead.
fn problem<T>(result: mvtensor::Result<T>) -> String {
    match result {
        Err(Error::Checkpoint { problem, .. }) => problem,
        Err(other) => panic!("not a checkpoint error: {other}"),
        Ok(_) => panic!("accepted"),
    }
}

/// A header declaring a paged table of 2^33 rows and no columns, 117 bytes in all: in one-row
/// pages, a page tree of 2^33 entries of at least 8 bytes each (64 GiB). The budget refuses
/// it, naming the tensor and the pages (and the file, when it is read from disk); the same
/// table in pages of 2^20 rows fits.
#[test]
fn a_117_byte_header_of_two_to_the_33_empty_rows_is_refused_by_the_budget() {
    let bytes = with_header(
        r#"{"__metadata__":{"mvtensor.paged.emb":"1"},"emb":{"dtype":"F32","shape":[8589934592,0],"data_offsets":[0,0]}}"#,
        &[],
    );
    assert_eq!(bytes.len(), 117);
    let refused = problem(Store::load_bytes(&bytes));
    assert!(
        refused.contains("`emb`")
            && refused.contains("8589934592 pages of 1 row)")
            && refused.contains("memory budget of"),
        "{refused}"
    );

    // The same file from disk names it; larger pages make it fit (8,192 pages of 2^20 rows).
    #[cfg(not(miri))]
    {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hostile.safetensors");
        std::fs::write(&path, &bytes).unwrap();
        let err = Store::load(&path).map(drop).unwrap_err();
        assert!(
            matches!(&err, Error::Checkpoint { file, .. } if *file == path.display().to_string()),
            "{err}"
        );
    }
    let fits = String::from_utf8(bytes[8..].to_vec())
        .unwrap()
        .replace(r#""1""#, r#""1048576""#);
    let store = Store::load_bytes(&with_header(&fits, &[])).unwrap();
    let emb = store.get_paged::<f32>("emb").unwrap();
    assert_eq!(emb.shape(), [1usize << 33, 0]);
}

/// What safetensors leaves to us: the paged metadata, ndarray's bound on a shape, and the
/// budget, each refused by name before anything is allocated; a zero-size tensor of a huge
/// declared shape is honest and loads.
#[test]
fn declared_sizes_are_checked_against_the_file_and_the_budget() {
    let paged = |rows_per_page: &str, shape: &str, data: &[u8]| {
        let header = format!(
            r#"{{"__metadata__":{{"mvtensor.paged.t":"{rows_per_page}"}},"t":{{"dtype":"F32","shape":{shape},"data_offsets":[0,{}]}}}}"#,
            data.len()
        );
        Store::load_bytes(&with_header(&header, data))
    };
    let rows = [0u8; 4 * 6];
    for (rows_per_page, shape, data, says) in [
        ("0", "[6,1]", &rows[..], "`mvtensor.paged.t` is `0`"),
        ("7", "[6,1]", &rows[..], "from 1 to the tensor's 6 rows"),
        ("-1", "[6,1]", &rows[..], "`mvtensor.paged.t` is `-1`"),
        ("1", "[]", &rows[..4], "has no rows (rank 0)"),
    ] {
        let refused = problem(paged(rows_per_page, shape, data));
        assert!(refused.contains(says), "{rows_per_page} {shape}: {refused}");
    }
    assert_eq!(paged("6", "[6,1]", &rows).unwrap().len(), 1);
    assert_eq!(
        paged("1", "[0,3]", &[]).unwrap().len(),
        1,
        "no rows, one page"
    );

    // Zero elements, but a shape ndarray cannot hold: refused, not a panic. (Safetensors
    // refuses the product it overflows on the way, [2^40, 2^40, 0]; ours is the zero first.)
    for shape in [
        "[0,1099511627776,1099511627776]",
        "[4611686018427387904,2,0]",
    ] {
        let header = format!(r#"{{"t":{{"dtype":"F32","shape":{shape},"data_offsets":[0,0]}}}}"#);
        let refused = problem(Store::load_bytes(&with_header(&header, &[])));
        assert!(
            refused.contains("more elements than an array can"),
            "{shape}: {refused}"
        );
    }
    let overflowing = with_header(
        r#"{"t":{"dtype":"F32","shape":[1099511627776,1099511627776,0],"data_offsets":[0,0]}}"#,
        &[],
    );
    let refused = problem(Store::load_bytes(&overflowing));
    assert!(refused.contains("overflow"), "{refused}");
    let empty = with_header(
        r#"{"t":{"dtype":"F32","shape":[4611686018427387904,0],"data_offsets":[0,0]}}"#,
        &[],
    );
    let store = Store::load_bytes(&empty).unwrap();
    assert_eq!(
        store.get::<f32, Ix2>("t").unwrap().read().shape(),
        [1usize << 62, 0]
    );
    // What loads saves: no bytes, whatever the axes beside the 0 (4 * 2^62 overflows).
    let saved = store.snapshot().to_bytes().unwrap();
    let again = Store::load_bytes(&saved).unwrap();
    assert_eq!(
        again.get::<f32, Ix2>("t").unwrap().read().shape(),
        [1usize << 62, 0]
    );
    #[cfg(not(miri))]
    {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty.safetensors");
        store.save(&path).unwrap();
        let loaded = Store::load(&path).unwrap();
        let t = loaded.get::<f32, Ix2>("t").unwrap();
        assert_eq!(t.read().shape(), [1usize << 62, 0]);
    }

    // A budget of our choosing: a tensor's values and its variable's state need more than
    // its bytes; one byte short of what the refusal says it needs is refused, and exactly
    // that is accepted.
    let w = Store::new();
    w.variable("w", Array1::<f32>::zeros(1000)).unwrap();
    let bytes = w.snapshot().to_bytes().unwrap();
    let with_budget =
        |budget| Store::load_bytes_with(&bytes, Restore::default().memory_budget(budget));
    let refused = problem(with_budget(4000));
    let need: usize = refused
        .split_once("tensor `w` would need ")
        .and_then(|(_, rest)| rest.split_once(' '))
        .and_then(|(need, _)| need.parse().ok())
        .unwrap_or_else(|| panic!("{refused}"));
    assert!(
        need > 4000 && refused.contains("memory budget of 4000 bytes"),
        "{refused}"
    );
    let short = problem(with_budget(need - 1));
    assert!(
        short.contains(&format!("would need {need} bytes"))
            && short.contains(&format!("memory budget of {} bytes", need - 1)),
        "{short}"
    );
    let loaded = with_budget(need).unwrap();
    assert_eq!(loaded.get::<f32, Ix1>("w").unwrap().read().len(), 1000);
}

/// A restore is refused by its budget before anything is applied.
#[test]
#[cfg_attr(miri, ignore = "file system I/O (miri isolates it)")]
fn a_restore_over_its_budget_applies_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    let store = Store::new();
    let a = store.variable("a", Array1::<f32>::ones(100)).unwrap();
    let b = store.variable("b", Array1::<f32>::ones(100)).unwrap();
    store.save(&path).unwrap();
    a.assign_add(&Array1::ones(100)).unwrap();
    b.assign_add(&Array1::ones(100)).unwrap();
    let refused = problem(store.restore(&path, Restore::default().memory_budget(600)));
    assert!(
        refused.contains("tensor `b` would need 400 bytes (its new value) on top of 400 "),
        "{refused}"
    );
    assert_eq!((a.version(), b.version()), (1, 1), "nothing applied");
    let restored = store.restore(&path, Restore::default().memory_budget(800));
    assert_eq!(restored.unwrap(), 2);
    assert_eq!((a.read()[0], b.read()[0]), (1.0, 1.0));
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
