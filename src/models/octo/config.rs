//! Octo's sizes and settings (`octo.*` keys, vla.cpp's names where it has them), plus what
//! the weights say (the stems' widths, the T5 encoder's sizes, the proprio bins).

use super::ARCH;
use crate::config::{self, bounded, positive, Keys, Section};
use crate::gguf::{GgufFile, GgufWriter};
use crate::{Error, Result};

/// The cameras Octo's released models tokenize, in token order.
pub const CAMERAS: [&str; 2] = ["primary", "wrist"];
/// SmallStem's convolution stages.
pub const STEM_STAGES: usize = 4;
/// Flax's `GroupNorm` default groups and epsilon, which SmallStem keeps.
pub const GN_GROUPS: usize = 32;
pub const GN_EPS: f32 = 1e-6;
/// T5's RMSNorm epsilon (every released T5).
pub const T5_EPS: f32 = 1e-6;

/// The action head: a DDPM over an MLP-ResNet, or L1 regression (`tanh`-squashed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Head {
    Diffusion,
    L1,
}

impl Head {
    pub fn name(self) -> &'static str {
        match self {
            Head::Diffusion => "diffusion",
            Head::L1 => "l1",
        }
    }
}

/// One camera's SmallStem: its frame side, the widths of its stages, the patch
/// convolution's side and width, and its token count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stem {
    pub side: usize,
    /// 3, or 6 where the goal image is stacked on the frame (zeros for a language task).
    pub in_channels: usize,
    pub widths: [usize; STEM_STAGES],
    pub patch: usize,
    pub features: usize,
}

