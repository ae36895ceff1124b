//! A checkpoint's tensors as its header declares them, untyped (name, dtype, shape, bytes):
//! `safetensors` has checked the header, the offsets, and each tensor's element count
//! against its bytes; nothing is converted and no value is allocated here.

use std::collections::HashMap;

use safetensors::tensor::Dtype;
use safetensors::SafeTensors;

use super::super::{LAYOUT, PAGED};
use super::error;
use crate::error::Result;

/// One tensor of a file, as its header declares it: typed only where it is used.
pub(super) struct Raw<'a> {
    pub(super) name: String,
    pub(super) dtype: Dtype,
    pub(super) shape: Vec<usize>,
    /// Its bytes in the file, exactly `shape`'s elements times the dtype's size.
    pub(super) data: &'a [u8],
}

/// A file's tensors, sorted by name, and its header's metadata.
pub(super) struct Parsed<'a> {
    pub(super) tensors: Vec<Raw<'a>>,
    metadata: HashMap<String, String>,
}

/// Every tensor of a checkpoint's bytes, as safetensors checked them (see the module
/// docs); nothing is converted and no value is allocated.
pub(super) fn parse<'a>(bytes: &'a [u8], file: &str) -> Result<Parsed<'a>> {
    let (header_len, header) =
        SafeTensors::read_metadata(bytes).map_err(|e| error(file, e.to_string()))?;
    let data = 8usize
        .checked_add(header_len)
        .and_then(|start| bytes.get(start..))
        .ok_or_else(|| error(file, "the header runs past the end of the file"))?;
    let mut tensors = header
        .tensors()
        .into_iter()
        .map(|(name, info)| {
            let (start, end) = info.data_offsets;
            Ok(Raw {
                data: data
                    .get(start..end)
                    .ok_or_else(|| error(file, format!("`{name}`: offsets out of range")))?,
                dtype: info.dtype,
                shape: info.shape.clone(),
                name,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    tensors.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    Ok(Parsed {
        tensors,
        metadata: header.metadata().clone().unwrap_or_default(),
    })
}

impl Parsed<'_> {
    /// The rows per page of `raw` if the file says it was a paged variable
    /// (`mvtensor.paged.<name>`).
    pub(super) fn rows_per_page(&self, raw: &Raw<'_>, file: &str) -> Result<Option<usize>> {
        let key = format!("{PAGED}{}", raw.name);
        match self.metadata.get(&key) {
            None => Ok(None),
            Some(rows) => rows
                .parse()
                .map(Some)
                .map_err(|_| error(file, format!("`{key}` is `{rows}`, not a number of rows"))),
        }
    }

    /// A packed set's tensors, as the file describes them (`mvtensor.layout.<name>`).
    pub(super) fn layout(&self, raw: &Raw<'_>) -> Option<&str> {
        self.metadata
            .get(&format!("{LAYOUT}{}", raw.name))
            .map(String::as_str)
    }
}
