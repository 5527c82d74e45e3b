//! pi0 and pi0.5 (lerobot `policies.pi0` / `policies.pi05`, ports of openpi): PaliGemma
//! (a SigLIP tower, a linear projector, a Gemma decoder over [image tokens, instruction])
//! and a narrower Gemma action expert whose layers attend to the decoder's cached keys and
//! values of the same layer plus the suffix, integrated over `num_steps` Euler steps.
//!
//! pi0's suffix is [state token, action tokens], the time embedding fused into each action
//! token by an MLP; pi0.5 has no state token (the state is discretised into the prompt) and
//! conditions every expert norm on the time instead (adaRMS, gated residuals).
//!
//! The [`FlowPolicy`] driver runs it as SmolVLA: `vision` (one camera), `prefill` (the
//! decoder over the prefix: every layer's rotated keys and values) and `denoise` (one
//! velocity). Masks, positions, the time embedding and the prompt are the hooks here.

use super::common::statistics;
use super::common::ActionIo;
use super::flow::{
    mask_constant, newline_terminated, valid_rows, FlowArch, FlowPolicy, FlowSpec, GraphFn, Inputs,
    PrefixLayout, RequestInputs, Segment, VALID,
};
use super::prefix::state_input;
use super::presets;
use crate::config::limits::MAX_SEQUENCE;
use crate::config::{self, first_failing, Keys, Section};
use crate::gguf::{GgmlType, GgufFile, GgufWriter};
use crate::graph::{Graph, GraphBuilder};
use crate::layers::{ada_rms_norm, linear, rms_norm, GatedActivation};
use crate::modules::decoder::{DecoderConfig, ExpertConfig, Layer, LmConfig, Query};
use crate::modules::flow::names;
use crate::modules::flow::{Schedule, TimeEmbedding};
use crate::modules::vision::{embed_images, Connector, VisionConfig};
use crate::preprocess::{CameraInput, PadAlign, PixelMap, Resize};
use crate::{Error, Result, Tensor};

pub const ARCH_PI0: &str = "pi0";
pub const ARCH_PI05: &str = "pi05";

/// The policy: pi0's or pi0.5's config under the flow-matching driver.
pub type Pi0 = FlowPolicy<Pi0Config>;

pub use super::presets::{full_config, small_config};

/// Resize padding, in [0, 1] units: openpi pads with -1 in [-1, 1] units, but lerobot's
/// float path pads with -1.0 before mapping [0, 1] to [-1, 1], so the model sees -3.
const PAD_UNIT: f32 = -1.0;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Variant {
    /// State token in the suffix, time fused into the action tokens.
    #[default]
    Pi0,
    /// State discretised into the prompt, time through adaRMS in the expert.
    Pi05,
}

