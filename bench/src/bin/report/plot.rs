//! The SVG plots.

use std::path::Path;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use crate::run::{Results, LATENCY_CONFIGS};
use mvtensor_bench::sections::{Body, SectionVariant};
use mvtensor_bench::train::{TrainVariant, TRAIN_THREADS};
use mvtensor_bench::workloads::Dense;
use mvtensor_bench::{size_label, Variant, SIZES, THREADS};

type Error = Box<dyn std::error::Error>;

const COLORS: [RGBColor; 8] = [
    RGBColor(214, 39, 40),   // mvtensor: red
    RGBColor(31, 119, 180),  // std Mutex: blue
    RGBColor(23, 190, 207),  // std RwLock: cyan
    RGBColor(44, 160, 44),   // parking_lot Mutex: green
    RGBColor(148, 103, 189), // parking_lot RwLock: purple
    RGBColor(255, 127, 14),  // arc-swap: orange
    RGBColor(127, 127, 127), // extra: grey
    RGBColor(140, 86, 75),   // second extra: brown
];

struct Series {
    name: String,
    color: RGBColor,
    points: Vec<(f64, f64)>,
}

struct Panel {
    title: String,
    series: Vec<Series>,
}

pub fn all(r: &Results, dir: &Path) -> Result<(), Error> {
    for w in Dense::ALL {
        let (title, unit) = match w {
            Dense::ReadMostly => ("Read-mostly (99% reads + sum, 1% assign_add)", "ops/s"),
            Dense::WriteHeavy => ("Write-heavy (assign_add of ones)", "updates/s"),
            Dense::TrainerStep => ("Trainer step (read, gradient, apply)", "steps/s"),
        };
        let panels = SIZES
            .iter()
            .map(|&n| Panel {
                title: format!("{} f32", size_label(n)),
                series: Variant::ALL
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| Series {
                        name: v.name().into(),
                        color: COLORS[i],
                        points: THREADS
                            .iter()
                            .map(|&t| (x_of(t), r.dense[&(w, n, t, v)]))
                            .collect(),
                    })
                    .collect(),
            })
            .collect();
        throughput(
            &dir.join(format!("{}.svg", w.key())),
            title,
            unit,
            panels,
            false,
        )?;
    }
    let panels = Body::ALL
        .iter()
        .map(|&b| Panel {
            title: b.key().into(),
            series: SectionVariant::ALL
                .iter()
                .filter(|v| v.runs(b))
                .map(|&v| Series {
                    name: v.name().into(),
                    color: section_color(v),
                    points: THREADS
                        .iter()
                        .map(|&t| (x_of(t), r.sections[&(b, t, v)]))
                        .collect(),
                })
                .collect(),
        })
        .collect();
    throughput(
        &dir.join("critical_section.svg"),
        "Critical section, tiny body (log scale)",
        "executions/s",
        panels,
        true,
    )?;
    latency(r, &dir.join("read_latency.svg"))?;
    train_loss(r, &dir.join("train_loss.svg"))
}

/// The wine trainer's loss over all wines against wall time, at the most threads.
fn train_loss(r: &Results, path: &Path) -> Result<(), Error> {
    let threads = TRAIN_THREADS[TRAIN_THREADS.len() - 1];
    let series: Vec<Series> = TrainVariant::ALL
        .iter()
        .enumerate()
        .map(|(i, &v)| Series {
            name: v.name().into(),
            color: COLORS[if i == 4 { 6 } else { i }],
            points: r.train[&(threads, v)]
                .curve
                .iter()
                .map(|&(t, loss)| (t * 1e3, f64::from(loss)))
                .collect(),
        })
        .collect();
    let points = || series.iter().flat_map(|s| s.points.iter().copied());
    let xmax = points().map(|p| p.0).fold(0.0, f64::max) * 1.05;
    let ymin = points()
        .map(|p| p.1)
        .fold(f64::INFINITY, f64::min)
        .max(1e-3);
    let ymax = points().map(|p| p.1).fold(0.0, f64::max);
    let root = SVGBackend::new(path, (760, 470)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        &format!(
            "Wine trainer: loss over all wines against wall time, {threads} threads (log scale)"
        ),
        ("sans-serif", 20),
    )?;
    let entries: Vec<(String, RGBColor)> =
        series.iter().map(|s| (s.name.clone(), s.color)).collect();
    let root = with_legend(root, &entries)?;
    let mut chart = ChartBuilder::on(&root)
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..xmax, (ymin * 0.9..ymax * 1.1).log_scale())?;
    chart
        .configure_mesh()
        .max_light_lines(1)
        .x_desc("wall time (ms)")
        .y_desc("mean squared error")
        .y_label_formatter(&|y| format!("{y:.2}"))
        .draw()?;
    for s in &series {
        let width = if s.name == "mvtensor" { 3 } else { 2 };
        chart.draw_series(LineSeries::new(
            s.points.clone(),
            s.color.stroke_width(width),
        ))?;
    }
    root.present()?;
    Ok(())
}

