//! SmolVLA (lerobot `policies.smolvla`): a SmolVLM2 vision tower and pixel-shuffle
//! connector, a truncated SmolLM2 decoder over [image tokens, instruction, state], and a
//! narrower action expert whose layers alternate self-attention (over the cached prefix
//! keys/values plus the action tokens) and cross-attention (over the prefix keys/values
//! re-projected by the expert), integrated over `num_steps` Euler steps.
//!
//! Three graphs, compiled once: `vision` (one camera to image tokens), `prefill` (the
//! decoder over the prefix, giving every expert layer its keys and values) and `denoise`
//! (one velocity evaluation). Masks, positions, the time embedding and the Euler update are
//! computed here on the host.

use super::common::{self, check_tensors, instruction_ids, ms_since, LoadedGraphs, Normalizer};
use super::limits::{shared_config, MAX_SEQUENCE};
use super::schema::{Meta, Schema};
use crate::gguf::{GgmlType, GgufFile, GgufWriter};
use crate::graph::{Graph, GraphBuilder, NodeId};
use crate::layers::{linear, rms_norm, GatedActivation};
use crate::modules::decoder::{
    finish_layer, layer_prefix, layer_tensor_shapes, norm_and_query, project_heads, rotate,
    rotated_kv, DecoderConfig, Layer,
};
use crate::modules::flow::{euler_integrate, sinusoidal_time_embedding};
use crate::modules::image::PadAlign;
use crate::modules::vision::{image_tokens, Connector, PatchPositions, VisionConfig};
use crate::policy::{ActionChunk, Observation, Policy, PolicyInfo, RuntimeOptions, StageTimes};
use crate::tokenizer::{demo::tiny_byte_level, SpecialTokens, Tokenizer};
use crate::{Error, Result, Tensor};
use std::time::Instant;

pub use super::common::gaussian_noise;

pub const ARCH: &str = "smolvla";

#[derive(Clone, Debug, PartialEq)]
pub struct SmolVlaConfig {
    pub vision: VisionConfig,
    /// Pixel-shuffle factor of the connector.
    pub scale_factor: usize,
    pub hidden: usize,
    pub n_layers: usize,
    pub lm_inter: usize,
    pub vocab_size: usize,
    pub attn: DecoderConfig,
    pub expert_hidden: usize,
    pub expert_inter: usize,
    /// Expert layer `i` self-attends when `i % self_attn_every_n_layers == 0`.
    pub self_attn_every_n_layers: usize,
    pub n_images: usize,
    pub tokenizer_max_length: usize,
    pub pad_token_id: u32,
    pub chunk_size: usize,
    pub num_steps: usize,
    pub max_state_dim: usize,
    pub max_action_dim: usize,
    pub state_dim: usize,
    pub action_dim: usize,
    pub min_period: f64,
    pub max_period: f64,
}

impl SmolVlaConfig {
    pub fn n_img_tokens(&self) -> usize {
        self.vision.n_patches() / (self.scale_factor * self.scale_factor)
    }

    pub fn prefix_len(&self) -> usize {
        self.n_images * self.n_img_tokens() + self.tokenizer_max_length + 1
    }

    fn is_self_attn(&self, layer: usize) -> bool {
        layer % self.self_attn_every_n_layers.max(1) == 0
    }

