//! The safetensors format, written as a stream: the 8-byte little-endian header length, the
//! JSON header (padded with spaces to a multiple of 8 bytes, as safetensors pads it), then
//! every tensor's bytes in the header's order, each written straight from the version or page
//! that holds it. Nothing of a tensor's size is allocated: a paged table goes out page by page.
//!
//! The header is what safetensors itself writes: `__metadata__` first, then each tensor's
//! `dtype`, `shape` and `data_offsets` (from 0 at the end of the header, contiguous), the
//! tensors ordered by descending element size and then by name, so that every tensor starts at
//! a multiple of its element size in the file. The metadata keys are sorted, so one snapshot
//! always gives the same bytes.

use std::collections::BTreeMap;
use std::io::{self, Write};

use safetensors::tensor::Dtype;

use super::{dtype_out, LAYOUT, METADATA, PAGED, TIMESTAMP, VERSION};
use crate::store::snapshot::Captured;
use crate::{Element, StoreSnapshot};

/// The largest header safetensors' reader accepts.
const MAX_HEADER: usize = 100_000_000;

/// A file to write: its header's bytes (length prefix included) and its tensors, in order,
/// each with its byte length.
pub(super) struct Plan<'s> {
    header: Vec<u8>,
    tensors: Vec<(&'s str, &'s Captured, u64)>,
    /// The whole file's length in bytes.
    pub(super) len: u64,
}

impl StoreSnapshot {
    /// The file this snapshot is written as; refused if a variable has the name of the
    /// header's metadata entry, which no reader could tell apart (the file would be written,
    /// and unreadable), or if the header passes what safetensors reads.
    pub(super) fn plan(&self) -> Result<Plan<'_>, String> {
        if let Some(name) = self.left_out().first() {
            return Err(format!(
                "the snapshot was taken inside an execution (or a queued variable's update \
                 closure), where private state cannot be copied, and leaves out `{name}`: \
                 take it outside"
            ));
        }
        if self.entries().iter().any(|(name, _)| &**name == METADATA) {
            return Err(format!(
                "a variable is named `{METADATA}`, which safetensors reserves for the \
                 header's metadata: rename it to save"
            ));
        }
        let mut metadata = BTreeMap::new();
        metadata.insert(TIMESTAMP.to_owned(), self.timestamp().to_string());
        let mut tensors = Vec::with_capacity(self.entries().len());
        for (name, captured) in self.entries() {
            metadata.insert(format!("{VERSION}{name}"), captured.number.to_string());
            if let Some(rows) = captured.rows_per_page {
                metadata.insert(format!("{PAGED}{name}"), rows.to_string());
            }
            if let Some(layout) = &captured.layout {
                metadata.insert(format!("{LAYOUT}{name}"), layout.to_string());
            }
            let len = byte_len(captured)
                .ok_or_else(|| format!("`{name}`: {:?} elements overflow", captured.shape))?;
            tensors.push((&**name, captured, len));
        }
        // The entries are sorted by name already; a stable sort keeps that within a dtype.
        tensors.sort_by_key(|&(_, captured, _)| std::cmp::Reverse(dtype_out(captured.dtype)));
        // Checked before the header is written: every tensor's end offset is at most this.
        let data = tensors
            .iter()
            .try_fold(0u64, |n, &(_, _, len)| n.checked_add(len))
            .ok_or("the tensors' bytes overflow a file length")?;
        let header = header(&metadata, &tensors)?;
        let len = data
            .checked_add(header.len() as u64)
            .ok_or("the tensors' bytes overflow a file length")?;
        Ok(Plan {
            header,
            tensors,
            len,
        })
    }
}