fn section_color(v: SectionVariant) -> RGBColor {
    match v {
        SectionVariant::Mvtensor => COLORS[0],
        SectionVariant::StdMutex => COLORS[1],
        SectionVariant::StdRwLock => COLORS[2],
        SectionVariant::PlMutex => COLORS[3],
        SectionVariant::PlRwLock => COLORS[4],
        SectionVariant::ArcSwap => COLORS[5],
        SectionVariant::MvFetchUpdate => COLORS[6],
        SectionVariant::MvPrivate => COLORS[7],
    }
}

/// Threads on a log2 axis.
fn x_of(threads: usize) -> f64 {
    (threads as f64).log2()
}

fn si(y: f64) -> String {
    if y >= 1e6 {
        format!("{:.1}M", y / 1e6)
    } else if y >= 1e3 {
        format!("{:.0}k", y / 1e3)
    } else {
        format!("{y:.0}")
    }
}

/// Legend rows height, in pixels.
const ROW: u32 = 24;

/// Where each legend entry goes: (row, x), wrapping at `width`; and the rows used.
fn legend_layout(entries: &[(String, RGBColor)], width: u32) -> (Vec<(u32, i32)>, u32) {
    let mut out = Vec::new();
    let (mut row, mut x) = (0u32, 20i32);
    for (name, _) in entries {
        // The naive font layout: about 0.6 em per character at 14 px.
        let w = 30 + (name.chars().count() as f64 * 8.4) as i32 + 24;
        if x + w > width as i32 && x > 20 {
            row += 1;
            x = 20;
        }
        out.push((row, x));
        x += w;
    }
    (out, row + 1)
}

/// Legend entries (a coloured line and a name each) across the top `area`.
fn legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    entries: &[(String, RGBColor)],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let (width, _) = area.dim_in_pixel();
    let (places, _) = legend_layout(entries, width);
    for ((name, color), (row, x)) in entries.iter().zip(places) {
        let y = (row * ROW + ROW / 2) as i32;
        area.draw(&PathElement::new(
            vec![(x, y), (x + 24, y)],
            color.stroke_width(3),
        ))?;
        area.draw(&Text::new(
            name.clone(),
            (x + 30, y - 7),
            ("sans-serif", 14).into_font(),
        ))?;
    }
    Ok(())
}

/// Splits a legend strip off the top of `root`, draws `entries` in it, returns the rest.
fn with_legend<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    entries: &[(String, RGBColor)],
) -> Result<DrawingArea<DB, plotters::coord::Shift>, DrawingAreaErrorKind<DB::ErrorType>> {
    let (width, _) = root.dim_in_pixel();
    let (_, rows) = legend_layout(entries, width);
    let (top, rest) = root.split_vertically(rows * ROW + 6);
    legend(&top, entries)?;
    Ok(rest)
}

