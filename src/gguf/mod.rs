//! GGUF v3 (and v2) files: a zero-copy reader over memmap2, a writer, and the ggml block
//! formats (dequantize / quantize).
//!
//! Dimension order: GGUF stores `ne` (ggml's order, `ne[0]` varies fastest). We call that
//! `dims` inside this module; [`TensorInfo::shape`] gives the row-major shape used by
//! [`crate::Tensor`] (the reverse of `dims`).

pub mod quant;
mod types;

pub use types::GgmlType;
mod reader;
mod retype;
mod value;
mod writer;

pub use reader::{GgufFile, TensorInfo, ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_DIMS};
pub use retype::{
    is_matmul_weight, is_quantizable, matrix_dims, metadata_writer, retype, retyped, QuantScope,
};
pub use value::{Value, ValueType};
pub use writer::GgufWriter;
