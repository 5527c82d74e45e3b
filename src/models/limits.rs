//! Checks every policy config shares, and the bounds they hold sizes to.
//!
//! Many sizes in a GGUF's metadata are fixed by no tensor's shape (layer counts, sequence
//! lengths, chunk size, step count), and a tensor with a zero dimension bounds nothing. So a
//! hostile or broken file could otherwise make a load or every request allocate without end,
//! loop for hours, divide by zero, or hand ggml an epsilon it aborts on. The bounds are far
//! above any released policy's sizes (SmolVLA, pi0, pi0.5: 16-27 layers, under 1,000 tokens,
//! chunks of 50, 10 steps, 32-dimensional state and action).

use crate::modules::decoder::DecoderConfig;
use crate::modules::vision::VisionConfig;

pub const MAX_LAYERS: usize = 1024;
pub const MAX_PATCHES_PER_SIDE: usize = 1024;
pub const MAX_IMAGES: usize = 16;
/// Prefix plus suffix tokens: the attention masks hold (prefix + suffix)^2 floats.
pub const MAX_SEQUENCE: usize = 8192;
pub const MAX_CHUNK: usize = 1024;
/// Denoising steps, the model's own or `--steps`.
pub const MAX_STEPS: usize = 1000;
/// State and action widths (padded and real).
pub const MAX_ROBOT_DIM: usize = 4096;

/// The sizes every policy config has, under the same names ([`shared_config!`] takes them).
pub(crate) struct SharedConfig<'a> {
    pub vision: &'a VisionConfig,
    pub attn: &'a DecoderConfig,
    pub hidden: usize,
    pub lm_inter: usize,
    pub expert_inter: usize,
    pub n_layers: usize,
    pub expert_hidden: usize,
    pub vocab_size: usize,
    pub pad_token_id: u32,
    pub n_images: usize,
    pub tokenizer_max_length: usize,
    pub chunk_size: usize,
    pub num_steps: usize,
    pub max_state_dim: usize,
    pub max_action_dim: usize,
    pub state_dim: usize,
    pub action_dim: usize,
    pub min_period: f64,
    pub max_period: f64,
}

impl SharedConfig<'_> {
    /// The first check that fails, as a sentence. Once this passes, products of these sizes
    /// (patches, prefix length, masks) cannot overflow.
    pub fn check(&self) -> Result<(), String> {
        let (v, a) = (self.vision, self.attn);
        let bounded = |name: &str, x: usize, lo: usize, hi: usize| {
            if (lo..=hi).contains(&x) {
                Ok(())
            } else {
                Err(format!("{name} {x}: expected {lo} to {hi}"))
            }
        };
        let positive = |name: &str, x: usize| {
            if x > 0 {
                Ok(())
            } else {
                Err(format!("{name} 0: must be positive"))
            }
        };
        positive("hidden", self.hidden)?;
        positive("lm_inter", self.lm_inter)?;
        positive("expert_inter", self.expert_inter)?;
        positive("vit_hidden", v.hidden)?;
        positive("vit_inter", v.inter)?;
        bounded("vit_layers", v.layers, 1, MAX_LAYERS)?;
        bounded("n_layers", self.n_layers, 1, MAX_LAYERS)?;
        positive("head_dim", a.head_dim)?;
        positive("expert_h", self.expert_hidden)?;
        positive("vocab_size", self.vocab_size)?;
        bounded("n_images", self.n_images, 1, MAX_IMAGES)?;
        bounded(
            "tokenizer_max_length",
            self.tokenizer_max_length,
            1,
            MAX_SEQUENCE,
        )?;
        bounded("chunk_size", self.chunk_size, 1, MAX_CHUNK)?;
        bounded("num_steps", self.num_steps, 1, MAX_STEPS)?;
        bounded("max_state_dim", self.max_state_dim, 1, MAX_ROBOT_DIM)?;
        bounded("max_action_dim", self.max_action_dim, 1, MAX_ROBOT_DIM)?;
        let checks = [
            (
                v.patch_size > 0 && v.image_size % v.patch_size == 0,
                "image_size must be a multiple of patch_size",
            ),
            (
                v.image_size > 0 && v.image_size / v.patch_size.max(1) <= MAX_PATCHES_PER_SIDE,
                "patches per side (image_size / patch_size) must be 1 to 1024",
            ),
            (
                v.heads > 0 && v.hidden % v.heads == 0,
                "vit_hidden must be a multiple of vit_heads",
            ),
            (
                a.kv_heads > 0 && a.q_heads % a.kv_heads == 0,
                "n_q_heads must be a multiple of n_kv_heads",
            ),
            (
                a.head_dim % 2 == 0 && self.expert_hidden % 2 == 0,
                "head_dim and expert_h must be even",
            ),
            (
                self.state_dim <= self.max_state_dim && self.action_dim <= self.max_action_dim,
                "real dims exceed max dims",
            ),
            (
                (self.pad_token_id as usize) < self.vocab_size,
                "pad_token_id must be below vocab_size",
            ),
            // ggml asserts eps >= 0; a negative one is NaN on the other backends.
            (
                [v.ln_eps, a.norm_eps]
                    .iter()
                    .all(|e| *e >= 0.0 && e.is_finite()),
                "vit_ln_eps and norm_eps must be finite and >= 0",
            ),
            (
                a.rope_theta > 0.0 && a.rope_theta.is_finite(),
                "rope_theta must be positive",
            ),
            (
                self.min_period > 0.0 && self.min_period <= self.max_period,
                "periods must satisfy 0 < min_period <= max_period",
            ),
        ];
        match checks.iter().find(|(ok, _)| !ok) {
            Some((_, why)) => Err((*why).to_owned()),
            None => Ok(()),
        }
    }
}

/// The [`SharedConfig`] of a policy config, which has every one of its fields by name.
macro_rules! shared_config {
    ($cfg:expr) => {{
        let c = $cfg;
        $crate::models::limits::SharedConfig {
            vision: &c.vision,
            attn: &c.attn,
            hidden: c.hidden,
            lm_inter: c.lm_inter,
            expert_inter: c.expert_inter,
            n_layers: c.n_layers,
            expert_hidden: c.expert_hidden,
            vocab_size: c.vocab_size,
            pad_token_id: c.pad_token_id,
            n_images: c.n_images,
            tokenizer_max_length: c.tokenizer_max_length,
            chunk_size: c.chunk_size,
            num_steps: c.num_steps,
            max_state_dim: c.max_state_dim,
            max_action_dim: c.max_action_dim,
            state_dim: c.state_dim,
            action_dim: c.action_dim,
            min_period: c.min_period,
            max_period: c.max_period,
        }
    }};
}
pub(crate) use shared_config;
