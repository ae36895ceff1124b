//! Paged variables as store members: looked up by kind, captured by store snapshots at the
//! same point of the commit order as dense variables, written by checkpoints, and the chain
//! writers keep for snapshots in progress given back once none is.

use crate::common;

use common::scaled;
use mvtensor::{Error, PagedVariable, Store, VariableKind};
use ndarray::{arr0, Array2, Ix0, IxDyn};

#[test]
fn a_store_registers_and_finds_paged_variables_by_kind() {
    let store = Store::new();
    let emb = store.paged("emb", Array2::<f32>::zeros((100, 4))).unwrap();
    store.variable("step", arr0(0i64)).unwrap();
    emb.scatter_add(&[5], &Array2::ones((1, 4))).unwrap();

    let again = store.get_paged::<f32>("emb").unwrap();
    assert_eq!(again.read().row(5).unwrap()[[0]], 1.0, "the same variable");
    assert!(matches!(
        store.get::<f32, IxDyn>("emb"),
        Err(Error::KindMismatch {
            expected: VariableKind::Dense,
            found: VariableKind::Paged,
            ..
        })
    ));
    assert!(matches!(
        store.get_paged::<i64>("step"),
        Err(Error::KindMismatch {
            expected: VariableKind::Paged,
            found: VariableKind::Dense,
            ..
        })
    ));
    assert!(matches!(
        store.get_paged::<f64>("emb"),
        Err(Error::DTypeMismatch { .. })
    ));
    assert!(matches!(
        store.paged("step", Array2::<f32>::zeros((2, 2))),
        Err(Error::NameTaken { .. })
    ));
    let other = PagedVariable::builder(Array2::<f32>::zeros((3, 3)))
        .name("emb")
        .build()
        .unwrap();
    assert!(matches!(
        store.register_paged(&other),
        Err(Error::NameTaken { .. })
    ));

    let info = store.list();
    assert_eq!(info[0].name, "emb");
    assert_eq!(info[0].kind, VariableKind::Paged);
    assert_eq!((info[0].shape.clone(), info[0].version), (vec![100, 4], 1));
    assert_eq!(info[1].kind, VariableKind::Dense);
}

#[test]
fn a_store_snapshot_holds_its_paged_table_through_later_writes() {
    let store = Store::new();
    let emb = store.paged("emb", Array2::<f32>::zeros((64, 8))).unwrap();
    emb.scatter_add(&[1, 2], &Array2::ones((2, 8))).unwrap();
    let snapshot = store.snapshot();
    let before = snapshot.get_paged::<f32>("emb").unwrap().to_array();
    for _ in 0..50 {
        emb.scatter_add(&[1, 3], &Array2::ones((2, 8))).unwrap();
    }
    let table = snapshot.get_paged::<f32>("emb").unwrap();
    assert_eq!(table.to_array(), before, "a store snapshot changed");
    assert_eq!(table.version(), 1);
    let entry = snapshot.iter().next().unwrap();
    assert_eq!((entry.kind(), entry.version()), (VariableKind::Paged, 1));
    assert!(matches!(
        snapshot.get::<f32, IxDyn>("emb"),
        Err(Error::KindMismatch { .. })
    ));
    drop(store);
    drop(emb);
    assert_eq!(
        table.to_array(),
        before,
        "it outlives its variable and store"
    );
}

/// One thread adds one to a dense counter, then to row 0 of a paged table (every page a row),
/// over and over; snapshots taken meanwhile never show the table ahead of the counter (the
/// cut respects the order of the two writes), never go back in time, and show each table
/// whole (its version number is its row's value).
#[test]
fn store_snapshots_cut_paged_and_dense_writes_consistently() {
    let store = Store::new();
    let count = store.variable("count", arr0(0i64)).unwrap();
    let emb = store.paged("emb", Array2::<i64>::zeros((256, 2))).unwrap();
    let writes = scaled(100, 20_000) as i64;
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..writes {
                count.fetch_add(1).unwrap();
                emb.scatter_add(&[0, 255], &Array2::ones((2, 2))).unwrap();
            }
        });
        let mut last = (0, 0);
        loop {
            let snapshot = store.snapshot();
            let c = snapshot.get::<i64, Ix0>("count").unwrap()[[]];
            let table = snapshot.get_paged::<i64>("emb").unwrap();
            let e = table.row(0).unwrap()[[0]];
            assert!(e <= c, "the table ({e}) ahead of the counter ({c})");
            assert!(
                c - e <= 1,
                "the counter ({c}) more than one write ahead ({e})"
            );
            assert_eq!(table.row(255).unwrap()[[1]], e, "half a write");
            assert_eq!(table.version() as i64, e);
            assert!(
                (c, e) >= last,
                "went back in time: {last:?} then {:?}",
                (c, e)
            );
            last = (c, e);
            if e == writes {
                break;
            }
        }
    });
}

