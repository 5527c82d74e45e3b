//! Architectures: each is config + composition of [`crate::modules`] + predict.

use crate::gguf::GgufFile;
use crate::policy::{Policy, RuntimeOptions};
use crate::{Error, Result};

/// Opens the GGUF at `path` and builds the policy its `general.architecture` names.
pub fn load(path: &std::path::Path, opts: &RuntimeOptions) -> Result<Box<dyn Policy>> {
    let file = GgufFile::open(path)?;
    from_gguf(file, opts)
}

pub fn from_gguf(file: GgufFile, _opts: &RuntimeOptions) -> Result<Box<dyn Policy>> {
    let arch = file.architecture()?.to_owned();
    Err(Error::InvalidArgument(format!("unsupported architecture {arch:?} (supported: none yet)")))
}

/// A small SmolVLA-shaped model with random weights, built deterministically in memory, as
/// GGUF bytes (what `vla-server --demo` serves).
pub fn demo_gguf() -> Result<Vec<u8>> {
    Err(Error::NotImplemented { op: "demo model".into(), backend: "any" })
}
