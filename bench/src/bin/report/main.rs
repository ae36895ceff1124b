//! The benchmark report: a short run of the whole matrix of `benches/variants.rs` (mvtensor
//! against std and parking_lot `Mutex`/`RwLock` and an arc-swap RCU cell), written to
//! `docs/benchmarks.md` with SVG plots in `docs/plots/`.
//!
//! ```text
//! cargo run --release -p mvtensor-bench --bin report [-- --scale F] [--out DIR]
//! ```
//!
//! `--scale 3` runs every cell three times as long (less noise); `--out DIR` writes
//! `DIR/benchmarks.md` and `DIR/plots/` instead of `docs/`. Every figure in the report comes
//! from this one run. Every run checks its final value exactly and the process panics if any
//! variant lost an update.

mod checkpoints;
mod cli;
mod contention;
mod costs;
mod embedding;
mod environment;
mod format;
mod goals;
mod losses;
mod memory;
mod optimizer;
mod plot;
mod report;
mod run;
mod tables;
#[cfg(test)]
mod tests;
mod train;

use std::process::ExitCode;
use std::time::Instant;

use cli::parse_args;
use environment::{load_average, Environment};
use memory::memory_child;
use report::Report;
use run::{measure, Plan};

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("--memory-child") {
        return memory_child(&argv[2..]);
    }
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let started = Instant::now();
    let env = Environment::now();
    let plan = Plan::scaled(args.scale, env.cores);
    eprintln!(
        "report: {} cores, load average {}, scale {}",
        env.cores, env.load_before, args.scale
    );
    let results = measure(plan, started);
    let load_after = load_average();
    let wall = started.elapsed();
    eprintln!(
        "[{:>5.1}s] measured; writing the report",
        wall.as_secs_f64()
    );

    let plots = args.out.join("plots");
    if let Err(e) = std::fs::create_dir_all(&plots) {
        eprintln!("cannot create {}: {e}", plots.display());
        return ExitCode::FAILURE;
    }
    let report = Report {
        env: &env,
        plan,
        scale: args.scale,
        r: &results,
        wall,
        load_after,
    };
    let markdown = report.markdown();
    let md_path = args.out.join("benchmarks.md");
    if let Err(e) = std::fs::write(&md_path, markdown) {
        eprintln!("cannot write {}: {e}", md_path.display());
        return ExitCode::FAILURE;
    }
    if let Err(e) = plot::all(&results, &plots) {
        eprintln!("cannot draw the plots: {e}");
        return ExitCode::FAILURE;
    }
    eprintln!(
        "[{:>5.1}s] wrote {} and {}/*.svg",
        started.elapsed().as_secs_f64(),
        md_path.display(),
        plots.display()
    );
    ExitCode::SUCCESS
}
