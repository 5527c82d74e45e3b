//! SmolVLA (lerobot `policies.smolvla`): a SmolVLM2 vision tower and pixel-shuffle
//! connector, a truncated SmolLM2 decoder over [image tokens, instruction, state], and a
//! narrower action expert whose layers alternate self-attention (over the cached prefix
//! keys/values plus the action tokens) and cross-attention (over the prefix keys/values
//! re-projected by the expert), integrated over `num_steps` Euler steps from t = 1 to 0.
//!
//! The [`FlowPolicy`] driver runs it: `vision` (one camera to image tokens), `prefill` (the
//! decoder over the prefix, giving every expert layer its keys and values) and `denoise`
//! (one velocity evaluation). Masks, positions and the time embedding are the hooks here.

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
use crate::gguf::{GgmlType, GgufFile};
use crate::graph::{Graph, GraphBuilder, NodeId};
use crate::layers::{linear, rms_norm, GatedActivation};
use crate::modules::decoder::{DecoderConfig, ExpertConfig, Layer, LmConfig, Query};
use crate::modules::flow::names;
use crate::modules::flow::{Schedule, TimeEmbedding};
use crate::modules::vision::{embed_images, Connector, VisionConfig};
use crate::preprocess::{CameraInput, PadAlign, PixelMap, Resize};
use crate::tokenizer::Tokenizer;
use crate::{Result, Tensor};

pub use super::common::gaussian_noise;
pub use super::presets::{demo_config, smolvla_base_config};

pub const ARCH: &str = "smolvla";

/// The policy: SmolVLA's config under the flow-matching driver.
pub type SmolVla = FlowPolicy<SmolVlaConfig>;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct SmolVlaConfig {
    pub vision: VisionConfig,
    /// Pixel-shuffle factor of the connector (key `scale_factor`).
    pub scale_factor: usize,
    pub lm: LmConfig,
    /// Heads, head size, RoPE and norm epsilon, shared by the decoder and the expert.
    pub attn: DecoderConfig,
    pub expert: ExpertConfig,
    /// Expert layer `i` self-attends when `i % self_attn_every_n_layers == 0`.
    pub self_attn_every_n_layers: usize,
    pub io: ActionIo,
    pub time: TimeEmbedding,
}

impl Section for SmolVlaConfig {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        self.vision.keys(k)?;
        k.usize("scale_factor", &mut self.scale_factor)?;
        let cfg = self.clone();
        k.derived("n_img_tokens", &|| cfg.n_img_tokens())?;
        self.lm.keys(k)?;
        self.attn.keys(k)?;
        self.expert.keys(k)?;
        k.usize(
            "self_attn_every_n_layers",
            &mut self.self_attn_every_n_layers,
        )?;
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
        // Bounded by the checks above, so the products below cannot overflow.
        let side = self.vision.patches_per_side();
        first_failing(&[(
            self.scale_factor > 0 && side.is_multiple_of(self.scale_factor),
            "patches per side must be a multiple of scale_factor",
        )])?;
        let tokens = self.prefix_len() + self.io.chunk_size;
        first_failing(&[(
            tokens <= MAX_SEQUENCE,
            &format!("{tokens} tokens (prefix + action tokens): more than {MAX_SEQUENCE}"),
        )])
    }
}

impl SmolVlaConfig {
    pub fn connector(&self) -> Connector {
        Connector::Linear {
            pixel_shuffle: self.scale_factor,
            bias: false,
        }
    }

    pub fn n_img_tokens(&self) -> usize {
        self.connector().n_tokens(self.vision.n_patches())
    }

    pub fn prefix_len(&self) -> usize {
        self.io.n_images * self.n_img_tokens() + self.io.tokenizer_max_length + 1
    }

    fn is_self_attn(&self, layer: usize) -> bool {
        layer.is_multiple_of(self.self_attn_every_n_layers.max(1))
    }
}

impl FlowArch for SmolVlaConfig {
    fn arch(&self) -> &'static str {
        ARCH
    }

    fn io_mut(&mut self) -> &mut ActionIo {
        &mut self.io
    }

    /// Reads and checks the `smolvla.*` metadata (see docs/GGUF.md).
    fn read(file: &GgufFile) -> Result<Self> {
        let fixed = SmolVlaConfig {
            attn: DecoderConfig {
                ffn: GatedActivation::Silu,
                ..Default::default()
            },
            ..Default::default()
        };
        config::read(file, ARCH, fixed)
    }

    fn spec(&self) -> FlowSpec {
        let camera = CameraInput::square(
            self.vision.image_size,
            Resize::KeepAspectPad,
            0.0,
            PadAlign::BottomRight,
            PixelMap::MinusOneToOne,
        );
        FlowSpec {
            truncates_prompt: true,
            ..FlowSpec::new(
                self.io.clone(),
                self.lm.vocab_size,
                camera,
                Schedule::OneToZero,
            )
        }
    }

    const GRAPHS: [GraphFn<Self>; 3] = [graphs::vision, graphs::prefill, graphs::denoise];

    /// lerobot's `SmolVLANewLineProcessor`: a newline appended unless the task ends with one.
    fn prompt_text(&self, task: &str, _state: &[f32]) -> String {
        newline_terminated(task)
    }

    fn request_inputs(
        &self,
        tokens: Vec<f32>,
        n_tokens: usize,
        state: &[f32],
    ) -> Result<RequestInputs> {
        let layout = self.layout(n_tokens);
        let suffix = self.suffix_inputs(&layout)?;
        let mut prefix = layout.into_inputs(tokens)?;
        prefix.push(state_input(state)?);
        Ok(RequestInputs { prefix, suffix })
    }

    fn time_input(&self, t: f32) -> Result<Tensor<'static>> {
        time_input(self, t)
    }

    fn statistics(&self) -> Vec<(String, Vec<usize>)> {
        statistics(&self.io, ["mean", "std"], ["mean", "std"])
    }
}

