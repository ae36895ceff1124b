//! Interop: a checkpoint mvtensor writes loads in Python (`safetensors` and
//! `numpy`) with identical values, dtypes, shapes and metadata, and a file Python writes
//! loads in mvtensor. The test is ignored by default (a plain `cargo test` shows it as
//! ignored, with its reason); `.ci/run` installs the two packages and runs it with
//! `--ignored`, where a missing Python or package fails it with a message saying what to
//! install.

use std::process::Command;

use mvtensor::{half, Store};
use ndarray::{arr0, Array1, Array2, Ix0, Ix1, Ix2};

/// The Python side: checks the file mvtensor wrote against the same values, then writes one
/// of its own. (bf16 is left out: numpy has no bfloat16.)
const SCRIPT: &str = r#"
import sys
import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

ours, theirs = sys.argv[1], sys.argv[2]
t = load_file(ours)
expected = {
    "w": np.array([[0.5, -1.25, 3.0], [1e-7, -0.0, 65504.0]], dtype=np.float32),
    "d": np.array([1e300, -2.5], dtype=np.float64),
    "step": np.array(41, dtype=np.int64),
    "ids": np.array([-7, 2147483647], dtype=np.int32),
    "h": np.array([0.5, -2.0], dtype=np.float16),
}
assert sorted(t) == sorted(expected), sorted(t)
for name, want in expected.items():
    got = t[name]
    assert got.dtype == want.dtype, (name, got.dtype)
    assert got.shape == want.shape, (name, got.shape)
    assert np.array_equal(got, want), (name, got)
with safe_open(ours, "np") as f:
    meta = f.metadata()
assert meta["mvtensor.version.step"] == "1", meta
assert int(meta["mvtensor.timestamp"]) >= 0, meta
save_file(
    {
        "w2": (t["w"] * 2).astype(np.float32),
        "count": np.arange(6, dtype=np.int64).reshape(2, 3),
        "one": np.array(1.5, dtype=np.float64),
    },
    theirs,
    metadata={"written_by": "python"},
)
print("python ok")
"#;

/// `python3`, once it has imported numpy and safetensors; else the test fails, saying what
/// is missing and how to install it.
fn python() -> &'static str {
    let out = Command::new("python3")
        .args(["-c", "import numpy, safetensors"])
        .output();
    match out {
        Ok(out) if out.status.success() => "python3",
        Ok(out) => panic!(
            "python3 cannot import numpy and safetensors (pip install numpy safetensors):\n{}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!("no python3 to run ({e}): install Python 3, numpy and safetensors"),
    }
}

#[test]
#[ignore = "needs python3 with numpy and safetensors (.ci/run installs them and runs it with --ignored)"]
fn python_reads_what_mvtensor_writes_and_the_other_way_round() {
    let python = python();
    let dir = tempfile::tempdir().unwrap();
    let (ours, theirs) = (
        dir.path().join("ours.safetensors"),
        dir.path().join("theirs.safetensors"),
    );
    let store = Store::new();
    store
        .variable(
            "w",
            Array2::from(vec![[0.5f32, -1.25, 3.0], [1e-7, -0.0, 65504.0]]),
        )
        .unwrap();
    store
        .variable("d", Array1::from(vec![1e300f64, -2.5]))
        .unwrap();
    let step = store.variable("step", arr0(40i64)).unwrap();
    step.fetch_add(1).unwrap();
    store
        .variable("ids", Array1::from(vec![-7i32, i32::MAX]))
        .unwrap();
    let h = [half::f16::from_f32(0.5), half::f16::from_f32(-2.0)];
    store.variable("h", Array1::from(h.to_vec())).unwrap();
    store.save(&ours).unwrap();

    let out = Command::new(python)
        .args(["-c", SCRIPT])
        .arg(&ours)
        .arg(&theirs)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let back = Store::load(&theirs).unwrap();
    let w2 = back.get::<f32, Ix2>("w2").unwrap();
    assert_eq!(
        *w2.read(),
        &*store.get::<f32, Ix2>("w").unwrap().read() * 2.0
    );
    let count = back.get::<i64, Ix2>("count").unwrap();
    assert_eq!(
        count.read().iter().copied().collect::<Vec<_>>(),
        (0..6).collect::<Vec<_>>()
    );
    assert_eq!(back.get::<f64, Ix0>("one").unwrap().get(), 1.5);
    assert!(
        back.get::<f32, Ix1>("w2").is_err(),
        "a rank-2 tensor stays rank 2"
    );
}
