//! What both checkpoint targets check of a file's bytes: `Store::load_bytes` never panics, a
//! refusal is `Error::Checkpoint` naming `<bytes>`, and what it accepts agrees with the
//! safetensors crate's own reading (the reference model): the same names, dtypes, shapes and
//! element bytes. A tensor the metadata marks paged is read back through `Store::get_paged`,
//! the rest through `Store::get`.
//!
//! What loads also saves and comes back: the loaded store's `to_bytes` succeeds, the bytes
//! hold the same tensors (by the reference's reading of both files) with the same rows per
//! page, they load into the same variables, and `Store::restore` of them into that store
//! restores every variable and changes no value.

use std::collections::HashMap;

use mvtensor::checkpoint::Restore;
use mvtensor::ndarray::IxDyn;
use mvtensor::{DType, Error, Store, VariableKind};
use safetensors::tensor::Dtype;
use safetensors::SafeTensors;

/// The metadata key prefix of a paged variable's rows per page.
const PAGED: &str = "mvtensor.paged.";

/// Loads `data` and checks it against the reference, then its round trip (see the module
/// docs).
pub fn check_load(data: &[u8]) {
    let store = match Store::load_bytes(data) {
        Ok(store) => store,
        Err(Error::Checkpoint { file, .. }) => {
            assert_eq!(file, "<bytes>");
            return;
        }
        Err(other) => panic!("a refusal that is not Error::Checkpoint: {other}"),
    };
    check_against_reference(&store, data);
    let saved = store
        .snapshot()
        .to_bytes()
        .unwrap_or_else(|e| panic!("a loaded store does not save: {e}"));
    let kinds: Vec<(String, VariableKind)> =
        store.list().into_iter().map(|i| (i.name, i.kind)).collect();
    // Before the second load: the peak stays one store's worth.
    drop(store);
    same_tensors(data, &saved);

    // The saved bytes hold what was accepted once, so no budget is needed to accept it
    // again (the file may be shorter than the first, and so its default budget smaller).
    let unlimited = Restore::default().memory_budget(usize::MAX);
    let again = Store::load_bytes_with(&saved, unlimited)
        .unwrap_or_else(|e| panic!("what a loaded store saved does not load: {e}"));
    let kinds_again: Vec<(String, VariableKind)> =
        again.list().into_iter().map(|i| (i.name, i.kind)).collect();
    assert_eq!(kinds_again, kinds, "other variables after a round trip");
    check_against_reference(&again, &saved);

    let path = std::env::temp_dir().join(format!(
        "mvtensor-fuzz-restore-{}.safetensors",
        std::process::id()
    ));
    std::fs::write(&path, &saved).expect("a scratch file in the temporary directory");
    let restored = again.restore(&path, unlimited);
    let _ = std::fs::remove_file(&path);
    let restored = restored.unwrap_or_else(|e| panic!("a restore of the store's own file: {e}"));
    assert_eq!(restored, kinds.len(), "variables restored");
    check_against_reference(&again, &saved);
}

/// The store holds what the reference reads in `data`: the same names, shapes, dtypes and
/// element bytes.
fn check_against_reference(store: &Store, data: &[u8]) {
    let reference =
        SafeTensors::deserialize(data).expect("mvtensor accepted what safetensors refuses");
    let mut names = reference.names();
    names.sort_unstable();
    let infos = store.list();
    assert_eq!(
        infos.iter().map(|i| i.name.as_str()).collect::<Vec<_>>(),
        names
    );
    for info in infos {
        let tensor = reference.tensor(&info.name).unwrap();
        assert_eq!(info.shape, tensor.shape(), "{}", info.name);
        let name = (info.name.as_str(), info.kind);
        let bytes = match (info.dtype, tensor.dtype()) {
            (DType::F32, Dtype::F32) => le(store, name, f32::to_le_bytes),
            (DType::F64, Dtype::F64) => le(store, name, f64::to_le_bytes),
            (DType::I32, Dtype::I32) => le(store, name, i32::to_le_bytes),
            (DType::I64, Dtype::I64) => le(store, name, i64::to_le_bytes),
            (DType::F16, Dtype::F16) => le(store, name, mvtensor::half::f16::to_le_bytes),
            (DType::BF16, Dtype::BF16) => le(store, name, mvtensor::half::bf16::to_le_bytes),
            (ours, theirs) => panic!(
                "`{}`: loaded as {ours}, the file says {theirs:?}",
                info.name
            ),
        };
        assert_eq!(bytes, tensor.data(), "`{}`: other values", info.name);
    }
}

/// The two files hold the same tensors by the reference's reading (names, dtypes, shapes,
/// bytes), and each paged tensor the same rows per page.
fn same_tensors(first: &[u8], second: &[u8]) {
    let (a, b) = (
        SafeTensors::deserialize(first).expect("read once already"),
        SafeTensors::deserialize(second).expect("a saved file safetensors refuses"),
    );
    let (mut names_a, mut names_b) = (a.names(), b.names());
    names_a.sort_unstable();
    names_b.sort_unstable();
    assert_eq!(names_a, names_b, "other tensors after a save");
    let rows = |bytes: &[u8]| -> HashMap<String, String> {
        let (_, metadata) = SafeTensors::read_metadata(bytes).expect("read once already");
        metadata.metadata().clone().unwrap_or_default()
    };
    let (rows_a, rows_b) = (rows(first), rows(second));
    for name in names_a {
        let (ta, tb) = (a.tensor(name).unwrap(), b.tensor(name).unwrap());
        assert_eq!(
            (ta.dtype(), ta.shape(), ta.data()),
            (tb.dtype(), tb.shape(), tb.data()),
            "`{name}` after a save"
        );
        let key = format!("{PAGED}{name}");
        let per_page = |m: &HashMap<String, String>| m.get(&key).map(|t| t.parse::<usize>());
        assert_eq!(
            per_page(&rows_a).map(Result::ok),
            per_page(&rows_b).map(Result::ok),
            "`{name}`: rows per page after a save"
        );
    }
}

/// The variable's elements as little-endian bytes, in standard order.
fn le<A: mvtensor::Element, const N: usize>(
    store: &Store,
    (name, kind): (&str, VariableKind),
    f: fn(A) -> [u8; N],
) -> Vec<u8> {
    let elements = match kind {
        VariableKind::Dense => store.get::<A, IxDyn>(name).unwrap().read().to_owned(),
        VariableKind::Paged => store.get_paged::<A>(name).unwrap().read().to_array(),
        other => unreachable!("a loaded store holds only variables, not {other} state"),
    };
    elements.iter().flat_map(|&x| f(x)).collect()
}
