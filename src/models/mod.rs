//! Architectures: each is config + composition of [`crate::modules`] + predict.

pub mod schema;
pub mod smolvla;

use crate::gguf::{GgmlType, GgufFile};
use crate::policy::{Policy, RuntimeOptions};
use crate::{Error, Result};
use std::collections::BTreeMap;

pub const ARCHS: &[&str] = &[smolvla::ARCH];

/// Opens the GGUF at `path` and builds the policy its `general.architecture` names.
pub fn load(path: &std::path::Path, opts: &RuntimeOptions) -> Result<Box<dyn Policy>> {
    from_gguf(GgufFile::open(path)?, opts)
}

pub fn from_gguf(file: GgufFile, opts: &RuntimeOptions) -> Result<Box<dyn Policy>> {
    let arch = file.architecture()?.to_owned();
    match arch.as_str() {
        smolvla::ARCH => Ok(Box::new(smolvla::SmolVla::new(file, opts)?)),
        _ => Err(Error::InvalidArgument(format!(
            "unsupported architecture {arch:?} (supported: {})",
            ARCHS.join(", ")
        ))),
    }
}

/// The demo model `vla-server --demo` serves: SmolVLA-shaped, small, random weights from a
/// fixed seed, so every build serves the same model.
pub fn demo_gguf() -> Result<Vec<u8>> {
    smolvla::random_gguf(&smolvla::demo_config(), 0x5eed, GgmlType::F32)
}

/// Tensor dtypes and counts, most common first: `"f32 (120), bf16 (40)"`.
pub fn dtype_summary(file: &GgufFile) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for t in file.tensors() {
        *counts.entry(t.ty.to_string()).or_default() += 1;
    }
    let mut v: Vec<_> = counts.into_iter().collect();
    v.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    v.iter().map(|(t, n)| format!("{t} ({n})")).collect::<Vec<_>>().join(", ")
}
