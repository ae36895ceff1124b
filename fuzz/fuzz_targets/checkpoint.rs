//! Arbitrary bytes fed to the checkpoint loader (`Store::load_bytes`): it never panics, a
//! refusal is always `Error::Checkpoint`, and what it accepts agrees with the safetensors
//! crate's own reading of the same bytes (the reference model): the same names, dtypes,
//! shapes and element bytes; and it saves (`to_bytes`) as a file of the same tensors that
//! loads and restores (`Store::restore`) unchanged. A tensor the metadata marks paged (`mvtensor.paged.<name>`) is
//! read back through `Store::get_paged`, the rest through `Store::get`. Seeds:
//! `fuzz/seeds/checkpoint` (valid files of every dtype).
//!
//!     cargo +nightly fuzz run checkpoint fuzz/corpus/checkpoint fuzz/seeds/checkpoint

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "common/reference.rs"]
mod reference;

fuzz_target!(|data: &[u8]| reference::check_load(data));