impl Variant {
    pub fn arch(self) -> &'static str {
        match self {
            Variant::Pi0 => ARCH_PI0,
            Variant::Pi05 => ARCH_PI05,
        }
    }

    pub fn from_arch(arch: &str) -> Option<Self> {
        [Variant::Pi0, Variant::Pi05]
            .into_iter()
            .find(|v| v.arch() == arch)
    }

    /// Tokens before the actions in the expert's sequence.
    fn suffix_extra(self) -> usize {
        match self {
            Variant::Pi0 => 1,
            Variant::Pi05 => 0,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pi0Config {
    pub variant: Variant,
    pub vision: VisionConfig,
    /// The Gemma decoder.
    pub lm: LmConfig,
    /// Heads, head size, RoPE and norm epsilon, shared by the decoder and the expert (their
    /// keys and values are concatenated, so they must agree).
    pub attn: DecoderConfig,
    pub expert: ExpertConfig,
    pub io: ActionIo,
    pub time: TimeEmbedding,
}

impl Section for Pi0Config {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        self.vision.keys(k)?;
        let n_img_tokens = self.vision.clone();
        k.derived("n_img_tokens", &|| n_img_tokens.n_patches())?;
        self.lm.keys(k)?;
        self.attn.keys(k)?;
        self.expert.keys(k)?;
        self.io.keys(k)?;
        self.time.keys(k)
    }

    fn check(&self) -> std::result::Result<(), String> {
        self.vision.check()?;
        self.lm.check()?;
        self.attn.check()?;
        self.expert.check()?;
        self.io.check()?;
        self.io.check_vocab(self.lm.vocab_size)?;
        self.time.check()?;
        // Bounded by the checks above, so the sum cannot overflow.
        let tokens = self.prefix_len() + self.suffix_len();
        first_failing(&[(
            tokens <= MAX_SEQUENCE,
            &format!("{tokens} tokens (prefix + suffix): more than {MAX_SEQUENCE}"),
        )])
    }
}

impl Pi0Config {
    /// PaliGemma's projector: no pixel shuffle, a bias.
    pub fn connector(&self) -> Connector {
        Connector::Linear {
            pixel_shuffle: 1,
            bias: true,
        }
    }

    pub fn n_img_tokens(&self) -> usize {
        self.connector().n_tokens(self.vision.n_patches())
    }

    pub fn prefix_len(&self) -> usize {
        self.io.n_images * self.n_img_tokens() + self.io.tokenizer_max_length
    }

    /// Expert sequence length: the actions, after pi0's state token.
    pub fn suffix_len(&self) -> usize {
        self.io.chunk_size + self.variant.suffix_extra()
    }

    /// The prefix of a request with `n_tokens` real instruction tokens: one bidirectional
    /// block of images and instruction.
    pub fn layout(&self, n_tokens: usize) -> PrefixLayout {
        let n_img = self.io.n_images * self.n_img_tokens();
        PrefixLayout::new(&[
            Segment::new(n_img, n_img, 0),
            Segment::new(self.io.tokenizer_max_length, n_tokens, 0),
        ])
    }

    /// The [`graphs::denoise`] input fixed for a request besides `valid`: `positions`, the
    /// suffix's positions after the valid prefix.
    pub fn suffix_inputs(&self, layout: &PrefixLayout) -> Result<Inputs> {
        let s = self.suffix_len();
        let positions: Vec<f32> = (0..s).map(|i| (layout.n_valid + i) as f32).collect();
        Ok(vec![(
            "positions".into(),
            Tensor::from_f32(vec![s], positions)?,
        )])
    }
}

impl FlowArch for Pi0Config {
    fn arch(&self) -> &'static str {
        self.variant.arch()
    }

    fn io_mut(&mut self) -> &mut ActionIo {
        &mut self.io
    }

    /// Reads and checks the `pi0.*` / `pi05.*` metadata (see docs/GGUF.md).
    fn read(file: &GgufFile) -> Result<Self> {
        let arch = file.architecture()?;
        let variant = Variant::from_arch(arch).ok_or_else(|| {
            Error::InvalidArgument(format!("architecture {arch:?} is not pi0 or pi05"))
        })?;
        let fixed = Pi0Config {
            variant,
            attn: DecoderConfig {
                ffn: GatedActivation::GeluTanh,
                ..Default::default()
            },
            ..Default::default()
        };
        config::read(file, variant.arch(), fixed)
    }

    fn spec(&self) -> FlowSpec {
        let camera = CameraInput::square(
            self.vision.image_size,
            Resize::KeepAspectPad,
            PAD_UNIT,
            PadAlign::Center,
            PixelMap::MinusOneToOne,
        );
        FlowSpec {
            truncates_prompt: true,
            // Gemma scales its embeddings by sqrt(hidden) and its RMSNorm gains by (1 + w);
            // the Gemma family is documented to overflow f16 (transformers #36822, Gemma 3).
            // Not measurable here (no trained checkpoint): random weights stay far inside
            // the range.
            f16_risk: Some("the Gemma family is known to exceed that range (transformers #36822)"),
            ..FlowSpec::new(
                self.io.clone(),
                self.lm.vocab_size,
                camera,
                Schedule::OneToZero,
            )
        }
    }

    const GRAPHS: [GraphFn<Self>; 3] = [graphs::vision, graphs::prefill, graphs::denoise];

    /// pi0 appends a newline (`Pi0NewLineProcessor`), pi0.5 builds its state prompt
    /// ([`pi05_prompt`]).
    fn prompt_text(&self, task: &str, state: &[f32]) -> String {
        match self.variant {
            Variant::Pi0 => newline_terminated(task),
            Variant::Pi05 => pi05_prompt(task, state),
        }
    }

    fn request_inputs(
        &self,
        tokens: Vec<f32>,
        n_tokens: usize,
        state: &[f32],
    ) -> Result<RequestInputs> {
        let layout = self.layout(n_tokens);
        let mut suffix = self.suffix_inputs(&layout)?;
        let prefix = layout.into_inputs(tokens)?;
        if self.variant == Variant::Pi0 {
            suffix.push(state_input(state)?);
        }
        Ok(RequestInputs { prefix, suffix })
    }

    fn time_input(&self, t: f32) -> Result<Tensor<'static>> {
        time_input(self, t)
    }

    /// Mean/std for pi0, quantiles for pi0.5 (lerobot's defaults).
    fn statistics(&self) -> Vec<(String, Vec<usize>)> {
        let stats = match self.variant {
            Variant::Pi0 => ["mean", "std"],
            Variant::Pi05 => ["q01", "q99"],
        };
        statistics(&self.io, stats, stats)
    }
}

