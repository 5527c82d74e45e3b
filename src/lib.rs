//! vla-rs: a portable runtime for robot Vision-Language-Action policies.
//!
//! Layout: [`gguf`] reads and writes model files, [`tensor`] and [`ops`] hold the
//! CPU reference implementation of every op, [`graph`] executes models on a
//! backend, [`models`] composes architectures behind [`policy::Policy`], [`tokenizer`]
//! turns instructions into token ids and [`convert`] turns published checkpoints into GGUF files.

pub mod backend;
pub mod checkpoint;
pub mod config;
pub mod convert;
pub mod error;
pub mod foldquant;
pub mod gguf;
pub mod graph;
pub mod layers;
pub mod models;
pub mod modules;
pub mod ops;
pub mod policy;
pub mod preprocess;
pub mod tensor;
pub mod tokenizer;

pub use error::{Error, Result};
pub use tensor::Tensor;
