//! Structure-aware fuzzing of the checkpoint loader (`Store::load_bytes`): the input is a
//! checkpoint described by `arbitrary` values (tensors with names, dtypes mvtensor has and
//! dtypes it lacks, shapes with dimensions up to `u64::MAX`, data offsets exact or wrong, a
//! paged entry's rows per page, a packed layout, version and timestamp entries, any other
//! metadata), written out as a safetensors header in JSON by hand, with a short data
//! section. Random bytes rarely make a header that parses; these always do, so the
//! loader's checks of what a header declares are what gets explored.
//!
//! Checked: it never panics; a refusal is `Error::Checkpoint` naming `<bytes>`; what it
//! accepts agrees with the safetensors crate's reading (names, dtypes, shapes, bytes), and
//! saves (`to_bytes`) as a file of the same tensors that loads into the same variables and
//! restores into them (`Store::restore`) unchanged. Run
//! under a memory limit (`-rss_limit_mb=2048 -malloc_limit_mb=1024`, as `.ci/run` does): a
//! file of at most a few KiB that makes the loader allocate a GiB is a finding: e.g. the
//! 117-byte header declaring a paged table of 2^33 rows of no columns (seed
//! `fuzz/seeds/checkpoint_header/paged-2e33-rows`), which the loader must refuse by its
//! memory budget.
//!
//!     cargo +nightly fuzz run checkpoint_header fuzz/corpus/checkpoint_header \
//!         fuzz/seeds/checkpoint_header -- -rss_limit_mb=2048 -malloc_limit_mb=1024

#![no_main]

use std::fmt::Write;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;

#[path = "common/reference.rs"]
mod reference;

/// The data section's largest size: tensors that would need more get offsets that do not
/// cover them, which the loader must refuse.
const MAX_DATA: u64 = 4096;

#[derive(Arbitrary, Debug)]
enum Name {
    /// One of a few names, so that tensors and metadata entries meet.
    Common(u8),
    Any(String),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Kind {
    F32,
    F64,
    I32,
    I64,
    F16,
    Bf16,
    // safetensors dtypes mvtensor has no element type for.
    Bool,
    U8,
    I8,
    U16,
    I16,
    U32,
    U64,
    F8E4m3,
}

#[derive(Arbitrary, Debug)]
enum DTypeIn {
    Known(Kind),
    /// Any text: an unknown dtype, or a known one misspelt.
    Text(String),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Dim {
    Small(u8),
    /// `2^(k % 64)`.
    Pow2(u8),
    Huge(u64),
}

#[derive(Arbitrary, Debug)]
enum Offsets {
    /// Where the tensor's bytes would be, after the previous tensor's.
    Exact,
    /// The exact ones moved by a few bytes.
    Shifted(i8, i8),
    Raw(u64, u64),
}

#[derive(Arbitrary, Debug)]
enum Rows {
    Count(u64),
    Text(String),
}

#[derive(Arbitrary, Debug)]
struct Tensor {
    name: Name,
    dtype: DTypeIn,
    shape: Vec<Dim>,
    offsets: Offsets,
    /// `mvtensor.paged.<name>`: a paged variable's rows per page.
    paged: Option<Rows>,
    /// `mvtensor.layout.<name>`: a packed set's tensors, described.
    layout: Option<String>,
    /// `mvtensor.version.<name>`.
    version: Option<String>,
}

#[derive(Arbitrary, Debug)]
struct Input {
    tensors: Vec<Tensor>,
    timestamp: Option<String>,
    metadata: Vec<(String, String)>,
    /// Bytes past the tensors' data.
    extra_data: u8,
    /// The data's bytes repeat this.
    fill: u8,
    /// Spaces after the JSON (the writer pads to 8 bytes).
    padding: u8,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::F32 => "F32",
            Kind::F64 => "F64",
            Kind::I32 => "I32",
            Kind::I64 => "I64",
            Kind::F16 => "F16",
            Kind::Bf16 => "BF16",
            Kind::Bool => "BOOL",
            Kind::U8 => "U8",
            Kind::I8 => "I8",
            Kind::U16 => "U16",
            Kind::I16 => "I16",
            Kind::U32 => "U32",
            Kind::U64 => "U64",
            Kind::F8E4m3 => "F8_E4M3",
        }
    }