/// Throughput against threads, one panel per size or body; a log y axis if `log_y`.
fn throughput(
    path: &Path,
    title: &str,
    unit: &str,
    panels: Vec<Panel>,
    log_y: bool,
) -> Result<(), Error> {
    let width = 440 * panels.len() as u32;
    let root = SVGBackend::new(path, (width, 470)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 22))?;
    let entries: Vec<(String, RGBColor)> = panels[0]
        .series
        .iter()
        .map(|s| (s.name.clone(), s.color))
        .collect();
    let root = with_legend(root, &entries)?;
    let areas = root.split_evenly((1, panels.len()));
    for (area, panel) in areas.iter().zip(&panels) {
        let ys = || {
            panel
                .series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.1))
        };
        let ymax = ys().fold(0.0, f64::max).max(1.0);
        if log_y {
            let ymin = ys().fold(f64::INFINITY, f64::min).max(1.0);
            let range = (ymin * 0.5..ymax * 2.0).log_scale();
            throughput_panel(area, panel, unit, range)?;
        } else {
            throughput_panel(area, panel, unit, 0.0..ymax * 1.1)?;
        }
    }
    root.present()?;
    Ok(())
}

fn throughput_panel<DB, Y>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    panel: &Panel,
    unit: &str,
    y_range: Y,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(-0.2f64..3.2f64, y_range)?;
    chart
        .configure_mesh()
        .max_light_lines(1)
        .x_labels(7)
        .x_label_formatter(&|x| {
            if (x - x.round()).abs() < 1e-6 && *x >= 0.0 {
                format!("{}", 1u32 << x.round() as u32)
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| si(*y))
        .x_desc("threads")
        .y_desc(unit)
        .draw()?;
    for s in &panel.series {
        let color = s.color;
        let width = if s.name == "mvtensor" || s.name.starts_with("mvtensor C") {
            3
        } else {
            2
        };
        chart.draw_series(LineSeries::new(s.points.clone(), color.stroke_width(width)))?;
        chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    Ok(())
}

fn latency(r: &Results, path: &Path) -> Result<(), Error> {
    let quantiles = [0.5, 0.9, 0.99, 0.999];
    let labels = ["p50", "p90", "p99", "p99.9"];
    let root = SVGBackend::new(path, (440 * LATENCY_CONFIGS.len() as u32, 440)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        "Read latency under writes: read() + sum of 1M f32 (log scale)",
        ("sans-serif", 22),
    )?;
    let entries: Vec<(String, RGBColor)> = Variant::ALL
        .iter()
        .enumerate()
        .map(|(i, v)| (v.name().to_string(), COLORS[i]))
        .collect();
    let root = with_legend(root, &entries)?;
    let areas = root.split_evenly((1, r.latency.len()));
    let all_us: Vec<f64> = r
        .latency
        .iter()
        .flat_map(|(_, cells)| cells.iter())
        .flat_map(|(_, l)| quantiles.iter().map(|&q| l.at(q) as f64 / 1e3))
        .collect();
    let lo = all_us.iter().copied().fold(f64::INFINITY, f64::min) * 0.7;
    let hi = all_us.iter().copied().fold(0.0, f64::max) * 1.5;
    for (area, ((w, rd), cells)) in areas.iter().zip(&r.latency) {
        let plural = |k: usize, what: &str| format!("{k} {what}{}", if k == 1 { "" } else { "s" });
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!("{} + {}", plural(*w, "writer"), plural(*rd, "reader")),
                ("sans-serif", 16),
            )
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.2f64..3.2f64, (lo.max(0.01)..hi).log_scale())?;
        chart
            .configure_mesh()
            .max_light_lines(1)
            .x_labels(7)
            .x_label_formatter(&|x| {
                if (x - x.round()).abs() < 1e-6 && *x >= 0.0 && *x < 3.5 {
                    labels[x.round() as usize].to_string()
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|y| {
                if *y >= 1000.0 {
                    format!("{:.0} ms", y / 1000.0)
                } else {
                    format!("{y:.0} µs")
                }
            })
            .x_desc("percentile")
            .y_desc("latency")
            .draw()?;
        for (j, (v, l)) in cells.iter().enumerate() {
            let color = COLORS[j];
            let points: Vec<(f64, f64)> = quantiles
                .iter()
                .enumerate()
                .map(|(k, &q)| (k as f64, l.at(q) as f64 / 1e3))
                .collect();
            let width = if *v == Variant::Mvtensor { 3 } else { 2 };
            chart.draw_series(LineSeries::new(points.clone(), color.stroke_width(width)))?;
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        }
    }
    root.present()?;
    Ok(())
}
