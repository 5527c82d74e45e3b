//! ggml-only: the cases the ggml lowering answers `NotImplemented` for (name prefixes).
//! Anything else that errors on ggml fails the harness.

pub const NOT_IMPLEMENTED: &[&str] = &[];
