//! Helpers shared by the loom models live in `tests/`; this crate has no code of its own.
