//! vla-rs: a portable runtime for robot Vision-Language-Action policies.
//!
//! Layout: [`gguf`] reads and writes model files, [`tensor`] and [`ops`] hold the
//! CPU reference implementation of every op, [`graph`] (later) executes models on a
//! backend, [`models`] (later) composes architectures.

pub mod backend;
pub mod error;
pub mod gguf;
pub mod graph;
pub mod ops;
pub mod tensor;

pub use error::{Error, Result};
pub use tensor::Tensor;