impl Stem {
    /// The token grid's side: four stride-2 convolutions (3x3, padding 1), then the patch.
    pub fn grid(&self) -> usize {
        let mut s = self.side;
        for _ in 0..STEM_STAGES {
            s = (s + 2 - 3) / 2 + 1;
        }
        s / self.patch.max(1)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct OctoConfig {
    pub d: usize,
    pub layers: usize,
    pub heads: usize,
    pub ffn: usize,
    pub ln_eps: f32,
    pub readouts: usize,
    pub window: usize,
    /// Rows of the observation and readout position tables (`max_horizon`).
    pub max_horizon: usize,
    /// Per camera of [`CAMERAS`], its stem where the model has that camera.
    pub stems: Vec<Option<Stem>>,
    /// Language tokens (the T5 tokenizer's padded length) and T5's sizes.
    pub lang_tokens: usize,
    pub t5_d: usize,
    pub t5_layers: usize,
    pub t5_heads: usize,
    pub t5_kv: usize,
    pub t5_ffn: usize,
    pub t5_vocab: usize,
    pub t5_buckets: usize,
    pub t5_max_distance: usize,
    /// Gated-GELU FFN (T5 v1.1) instead of ReLU (t5-base).
    pub t5_gated: bool,
    pub repeat_task_tokens: bool,
    pub correct_attention: bool,
    /// Proprio dimensions (0: no proprio tokens) and bins.
    pub proprio_dim: usize,
    pub proprio_bins: usize,
    pub head: Head,
    pub horizon: usize,
    pub action_dim: usize,
    pub max_action: f32,
    pub steps: usize,
    pub schedule_s: f32,
    pub time_dim: usize,
    pub hidden: usize,
    pub blocks: usize,
    /// The diffusion head's MLP-ResNet blocks start with a LayerNorm (`use_layer_norm`).
    pub head_ln: bool,
    /// L1 head: multi-head attention pooling over the readouts (else their mean), and its
    /// heads.
    pub use_map: bool,
    pub map_heads: usize,
}

impl Section for OctoConfig {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        k.usize("embedding_length", &mut self.d)?;
        k.usize("block_count", &mut self.layers)?;
        k.usize("attention.head_count", &mut self.heads)?;
        k.usize("feed_forward_length", &mut self.ffn)?;
        k.f32("attention.layer_norm_eps", &mut self.ln_eps)?;
        k.usize("readout.count", &mut self.readouts)?;
        k.usize("window_size", &mut self.window)?;
        k.usize("tokens.language", &mut self.lang_tokens)?;
        k.usize("action.horizon", &mut self.horizon)?;
        k.usize("action.dim", &mut self.action_dim)?;
        k.f32("diffusion.max_action", &mut self.max_action)?;
        k.usize("diffusion.steps", &mut self.steps)?;
        k.f32("diffusion.s", &mut self.schedule_s)?;
        k.usize("diffusion.time_dim", &mut self.time_dim)?;
        k.usize("diffusion.hidden", &mut self.hidden)?;
        k.usize("diffusion.num_blocks", &mut self.blocks)?;
        // vla.cpp's files lack these: its runtime's fixed choices (octo-small-1.5's) apply
        k.usize_or("t5.relative_max_distance", &mut self.t5_max_distance, 128)?;
        flag(k, "repeat_task_tokens", &mut self.repeat_task_tokens)?;
        flag(k, "use_correct_attention", &mut self.correct_attention)?;
        k.usize_or("map.head_count", &mut self.map_heads, 8)
    }

    fn check(&self) -> std::result::Result<(), String> {
        use config::limits::*;
        positive("embedding_length", self.d)?;
        bounded("attention.head_count", self.heads, 1, self.d)?;
        bounded("block_count", self.layers, 1, MAX_LAYERS)?;
        positive("feed_forward_length", self.ffn)?;
        bounded("readout.count", self.readouts, 1, 64)?;
        bounded("window_size", self.window, 1, self.max_horizon.max(1))?;
        bounded("tokens.language", self.lang_tokens, 1, 512)?;
        bounded("action.horizon", self.horizon, 1, MAX_CHUNK)?;
        bounded("action.dim", self.action_dim, 1, MAX_ROBOT_DIM)?;
        bounded("diffusion.steps", self.steps, 1, 1000)?;
        bounded("t5.block_count", self.t5_layers, 1, MAX_LAYERS)?;
        bounded("t5.head_count", self.t5_heads, 1, 256)?;
        bounded("map.head_count", self.map_heads, 1, self.d)?;
        bounded("proprio.dim", self.proprio_dim, 0, MAX_ROBOT_DIM)?;
        if !self.d.is_multiple_of(self.heads) || !self.d.is_multiple_of(self.map_heads) {
            return Err(format!(
                "embedding_length {} must be a multiple of the head counts ({}, {})",
                self.d, self.heads, self.map_heads
            ));
        }
        if self.max_action.is_nan() || self.max_action <= 0.0 {
            return Err(format!("diffusion.max_action {}", self.max_action));
        }
        if self.stems.iter().all(Option::is_none) {
            return Err("no camera stem".into());
        }
        for s in self.stems.iter().flatten() {
            if s.widths.iter().any(|w| !w.is_multiple_of(GN_GROUPS)) || s.grid() == 0 {
                return Err(format!(
                    "stem {s:?}: widths must be multiples of {GN_GROUPS}, the frame at least 16"
                ));
            }
        }
        Ok(())
    }
}

/// A 0/1 key, 1 where absent (vla.cpp's runtime: the task repeated at each step, the
/// correct attention rule).
fn flag(k: &mut dyn Keys, key: &str, v: &mut bool) -> Result<()> {
    let mut x = usize::from(*v);
    k.usize_or(key, &mut x, 1)?;
    if x > 1 {
        return Err(bad(format!("{key} = {x}: expected 0 or 1")));
    }
    *v = x == 1;
    Ok(())
}

pub(super) fn bad(why: String) -> Error {
    Error::InvalidArgument(format!("{ARCH} config: {why}"))
}

/// A tensor's row-major shape.
fn dims(file: &GgufFile, name: &str) -> Result<Vec<usize>> {
    Ok(file.tensor_info(name)?.shape())
}

impl OctoConfig {
    pub fn empty() -> Self {
        OctoConfig {
            d: 0,
            layers: 0,
            heads: 0,
            ffn: 0,
            ln_eps: 1e-6,
            readouts: 1,
            window: 1,
            max_horizon: 0,
            stems: vec![None; CAMERAS.len()],
            lang_tokens: 16,
            t5_d: 0,
            t5_layers: 0,
            t5_heads: 0,
            t5_kv: 0,
            t5_ffn: 0,
            t5_vocab: 0,
            t5_buckets: 32,
            t5_max_distance: 128,
            t5_gated: false,
            repeat_task_tokens: true,
            correct_attention: true,
            proprio_dim: 0,
            proprio_bins: 0,
            head: Head::Diffusion,
            horizon: 4,
            action_dim: 7,
            max_action: 5.0,
            steps: 20,
            schedule_s: 0.008,
            time_dim: 32,
            hidden: 256,
            blocks: 3,
            head_ln: true,
            use_map: false,
            map_heads: 8,
        }
    }

