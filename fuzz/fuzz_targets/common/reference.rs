//! What both checkpoint targets check of a file's bytes: `Store::load_bytes` never panics, a
//! refusal is `Error::Checkpoint` naming `<bytes>`, and what it accepts agrees with the
//! safetensors crate's own reading (the reference model): the same names, dtypes, shapes and
//! element bytes. A tensor the metadata marks paged is read back through `Store::get_paged`,
//! the rest through `Store::get`.

use mvtensor::ndarray::IxDyn;
use mvtensor::{DType, Error, Store, VariableKind};
use safetensors::tensor::Dtype;
use safetensors::SafeTensors;

/// Loads `data` and checks it against the reference (see the module docs).
pub fn check_load(data: &[u8]) {
    let store = match Store::load_bytes(data) {
        Ok(store) => store,
        Err(Error::Checkpoint { file, .. }) => {
            assert_eq!(file, "<bytes>");
            return;
        }
        Err(other) => panic!("a refusal that is not Error::Checkpoint: {other}"),
    };
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
            (DType::F32, Dtype::F32) => le(&store, name, f32::to_le_bytes),
            (DType::F64, Dtype::F64) => le(&store, name, f64::to_le_bytes),
            (DType::I32, Dtype::I32) => le(&store, name, i32::to_le_bytes),
            (DType::I64, Dtype::I64) => le(&store, name, i64::to_le_bytes),
            (DType::F16, Dtype::F16) => le(&store, name, mvtensor::half::f16::to_le_bytes),
            (DType::BF16, Dtype::BF16) => le(&store, name, mvtensor::half::bf16::to_le_bytes),
            (ours, theirs) => panic!(
                "`{}`: loaded as {ours}, the file says {theirs:?}",
                info.name
            ),
        };
        assert_eq!(bytes, tensor.data(), "`{}`: other values", info.name);
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
    };
    elements.iter().flat_map(|&x| f(x)).collect()
}
