//! Model parts shared across architectures, composed from [`crate::layers`]: a SigLIP-style
//! vision tower, decoder-LM layers, flow-matching helpers and image preprocessing.

pub mod decoder;
pub mod flow;
pub mod image;
pub mod vision;
