//! The report's tables: goals at a glance, bandwidth, each workload, latency, sections, memory.

use std::fmt::Write as _;

use crate::format::{latency, mib, rate, ratio, verdict};
use crate::goals::Goal;
use crate::report::Report;
use crate::run::{BIG, MEMORY_THREADS};
use mvtensor_bench::sections::{Body, SectionVariant};
use mvtensor_bench::workloads::{Dense, WRITE_EVERY};
use mvtensor_bench::{size_label, Variant, SIZES, THREADS};

impl Report<'_> {
    pub(crate) fn goal_table(&self, s: &mut String, goals: &[Goal]) {
        let _ = writeln!(s, "## Goals at a glance\n");
        let _ = writeln!(
            s,
            "Ratios: mvtensor ÷ the best lock of the same cell. [Where we lose](#where-we-lose) \
             explains each miss.\n"
        );
        let _ = writeln!(s, "| goal | target | measured | |");
        let _ = writeln!(s, "| --- | --- | --- | --- |");
        for g in goals {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                g.name,
                g.target,
                g.measured,
                verdict(g.met)
            );
        }
        let _ = writeln!(s);
    }

    pub(crate) fn bandwidth_table(&self, s: &mut String) {
        let _ = writeln!(s, "## Memory-bandwidth baseline\n");
        let _ = writeln!(
            s,
            "`c = a + b` in this process, three arrays of traffic. The *bound* of a dense \
             update (`w += d`: read two tensors, write one) is the best of these over three \
             tensors' bytes. All three sizes fit in cache, so these are cache bandwidths.\n"
        );
        let _ = writeln!(s, "| size | 1 thread | 2 threads | bound (updates/s) |");
        let _ = writeln!(s, "| --- | --- | --- | --- |");
        for n in SIZES {
            let _ = writeln!(
                s,
                "| {} | {:.1} GB/s | {:.1} GB/s | {} |",
                size_label(n),
                self.r.bandwidth[&(n, 1)],
                self.r.bandwidth[&(n, 2)],
                rate(self.bound(n, 3.0))
            );
        }
        let _ = writeln!(s);
    }

    pub(crate) fn dense_section(&self, s: &mut String, w: Dense) {
        let (title, what, unit, plot) = match w {
            Dense::ReadMostly => (
                "1. Read-mostly",
                format!(
                    "Every thread reads {} times (the variant's read and a sum over the tensor, \
                     as a reader of parameters does) for each `assign_add` of ones.",
                    WRITE_EVERY - 1
                ),
                "Operations/s, reads and writes.",
                "read_mostly",
            ),
            Dense::WriteHeavy => (
                "2. Write-heavy",
                "Every thread adds tensors of ones, back to back.".to_string(),
                "Updates/s.",
                "write_heavy",
            ),
            Dense::TrainerStep => (
                "3. Trainer step",
                "Every thread reads the parameters, computes a gradient of their size (`sign(w)`, \
                 one pass) and applies it with `assign_add`; a lock computes under its read (or \
                 only) lock, then locks again to apply."
                    .to_string(),
                "Steps/s.",
                "trainer_step",
            ),
        };
        let _ = writeln!(s, "## {title}\n\n{what} {unit}\n");
        let _ = writeln!(s, "![{title}](plots/{plot}.svg)\n");
        let _ = write!(s, "| size | threads |");
        for v in Variant::ALL {
            let _ = write!(s, " {} |", v.name());
        }
        let _ = writeln!(s, " mvtensor ÷ best lock |");
        let _ = writeln!(s, "|{}", " --- |".repeat(Variant::ALL.len() + 3));
        for n in SIZES {
            for t in THREADS {
                let mv = self.dense(w, n, t, Variant::Mvtensor);
                let _ = write!(s, "| {} | {t} | {} |", size_label(n), rate(mv));
                for v in &Variant::ALL[1..] {
                    let x = self.dense(w, n, t, *v);
                    let _ = write!(s, " {} ({}) |", rate(x), ratio(x / mv));
                }
                let (lock, l) = self.best_lock(w, n, t);
                let mark = if mv >= l { "" } else { " ⚠" };
                let _ = writeln!(s, " {} ({}){mark} |", ratio(mv / l), lock.name());
            }
        }
        let _ = writeln!(s);
        if w == Dense::ReadMostly {
            return;
        }
        let arrays = if w == Dense::WriteHeavy { 3.0 } else { 5.0 };
        let per = if w == Dense::WriteHeavy {
            "an update"
        } else {
            "a step"
        };
        let _ = writeln!(
            s,
            "Percent of the bandwidth bound ({arrays} tensors of traffic {per}), and mvtensor's \
             deltas per combined pass (1.00: no overlap):\n"
        );
        let _ = write!(s, "| size | threads |");
        for v in Variant::ALL {
            let _ = write!(s, " {} |", v.name());
        }
        let _ = writeln!(s, " mvtensor batch |");
        let _ = writeln!(s, "|{}", " --- |".repeat(Variant::ALL.len() + 3));
        for n in SIZES {
            let bound = self.bound(n, arrays);
            for t in THREADS {
                let _ = write!(s, "| {} | {t} |", size_label(n));
                for v in Variant::ALL {
                    let _ = write!(s, " {:.0}% |", 100.0 * self.dense(w, n, t, v) / bound);
                }
                let b = self.r.batch.get(&(w, n, t));
                let _ = writeln!(s, " {} |", b.map_or("-".into(), |b| format!("{b:.2}")));
            }
        }
        let _ = writeln!(s);
    }

    pub(crate) fn latency_section(&self, s: &mut String) {
        let _ = writeln!(s, "## 4. Read latency under writes\n");
        let _ = writeln!(
            s,
            "Writers add ones to 1M f32 while readers time each read and sum (all readers in \
             one histogram). Last column: the variant's p99 ÷ mvtensor's (above 1.00x: \
             mvtensor's tail is lower).\n"
        );
        let _ = writeln!(s, "![read latency](plots/read_latency.svg)\n");
        let _ = writeln!(
            s,
            "| writers + readers | variant | p50 | p99 | p99.9 | max | reads/s | updates/s | p99 ÷ mvtensor |"
        );
        let _ = writeln!(s, "|{}", " --- |".repeat(9));
        for ((w, r), cells) in &self.r.latency {
            let mv99 = cells[0].1.at(0.99) as f64;
            for (v, l) in cells {
                let _ = writeln!(
                    s,
                    "| {w} + {r} | {} | {} | {} | {} | {} | {} | {} | {:.2}x |",
                    v.name(),
                    latency(l.at(0.5)),
                    latency(l.at(0.99)),
                    latency(l.at(0.999)),
                    latency(l.hist.max()),
                    rate(l.reads_per_s),
                    rate(l.updates_per_s),
                    l.at(0.99) as f64 / mv99
                );
            }
        }
        let _ = writeln!(s);
    }

    pub(crate) fn section_section(&self, s: &mut String) {
        let _ = writeln!(s, "## 5. Critical sections with a tiny body\n");
        let _ = writeln!(
            s,
            "**counter**: increment a scalar `i64`, returning the old value (mvtensor: \
             `CriticalSection::execute` on a 0-d variable; also its lock-free `fetch_update`). \
             **transfer**: move 1 between two accounts atomically (mvtensor: one section over \
             two 0-d variables; the others: one lock or RCU cell over both). Executions/s; in \
             brackets each ÷ mvtensor's section.\n"
        );
        let _ = writeln!(s, "![critical sections](plots/critical_section.svg)\n");
        for body in Body::ALL {
            let variants: Vec<SectionVariant> = SectionVariant::ALL
                .into_iter()
                .filter(|v| v.runs(body))
                .collect();
            let _ = writeln!(s, "**{}**\n", body.key());
            let _ = write!(s, "| threads |");
            for v in &variants {
                let _ = write!(s, " {} |", v.name());
            }
            let _ = writeln!(s, " mvtensor ÷ best lock |");
            let _ = writeln!(s, "|{}", " --- |".repeat(variants.len() + 2));
            for t in THREADS {
                let mv = self.section(body, t, SectionVariant::Mvtensor);
                let _ = write!(s, "| {t} | {} |", rate(mv));
                for v in &variants[1..] {
                    let x = self.section(body, t, *v);
                    let _ = write!(s, " {} ({}) |", rate(x), ratio(x / mv));
                }
                let (lock, l) = self.best_section_lock(body, t);
                let mark = if mv >= l { "" } else { " ⚠" };
                let _ = writeln!(s, " {} ({}){mark} |", ratio(mv / l), lock.name());
            }
            let _ = writeln!(s);
        }
    }

    pub(crate) fn memory_section(&self, s: &mut String) {
        let _ = writeln!(s, "## 6. Memory\n");
        let _ = writeln!(
            s,
            "Workload 2 with {MEMORY_THREADS} writers, each variant and size in a fresh \
             process. Resident memory (`VmRSS` every millisecond, above a baseline taken before \
             the variant was created; *steady*: without the first quarter; peak: `VmHWM`) is \
             approximate: freed memory the allocator keeps and thread stacks count, so only 1M \
             rows give copies. Live versions: `Variable::stats().live_versions`.\n"
        );
        let _ = writeln!(
            s,
            "| size | variant | updates/s | steady resident (median) | steady resident (max) | peak | live versions (median / max / max incl. warm-up) |"
        );
        let _ = writeln!(s, "|{}", " --- |".repeat(7));
        for (n, v, m) in &self.r.memory {
            let tensor = (n * 4) as f64;
            let copies = |b: u64| {
                if *n == BIG {
                    format!("{} ({:.1} copies)", mib(b), b as f64 / tensor)
                } else {
                    mib(b)
                }
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} |",
                size_label(*n),
                v.name(),
                rate(m.updates_per_s),
                copies(m.rss_p50),
                copies(m.rss_max),
                m.peak_bytes.map_or("-".into(), copies),
                match (m.live_p50, m.live_max, m.live_max_all) {
                    (Some(a), Some(b), Some(c)) => format!("{a} / {b} / {c}"),
                    _ => "-".into(),
                }
            );
        }
        let _ = writeln!(s);
    }
}
