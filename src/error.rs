//! The crate's one error type.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {err}", path.display())]
    Io { path: PathBuf, err: std::io::Error },

    #[error("write failed: {0}")]
    Write(#[from] std::io::Error),

    /// A GGUF file that is malformed: truncated, inconsistent or hostile.
    #[error("invalid GGUF at byte {offset}: {reason}")]
    InvalidGguf { offset: u64, reason: String },

    #[error("unsupported GGUF version {0} (supported: 2, 3)")]
    UnsupportedGgufVersion(u32),

    #[error("unsupported tensor type {0}")]
    UnsupportedType(u32),

    /// A known type that this operation cannot handle (e.g. dequantizing a K-quant).
    #[error("{op}: type {ty} is not supported")]
    TypeNotSupported { op: &'static str, ty: String },

    #[error("tensor {0:?} not found")]
    TensorNotFound(String),

    #[error("metadata key {0:?} not found")]
    MetadataNotFound(String),

    #[error("metadata key {key:?}: expected {expected}, found {found}")]
    MetadataType {
        key: String,
        expected: &'static str,
        found: String,
    },

    #[error("duplicate {kind} {name:?}")]
    Duplicate { kind: &'static str, name: String },

    #[error("{op}: {reason}")]
    Shape { op: &'static str, reason: String },

    #[error("{0}")]
    InvalidArgument(String),

    /// Tokenizer data that is malformed or uses an unsupported option.
    #[error("tokenizer: {0}")]
    Tokenizer(String),

    /// A checkpoint (or its config) that cannot be converted; names the file and what is wrong.
    #[error("{}: {reason}", path.display())]
    Checkpoint { path: PathBuf, reason: String },

    #[error("no adapter for backend {backend} (found: {found})")]
    NoAdapter { backend: String, found: String },

    /// A failure reported by the GPU API (device lost, validation, out of memory).
    #[error("gpu: {0}")]
    Gpu(String),

    #[error("{op} is not implemented on the {backend} backend")]
    NotImplemented { op: String, backend: &'static str },
}

impl Error {
    pub(crate) fn shape(op: &'static str, reason: impl Into<String>) -> Self {
        Error::Shape {
            op,
            reason: reason.into(),
        }
    }
}