    pub fn read(file: &GgufFile) -> Result<Self> {
        let m = Meta::new(file, ARCH);
        let cfg = SmolVlaConfig {
            vision: VisionConfig {
                hidden: m.usize("vit_hidden")?,
                layers: m.usize("vit_layers")?,
                heads: m.usize("vit_heads")?,
                inter: m.usize("vit_inter")?,
                image_size: m.usize("image_size")?,
                patch_size: m.usize("patch_size")?,
                ln_eps: m.f32("vit_ln_eps")?,
                positions: match file.get_u64(&format!("{ARCH}.vit_positions")) {
                    Err(Error::MetadataNotFound(_)) => PatchPositions::Grid,
                    _ => {
                        let id = m.usize("vit_positions")?;
                        PatchPositions::from_id(id).ok_or_else(|| {
                            Error::InvalidArgument(format!(
                                "metadata \"{ARCH}.vit_positions\" = {id}: expected 0 or 1"
                            ))
                        })?
                    }
                },
            },
            scale_factor: m.usize("scale_factor")?,
            hidden: m.usize("hidden")?,
            n_layers: m.usize("n_layers")?,
            lm_inter: m.usize("lm_inter")?,
            vocab_size: m.usize("vocab_size")?,
            attn: DecoderConfig {
                q_heads: m.usize("n_q_heads")?,
                kv_heads: m.usize("n_kv_heads")?,
                head_dim: m.usize("head_dim")?,
                rope_theta: m.f32("rope_theta")?,
                norm_eps: m.f32("norm_eps")?,
                ffn: GatedActivation::Silu,
            },
            expert_hidden: m.usize("expert_h")?,
            expert_inter: m.usize("expert_inter")?,
            self_attn_every_n_layers: m.usize("self_attn_every_n_layers")?,
            n_images: m.usize("n_images")?,
            tokenizer_max_length: m.usize("tokenizer_max_length")?,
            pad_token_id: m.usize("pad_token_id")? as u32,
            chunk_size: m.usize("chunk_size")?,
            num_steps: m.usize("num_steps")?,
            max_state_dim: m.usize("max_state_dim")?,
            max_action_dim: m.usize("max_action_dim")?,
            state_dim: m.usize("real_state_dim")?,
            action_dim: m.usize("real_action_dim")?,
            min_period: m.decimal("min_period")?,
            max_period: m.decimal("max_period")?,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks that the sizes fit together and stay within [`super::limits`] (`read` calls
    /// it; so does the converter).
    pub fn validate(&self) -> Result<()> {
        let shared = shared_config!(self);
        let side = self.vision.image_size / self.vision.patch_size.max(1);
        shared
            .check()
            .and_then(|()| {
                // Bounded by the shared check, so the products below cannot overflow.
                if self.scale_factor == 0 || side % self.scale_factor != 0 {
                    Err("patches per side must be a multiple of scale_factor".into())
                } else if self.prefix_len() + self.chunk_size > MAX_SEQUENCE {
                    Err(format!(
                        "{} prefix + {} action tokens: more than {MAX_SEQUENCE}",
                        self.prefix_len(),
                        self.chunk_size
                    ))
                } else {
                    Ok(())
                }
            })
            .map_err(|why| Error::InvalidArgument(format!("smolvla config: {why}")))
    }

    /// Writes the `smolvla.*` metadata (see docs/GGUF.md).
    pub fn write(&self, w: &mut GgufWriter) -> Result<()> {
        let v = &self.vision;
        let mut m = Schema::new(w, ARCH)?;
        for (k, x) in [
            ("vit_hidden", v.hidden),
            ("vit_layers", v.layers),
            ("vit_heads", v.heads),
            ("vit_inter", v.inter),
            ("image_size", v.image_size),
            ("patch_size", v.patch_size),
            ("scale_factor", self.scale_factor),
            ("n_img_tokens", self.n_img_tokens()),
            ("hidden", self.hidden),
            ("n_layers", self.n_layers),
            ("lm_inter", self.lm_inter),
            ("vocab_size", self.vocab_size),
            ("n_q_heads", self.attn.q_heads),
            ("n_kv_heads", self.attn.kv_heads),
            ("head_dim", self.attn.head_dim),
            ("expert_h", self.expert_hidden),
            ("expert_inter", self.expert_inter),
            ("self_attn_every_n_layers", self.self_attn_every_n_layers),
            ("n_images", self.n_images),
            ("tokenizer_max_length", self.tokenizer_max_length),
            ("pad_token_id", self.pad_token_id as usize),
            ("chunk_size", self.chunk_size),
            ("num_steps", self.num_steps),
            ("max_state_dim", self.max_state_dim),
            ("max_action_dim", self.max_action_dim),
            ("real_state_dim", self.state_dim),
            ("real_action_dim", self.action_dim),
            ("vit_positions", v.positions.id()),
        ] {
            m.u32(k, x)?;
        }
        m.f32("vit_ln_eps", v.ln_eps)?;
        m.f32("rope_theta", self.attn.rope_theta)?;
        m.f32("norm_eps", self.attn.norm_eps)?;
        m.f32("min_period", self.min_period as f32)?;
        m.f32("max_period", self.max_period as f32)?;
        Ok(())
    }

    /// Every tensor the model reads, with its row-major shape.
    pub fn tensor_shapes(&self) -> Vec<(String, Vec<usize>)> {
        let v = &self.vision;
        let (h, eh, a) = (self.hidden, self.expert_hidden, &self.attn);
        let mut t = v.tensor_shapes();
        t.extend([
            (
                "mm.proj.weight".into(),
                vec![h, v.hidden * self.scale_factor * self.scale_factor],
            ),
            ("token_embd.weight".into(), vec![self.vocab_size, h]),
            ("state_proj.weight".into(), vec![h, self.max_state_dim]),
            ("state_proj.bias".into(), vec![h]),
            (
                "action_in_proj.weight".into(),
                vec![eh, self.max_action_dim],
            ),
            ("action_in_proj.bias".into(), vec![eh]),
            ("action_time_mlp_in.weight".into(), vec![eh, 2 * eh]),
            ("action_time_mlp_in.bias".into(), vec![eh]),
            ("action_time_mlp_out.weight".into(), vec![eh, eh]),
            ("action_time_mlp_out.bias".into(), vec![eh]),
            (
                "action_out_proj.weight".into(),
                vec![self.max_action_dim, eh],
            ),
            ("action_out_proj.bias".into(), vec![self.max_action_dim]),
            ("aex.output_norm.weight".into(), vec![eh]),
            ("state_mean".into(), vec![self.state_dim]),
            ("state_std".into(), vec![self.state_dim]),
            ("action_mean".into(), vec![self.action_dim]),
            ("action_std".into(), vec![self.action_dim]),
        ]);
        for i in 0..self.n_layers {
            t.extend(layer_tensor_shapes(
                &layer_prefix("vlm", i),
                h,
                h,
                self.lm_inter,
                a,
                None,
            ));
            let kv_in = if self.is_self_attn(i) {
                eh
            } else {
                a.kv_heads * a.head_dim
            };
            t.extend(layer_tensor_shapes(
                &layer_prefix("aex", i),
                eh,
                kv_in,
                self.expert_inter,
                a,
                None,
            ));
        }
        t
    }
}

/// Graph builders, shared by the policy and by tests that inspect intermediate tensors.
pub mod graphs {
    use super::*;

    /// `image` `[3, S, S]` in [-1, 1] -> image tokens `[n_img_tokens, hidden]` (connector
    /// output, before the sqrt(hidden) scaling).
    pub fn vision(file: &GgufFile, cfg: &SmolVlaConfig) -> Result<Graph> {
        let mut g = GraphBuilder::new(file);
        let s = cfg.vision.image_size;
        let img = g.input("image", &[3, s, s]);
        let out = image_tokens(
            &mut g,
            img,
            &cfg.vision,
            Connector {
                pixel_shuffle: cfg.scale_factor,
                bias: false,
            },
        )?;
        g.build(&[out])
    }

    /// Inputs `img_tokens` `[n_images * n_img_tokens, hidden]`, `tokens` `[L]`, `state`
    /// `[1, max_state_dim]` (normalised, padded), `positions` `[P]`, `mask` `[P, P]`.
    /// Outputs, for every layer, the keys and values its expert layer attends to: the
    /// decoder's rotated keys and values `[P, kv_heads, head_dim]` for self-attention layers,
    /// and the expert's projections of them for cross-attention layers.
    pub fn prefill(file: &GgufFile, cfg: &SmolVlaConfig) -> Result<Graph> {
        let mut g = GraphBuilder::new(file);
        let (p, h, a) = (cfg.prefix_len(), cfg.hidden, &cfg.attn);
        let img = g.input("img_tokens", &[cfg.n_images * cfg.n_img_tokens(), h]);
        let tokens = g.input("tokens", &[cfg.tokenizer_max_length]);
        let state = g.input("state", &[1, cfg.max_state_dim]);
        let positions = g.input("positions", &[p]);
        let mask = g.input("mask", &[p, p]);
        let embed_scale = (h as f32).sqrt();
        let img = g.scale(img, embed_scale);
        let table = g.weight("token_embd.weight")?;
        let lang = g.embedding(table, tokens)?;
        let lang = g.scale(lang, embed_scale);
        let state = linear(&mut g, state, "state_proj", true)?;
        let mut x = g.concat(&[img, lang, state], 0)?;
        let mut outputs = Vec::new();
        for i in 0..cfg.n_layers {
            let layer = Layer::new("vlm", i);
            let (hn, q, _) = norm_and_query(&mut g, x, &layer, a)?;
            let q = rotate(&mut g, q, positions, a)?;
            let (k, v) = rotated_kv(&mut g, hn, positions, &layer.prefix, a)?;
            if cfg.is_self_attn(i) {
                outputs.extend([k, v]);
            } else {
                let aex = layer_prefix("aex", i);
                let flat =
                    |g: &mut GraphBuilder, t: NodeId| g.reshape(t, &[p, a.kv_heads * a.head_dim]);
                let (kf, vf) = (flat(&mut g, k)?, flat(&mut g, v)?);
                outputs.push(project_heads(
                    &mut g, kf, &aex, "attn_k", a.kv_heads, a.head_dim,
                )?);
                outputs.push(project_heads(
                    &mut g, vf, &aex, "attn_v", a.kv_heads, a.head_dim,
                )?);
            }
            // The last layer's output feeds nothing the expert reads.
            if i + 1 < cfg.n_layers {
                x = finish_layer(&mut g, x, q, k, v, Some(mask), None, &layer, a)?;
            }
        }
        g.build(&outputs)
    }

    /// One velocity evaluation. Inputs `x_t` `[chunk, max_action_dim]`, `time_emb`
    /// `[chunk, expert_h]`, `pos_self` / `pos_cross` `[chunk]`, `mask_self`
    /// `[chunk, P + chunk]`, `mask_cross` `[chunk, P]`, and `kv.{i}.k` / `kv.{i}.v` from
    /// [`prefill`]. Output `v_t` `[chunk, max_action_dim]`.
    pub fn denoise(file: &GgufFile, cfg: &SmolVlaConfig) -> Result<Graph> {
        let mut g = GraphBuilder::new(file);
        let (p, c, a) = (cfg.prefix_len(), cfg.chunk_size, &cfg.attn);
        let x_t = g.input("x_t", &[c, cfg.max_action_dim]);
        let time = g.input("time_emb", &[c, cfg.expert_hidden]);
        let pos_self = g.input("pos_self", &[c]);
        let pos_cross = g.input("pos_cross", &[c]);
        let mask_self = g.input("mask_self", &[c, p + c]);
        let mask_cross = g.input("mask_cross", &[c, p]);
        let act = linear(&mut g, x_t, "action_in_proj", true)?;
        let fused = g.concat(&[act, time], 1)?;
        let fused = linear(&mut g, fused, "action_time_mlp_in", true)?;
        let fused = g.silu(fused);
        let mut x = linear(&mut g, fused, "action_time_mlp_out", true)?;
        for i in 0..cfg.n_layers {
            let layer = Layer::new("aex", i);
            let cache_k = g.input(format!("kv.{i}.k"), &[p, a.kv_heads, a.head_dim]);
            let cache_v = g.input(format!("kv.{i}.v"), &[p, a.kv_heads, a.head_dim]);
            let (hn, q, _) = norm_and_query(&mut g, x, &layer, a)?;
            let (q, k, v, mask) = if cfg.is_self_attn(i) {
                let q = rotate(&mut g, q, pos_self, a)?;
                let (k, v) = rotated_kv(&mut g, hn, pos_self, &layer.prefix, a)?;
                let k = g.concat(&[cache_k, k], 0)?;
                let v = g.concat(&[cache_v, v], 0)?;
                (q, k, v, mask_self)
            } else {
                let q = rotate(&mut g, q, pos_cross, a)?;
                (q, cache_k, cache_v, mask_cross)
            };
            x = finish_layer(&mut g, x, q, k, v, Some(mask), None, &layer, a)?;
        }
        let x = rms_norm(&mut g, x, "aex.output_norm", a.norm_eps)?;
        let out = linear(&mut g, x, "action_out_proj", true)?;
        g.build(&[out])
    }
}

/// Masks and positions of one request, from the number of valid instruction tokens.
pub struct PrefixLayout {
    /// Per prefix token: not padding.
    pub valid: Vec<bool>,
    /// The reference's `cumsum(pad_mask) - 1`.
    pub positions: Vec<f32>,
    /// `[P, P]`: 1 where query i may attend key j.
    pub mask: Vec<f32>,
    pub n_valid: usize,
}

impl PrefixLayout {
    pub fn new(cfg: &SmolVlaConfig, n_tokens: usize) -> Self {
        let n_img = cfg.n_images * cfg.n_img_tokens();
        let p = cfg.prefix_len();
        let valid: Vec<bool> = (0..p)
            .map(|i| i < n_img || i >= n_img + cfg.tokenizer_max_length || i - n_img < n_tokens)
            .collect();
        // Images and instruction form one bidirectional block; the state token starts a
        // second block that sees both, but they do not see it.
        let block = |i: usize| usize::from(i == p - 1);
        let mut positions = Vec::with_capacity(p);
        let mut count = 0f32;
        for &v in &valid {
            count += f32::from(u8::from(v));
            positions.push(count - 1.0);
        }
        let mut mask = vec![0f32; p * p];
        for i in 0..p {
            for j in 0..p {
                let ok = valid[i] && valid[j] && block(j) <= block(i);
                // A padding query sees only itself so no row is empty; padding keys stay
                // invisible to real tokens, so this changes nothing the model outputs.
                mask[i * p + j] = f32::from(u8::from(ok || i == j));
            }
        }
        let n_valid = valid.iter().filter(|&&v| v).count();
        PrefixLayout {
            valid,
            positions,
            mask,
            n_valid,
        }
    }

    /// The [`graphs::denoise`] inputs fixed for a request: `pos_self` (action tokens follow
    /// the valid prefix), `pos_cross` (from 0, as lerobot's cross-attention layers),
    /// `mask_self` (valid prefix + causal over the chunk) and `mask_cross` (valid prefix).
    pub fn suffix_inputs(
        &self,
        cfg: &SmolVlaConfig,
    ) -> Result<[(&'static str, Tensor<'static>); 4]> {
        let (p, c) = (self.valid.len(), cfg.chunk_size);
        let valid = |j: usize| f32::from(u8::from(self.valid[j]));
        let mask_self: Vec<f32> = (0..c)
            .flat_map(|i| (0..p + c).map(move |j| (i, j)))
            .map(|(i, j)| {
                if j < p {
                    valid(j)
                } else {
                    f32::from(u8::from(j - p <= i))
                }
            })
            .collect();
        Ok([
            (
                "pos_self",
                Tensor::from_f32(
                    vec![c],
                    (0..c)
                        .map(|i| (self.n_valid + i) as f32)
                        .collect::<Vec<_>>(),
                )?,
            ),
            (
                "pos_cross",
                Tensor::from_f32(vec![c], (0..c).map(|i| i as f32).collect::<Vec<_>>())?,
            ),
            ("mask_self", Tensor::from_f32(vec![c, p + c], mask_self)?),
            (
                "mask_cross",
                Tensor::from_f32(
                    vec![c, p],
                    (0..c * p).map(|k| valid(k % p)).collect::<Vec<_>>(),
                )?,
            ),
        ])
    }
}

/// The [`graphs::denoise`] input `time_emb` at time `t`: the sinusoidal embedding, one row per action.
pub fn time_input(cfg: &SmolVlaConfig, t: f32) -> Result<Tensor<'static>> {
    let emb = sinusoidal_time_embedding(
        f64::from(t),
        cfg.expert_hidden,
        cfg.min_period,
        cfg.max_period,
    );
    Tensor::from_f32(
        vec![cfg.chunk_size, cfg.expert_hidden],
        emb.repeat(cfg.chunk_size),
    )
}

/// Graph indices in [`LoadedGraphs`].
const VISION: usize = 0;
const PREFILL: usize = 1;
const DENOISE: usize = 2;

pub struct SmolVla {
    cfg: SmolVlaConfig,
    info: PolicyInfo,
    state_norm: Normalizer,
    action_norm: Normalizer,
    /// From the GGUF's `tokenizer.ggml.*` metadata; without it only token ids are accepted.
    tokenizer: Option<Tokenizer>,
    graphs: LoadedGraphs,
}

impl SmolVla {
    pub fn new(file: GgufFile, opts: &RuntimeOptions) -> Result<Self> {
        let mut cfg = SmolVlaConfig::read(&file)?;
        cfg.num_steps = common::steps_override(cfg.num_steps, opts)?;
        check_tensors(&file, &cfg.tensor_shapes())?;
        let tokenizer = common::gguf_tokenizer(&file, cfg.vocab_size)?;
        let state_norm = Normalizer::from_gguf(&file, "state", cfg.state_dim)?;
        let action_norm = Normalizer::from_gguf(&file, "action", cfg.action_dim)?;
        let graphs = LoadedGraphs::compile(file, opts, |f| {
            Ok(vec![
                graphs::vision(f, &cfg)?,
                graphs::prefill(f, &cfg)?,
                graphs::denoise(f, &cfg)?,
            ])
        })?;
        let info = PolicyInfo {
            n_images: cfg.n_images,
            image_height: cfg.vision.image_size,
            image_width: cfg.vision.image_size,
            max_state_dim: cfg.max_state_dim,
            state_dim: cfg.state_dim,
            chunk_size: cfg.chunk_size,
            max_action_dim: cfg.max_action_dim,
            action_dim: cfg.action_dim,
            num_steps: cfg.num_steps,
            ..graphs.info(ARCH)
        };
        Ok(SmolVla {
            cfg,
            info,
            state_norm,
            action_norm,
            tokenizer,
            graphs,
        })
    }

    pub fn config(&self) -> &SmolVlaConfig {
        &self.cfg
    }

    /// The tokenizer shipped in the GGUF, if any.
    pub fn tokenizer(&self) -> Option<&Tokenizer> {
        self.tokenizer.as_ref()
    }

    /// Instruction ids as lerobot's SmolVLA preprocessor makes them: a newline appended
    /// unless the task ends with one (`SmolVLANewLineProcessor`), then the tokenizer with
    /// right truncation to `tokenizer_max_length` (`TokenizerProcessorStep`).
    pub fn tokenize_prompt(&self, prompt: &str) -> Result<Vec<u32>> {
        let tok = common::require_tokenizer(self.tokenizer.as_ref())?;
        let mut ids = match prompt.ends_with('\n') {
            true => tok.encode(prompt)?,
            false => tok.encode(&format!("{prompt}\n"))?,
        };
        ids.truncate(self.cfg.tokenizer_max_length);
        Ok(ids)
    }

    /// The padded instruction ids and how many are real.
    fn tokens(&self, obs: &Observation) -> Result<(Vec<f32>, usize)> {
        let cfg = &self.cfg;
        instruction_ids(
            obs,
            cfg.tokenizer_max_length,
            cfg.vocab_size,
            cfg.pad_token_id,
            |p| self.tokenize_prompt(p),
        )
    }

    fn normalised_state(&self, obs: &Observation) -> Result<Vec<f32>> {
        let cfg = &self.cfg;
        self.state_norm
            .normalize_state(obs, cfg.state_dim, cfg.max_state_dim)
    }

    /// Runs the vision tower on each preprocessed camera view: `[n_images * n_img_tokens, hidden]`.
    pub fn image_tokens(&mut self, obs: &Observation) -> Result<Vec<f32>> {
        let (n, s) = (self.cfg.n_images, self.cfg.vision.image_size);
        common::image_tokens(
            self.graphs.exec(VISION),
            obs,
            n,
            s,
            0.0,
            PadAlign::BottomRight,
        )
    }
}

impl Policy for SmolVla {
    fn info(&self) -> &PolicyInfo {
        &self.info
    }

    fn predict(&mut self, obs: &Observation) -> Result<ActionChunk> {
        let t0 = Instant::now();
        let (tokens, n_tokens) = self.tokens(obs)?;
        let state = self.normalised_state(obs)?;
        let (c, ad) = (self.cfg.chunk_size, self.cfg.max_action_dim);
        let noise = common::noise_or_draw(obs, c, ad)?;
        let img = self.image_tokens(obs)?;
        let vision_ms = ms_since(t0);

        let t1 = Instant::now();
        let (cfg, graphs) = (&self.cfg, &mut self.graphs);
        let layout = PrefixLayout::new(cfg, n_tokens);
        let p = cfg.prefix_len();
        let img = Tensor::from_f32(vec![cfg.n_images * cfg.n_img_tokens(), cfg.hidden], img)?;
        let tokens = Tensor::from_f32(vec![cfg.tokenizer_max_length], tokens)?;
        let state = Tensor::from_f32(vec![1, cfg.max_state_dim], state)?;
        let positions = Tensor::from_f32(vec![p], &layout.positions[..])?;
        let mask = Tensor::from_f32(vec![p, p], &layout.mask[..])?;
        let kv = graphs.exec(PREFILL).run(&[
            ("img_tokens", &img),
            ("tokens", &tokens),
            ("state", &state),
            ("positions", &positions),
            ("mask", &mask),
        ])?;
        let prefill_ms = ms_since(t1);

        let t2 = Instant::now();
        let names: Vec<String> = (0..cfg.n_layers)
            .flat_map(|i| [format!("kv.{i}.k"), format!("kv.{i}.v")])
            .collect();
        let suffix = layout.suffix_inputs(cfg)?;
        let x = euler_integrate(noise, cfg.num_steps, |x, t| {
            let time = time_input(cfg, t)?;
            let x_t = Tensor::from_f32(vec![c, ad], x)?;
            let mut inputs: Vec<(&str, &Tensor)> = vec![("x_t", &x_t), ("time_emb", &time)];
            inputs.extend(suffix.iter().map(|(n, t)| (*n, t)));
            inputs.extend(names.iter().map(String::as_str).zip(kv.iter()));
            let out = graphs.exec(DENOISE).run(&inputs)?;
            out[0].to_vec_f32()
        })?;
        let denoise_ms = ms_since(t2);

        let d = cfg.action_dim;
        let actions = self.action_norm.unnormalize_rows(&x, ad, d);
        let total_ms = ms_since(t0);
        Ok(ActionChunk {
            actions,
            chunk_size: c,
            action_dim: d,
            times: StageTimes {
                vision_ms,
                prefill_ms,
                denoise_ms,
                total_ms,
            },
        })
    }
}

/// A small SmolVLA-shaped config for the demo model and fast tests.
pub fn demo_config() -> SmolVlaConfig {
    SmolVlaConfig {
        vision: VisionConfig {
            hidden: 64,
            layers: 2,
            heads: 4,
            inter: 128,
            image_size: 64,
            patch_size: 8,
            ln_eps: 1e-6,
            positions: PatchPositions::Grid,
        },
        scale_factor: 2,
        hidden: 96,
        n_layers: 4,
        lm_inter: 256,
        vocab_size: 512,
        attn: DecoderConfig {
            q_heads: 6,
            kv_heads: 2,
            head_dim: 16,
            rope_theta: 10000.0,
            norm_eps: 1e-5,
            ffn: GatedActivation::Silu,
        },
        expert_hidden: 72,
        expert_inter: 256,
        self_attn_every_n_layers: 2,
        n_images: 2,
        tokenizer_max_length: 16,
        pad_token_id: 2,
        chunk_size: 50,
        num_steps: 10,
        max_state_dim: 32,
        max_action_dim: 32,
        state_dim: 6,
        action_dim: 6,
        min_period: 4e-3,
        max_period: 4.0,
    }
}

/// The demo model's tokenizer: SmolLM2's first three special tokens (so the demo's pad id
/// 2 is `<|im_end|>`, SmolLM2-Instruct's pad token), the 256 byte tokens, and merges that make common
/// instruction words single tokens; fewer tokens than the demo config's vocab_size.
pub fn demo_tokenizer() -> Result<Tokenizer> {
    const WORDS: &[&str] = &[
        "Ġthe",
        "Ġpick",
        "Ġup",
        "Ġput",
        "Ġplace",
        "Ġin",
        "Ġon",
        "Ġinto",
        "Ġand",
        "Ġto",
        "Ġred",
        "Ġblue",
        "Ġgreen",
        "Ġyellow",
        "Ġcube",
        "Ġblock",
        "Ġbowl",
        "Ġcup",
        "Ġbox",
        "Ġtray",
        "Ġdrawer",
        "Ġdoor",
        "Ġopen",
        "Ġclose",
        "Ġpush",
        "Ġmove",
        "Ġleft",
        "Ġright",
        "Ġtop",
        "Ġtable",
        "Ġgripper",
        "Ġstack",
        "pick",
        "put",
        "open",
        "close",
        "move",
        "push",
        "ĊĊ",
    ];
    let special = SpecialTokens {
        eos: Some(2),
        pad: Some(2),
        ..Default::default()
    };
    tiny_byte_level(
        &["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        WORDS,
        special,
    )
}

/// A GGUF for `cfg` with random weights drawn from `seed` (norm gains near 1, std near 1,
/// everything else small), for demos and tests; with [`demo_tokenizer`] when it fits
/// `cfg.vocab_size`.
pub fn random_gguf(cfg: &SmolVlaConfig, seed: u64, ty: GgmlType) -> Result<Vec<u8>> {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", ARCH)?;
    w.add_metadata("general.name", "smolvla random-weight demo")?;
    cfg.write(&mut w)?;
    let tokenizer = demo_tokenizer()?;
    if tokenizer.len() <= cfg.vocab_size {
        tokenizer.write_gguf(&mut w)?;
    }
    let is_float_matrix = |name: &str| !name.starts_with("state_") && !name.starts_with("action_");
    common::add_random_tensors(&mut w, &cfg.tensor_shapes(), seed, ty, is_float_matrix)?;
    w.to_bytes()
}
