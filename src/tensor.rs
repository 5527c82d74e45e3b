//! Tensor type (placeholder).
pub struct Tensor;
