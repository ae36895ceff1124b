//! A checkpoint's tensors as its header declares them, untyped (name, dtype, shape, bytes),
//! and what loading them would allocate, checked against a memory budget before anything is.
//!
//! What `safetensors` checks when it reads the header: the JSON, that the offsets are
//! contiguous and end at the end of the file, and that each tensor's element count (a
//! checked product of its shape) times its dtype's size is its byte range. What it does not:
//! that ndarray can hold the shape (the product of its non-zero axes within `isize`), our
//! metadata (a paged table's rows per page), and what a tensor makes *us* allocate beyond its
//! bytes. A paged table of 2^33 zero-width rows is zero bytes in the file and, in one-row
//! pages, a page tree of 2^33 entries of at least 8 bytes each (64 GiB) in memory: [`Budget`]
//! refuses it before the first page.

use std::collections::HashMap;

use safetensors::tensor::Dtype;
use safetensors::SafeTensors;

use super::super::{LAYOUT, PAGED};
use super::error;
use crate::error::Result;

// What a load or restore allocates is counted in bytes requested from the allocator (its
// own headers and rounding are the allocator's business), with room to spare.

/// What a variable costs beyond its values: its inner state, first version, name and
/// registry node, about what a scalar variable requests, so that many tiny tensors count
/// what they make the loader allocate, not only their bytes.
const PER_TENSOR: usize = 1536;

/// What a paged table's page costs beyond its rows: its entry in the table's tree of nodes
/// (8 bytes at the lowest level, an eighth of that or less above it, and the root), with
/// room to spare.
pub(super) const TREE_PER_PAGE: usize = 16;

/// Of the default budget: this many times the file's length (above the 10 times of the
/// worst honest file: a paged table of one-row pages of 2-byte rows, each of which costs its
/// 2 bytes in the values the table is built from and in its page, plus [`TREE_PER_PAGE`])...
const BUDGET_PER_FILE_BYTE: usize = 16;
/// ...plus this allowance, for the variables' own state and tables of zero-width rows.
const BUDGET_ALLOWANCE: usize = 256 << 20;

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

/// Every tensor of a checkpoint's bytes, its shape checked against its bytes (see the
/// module docs); nothing is converted and no value is allocated.
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
            let raw = Raw {
                data: data
                    .get(start..end)
                    .ok_or_else(|| error(file, format!("`{name}`: offsets out of range")))?,
                dtype: info.dtype,
                shape: info.shape.clone(),
                name,
            };
            check_shape(&raw)
                .map_err(|problem| error(file, format!("`{}`: {problem}", raw.name)))?;
            Ok(raw)
        })
        .collect::<Result<Vec<_>>>()?;
    tensors.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    Ok(Parsed {
        tensors,
        metadata: header.metadata().clone().unwrap_or_default(),
    })
}

/// The tensor's element count (a checked product) times its dtype's size is its byte range,
/// and ndarray can hold its shape (the product of the non-zero axes fits an `isize`).
fn check_shape(raw: &Raw<'_>) -> std::result::Result<(), String> {
    let elements = raw
        .shape
        .iter()
        .try_fold(1usize, |n, &axis| n.checked_mul(axis));
    let bits = elements.and_then(|n| n.checked_mul(raw.dtype.bitsize()));
    if bits != raw.data.len().checked_mul(8) {
        return Err(format!(
            "shape {:?} of {:?} is not its {} bytes",
            raw.shape,
            raw.dtype,
            raw.data.len()
        ));
    }
    let nonzero = raw
        .shape
        .iter()
        .filter(|&&axis| axis != 0)
        .try_fold(1usize, |n, &axis| n.checked_mul(axis));
    if nonzero.is_none_or(|n| isize::try_from(n).is_err()) {
        return Err(format!(
            "shape {:?} has more elements than an array can",
            raw.shape
        ));
    }
    Ok(())
}

