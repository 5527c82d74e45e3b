//! OpenVLA-OFT (moojink/openvla-oft): Prismatic's DINOv2 + SigLIP towers, the proprio token,
//! Llama 2 run **bidirectionally** (its transformers fork drops the causal mask) over
//! `[BOS, patches, proprio, prompt, empty token, zeroed action slots, stop]`, and the L1
//! regression head (an MLP-ResNet) over the last hidden state at the action rows: the chunk
//! in one pass, served by [`OpenVlaPolicy`]. Keys and tensor names are vla.cpp's
//! `openvla_oft` layout where it has them (docs/GGUF.md).

pub mod graphs;

use super::openvla::{self, ActionIo, LmDims, OpenVlaArch, OpenVlaPolicy, PromptShape};
use crate::config::limits::MAX_LAYERS;
use crate::config::{bounded, first_failing, positive, Keys, Section};
use crate::gguf::GgufFile;
use crate::graph::{GraphBuilder, NodeId};
use crate::modules::prismatic::PrismaticConfig;
use crate::preprocess::CameraInput;
use crate::Result;

pub const ARCH: &str = "openvla_oft";

/// An OpenVLA-OFT policy.
pub type OpenVlaOftPolicy = OpenVlaPolicy<OpenVlaOftConfig>;

/// The L1 head: `action.{head_hidden,head_blocks}`, `action.head_ln_eps`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OftHead {
    pub head_hidden: usize,
    pub head_blocks: usize,
    pub head_ln_eps: f32,
}

impl Section for OftHead {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        k.usize("action.head_hidden", &mut self.head_hidden)?;
        k.usize("action.head_blocks", &mut self.head_blocks)?;
        k.f32("action.head_ln_eps", &mut self.head_ln_eps)
    }

    fn check(&self) -> std::result::Result<(), String> {
        positive("action.head_hidden", self.head_hidden)?;
        bounded("action.head_blocks", self.head_blocks, 0, MAX_LAYERS)?;
        first_failing(&[(
            self.head_ln_eps >= 0.0 && self.head_ln_eps.is_finite(),
            "action.head_ln_eps must be finite and >= 0",
        )])
    }
}

/// OpenVLA-OFT's sizes and settings.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpenVlaOftConfig {
    pub vision: PrismaticConfig,
    pub lm: LmDims,
    pub io: ActionIo,
    pub head: OftHead,
    /// The token the prompt ends with (`tokens.empty_id`: SentencePiece's "▁", 29871), which
    /// the reference appends where the ids lack it.
    pub empty_id: usize,
}

impl Section for OpenVlaOftConfig {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        self.vision.keys(k)?;
        self.lm.keys(k)?;
        self.io.keys(k)?;
        self.head.keys(k)?;
        k.usize("tokens.empty_id", &mut self.empty_id)
    }

    fn check(&self) -> std::result::Result<(), String> {
        self.vision.check()?;
        self.lm.check()?;
        self.io.check()?;
        self.head.check()?;
        self.io.check_vocab(self.lm.vocab)?;
        match self.empty_id < self.lm.vocab {
            true => Ok(()),
            false => Err(format!(
                "tokens.empty_id {} is outside the vocabulary ({})",
                self.empty_id, self.lm.vocab
            )),
        }
    }
}

impl OpenVlaOftConfig {
    /// The patches and the proprio token (the reference's `NUM_PATCHES`).
    pub fn patch_rows(&self) -> usize {
        self.vision.n_patches() * self.vision.num_images + 1
    }

    /// The action slots: chunk x action_dim.
    pub fn slots(&self) -> usize {
        self.io.chunk * self.io.action_dim
    }

    /// The first of the head's rows for a prompt of `n_prompt` tokens (the empty token
    /// included): one before the action slots, as the reference slices (the prompt's last
    /// token and all but the last slot).
    pub fn head_start(&self, n_prompt: usize) -> usize {
        self.patch_rows() + n_prompt - 1
    }
}

impl OpenVlaArch for OpenVlaOftConfig {
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

    /// The reference client's prompt (the tokenizer adds BOS), the task lower-cased.
    fn prompt(&self, task: &str) -> String {
        format!(
            "In: What action should the robot take to {}?\nOut:",
            task.to_lowercase()
        )
    }

    /// The ids with the empty token appended where they do not end with it, as the
    /// reference's `predict_action` does.
    fn model_ids(&self, mut ids: Vec<u32>) -> Vec<u32> {
        let empty = self.empty_id as u32;
        if ids.last() != Some(&empty) {
            ids.push(empty);
        }
        ids
    }

    fn other_rows(&self) -> usize {
        self.patch_rows() + self.slots() + 1
    }

    fn predict(&self, g: &mut GraphBuilder, p: PromptShape) -> Result<NodeId> {
        graphs::predict(g, self, p.len)
    }

    fn translate(file: GgufFile) -> Result<GgufFile> {
        crate::models::vlacpp::openvla_oft::translate(file)
    }
}
