//! Model parts shared across architectures, composed from [`crate::layers`]: a SigLIP-style
//! vision tower, DINOv3, BERT, decoder-LM layers, and flow-matching helpers.

pub mod bert;
pub mod decoder;
pub mod dinov3;
pub mod dit;
pub mod evo1_head;
pub mod flow;
pub mod gr00t_head;
pub mod prismatic;
pub mod qwen_text;
pub mod qwen_vision;
pub mod vision;