impl Parsed<'_> {
    /// The rows per page of `raw` if the file says it was a paged variable
    /// (`mvtensor.paged.<name>`): a positive number no larger than its rows (or 1 for no
    /// rows), as mvtensor writes, of a tensor with rows (rank 1 or more).
    pub(super) fn rows_per_page(&self, raw: &Raw<'_>, file: &str) -> Result<Option<usize>> {
        let key = format!("{PAGED}{}", raw.name);
        let Some(text) = self.metadata.get(&key) else {
            return Ok(None);
        };
        let Some(&rows) = raw.shape.first() else {
            return Err(error(
                file,
                format!(
                    "`{key}` makes `{}` a paged table, but it has no rows (rank 0)",
                    raw.name
                ),
            ));
        };
        match text.parse::<usize>() {
            Ok(per_page) if (1..=rows.max(1)).contains(&per_page) => Ok(Some(per_page)),
            _ => Err(error(
                file,
                format!(
                    "`{key}` is `{text}`, not a number of rows per page from 1 to the \
                     tensor's {rows} rows"
                ),
            )),
        }
    }

    /// A packed set's tensors, as the file describes them (`mvtensor.layout.<name>`).
    pub(super) fn layout(&self, raw: &Raw<'_>) -> Option<&str> {
        self.metadata
            .get(&format!("{LAYOUT}{}", raw.name))
            .map(String::as_str)
    }
}

/// Bytes a load or restore may allocate for a file's tensors, and what it has counted so far.
pub(super) struct Budget<'f> {
    file: &'f str,
    limit: usize,
    used: usize,
}

impl<'f> Budget<'f> {
    /// `limit` bytes, or by default [`BUDGET_PER_FILE_BYTE`] times the file's `file_len` plus
    /// [`BUDGET_ALLOWANCE`] (see [`Restore::memory_budget`](super::Restore::memory_budget)).
    pub(super) fn new(file: &'f str, limit: Option<usize>, file_len: usize) -> Self {
        let limit = limit.unwrap_or_else(|| {
            file_len
                .saturating_mul(BUDGET_PER_FILE_BYTE)
                .saturating_add(BUDGET_ALLOWANCE)
        });
        Self {
            file,
            limit,
            used: 0,
        }
    }

    /// Counts what `raw` needs for loading into a new store: its values, and if `paged` (rows
    /// per page) the table built from them; refused, naming the tensor and the bytes, if the
    /// budget does not hold it.
    pub(super) fn charge_load(&mut self, raw: &Raw<'_>, paged: Option<usize>) -> Result<()> {
        let (need, what) = match paged {
            None => (
                raw.data.len().checked_add(PER_TENSOR),
                format!("{} bytes of values", raw.data.len()),
            ),
            Some(per_page) => {
                let pages = raw.shape[0].div_ceil(per_page); // the rank is checked
                (
                    paged_table(raw, per_page, pages)
                        .and_then(|t| t.checked_add(raw.data.len()))
                        .and_then(|t| t.checked_add(PER_TENSOR)),
                    format!(
                        "a paged table of {pages} pages of {per_page} row{}",
                        if per_page == 1 { "" } else { "s" }
                    ),
                )
            }
        };
        self.charge(&raw.name, need, &what)
    }

    /// Counts `need` bytes (`None`: more than a `usize` holds) for the tensor `name`.
    pub(super) fn charge(&mut self, name: &str, need: Option<usize>, what: &str) -> Result<()> {
        match need.and_then(|n| n.checked_add(self.used)) {
            Some(total) if total <= self.limit => {
                self.used = total;
                Ok(())
            }
            _ => Err(error(
                self.file,
                format!(
                    "tensor `{name}` would need {} bytes ({what}){}, over the memory budget of \
                     {} bytes (`Restore::memory_budget` sets it)",
                    need.map_or_else(|| format!("more than {}", usize::MAX), |n| n.to_string()),
                    match self.used {
                        0 => String::new(),
                        used => format!(" on top of {used} for the tensors before it"),
                    },
                    self.limit
                ),
            )),
        }
    }
}

/// What a paged table of `raw`'s shape allocates in `pages` pages of `per_page` rows: each
/// page's rows (the last one padded to a whole page) and its share of the tree; `None` past
/// `usize`.
fn paged_table(raw: &Raw<'_>, per_page: usize, pages: usize) -> Option<usize> {
    let width = raw.shape[1..]
        .iter()
        .try_fold(1usize, |n, &axis| n.checked_mul(axis))?;
    let page = width
        .checked_mul(per_page)?
        .checked_mul(raw.dtype.bitsize() / 8)?;
    page.checked_add(TREE_PER_PAGE)?.checked_mul(pages)
}
