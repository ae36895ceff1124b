//! What the trainer measures besides time: latency histograms and this process's resident
//! memory. The benchmarks (`bench/`) measure with the same two.

#![allow(dead_code)] // each includer uses part of it

use hdrhistogram::Histogram;

/// A latency histogram in nanoseconds: 1 ns to 60 s, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

/// A field of `/proc/self/status` in bytes (Linux; `None` elsewhere or if it is missing).
pub fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib = line[field.len()..].trim().trim_end_matches("kB").trim();
    kib.parse::<u64>().ok().map(|k| k * 1024)
}

/// This process's resident memory (Linux; `None` elsewhere).
pub fn resident_bytes() -> Option<u64> {
    status_bytes("VmRSS:")
}
