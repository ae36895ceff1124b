//! What a save and a load cost and leave: a save streams the snapshot into the file (no
//! buffer of a table's or a tensor's size), a hostile header is refused before anything of
//! the sizes it declares is allocated, registering and loading N variables allocate N log N,
//! and a file's permissions follow the process's umask. What is allocated is counted by the
//! binary's allocator (`tests/counting`).

use std::collections::HashMap;

use mvtensor::checkpoint::Checkpoints;
use mvtensor::{Error, PagedVariable, Store};
use ndarray::{arr0, Array1, Array2, Ix1};
use safetensors::tensor::{Dtype, TensorView};

use crate::counting;

use counting::{bytes_allocated_by, largest_allocation};

/// A 32 MiB paged table and a 16 MiB dense tensor are saved with no allocation of even an
/// eighth of the smaller: the table goes out page by page and the tensor from its own memory,
/// never through a buffer of either's size. What is written reads back. (The largest request
/// is counted process-wide: the other tests of this binary request nothing near 2 MiB.)
#[test]
#[cfg_attr(miri, ignore = "file system I/O (miri isolates it)")]
fn a_save_streams_tables_and_tensors_into_the_file() {
    alone!();
    let (rows, width, dense) = (1 << 19, 16, 1 << 22);
    let table_bytes = rows * width * 4;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.safetensors");
    let store = Store::new();
    let emb = PagedVariable::builder(Array2::<f32>::zeros((rows, width)))
        .name("emb")
        .rows_per_page(256)
        .build()
        .unwrap();
    store.register_paged(&emb).unwrap();
    let ids = [0, 1, rows / 2, rows - 1];
    let grads = Array2::from_shape_fn((ids.len(), width), |(i, j)| (i * width + j) as f32);
    emb.scatter_add(&ids, &grads).unwrap();
    let w = store
        .variable("w", Array1::from_shape_fn(dense, |i| i as f32))
        .unwrap();

    let snapshot = store.snapshot();
    let largest = largest_allocation(|| snapshot.save(&path).unwrap());
    assert!(
        largest < dense * 4 / 8,
        "a save allocated {largest} bytes at once for a {table_bytes}-byte table and a {}-byte \
         tensor",
        dense * 4
    );
    // Through `Checkpoints` as well.
    let checkpoints = Checkpoints::new(dir.path().join("numbered"), 1).unwrap();
    let mut saved = None;
    let largest = largest_allocation(|| saved = Some(checkpoints.save(&store).unwrap()));
    assert!(
        largest < dense * 4 / 8,
        "Checkpoints::save: {largest} bytes"
    );

    for file in [path, saved.unwrap()] {
        assert!(std::fs::metadata(&file).unwrap().len() as usize > table_bytes + dense * 4);
        let back = Store::load(&file).unwrap();
        assert_eq!(*back.get::<f32, Ix1>("w").unwrap().read(), *w.read());
        let table = back.get_paged::<f32>("emb").unwrap().read_owned();
        assert_eq!(table.to_array(), emb.read_owned().to_array());
        assert_eq!(table.rows_per_page(), 256);
    }
}

/// A checkpoint's mode is `0o666` less the umask: `0o644` under `0o022`, `0o664` under
/// `0o002`, `0o600` under `0o077`, so that the umask decides whether another user's reader
/// can open it.
#[test]
#[cfg(unix)]
#[cfg_attr(miri, ignore = "file system I/O (miri isolates it)")]
fn a_saved_file_gets_the_process_umask() {
    alone!();
    use std::os::unix::fs::PermissionsExt;

    let dir = tempfile::tempdir().unwrap();
    let store = Store::new();
    store.variable("w", Array1::<f32>::ones(4)).unwrap();
    let checkpoints = Checkpoints::new(dir.path().join("numbered"), 8).unwrap();
    for (umask, mode) in [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)] {
        // SAFETY: `umask` only swaps the process's file-creation mask; no other test of this
        // binary creates files whose mode it checks.
        let before = unsafe { libc::umask(umask) };
        let path = dir.path().join(format!("{umask:o}.safetensors"));
        let saved = store.save(&path).map(drop);
        let numbered = checkpoints.save(&store);
        // SAFETY: as above, putting the mask back.
        unsafe { libc::umask(before) };
        saved.unwrap();
        for file in [path, numbered.unwrap()] {
            let found = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
            assert_eq!(
                found,
                mode,
                "{} under umask {umask:o}: {found:o}",
                file.display()
            );
        }
    }
}

/// A header declaring a paged table of 2^33 rows and no columns in one-row pages (no bytes
/// of data, and a page tree of 2^33 entries of at least 8 bytes each: 64 GiB) is refused by
/// the memory budget before anything of the table is allocated: the load requests what
/// parsing a header of a hundred bytes takes, nowhere near one entry per page.
#[test]
fn a_hostile_header_is_refused_before_its_sizes_are_allocated() {
    alone!();
    let view = TensorView::new(Dtype::F32, vec![1 << 33, 0], &[]).unwrap();
    let metadata = HashMap::from([("mvtensor.paged.emb".to_owned(), "1".to_owned())]);
    let bytes = safetensors::serialize([("emb", view)], Some(metadata)).unwrap();
    let (requested, loaded) = bytes_allocated_by(|| Store::load_bytes(&bytes).map(drop));
    match loaded {
        Err(Error::Checkpoint { problem, .. }) => assert!(
            problem.contains("`emb`") && problem.contains("memory budget of"),
            "{problem}"
        ),
        other => panic!("not refused by the budget: {other:?}"),
    }
    assert!(
        requested < 64 << 10,
        "refusing a {}-byte file requested {requested} bytes",
        bytes.len()
    );
}

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

/// Registering, and loading, four times the variables requests about four times the bytes
/// (N log N: each registration copies one path of the registry's persistent map), far from
/// the sixteen times of a registry copied whole at every registration. Bytes requested by
/// this thread, not time: the count is the same on a loaded machine and under a sanitizer.
#[test]
#[cfg_attr(miri, ignore = "10,000 variables")]
fn registering_and_loading_allocate_in_proportion_to_the_tensors() {
    alone!();
    const N: usize = 2_000;
    let register = |count: usize| {
        let store = Store::new();
        for i in 0..count {
            store.variable(&format!("v{i:05}"), arr0(i as f32)).unwrap();
        }
        store
    };
    let (small, store) = bytes_allocated_by(|| register(N));
    assert_eq!(store.len(), N);
    let (large, store) = bytes_allocated_by(|| register(4 * N));
    assert_eq!(store.len(), 4 * N);
    let ratio = large as f64 / small as f64;
    assert!(
        ratio < 8.0,
        "store.variable: {N} requested {small} bytes, {} requested {large} ({ratio:.1}x)",
        4 * N
    );

    let (small_file, large_file) = (many_tensors(N), many_tensors(4 * N));
    let (small, store) = bytes_allocated_by(|| Store::load_bytes(&small_file).unwrap());
    assert_eq!(store.len(), N);
    let (large, store) = bytes_allocated_by(|| Store::load_bytes(&large_file).unwrap());
    assert_eq!(store.len(), 4 * N);
    let ratio = large as f64 / small as f64;
    assert!(
        ratio < 8.0,
        "Store::load_bytes: {N} tensors requested {small} bytes, {} requested {large} \
         ({ratio:.1}x)",
        4 * N
    );
    let last = store.get::<f32, Ix1>(&format!("t{:05}", 4 * N - 1));
    assert_eq!(last.unwrap().read()[0], (4 * N - 1) as f32);
}
