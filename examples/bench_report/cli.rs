//! The command line: `[--scale F] [--out DIR]`.

use std::path::PathBuf;

pub(crate) struct Args {
    pub(crate) scale: f64,
    pub(crate) out: PathBuf,
}

pub(crate) fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        scale: 1.0,
        out: PathBuf::from("docs"),
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
                println!("usage: bench_report [--scale F] [--out DIR]");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    Ok(args)
}
