//! VLA-Adapter (OpenHelix-Team): Prismatic's DINOv2 + SigLIP towers, Qwen2.5 run causally
//! over `[first prompt token, patches, prompt, 64 action queries, stop]`, and a bridge-attention
//! L1 head reading every layer's hidden states: the chunk in one pass, no denoising. Keys and
//! tensor names are vla.cpp's `vla_adapter` layout where it has them (docs/GGUF.md).

pub mod graphs;
pub mod policy;

pub use policy::VlaAdapterPolicy;

use crate::config::limits::{MAX_CHUNK, MAX_LAYERS, MAX_ROBOT_DIM, MAX_SEQUENCE};
use crate::config::{self, bounded, first_failing, positive, Keys, Section};
use crate::gguf::{GgmlType, GgufFile, GgufWriter};
use crate::graph::{declared_weights, matmul_weights, Graph, GraphBuilder};
use crate::layers::GatedActivation;
use crate::modules::decoder::DecoderConfig;
use crate::modules::prismatic::PrismaticConfig;
use crate::preprocess::{CameraInput, PadAlign, PixelMap, Resize};
use crate::tokenizer::Tokenizer;
use crate::Result;

pub const ARCH: &str = "vla_adapter";

/// The language model: `lm.{hidden,layers,q_heads,kv_heads,head_dim,inter,vocab}`,
/// `lm.rope_theta`, `lm.rms_eps` (Qwen2.5: q/k/v biases, SwiGLU).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LmDims {
    pub hidden: usize,
    pub layers: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub inter: usize,
    pub vocab: usize,
    pub rope_theta: f32,
    pub rms_eps: f32,
}

impl Section for LmDims {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        k.usize("lm.hidden", &mut self.hidden)?;
        k.usize("lm.layers", &mut self.layers)?;
        k.usize("lm.q_heads", &mut self.q_heads)?;
        k.usize("lm.kv_heads", &mut self.kv_heads)?;
        k.usize("lm.head_dim", &mut self.head_dim)?;
        k.usize("lm.inter", &mut self.inter)?;
        k.usize("lm.vocab", &mut self.vocab)?;
        k.f32("lm.rope_theta", &mut self.rope_theta)?;
        k.f32("lm.rms_eps", &mut self.rms_eps)
    }

    fn check(&self) -> std::result::Result<(), String> {
        positive("lm.hidden", self.hidden)?;
        positive("lm.inter", self.inter)?;
        positive("lm.vocab", self.vocab)?;
        bounded("lm.layers", self.layers, 1, MAX_LAYERS)?;
        bounded("lm.q_heads", self.q_heads, 1, self.hidden)?;
        bounded("lm.kv_heads", self.kv_heads, 1, self.q_heads)?;
        let dec = DecoderConfig {
            q_heads: self.q_heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            rope_theta: self.rope_theta,
            norm_eps: self.rms_eps,
            ..Default::default()
        };
        dec.check().map_err(|e| format!("lm: {e}"))
    }
}

/// The action head: `action.{chunk,action_dim,proprio_dim,num_tokens,head_blocks,head_heads}`,
/// `action.head_rope_base`, `action.ln_eps` (`head_dim` written for vla.cpp).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HeadConfig {
    pub chunk: usize,
    pub action_dim: usize,
    pub proprio_dim: usize,
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
        k.usize("action.chunk", &mut self.chunk)?;
        k.usize("action.action_dim", &mut self.action_dim)?;
        k.usize("action.proprio_dim", &mut self.proprio_dim)?;
        k.usize("action.num_tokens", &mut self.num_tokens)?;
        k.usize("action.head_blocks", &mut self.head_blocks)?;
        k.usize("action.head_heads", &mut self.head_heads)?;
        k.f32("action.head_rope_base", &mut self.head_rope_base)?;
        k.f32("action.ln_eps", &mut self.ln_eps)
    }

    fn check(&self) -> std::result::Result<(), String> {
        bounded("action.chunk", self.chunk, 1, MAX_CHUNK)?;
        bounded("action.action_dim", self.action_dim, 1, MAX_ROBOT_DIM)?;
        bounded("action.proprio_dim", self.proprio_dim, 1, MAX_ROBOT_DIM)?;
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
    pub action: HeadConfig,
    /// The token after the action queries (`tokens.stop_id`).
    pub stop_id: usize,
}

impl Section for VlaAdapterConfig {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        self.vision.keys(k)?;
        self.lm.keys(k)?;
        self.action.keys(k)?;
        let (h, n) = (self.lm.hidden, self.action.head_heads.max(1));
        k.derived("action.head_dim", &|| h / n)?;
        k.usize("tokens.stop_id", &mut self.stop_id)
    }

    fn check(&self) -> std::result::Result<(), String> {
        self.vision.check()?;
        self.lm.check()?;
        self.action.check()?;
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
        if self.stop_id >= self.lm.vocab {
            return Err(format!(
                "tokens.stop_id {} is outside the vocabulary ({})",
                self.stop_id, self.lm.vocab
            ));
        }
        Ok(())
    }
}