    fn size(self) -> u64 {
        match self {
            Kind::Bool | Kind::U8 | Kind::I8 | Kind::F8E4m3 => 1,
            Kind::F16 | Kind::Bf16 | Kind::U16 | Kind::I16 => 2,
            Kind::F32 | Kind::I32 | Kind::U32 => 4,
            Kind::F64 | Kind::I64 | Kind::U64 => 8,
        }
    }
}

impl Dim {
    fn value(self) -> u64 {
        match self {
            Dim::Small(n) => u64::from(n % 8),
            Dim::Pow2(k) => 1 << (k % 64),
            Dim::Huge(n) => n,
        }
    }
}

impl Name {
    fn text(&self) -> String {
        match self {
            Name::Common(k) => ["emb", "w", "opt.state", "__metadata__"][usize::from(k % 4)].into(),
            Name::Any(s) => s.clone(),
        }
    }
}

/// `s` as a JSON string, quotes included.
fn json(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => write!(out, "\\u{:04x}", u32::from(c)).unwrap(),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The checkpoint `input` describes: the header's length, the header, the data.
fn file(input: &Input) -> Vec<u8> {
    let mut metadata: Vec<(String, String)> = Vec::new();
    if let Some(t) = &input.timestamp {
        metadata.push(("mvtensor.timestamp".into(), t.clone()));
    }
    let mut entries = Vec::new();
    let mut end = 0u64; // where the previous tensor's bytes end
    for t in input.tensors.iter().take(8) {
        let name = t.name.text();
        let (dtype, size) = match &t.dtype {
            DTypeIn::Known(kind) => (kind.name().to_owned(), kind.size()),
            DTypeIn::Text(text) => (text.clone(), 1),
        };
        let shape: Vec<u64> = t.shape.iter().take(6).map(|d| d.value()).collect();
        // As safetensors counts: the elements (a checked product), then their bytes, so
        // that [2^62, 0] is 0 bytes whatever the dtype.
        let bytes = shape
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            .and_then(|n| n.checked_mul(size));
        let exact = (end, end.saturating_add(bytes.unwrap_or(u64::MAX)));
        let (start, stop) = match t.offsets {
            Offsets::Exact => exact,
            Offsets::Shifted(a, b) => (
                exact.0.saturating_add_signed(a.into()),
                exact.1.saturating_add_signed(b.into()),
            ),
            Offsets::Raw(a, b) => (a, b),
        };
        end = end.max(stop.min(MAX_DATA));
        let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
        entries.push(format!(
            "{}:{{\"dtype\":{},\"shape\":[{}],\"data_offsets\":[{start},{stop}]}}",
            json(&name),
            json(&dtype),
            dims.join(",")
        ));
        match &t.paged {
            Some(Rows::Count(n)) => {
                metadata.push((format!("mvtensor.paged.{name}"), n.to_string()))
            }
            Some(Rows::Text(s)) => metadata.push((format!("mvtensor.paged.{name}"), s.clone())),
            None => {}
        }
        if let Some(layout) = &t.layout {
            metadata.push((format!("mvtensor.layout.{name}"), layout.clone()));
        }
        if let Some(version) = &t.version {
            metadata.push((format!("mvtensor.version.{name}"), version.clone()));
        }
    }
    metadata.extend(input.metadata.iter().take(8).cloned());
    let metadata: Vec<String> = metadata
        .iter()
        .map(|(k, v)| format!("{}:{}", json(k), json(v)))
        .collect();
    let mut header = format!("{{\"__metadata__\":{{{}}}", metadata.join(","));
    for entry in entries {
        header.push(',');
        header.push_str(&entry);
    }
    header.push('}');
    header.extend(std::iter::repeat_n(' ', usize::from(input.padding % 8)));
    let data_len = end + u64::from(input.extra_data % 4);
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend(std::iter::repeat_n(input.fill, data_len as usize));
    out
}

fuzz_target!(|input: Input| reference::check_load(&file(&input)));
