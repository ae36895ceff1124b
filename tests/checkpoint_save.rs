//! What a save costs and leaves: it streams the snapshot into the file (no buffer of a
//! table's or a tensor's size: the largest allocation during a save is counted by this
//! binary's allocator, `tests/counting`, which is why these tests have a process of their
//! own), and the file's permissions follow the process's umask (process-wide, so only this
//! binary sets it).

use mvtensor::checkpoint::Checkpoints;
use mvtensor::{PagedVariable, Store};
use ndarray::{Array1, Array2, Ix1};

mod counting;

use counting::largest_allocation;

/// A 32 MiB paged table and a 16 MiB dense tensor are saved with no allocation of even an
/// eighth of the smaller: the table goes out page by page and the tensor from its own memory,
/// never through a buffer of either's size. What is written reads back. (The largest request
/// is counted process-wide: the other test of this binary requests nothing near 2 MiB.)
#[test]
#[cfg_attr(miri, ignore = "file system I/O (miri isolates it)")]
fn a_save_streams_tables_and_tensors_into_the_file() {
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
/// `0o002`, `0o600` under `0o077` (files were `0o600` whatever the umask, and another user's
/// reader could not open them).
#[test]
#[cfg(unix)]
#[cfg_attr(miri, ignore = "file system I/O (miri isolates it)")]
fn a_saved_file_gets_the_process_umask() {
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