/// Graph builders, shared by the policy and by tests that inspect intermediate tensors.
/// Each takes a builder over the GGUF (or a declaring one) and the config.
pub mod graphs {
    use super::*;

    /// `image.{i}` `[3, S, S]` in [-1, 1] for each camera -> their image tokens
    /// `[n_images * n_img_tokens, hidden]`, in one run.
    pub fn vision(mut g: GraphBuilder, cfg: &SmolVlaConfig) -> Result<Graph> {
        let (n, c, h) = (cfg.io.n_images, cfg.connector(), cfg.lm.hidden);
        let out = embed_images(&mut g, n, &cfg.vision, c, h)?;
        g.build(&[out])
    }

    /// Inputs `img_tokens` `[n_images * n_img_tokens, hidden]`, `tokens` `[L]`, `state`
    /// `[1, max_state_dim]` (normalised, padded), `positions` `[P]`, `valid` `[P]`.
    /// Outputs, for every layer, the keys and values its expert layer attends to: the
    /// decoder's rotated keys and values `[P, kv_heads, head_dim]` for self-attention layers,
    /// and the expert's projections of them for cross-attention layers.
    pub fn prefill(mut g: GraphBuilder, cfg: &SmolVlaConfig) -> Result<Graph> {
        let (p, h, a) = (cfg.prefix_len(), cfg.lm.hidden, &cfg.attn);
        let img = g.input(
            names::IMG_TOKENS,
            &[cfg.io.n_images * cfg.n_img_tokens(), h],
        );
        let tokens = g.input(names::TOKENS, &[cfg.io.tokenizer_max_length]);
        let state = g.input(names::STATE, &[1, cfg.io.max_state_dim]);
        let positions = g.input("positions", &[p]);
        let valid = g.input(VALID, &[p]);
        let mask = cfg
            .layout(cfg.io.tokenizer_max_length)
            .allowed(&mut g, valid)?;
        let embed_scale = (h as f32).sqrt();
        let img = g.scale(img, embed_scale);
        let table = g.weight("token_embd.weight", &[cfg.lm.vocab_size, h])?;
        let lang = g.embedding(table, tokens)?;
        let lang = g.scale(lang, embed_scale);
        let state = linear(&mut g, state, "state_proj", h, true)?;
        let mut x = g.concat(&[img, lang, state], 0)?;
        let mut outputs = Vec::new();
        for i in 0..cfg.lm.n_layers {
            let layer = Layer::new("vlm", i, cfg.lm.inter, a);
            let query = layer.query(&mut g, x)?;
            let q = layer.rotate(&mut g, query.q, positions)?;
            let (k, v) = layer.rotated_kv(&mut g, query.normed, positions)?;
            if cfg.is_self_attn(i) {
                outputs.extend([k, v]);
            } else {
                let aex = Layer::new("aex", i, cfg.expert.inter, a);
                let flat =
                    |g: &mut GraphBuilder, t: NodeId| g.reshape(t, &[p, a.kv_heads * a.head_dim]);
                let (kf, vf) = (flat(&mut g, k)?, flat(&mut g, v)?);
                outputs.push(aex.project_heads(&mut g, kf, "attn_k", a.kv_heads)?);
                outputs.push(aex.project_heads(&mut g, vf, "attn_v", a.kv_heads)?);
            }
            // The last layer's output feeds nothing the expert reads.
            if i + 1 < cfg.lm.n_layers {
                x = layer.finish(&mut g, x, Query { q, ..query }, &[(k, v)], Some(mask))?;
            }
        }
        g.build(&outputs)
    }

