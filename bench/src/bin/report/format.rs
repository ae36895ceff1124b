//! How the report writes numbers: rates, latencies, ratios, sizes.

/// A rate with a readable unit: `1.23M`, `456.0k`, `789`. Units are written next to their
/// figures, here and below, so that a table cell is one word of the report's count.
pub(crate) fn rate(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// A latency in nanoseconds, with a readable unit.
pub(crate) fn latency(ns: u64) -> String {
    match ns {
        0..=9_999 => format!("{ns}ns"),
        10_000..=9_999_999 => format!("{:.1}µs", ns as f64 / 1e3),
        _ => format!("{:.1}ms", ns as f64 / 1e6),
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
    format!("{:.1}MiB", bytes as f64 / (1 << 20) as f64)
}

pub(crate) fn verdict(met: bool) -> &'static str {
    if met {
        "**met**"
    } else {
        "**missed**"
    }
}

/// `md` with every table row written without padding (`|a|b|`, delimiter cells `-`): the
/// same table once rendered, and a row's figures are not interleaved with words of `|`.
pub(crate) fn compact_tables(md: &str) -> String {
    let mut out = String::with_capacity(md.len());
    for line in md.lines() {
        if line.starts_with('|') {
            out.push_str(&compact_row(line));
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// One table row without padding; an escaped `\|` inside a cell stays in its cell.
fn compact_row(line: &str) -> String {
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cell.push(c);
                cell.push(chars.next().expect("peeked"));
            }
            '|' => cells.push(std::mem::take(&mut cell)),
            _ => cell.push(c),
        }
    }
    cells.push(cell);
    cells
        .iter()
        .map(|c| {
            let c = c.trim();
            if !c.is_empty() && c.chars().all(|x| x == '-') {
                "-"
            } else {
                c
            }
        })
        .collect::<Vec<_>>()
        .join("|")
}