/// Graph builders, shared by the policy and by tests that inspect intermediate tensors.
/// Each takes a builder over the GGUF (or a declaring one) and the config.
pub mod graphs {
    use super::*;

    /// `image.{i}` `[3, S, S]` in [-1, 1] for each camera -> their image tokens
    /// `[n_images * n_img_tokens, hidden]`, in one run.
    pub fn vision(mut g: GraphBuilder, cfg: &Pi0Config) -> Result<Graph> {
        let (n, c, h) = (cfg.io.n_images, cfg.connector(), cfg.lm.hidden);
        let out = embed_images(&mut g, n, &cfg.vision, c, h)?;
        g.build(&[out])
    }

    /// Inputs `img_tokens` `[n_images * n_img_tokens, hidden]`, `tokens` `[L]`, `positions`
    /// `[P]`, `valid` `[P]`. Outputs every layer's rotated keys and values
    /// `[P, kv_heads, head_dim]`, in layer order (k, v).
    pub fn prefill(mut g: GraphBuilder, cfg: &Pi0Config) -> Result<Graph> {
        let (p, h, a) = (cfg.prefix_len(), cfg.lm.hidden, &cfg.attn);
        let img = g.input(
            names::IMG_TOKENS,
            &[cfg.io.n_images * cfg.n_img_tokens(), h],
        );
        let tokens = g.input(names::TOKENS, &[cfg.io.tokenizer_max_length]);
        let positions = g.input("positions", &[p]);
        let valid = g.input(VALID, &[p]);
        let mask = cfg
            .layout(cfg.io.tokenizer_max_length)
            .allowed(&mut g, valid)?;
        let table = g.weight("token_embd.weight", &[cfg.lm.vocab_size, h])?;
        let lang = g.embedding(table, tokens)?;
        // Only the language embeddings are scaled: openpi's Gemma drops the normaliser and
        // PaliGemma's image-feature scaling.
        let lang = g.scale(lang, (h as f32).sqrt());
        let mut x = g.concat(&[img, lang], 0)?;
        let mut outputs = Vec::new();
        for i in 0..cfg.lm.n_layers {
            let layer = Layer::new("vlm", i, cfg.lm.inter, a);
            let query = layer.query(&mut g, x)?;
            let q = layer.rotate(&mut g, query.q, positions)?;
            let (k, v) = layer.rotated_kv(&mut g, query.normed, positions)?;
            outputs.extend([k, v]);
            // The last layer's output feeds nothing the expert reads.
            if i + 1 < cfg.lm.n_layers {
                x = layer.finish(&mut g, x, Query { q, ..query }, &[(k, v)], Some(mask))?;
            }
        }
        g.build(&outputs)
    }