impl VlaAdapterConfig {
    pub fn read(file: &GgufFile) -> Result<Self> {
        config::read(file, ARCH, Self::default())
    }

    pub fn write(&self, w: &mut GgufWriter) -> Result<()> {
        w.add_metadata("general.architecture", ARCH)?;
        config::write(self, w, ARCH)
    }

    pub fn decoder(&self) -> DecoderConfig {
        DecoderConfig {
            q_heads: self.lm.q_heads,
            kv_heads: self.lm.kv_heads,
            head_dim: self.lm.head_dim,
            rope_theta: self.lm.rope_theta,
            norm_eps: self.lm.rms_eps,
            ffn: GatedActivation::Silu,
            qk_norm: false,
            qkv_bias: true,
        }
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

    /// The language model's rows for a prompt of `n_prompt` tokens.
    pub fn sequence_rows(&self, n_prompt: usize) -> usize {
        self.task_rows() + n_prompt + self.action.num_tokens + 1
    }

    /// The predict graph for a prompt of `n_prompt` tokens, weights declared only.
    fn declaring_graph(&self, n_prompt: usize) -> Result<Graph> {
        let mut g = GraphBuilder::over(None);
        let out = graphs::predict(&mut g, self, n_prompt)?;
        g.build(&[out])
    }

    /// Every weight the graph reads with its shape, then the statistics.
    pub fn tensor_shapes(&self) -> Result<Vec<(String, Vec<usize>)>> {
        let mut shapes = declared_weights(&[self.declaring_graph(2)?])?;
        shapes.extend(self.statistics(None));
        Ok(shapes)
    }

    /// The longest prompt (in tokens) a request may carry: the reference has no bound but
    /// its language model's, this runtime one on the sequence ([`MAX_SEQUENCE`] rows).
    pub fn max_prompt(&self) -> usize {
        MAX_SEQUENCE.saturating_sub(self.task_rows() + self.action.num_tokens + 1)
    }

    /// The statistics' tensors, OpenVLA's BOUNDS_Q99 (`<what>_{q01,q99,mask}`, with
    /// `.<suite>` after the name for a file carrying several).
    pub fn statistics(&self, suite: Option<&str>) -> Vec<(String, Vec<usize>)> {
        let e = suite.map_or(String::new(), |s| format!(".{s}"));
        let mut v = Vec::new();
        for (what, dim) in [
            ("state", self.action.proprio_dim),
            ("action", self.action.action_dim),
        ] {
            for stat in ["q01", "q99", "mask"] {
                v.push((format!("{what}_{stat}{e}"), vec![dim]));
            }
        }
        v
    }
}

/// DINOv2's pixels: ImageNet's statistics as the released processor config stores them
/// (`tvf_normalize_params`, rounded to bf16), which override the exact ones. Written out in
/// full: each is exactly a bf16 value.
#[allow(clippy::excessive_precision)]
pub const DINO_PIXELS: PixelMap = PixelMap::MeanStd {
    mean: [0.484375, 0.455078125, 0.40625],
    std: [0.228515625, 0.2236328125, 0.224609375],
};
/// SigLIP's pixels: `2x - 1`.
pub const SIG_PIXELS: PixelMap = PixelMap::MinusOneToOne;

/// The two towers' camera inputs: the processor's stretch to the model's size, then each
/// tower's value map.
pub fn cameras(cfg: &VlaAdapterConfig) -> [CameraInput; 2] {
    [DINO_PIXELS, SIG_PIXELS].map(|pixels| {
        CameraInput::square(
            cfg.vision.image_size,
            Resize::StretchBicubicPillow,
            0.0,
            PadAlign::Center,
            pixels,
        )
    })
}

/// A random-weight file of `cfg`'s sizes (the matmul weights of type `ty`, the rest f32),
/// with `tokenizer` if given; its statistics mask every dimension but the last (a gripper).
pub fn random_writer(
    cfg: &VlaAdapterConfig,
    seed: u64,
    ty: GgmlType,
    tokenizer: Option<&Tokenizer>,
) -> Result<GgufWriter<'static>> {
    let mut w = GgufWriter::new();
    cfg.write(&mut w)?;
    w.add_metadata("general.name", "vla_adapter random-weight model")?;
    if let Some(t) = tokenizer {
        t.write_gguf(&mut w)?;
    }
    let shapes = cfg.tensor_shapes()?;
    let matmul = matmul_weights(&[cfg.declaring_graph(2)?]);
    let (masks, rest): (Vec<_>, Vec<_>) =
        shapes.into_iter().partition(|(n, _)| n.ends_with("_mask"));
    let matrix = |name: &str| matmul.contains(name);
    super::common::add_random_tensors(&mut w, &rest, seed, ty, matrix)?;
    for (name, shape) in masks {
        let d = shape[0];
        let v: Vec<f32> = (0..d).map(|i| f32::from(u8::from(i + 1 < d))).collect();
        w.add_f32(name, GgmlType::F32, &[d as u64], &v)?;
    }
    Ok(w)
}
