//! VLA-Adapter (OpenHelix-Team): Prismatic's DINOv2 + SigLIP towers, Qwen2.5 run causally
//! over `[first prompt token, patches, prompt, 64 action queries, stop]`, and a bridge-attention
//! L1 head reading every layer's hidden states: the chunk in one pass, no denoising, served by
//! [`OpenVlaPolicy`]. Keys and tensor names are vla.cpp's `vla_adapter` layout where it has
//! them (docs/GGUF.md).

pub mod graphs;

use super::openvla::{self, ActionIo, LmDims, OpenVlaArch, OpenVlaPolicy, PromptShape};
use crate::config::limits::{MAX_CHUNK, MAX_LAYERS};
use crate::config::{bounded, first_failing, positive, Keys, Section};
use crate::gguf::GgufFile;
use crate::graph::{GraphBuilder, NodeId};
use crate::modules::decoder::DecoderConfig;
use crate::modules::prismatic::PrismaticConfig;
use crate::preprocess::CameraInput;
use crate::Result;

pub const ARCH: &str = "vla_adapter";

/// A VLA-Adapter policy.
pub type VlaAdapterPolicy = OpenVlaPolicy<VlaAdapterConfig>;

/// The action head: `action.{num_tokens,head_blocks,head_heads}`, `action.head_rope_base`,
/// `action.ln_eps` (`head_dim` written for vla.cpp).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HeadConfig {
    /// Action queries in the language model's sequence.
    pub num_tokens: usize,
    /// Bridge-attention blocks, one per language-model layer.
    pub head_blocks: usize,
    pub head_heads: usize,
    pub head_rope_base: f32,
    pub ln_eps: f32,
}

impl Section for HeadConfig {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        k.usize("action.num_tokens", &mut self.num_tokens)?;
        k.usize("action.head_blocks", &mut self.head_blocks)?;
        k.usize("action.head_heads", &mut self.head_heads)?;
        k.f32("action.head_rope_base", &mut self.head_rope_base)?;
        k.f32("action.ln_eps", &mut self.ln_eps)
    }

    fn check(&self) -> std::result::Result<(), String> {
        bounded("action.num_tokens", self.num_tokens, 1, MAX_CHUNK)?;
        bounded("action.head_blocks", self.head_blocks, 1, MAX_LAYERS)?;
        positive("action.head_heads", self.head_heads)?;
        first_failing(&[
            (
                self.head_rope_base > 0.0 && self.head_rope_base.is_finite(),
                "action.head_rope_base must be positive",
            ),
            (
                self.ln_eps >= 0.0 && self.ln_eps.is_finite(),
                "action.ln_eps must be finite and >= 0",
            ),
        ])
    }
}

/// VLA-Adapter's sizes and settings.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VlaAdapterConfig {
    pub vision: PrismaticConfig,
    pub lm: LmDims,
    pub io: ActionIo,
    pub action: HeadConfig,
}

impl Section for VlaAdapterConfig {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        self.vision.keys(k)?;
        self.lm.keys(k)?;
        self.io.keys(k)?;
        self.action.keys(k)?;
        let (h, n) = (self.lm.hidden, self.action.head_heads.max(1));
        k.derived("action.head_dim", &|| h / n)
    }

    fn check(&self) -> std::result::Result<(), String> {
        self.vision.check()?;
        self.lm.check()?;
        self.io.check()?;
        self.action.check()?;
        self.io.check_vocab(self.lm.vocab)?;
        let (a, h) = (&self.action, self.lm.hidden);
        if a.head_blocks != self.lm.layers {
            return Err(format!(
                "action.head_blocks {} must equal lm.layers {}: block i reads layer i + 1",
                a.head_blocks, self.lm.layers
            ));
        }
        if !h.is_multiple_of(a.head_heads) || !(h / a.head_heads).is_multiple_of(2) {
            return Err(format!(
                "lm.hidden {h} must split into action.head_heads {} heads of even width",
                a.head_heads
            ));
        }
        Ok(())
    }
}

impl VlaAdapterConfig {
    pub fn decoder(&self) -> DecoderConfig {
        self.lm.decoder(true)
    }

    /// The head's task rows: the sequence's first `n_patches * num_images` rows.
    pub fn task_rows(&self) -> usize {
        self.vision.n_patches() * self.vision.num_images
    }

    /// The first of the head's adapter rows for a prompt of `n_prompt` tokens: one before
    /// the action queries, as the reference slices (the prompt's last token and all but the
    /// last query).
    pub fn adapter_start(&self, n_prompt: usize) -> usize {
        self.task_rows() + n_prompt - 1
    }
}

impl OpenVlaArch for VlaAdapterConfig {
    const ARCH: &'static str = ARCH;

    fn num_images(&self) -> usize {
        self.vision.num_images
    }

    fn camera(&self) -> CameraInput {
        let [camera, _] = openvla::cameras(&self.vision);
        camera
    }

    fn lm(&self) -> &LmDims {
        &self.lm
    }

    fn io(&self) -> &ActionIo {
        &self.io
    }

    /// The reference client's `use_minivlm` form, the default: the Qwen chat template (no
    /// BOS), the task lower-cased.
    fn prompt(&self, task: &str) -> String {
        format!(
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat action should the robot take to {}?<|im_end|>\n<|im_start|>assistant\n",
            task.to_lowercase()
        )
    }

    fn other_rows(&self) -> usize {
        self.task_rows() + self.action.num_tokens + 1
    }

    fn predict(&self, g: &mut GraphBuilder, p: PromptShape) -> Result<NodeId> {
        graphs::predict(g, self, p.len)
    }

    fn translate(file: GgufFile) -> Result<GgufFile> {
        crate::models::vlacpp::vla_adapter::translate(file)
    }
}