#[test]
fn a_checkpoint_writes_a_paged_table_whole_and_loads_it_paged() {
    let store = Store::new();
    let emb = store.paged("emb", Array2::<f32>::zeros((1000, 3))).unwrap();
    emb.scatter_add(&[0, 999], &Array2::from_elem((2, 3), 2.5))
        .unwrap();
    let bytes = store.snapshot().to_bytes().unwrap();
    let loaded = Store::load_bytes(&bytes).unwrap();
    let again = loaded.get_paged::<f32>("emb").unwrap();
    assert_eq!(again.read().to_array(), emb.read().to_array());
    assert_eq!(again.read().rows_per_page(), emb.read().rows_per_page());
    let wide = PagedVariable::builder(Array2::<f32>::ones((10, 3)))
        .name("wide")
        .rows_per_page(4)
        .build()
        .unwrap();
    store.register_paged(&wide).unwrap();
    let loaded = Store::load_bytes(&store.snapshot().to_bytes().unwrap()).unwrap();
    let again = loaded.get_paged::<f32>("wide").unwrap();
    assert_eq!(again.read().rows_per_page(), 4, "the page size comes back");
    assert_eq!(again.read().to_array(), wide.read().to_array());
}

#[test]
#[cfg_attr(miri, ignore = "file system I/O (miri isolates it)")]
fn restore_sets_paged_and_dense_variables_in_one_commit() {
    let store = Store::new();
    let emb = store.paged("emb", Array2::<f32>::zeros((1000, 3))).unwrap();
    let step = store.variable("step", arr0(0i64)).unwrap();
    emb.scatter_add(&[0], &Array2::ones((1, 3))).unwrap();
    step.fetch_add(1).unwrap();

    let dir = std::env::temp_dir().join(format!("mvtensor-paged-store-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("emb.safetensors");
    store.save(&path).unwrap();
    let saved = emb.read().to_array();
    emb.scatter_add(&[0, 1], &Array2::ones((2, 3))).unwrap();
    step.fetch_add(1).unwrap();
    assert_eq!(store.restore(&path, Default::default()).unwrap(), 2);
    assert_eq!(
        emb.read().to_array(),
        saved,
        "the paged table is the file's"
    );
    assert_eq!(step.read()[[]], 1);
    assert_eq!(emb.version(), 3, "one more version: the restore's");

    // A tensor of another shape than its paged variable: refused, nothing applied.
    let other = Store::new();
    other
        .variable("emb", Array2::<f32>::zeros((999, 3)))
        .unwrap();
    let wrong = dir.join("wrong.safetensors");
    other.save(&wrong).unwrap();
    let refused = store.restore(&wrong, mvtensor::checkpoint::Restore::lenient());
    assert!(
        matches!(&refused, Err(Error::Checkpoint { problem, .. }) if problem.contains("shape")),
        "{refused:?}"
    );
    assert_eq!(emb.version(), 3, "nothing applied");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_bad_page_size_in_a_checkpoint_is_a_typed_error() {
    let data = vec![0u8; 4 * 6];
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![2, 3], &data).unwrap();
    let metadata = [("mvtensor.paged.emb".to_owned(), "lots".to_owned())].into();
    let bytes = safetensors::serialize([("emb", view)], Some(metadata)).unwrap();
    let refused = Store::load_bytes(&bytes);
    assert!(
        matches!(&refused, Err(Error::Checkpoint { problem, .. }) if problem.contains("not a number of rows")),
        "{:?}",
        refused.map(|s| s.len())
    );
}
