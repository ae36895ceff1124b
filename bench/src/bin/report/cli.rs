//! The command line: `[--scale F] [--out DIR]`.

use std::path::{Path, PathBuf};

pub(crate) struct Args {
    pub(crate) scale: f64,
    pub(crate) out: PathBuf,
}

pub(crate) fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        scale: 1.0,
        // The repository's docs/, wherever the report runs from.
        out: Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .map_or_else(|| PathBuf::from("docs"), |root| root.join("docs")),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--scale" => {
                args.scale = value()?.parse().map_err(|e| format!("--scale: {e}"))?;
                if args.scale.is_nan() || args.scale <= 0.0 {
                    return Err("--scale must be positive".into());
                }
            }
            "--out" => args.out = PathBuf::from(value()?),
            "-h" | "--help" => {
                println!("usage: report [--scale F] [--out DIR]");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    Ok(args)
}