impl Plan<'_> {
    /// Writes the file into `out`. Each tensor must write exactly the bytes its header
    /// entry says: a tensor that writes another count is refused, naming it.
    pub(super) fn write(&self, out: &mut dyn Write) -> Result<(), String> {
        out.write_all(&self.header)
            .map_err(|e| format!("writing the header: {e}"))?;
        for &(name, captured, len) in &self.tensors {
            let mut counted = Counted { out, written: 0 };
            (captured.write)(captured, &mut counted)
                .map_err(|e| format!("writing `{name}`: {e}"))?;
            if counted.written != len {
                return Err(format!(
                    "`{name}` wrote {} bytes where its header says {len}",
                    counted.written
                ));
            }
        }
        Ok(())
    }
}

/// The bytes of `captured`'s elements: none if an axis is 0 (whatever the others, as the
/// loader accepts `[2^62, 0]`), else the checked product of its shape and element size;
/// `None` past `u64`.
fn byte_len(captured: &Captured) -> Option<u64> {
    if captured.shape.contains(&0) {
        return Some(0);
    }
    let size = dtype_out(captured.dtype).bitsize() as u64 / 8;
    captured
        .shape
        .iter()
        .try_fold(size, |n, &d| n.checked_mul(d as u64))
}

/// The length prefix and the JSON header, padded with spaces to a multiple of 8 bytes. The
/// tensors' lengths must sum within `u64` (checked by the caller), so no offset overflows.
fn header(
    metadata: &BTreeMap<String, String>,
    tensors: &[(&str, &Captured, u64)],
) -> Result<Vec<u8>, String> {
    let json = |e: serde_json::Error| format!("writing the header: {e}");
    let mut header = vec![0; 8];
    header.extend_from_slice(format!("{{\"{METADATA}\":").as_bytes());
    serde_json::to_writer(&mut header, metadata).map_err(json)?;
    let mut offset = 0u64;
    for &(name, captured, len) in tensors {
        header.push(b',');
        serde_json::to_writer(&mut header, name).map_err(json)?;
        let dtype: Dtype = dtype_out(captured.dtype);
        let shape = serde_json::to_string(&captured.shape).map_err(json)?;
        let end = offset + len;
        let entry = format!(
            ":{{\"dtype\":\"{dtype}\",\"shape\":{shape},\"data_offsets\":[{offset},{end}]}}"
        );
        header.extend_from_slice(entry.as_bytes());
        offset = end;
    }
    header.push(b'}');
    header.resize(header.len().next_multiple_of(8), b' ');
    let n = header.len() - 8;
    if n > MAX_HEADER {
        return Err(format!(
            "the header would be {n} bytes, over the {MAX_HEADER} safetensors reads \
             ({} variables): save fewer variables per file",
            tensors.len()
        ));
    }
    header[..8].copy_from_slice(&(n as u64).to_le_bytes());
    Ok(header)
}

/// A writer that counts the bytes it passes on.
struct Counted<'a> {
    out: &'a mut dyn Write,
    written: u64,
}

impl Write for Counted<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.out.write_all(buf)?;
        self.written += buf.len() as u64;
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Elements converted at a time where the machine is big-endian.
const CHUNK: usize = 4096;

/// Writes `values` as little-endian bytes: their own memory on a little-endian machine,
/// converted a chunk at a time otherwise (never a copy of the whole slice).
pub(crate) fn write_le<A: Element>(values: &[A], out: &mut dyn Write) -> io::Result<()> {
    if cfg!(target_endian = "little") {
        // SAFETY: every `Element` (f32, f64, i32, i64, half's f16 and bf16, the trait is
        // sealed) is a plain number without padding, so its memory is initialised bytes;
        // the slice covers exactly the values' memory and borrows it for as long.
        let bytes = unsafe {
            std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
        };
        return out.write_all(bytes);
    }
    let mut chunk = Vec::with_capacity(CHUNK * std::mem::size_of::<A>());
    for values in values.chunks(CHUNK) {
        chunk.clear();
        values.iter().for_each(|v| v.extend_le(&mut chunk));
        out.write_all(&chunk)?;
    }
    Ok(())
}