    /// One velocity evaluation. Inputs `x_t` `[chunk, max_action_dim]`, `time_emb`
    /// `[chunk, expert_h]`, `pos_self` `[chunk]`, the prefill's `valid` `[P]`, and
    /// `kv.{i}.k` / `kv.{i}.v` from [`prefill`]. Output `v_t` `[chunk, max_action_dim]`.
    /// Self-attention layers see the valid prefix and the chunk causally (positions after
    /// the valid prefix); cross-attention layers see the valid prefix (positions from 0, as
    /// lerobot's).
    pub fn denoise(mut g: GraphBuilder, cfg: &SmolVlaConfig) -> Result<Graph> {
        let (p, c, a) = (cfg.prefix_len(), cfg.io.chunk_size, &cfg.attn);
        let (eh, ad) = (cfg.expert.hidden, cfg.io.max_action_dim);
        let x_t = g.input(names::X_T, &[c, ad]);
        let time = g.input(names::TIME_EMB, &[c, eh]);
        let pos_self = g.input("pos_self", &[c]);
        let valid = g.input(VALID, &[p]);
        let arange = Tensor::from_f32(vec![c], (0..c).map(|i| i as f32).collect::<Vec<_>>())?;
        let pos_cross = g.constant(&format!("positions.arange.{c}"), arange)?;
        let mask_cross = valid_rows(&mut g, valid, c)?;
        let causal = mask_constant(&mut g, "mask.causal", c, c, |i, j| j <= i)?;
        let mask_self = g.concat(&[mask_cross, causal], 1)?;
        let act = linear(&mut g, x_t, "action_in_proj", eh, true)?;
        let fused = g.concat(&[act, time], 1)?;
        let fused = linear(&mut g, fused, "action_time_mlp_in", eh, true)?;
        let fused = g.silu(fused);
        let mut x = linear(&mut g, fused, "action_time_mlp_out", eh, true)?;
        for i in 0..cfg.lm.n_layers {
            let layer = Layer::new("aex", i, cfg.expert.inter, a);
            let cache_k = g.input(names::key(i), &[p, a.kv_heads, a.head_dim]);
            let cache_v = g.input(names::value(i), &[p, a.kv_heads, a.head_dim]);
            let query = layer.query(&mut g, x)?;
            let cache = (cache_k, cache_v);
            x = if cfg.is_self_attn(i) {
                let q = layer.rotate(&mut g, query.q, pos_self)?;
                let new = layer.rotated_kv(&mut g, query.normed, pos_self)?;
                let q = Query { q, ..query };
                layer.finish(&mut g, x, q, &[cache, new], Some(mask_self))?
            } else {
                let q = layer.rotate(&mut g, query.q, pos_cross)?;
                let q = Query { q, ..query };
                layer.finish(&mut g, x, q, &[cache], Some(mask_cross))?
            };
        }
        let x = rms_norm(&mut g, x, "aex.output_norm", a.norm_eps)?;
        let out = linear(&mut g, x, "action_out_proj", ad, true)?;
        g.build(&[out])
    }
}

impl SmolVlaConfig {
    /// The prefix of a request with `n_tokens` real instruction tokens: images and
    /// instruction form one bidirectional block; the state token starts a second block that
    /// sees both, but they do not see it.
    pub fn layout(&self, n_tokens: usize) -> PrefixLayout {
        let n_img = self.io.n_images * self.n_img_tokens();
        PrefixLayout::new(&[
            Segment::new(n_img, n_img, 0),
            Segment::new(self.io.tokenizer_max_length, n_tokens, 0),
            Segment::new(1, 1, 1),
        ])
    }

    /// The [`graphs::denoise`] input fixed for a request besides `valid`: `pos_self`, the
    /// action tokens' positions after the valid prefix.
    pub fn suffix_inputs(&self, layout: &PrefixLayout) -> Result<Inputs> {
        let c = self.io.chunk_size;
        let pos_self: Vec<f32> = (0..c).map(|i| (layout.n_valid + i) as f32).collect();
        Ok(vec![(
            "pos_self".into(),
            Tensor::from_f32(vec![c], pos_self)?,
        )])
    }
}

/// The [`graphs::denoise`] input `time_emb` at time `t`: the sinusoidal embedding, one row
/// per action.
pub fn time_input(cfg: &SmolVlaConfig, t: f32) -> Result<Tensor<'static>> {
    let (c, eh) = (cfg.io.chunk_size, cfg.expert.hidden);
    Tensor::from_f32(vec![c, eh], cfg.time.at(t, eh).repeat(c))
}

/// The demo model's tokenizer ([`crate::tokenizer::demo::smollm2_like`]).
pub fn demo_tokenizer() -> Result<Tokenizer> {
    crate::tokenizer::demo::smollm2_like()
}

/// A GGUF for `cfg` with random weights drawn from `seed` ([`presets::random_writer`]),
/// with [`demo_tokenizer`] when it fits `cfg`'s vocabulary.
pub fn random_gguf(cfg: &SmolVlaConfig, seed: u64, ty: GgmlType) -> Result<Vec<u8>> {
    let tokenizer = Some(demo_tokenizer()?).filter(|t| t.len() <= cfg.lm.vocab_size);
    presets::random_writer(cfg, seed, ty, tokenizer.as_ref())?.to_bytes()
}