    /// Reads and checks the config of an `octo` file; sizes the keys leave out come from
    /// the weights' shapes.
    pub fn read(file: &GgufFile) -> Result<Self> {
        let head = match file.get_str(&format!("{ARCH}.action.head_type"))? {
            "diffusion" => Head::Diffusion,
            "l1" => Head::L1,
            other => return Err(bad(format!("action.head_type {other:?}"))),
        };
        let mut cfg = OctoConfig {
            head,
            ..Self::empty()
        };
        for (c, cam) in CAMERAS.iter().enumerate() {
            let p = format!("{ARCH}.obs.{cam}");
            if file.tensor_info(&format!("{p}.proj.weight")).is_err() {
                continue;
            }
            let mut widths = [0; STEM_STAGES];
            let mut in_channels = 0;
            for (i, w) in widths.iter_mut().enumerate() {
                let k = dims(file, &format!("{p}.stem.{i}.conv.weight"))?;
                *w = k[0];
                if i == 0 {
                    in_channels = k.get(1).copied().unwrap_or(0);
                }
            }
            let patch = dims(file, &format!("{p}.patch_embd.weight"))?;
            let side = config::Meta::new(file, ARCH).usize(&format!("image.{cam}_size"))?;
            cfg.stems[c] = Some(Stem {
                side,
                in_channels,
                widths,
                patch: patch.last().copied().unwrap_or(1),
                features: patch[0],
            });
        }
        let first = CAMERAS
            .iter()
            .find(|c| {
                file.tensor_info(&format!("{ARCH}.obs.{c}.pos_embd"))
                    .is_ok()
            })
            .ok_or_else(|| bad("no camera tokens (octo.obs.*.pos_embd)".into()))?;
        cfg.max_horizon = dims(file, &format!("{ARCH}.obs.{first}.pos_embd"))?[0];
        let t5 = format!("{ARCH}.t5");
        let emb = dims(file, &format!("{t5}.tok_embd.weight"))?;
        (cfg.t5_vocab, cfg.t5_d) = (emb[0], emb[1]);
        cfg.t5_layers = (0..)
            .take_while(|i| {
                file.tensor_info(&format!("{t5}.blk.{i}.attn_q.weight"))
                    .is_ok()
            })
            .count();
        let rel = dims(file, &format!("{t5}.blk.0.attn_rel_b.weight"))?;
        (cfg.t5_buckets, cfg.t5_heads) = (rel[0], rel[1]);
        cfg.t5_kv = dims(file, &format!("{t5}.blk.0.attn_q.weight"))?[0] / cfg.t5_heads.max(1);
        cfg.t5_ffn = dims(file, &format!("{t5}.blk.0.ffn_up.weight"))?[0];
        cfg.t5_gated = file
            .tensor_info(&format!("{t5}.blk.0.ffn_gate.weight"))
            .is_ok();
        if let Ok(thr) = dims(file, &format!("{ARCH}.obs.proprio.bin_thresholds")) {
            cfg.proprio_bins = thr[0].saturating_sub(1);
            cfg.proprio_dim = dims(file, &format!("{ARCH}.obs.proprio.pos_embd"))?[1];
        }
        let has = |n: &str| file.tensor_info(&format!("{ARCH}.head.{n}")).is_ok();
        cfg.head_ln = has("diffusion.reverse.blk.0.ln.weight");
        cfg.use_map = has("l1.map.probe");
        config::read(file, ARCH, cfg)
    }

    /// Writes `general.architecture`, the `octo.*` keys and what the reader takes from
    /// key names (the image sizes, the head type).
    pub fn write(&self, w: &mut GgufWriter) -> Result<()> {
        w.add_metadata("general.architecture", ARCH)?;
        config::write_keys(self, w, ARCH)?;
        w.add_metadata(format!("{ARCH}.action.head_type"), self.head.name())?;
        w.add_metadata(format!("{ARCH}.diffusion.beta_schedule"), "cosine")?;
        // vla.cpp serves octo-small-1.5's sizes only, and checks this name
        let small = (self.d, self.layers, self.heads, self.ffn) == (384, 12, 6, 1536);
        let variant = if small { "octo-small-1.5" } else { "octo" };
        w.add_metadata(format!("{ARCH}.architecture"), variant)?;
        for (cam, stem) in CAMERAS.iter().zip(&self.stems) {
            if let Some(s) = stem {
                let g = s.grid();
                w.add_metadata(format!("{ARCH}.image.{cam}_size"), s.side as u32)?;
                w.add_metadata(format!("{ARCH}.tokens.{cam}"), (g * g) as u32)?;
            }
        }
        Ok(())
    }

    /// The cameras the model has, with their stems, in token order.
    pub fn cameras(&self) -> impl Iterator<Item = (&'static str, &Stem)> {
        CAMERAS
            .iter()
            .zip(&self.stems)
            .filter_map(|(c, s)| Some((*c, s.as_ref()?)))
    }

    pub fn head_dim(&self) -> usize {
        self.d / self.heads
    }
}
