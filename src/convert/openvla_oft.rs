//! OpenVLA-OFT checkpoint -> `openvla_oft` GGUF (schema: docs/GGUF.md): the folder its LIBERO
//! evaluation loads ([`super::openvla`]: Llama 2, no q/k/v biases), plus the L1 regression
//! head (`L1RegressionActionHead`'s MLP-ResNet).

use super::openvla::{self, Checkpoint};
use crate::config;
use crate::models::openvla_oft::{OftHead, OpenVlaOftConfig, ARCH};
use crate::Result;
use std::path::Path;

pub use super::openvla::Options;
pub type Converted = openvla::Converted<OpenVlaOftConfig>;

/// The head's LayerNorm epsilon (PyTorch's default: the reference passes none) and the empty
/// token the prompt ends with (SentencePiece's "▁" in Llama 2's vocabulary): constants of the
/// reference's code.
const HEAD_LN_EPS: f32 = 1e-5;
const EMPTY_ID: usize = 29_871;

/// Converts the OpenVLA-OFT checkpoint folder `ckpt`.
pub fn convert(
    ckpt: &Path,
    opts: &Options,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Converted> {
    let dtype = super::float_dtype(opts.dtype)?;
    let c = Checkpoint::open(ckpt, super::Kind::OpenvlaOft)?;
    let lm = c.lm(1e4)?;
    let io = c.io(opts)?;
    let blocks = c.head_blocks(&io, &lm)?;
    let config = OpenVlaOftConfig {
        vision: c.vision(opts)?,
        head: OftHead {
            head_hidden: c.head_shape("model.fc1.weight")?[0],
            head_blocks: blocks,
            head_ln_eps: HEAD_LN_EPS,
        },
        lm,
        io,
        empty_id: EMPTY_ID,
    };
    config::check(&config, ARCH)?;
    let v = &config.vision;
    let notes = vec![openvla::sizes_note(v, "bidirectional Llama", &config.lm)];
    let mut plan = openvla::shared_plan(v, config.lm.layers, false);
    plan.extend(openvla::head_blocks(config.head.head_blocks));
    let plan = openvla::Plan {
        ignored: openvla::ignored(&config.vision),
        ternary: Vec::new(),
        float_extra: Vec::new(),
        tensors: plan,
        head_unused: "",
    };
    openvla::write(ckpt, &c, config, plan, dtype, notes, progress)
}