    /// One velocity evaluation. Inputs `x_t` `[chunk, max_action_dim]`, `time_emb`
    /// (`[chunk, expert_h]` for pi0, `[1, expert_h]` for pi0.5), pi0's `state`
    /// `[1, max_state_dim]` (normalised, padded), `positions` `[S]`, the prefill's `valid`
    /// `[P]` and `kv.{i}.k` / `kv.{i}.v` from [`prefill`]. Output `v_t`
    /// `[chunk, max_action_dim]`. The suffix sees the valid prefix and itself
    /// bidirectionally, except that pi0's state token does not see the actions.
    pub fn denoise(mut g: GraphBuilder, cfg: &Pi0Config) -> Result<Graph> {
        let (p, c, s, a) = (
            cfg.prefix_len(),
            cfg.io.chunk_size,
            cfg.suffix_len(),
            &cfg.attn,
        );
        let (eh, ad) = (cfg.expert.hidden, cfg.io.max_action_dim);
        let x_t = g.input(names::X_T, &[c, ad]);
        let positions = g.input("positions", &[s]);
        let valid = g.input(VALID, &[p]);
        let extra = cfg.variant.suffix_extra();
        let prefix_part = valid_rows(&mut g, valid, s)?;
        let suffix_part = mask_constant(&mut g, "mask.suffix", s, s, |i, j| i >= extra || j == i)?;
        let mask = g.concat(&[prefix_part, suffix_part], 1)?;
        let act = linear(&mut g, x_t, "action_in_proj", eh, true)?;
        let (mut x, cond) = match cfg.variant {
            Variant::Pi0 => {
                let time = g.input(names::TIME_EMB, &[c, eh]);
                let state = g.input(names::STATE, &[1, cfg.io.max_state_dim]);
                let state = linear(&mut g, state, "state_proj", eh, true)?;
                let fused = g.concat(&[act, time], 1)?;
                let fused = linear(&mut g, fused, "action_time_mlp_in", eh, true)?;
                let fused = g.silu(fused);
                let fused = linear(&mut g, fused, "action_time_mlp_out", eh, true)?;
                (g.concat(&[state, fused], 0)?, None)
            }
            Variant::Pi05 => {
                let time = g.input(names::TIME_EMB, &[1, eh]);
                let t = linear(&mut g, time, "time_mlp_in", eh, true)?;
                let t = g.silu(t);
                let t = linear(&mut g, t, "time_mlp_out", eh, true)?;
                (act, Some(g.silu(t)))
            }
        };
        for i in 0..cfg.lm.n_layers {
            let layer = Layer::new("aex", i, cfg.expert.inter, a).conditioned(cond);
            let cache_k = g.input(names::key(i), &[p, a.kv_heads, a.head_dim]);
            let cache_v = g.input(names::value(i), &[p, a.kv_heads, a.head_dim]);
            let query = layer.query(&mut g, x)?;
            let q = layer.rotate(&mut g, query.q, positions)?;
            let new = layer.rotated_kv(&mut g, query.normed, positions)?;
            let kv = [(cache_k, cache_v), new];
            x = layer.finish(&mut g, x, Query { q, ..query }, &kv, Some(mask))?;
        }
        // the action rows first (the norm is per row): the output projection then reads
        // the norm itself
        let x = g.slice(x, 0, s - c, c)?;
        let x = match cond {
            None => rms_norm(&mut g, x, "aex.output_norm", a.norm_eps)?,
            Some(cond) => ada_rms_norm(&mut g, x, cond, "aex.ada_output_norm", a.norm_eps)?.0,
        };
        let out = linear(&mut g, x, "action_out_proj", ad, true)?;
        g.build(&[out])
    }
}

/// The [`graphs::denoise`] input `time_emb` at time `t`: the sinusoidal embedding, one row
/// per action for pi0, one row for pi0.5.
pub fn time_input(cfg: &Pi0Config, t: f32) -> Result<Tensor<'static>> {
    let eh = cfg.expert.hidden;
    let rows = match cfg.variant {
        Variant::Pi0 => cfg.io.chunk_size,
        Variant::Pi05 => 1,
    };
    Tensor::from_f32(vec![rows, eh], cfg.time.at(t, eh).repeat(rows))
}

/// openpi's 256-bin discretisation of a normalised state value (`np.digitize` over
/// `linspace(-1, 1, 257)[:-1]`, minus 1): -1 below -1, 255 from 1 - 1/128 up.
pub fn state_bin(x: f32) -> i32 {
    // The bin edges -1 + i/128 are exact in binary, so this equals the comparison count.
    let b = ((f64::from(x) + 1.0) * 128.0).floor();
    b.clamp(-1.0, 255.0) as i32
}

/// pi0.5's prompt: `Task: <task>, State: <bins>;\nAction: ` with the task stripped and
/// underscores and newlines made spaces (lerobot's `Pi05PrepareStateTokenizerProcessorStep`);
/// `state` is normalised and padded to `max_state_dim`.
pub fn pi05_prompt(task: &str, state: &[f32]) -> String {
    let task = task.trim().replace(['_', '\n'], " ");
    let bins: Vec<String> = state.iter().map(|&x| state_bin(x).to_string()).collect();
    format!("Task: {task}, State: {};\nAction: ", bins.join(" "))
}

/// A GGUF for `cfg` with random weights drawn from `seed` and random statistics (mean/std
/// for pi0, quantiles for pi0.5, as lerobot's defaults); no tokenizer.
pub fn random_gguf(cfg: &Pi0Config, seed: u64, ty: GgmlType) -> Result<Vec<u8>> {
    random_writer(cfg, seed, ty)?.to_bytes()
}

/// [`random_gguf`] as a writer, for files too large to build twice in memory.
pub fn random_writer(cfg: &Pi0Config, seed: u64, ty: GgmlType) -> Result<GgufWriter<'static>> {
    presets::random_writer(cfg, seed, ty, None)
}
