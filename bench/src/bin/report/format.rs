//! How the report writes numbers: rates, latencies, ratios, sizes.

/// A rate with a readable unit: `1.23 M`, `456 k`, `789`.
pub(crate) fn rate(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1} k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// A latency in nanoseconds, with a readable unit.
pub(crate) fn latency(ns: u64) -> String {
    match ns {
        0..=9_999 => format!("{ns} ns"),
        10_000..=9_999_999 => format!("{:.1} µs", ns as f64 / 1e3),
        _ => format!("{:.1} ms", ns as f64 / 1e6),
    }
}

/// A ratio, with enough digits to tell 0.004x from 0.001x.
pub(crate) fn ratio(x: f64) -> String {
    if x < 0.095 {
        format!("{x:.3}x")
    } else {
        format!("{x:.2}x")
    }
}

/// `1 thread`, `2 threads`.
pub(crate) fn count(k: usize, what: &str) -> String {
    format!("{k} {what}{}", if k == 1 { "" } else { "s" })
}

pub(crate) fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

pub(crate) fn verdict(met: bool) -> &'static str {
    if met {
        "**met**"
    } else {
        "**missed**"
    }
}
