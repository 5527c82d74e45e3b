//! pi0 and pi0.5 (lerobot `policies.pi0` / `policies.pi05`, ports of openpi): PaliGemma
//! (a SigLIP tower, a linear projector, a Gemma decoder over [image tokens, instruction])
//! and a narrower Gemma action expert whose layers attend to the decoder's cached keys and
//! values of the same layer plus the suffix, integrated over `num_steps` Euler steps.
//!
//! pi0's suffix is [state token, action tokens], the time embedding fused into each action
//! token by an MLP; pi0.5 has no state token (the state is discretised into the prompt) and
//! conditions every expert norm on the time instead (adaRMS, gated residuals).
//!
//! Three graphs, as SmolVLA: `vision` (one camera), `prefill` (the decoder over the prefix:
//! every layer's rotated keys and values) and `denoise` (one velocity). Masks, positions,
//! the time embedding, the prompt and the Euler update are computed here on the host.

use super::common::{self, check_tensors, instruction_ids, ms_since, LoadedGraphs, Normalizer};
use super::limits::{shared_config, MAX_SEQUENCE};
use super::schema::{Meta, Schema};
use crate::gguf::{GgmlType, GgufFile, GgufWriter};
use crate::graph::{Graph, GraphBuilder};
use crate::layers::{ada_rms_norm, linear, rms_norm, GatedActivation};
use crate::modules::decoder::{
    finish_layer, layer_prefix, layer_tensor_shapes, norm_and_query, rotate, rotated_kv,
    DecoderConfig, Layer,
};
use crate::modules::flow::{euler_integrate, sinusoidal_time_embedding};
use crate::modules::image::PadAlign;
use crate::modules::vision::{image_tokens, Connector, PatchPositions, VisionConfig};
use crate::policy::{ActionChunk, Observation, Policy, PolicyInfo, RuntimeOptions, StageTimes};
use crate::tokenizer::Tokenizer;
use crate::{Error, Result, Tensor};
use std::time::Instant;

pub const ARCH_PI0: &str = "pi0";
pub const ARCH_PI05: &str = "pi05";

/// Resize padding, in [0, 1] units: openpi pads with -1 in [-1, 1] units, but lerobot's
/// float path pads with -1.0 before mapping [0, 1] to [-1, 1], so the model sees -3.
const PAD_UNIT: f32 = -1.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// State token in the suffix, time fused into the action tokens.
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

#[derive(Clone, Debug, PartialEq)]
pub struct Pi0Config {
    pub variant: Variant,
    pub vision: VisionConfig,
    /// Gemma decoder width, depth, FFN width, vocabulary.
    pub hidden: usize,
    pub n_layers: usize,
    pub lm_inter: usize,
    pub vocab_size: usize,
    /// Heads, head size, RoPE and norm epsilon, shared by the decoder and the expert (their
    /// keys and values are concatenated, so they must agree).
    pub attn: DecoderConfig,
    pub expert_hidden: usize,
    pub expert_inter: usize,
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

impl Pi0Config {
    pub fn arch(&self) -> &'static str {
        self.variant.arch()
    }

    pub fn n_img_tokens(&self) -> usize {
        self.vision.n_patches()
    }

    pub fn prefix_len(&self) -> usize {
        self.n_images * self.n_img_tokens() + self.tokenizer_max_length
    }

    /// Expert sequence length: the actions, after pi0's state token.
    pub fn suffix_len(&self) -> usize {
        self.chunk_size + self.variant.suffix_extra()
    }

    pub fn read(file: &GgufFile) -> Result<Self> {
        let arch = file.architecture()?;
        let variant = Variant::from_arch(arch).ok_or_else(|| {
            Error::InvalidArgument(format!("architecture {arch:?} is not pi0 or pi05"))
        })?;
        let m = Meta::new(file, variant.arch());
        let cfg = Pi0Config {
            variant,
            vision: VisionConfig {
                hidden: m.usize("vit_hidden")?,
                layers: m.usize("vit_layers")?,
                heads: m.usize("vit_heads")?,
                inter: m.usize("vit_inter")?,
                image_size: m.usize("image_size")?,
                patch_size: m.usize("patch_size")?,
                ln_eps: m.f32("vit_ln_eps")?,
                positions: PatchPositions::Grid,
            },
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
                ffn: GatedActivation::GeluTanh,
            },
            expert_hidden: m.usize("expert_h")?,
            expert_inter: m.usize("expert_inter")?,
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
        shared
            .check()
            .and_then(|()| {
                // Bounded by the shared check, so the sum cannot overflow.
                let tokens = self.prefix_len() + self.suffix_len();
                if tokens > MAX_SEQUENCE {
                    Err(format!(
                        "{tokens} tokens (prefix + suffix): more than {MAX_SEQUENCE}"
                    ))
                } else {
                    Ok(())
                }
            })
            .map_err(|why| Error::InvalidArgument(format!("{} config: {why}", self.arch())))
    }

    /// Writes `general.architecture` and the `<arch>.*` metadata (see docs/GGUF.md).
    pub fn write(&self, w: &mut GgufWriter) -> Result<()> {
        w.add_metadata("general.architecture", self.arch())?;
        let v = &self.vision;
        let mut m = Schema::new(w, self.arch())?;
        for (k, x) in [
            ("vit_hidden", v.hidden),
            ("vit_layers", v.layers),
            ("vit_heads", v.heads),
            ("vit_inter", v.inter),
            ("image_size", v.image_size),
            ("patch_size", v.patch_size),
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
            ("n_images", self.n_images),
            ("tokenizer_max_length", self.tokenizer_max_length),
            ("pad_token_id", self.pad_token_id as usize),
            ("chunk_size", self.chunk_size),
            ("num_steps", self.num_steps),
            ("max_state_dim", self.max_state_dim),
            ("max_action_dim", self.max_action_dim),
            ("real_state_dim", self.state_dim),
            ("real_action_dim", self.action_dim),
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

    /// Every weight the model reads, with its row-major shape (the normalisation statistics,
    /// mean/std or quantiles, are checked separately).
    pub fn tensor_shapes(&self) -> Vec<(String, Vec<usize>)> {
        let (h, eh, a) = (self.hidden, self.expert_hidden, &self.attn);
        let (sd, ad) = (self.max_state_dim, self.max_action_dim);
        let mut t = self.vision.tensor_shapes();
        let mut linear = |name: &str, out: usize, inp: usize| {
            t.push((format!("{name}.weight"), vec![out, inp]));
            t.push((format!("{name}.bias"), vec![out]));
        };
        linear("mm.proj", h, self.vision.hidden);
        linear("action_in_proj", eh, ad);
        linear("action_out_proj", ad, eh);
        let cond = match self.variant {
            Variant::Pi0 => {
                linear("state_proj", eh, sd);
                linear("action_time_mlp_in", eh, 2 * eh);
                linear("action_time_mlp_out", eh, eh);
                None
            }
            Variant::Pi05 => {
                linear("time_mlp_in", eh, eh);
                linear("time_mlp_out", eh, eh);
                linear("aex.ada_output_norm", 3 * eh, eh);
                Some(eh)
            }
        };
        t.push(("token_embd.weight".into(), vec![self.vocab_size, h]));
        if cond.is_none() {
            t.push(("aex.output_norm.weight".into(), vec![eh]));
        }
        for i in 0..self.n_layers {
            t.extend(layer_tensor_shapes(
                &layer_prefix("vlm", i),
                h,
                h,
                self.lm_inter,
                a,
                None,
            ));
            t.extend(layer_tensor_shapes(
                &layer_prefix("aex", i),
                eh,
                eh,
                self.expert_inter,
                a,
                cond,
            ));
        }
        t
    }
}

/// Graph builders, shared by the policy and by tests that inspect intermediate tensors.
pub mod graphs {
    use super::*;

    /// `image` `[3, S, S]` in [-1, 1] -> image tokens `[n_img_tokens, hidden]`.
    pub fn vision(file: &GgufFile, cfg: &Pi0Config) -> Result<Graph> {
        let mut g = GraphBuilder::new(file);
        let s = cfg.vision.image_size;
        let img = g.input("image", &[3, s, s]);
        let out = image_tokens(
            &mut g,
            img,
            &cfg.vision,
            Connector {
                pixel_shuffle: 1,
                bias: true,
            },
        )?;
        g.build(&[out])
    }

    /// Inputs `img_tokens` `[n_images * n_img_tokens, hidden]`, `tokens` `[L]`, `positions`
    /// `[P]`, `mask` `[P, P]`. Outputs every layer's rotated keys and values
    /// `[P, kv_heads, head_dim]`, in layer order (k, v).
    pub fn prefill(file: &GgufFile, cfg: &Pi0Config) -> Result<Graph> {
        let mut g = GraphBuilder::new(file);
        let (p, h, a) = (cfg.prefix_len(), cfg.hidden, &cfg.attn);
        let img = g.input("img_tokens", &[cfg.n_images * cfg.n_img_tokens(), h]);
        let tokens = g.input("tokens", &[cfg.tokenizer_max_length]);
        let positions = g.input("positions", &[p]);
        let mask = g.input("mask", &[p, p]);
        let table = g.weight("token_embd.weight")?;
        let lang = g.embedding(table, tokens)?;
        // Only the language embeddings are scaled: openpi's Gemma drops the normaliser and
        // PaliGemma's image-feature scaling.
        let lang = g.scale(lang, (h as f32).sqrt());
        let mut x = g.concat(&[img, lang], 0)?;
        let mut outputs = Vec::new();
        for i in 0..cfg.n_layers {
            let layer = Layer::new("vlm", i);
            let (hn, q, _) = norm_and_query(&mut g, x, &layer, a)?;
            let q = rotate(&mut g, q, positions, a)?;
            let (k, v) = rotated_kv(&mut g, hn, positions, &layer.prefix, a)?;
            outputs.extend([k, v]);
            // The last layer's output feeds nothing the expert reads.
            if i + 1 < cfg.n_layers {
                x = finish_layer(&mut g, x, q, k, v, Some(mask), None, &layer, a)?;
            }
        }
        g.build(&outputs)
    }

    /// One velocity evaluation. Inputs `x_t` `[chunk, max_action_dim]`, `time_emb`
    /// (`[chunk, expert_h]` for pi0, `[1, expert_h]` for pi0.5), pi0's `state`
    /// `[1, max_state_dim]` (normalised, padded), `positions` `[S]`, `mask` `[S, P + S]`
    /// and `kv.{i}.k` / `kv.{i}.v` from [`prefill`]. Output `v_t` `[chunk, max_action_dim]`.
    pub fn denoise(file: &GgufFile, cfg: &Pi0Config) -> Result<Graph> {
        let mut g = GraphBuilder::new(file);
        let (p, c, s, a) = (
            cfg.prefix_len(),
            cfg.chunk_size,
            cfg.suffix_len(),
            &cfg.attn,
        );
        let x_t = g.input("x_t", &[c, cfg.max_action_dim]);
        let positions = g.input("positions", &[s]);
        let mask = g.input("mask", &[s, p + s]);
        let act = linear(&mut g, x_t, "action_in_proj", true)?;
        let (mut x, cond) = match cfg.variant {
            Variant::Pi0 => {
                let time = g.input("time_emb", &[c, cfg.expert_hidden]);
                let state = g.input("state", &[1, cfg.max_state_dim]);
                let state = linear(&mut g, state, "state_proj", true)?;
                let fused = g.concat(&[act, time], 1)?;
                let fused = linear(&mut g, fused, "action_time_mlp_in", true)?;
                let fused = g.silu(fused);
                let fused = linear(&mut g, fused, "action_time_mlp_out", true)?;
                (g.concat(&[state, fused], 0)?, None)
            }
            Variant::Pi05 => {
                let time = g.input("time_emb", &[1, cfg.expert_hidden]);
                let t = linear(&mut g, time, "time_mlp_in", true)?;
                let t = g.silu(t);
                let t = linear(&mut g, t, "time_mlp_out", true)?;
                (act, Some(g.silu(t)))
            }
        };
        for i in 0..cfg.n_layers {
            let layer = Layer::conditioned("aex", i, cond);
            let cache_k = g.input(format!("kv.{i}.k"), &[p, a.kv_heads, a.head_dim]);
            let cache_v = g.input(format!("kv.{i}.v"), &[p, a.kv_heads, a.head_dim]);
            let (hn, q, gate) = norm_and_query(&mut g, x, &layer, a)?;
            let q = rotate(&mut g, q, positions, a)?;
            let (k, v) = rotated_kv(&mut g, hn, positions, &layer.prefix, a)?;
            let k = g.concat(&[cache_k, k], 0)?;
            let v = g.concat(&[cache_v, v], 0)?;
            x = finish_layer(&mut g, x, q, k, v, Some(mask), gate, &layer, a)?;
        }
        let x = match cond {
            None => rms_norm(&mut g, x, "aex.output_norm", a.norm_eps)?,
            Some(cond) => ada_rms_norm(&mut g, x, cond, "aex.ada_output_norm", a.norm_eps)?.0,
        };
        let x = g.slice(x, 0, s - c, c)?;
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
    /// `[P, P]`: 1 where query i may attend key j (the valid prefix is one bidirectional block).
    pub mask: Vec<f32>,
    pub n_valid: usize,
}

impl PrefixLayout {
    pub fn new(cfg: &Pi0Config, n_tokens: usize) -> Self {
        let n_img = cfg.n_images * cfg.n_img_tokens();
        let p = cfg.prefix_len();
        let valid: Vec<bool> = (0..p).map(|i| i < n_img || i - n_img < n_tokens).collect();
        let mut positions = Vec::with_capacity(p);
        let mut count = 0f32;
        for &v in &valid {
            count += f32::from(u8::from(v));
            positions.push(count - 1.0);
        }
        let mut mask = vec![0f32; p * p];
        for i in 0..p {
            for j in 0..p {
                // A padding query sees only itself so no row is empty; padding keys stay
                // invisible to real tokens, so this changes nothing the expert reads.
                mask[i * p + j] = f32::from(u8::from((valid[i] && valid[j]) || i == j));
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

    /// The [`graphs::denoise`] `positions` (the suffix follows the valid prefix) and `mask`
    /// (the valid prefix, and the suffix bidirectionally, except that pi0's state token
    /// does not see the actions).
    pub fn suffix_inputs(&self, cfg: &Pi0Config) -> Result<[(&'static str, Tensor<'static>); 2]> {
        let (p, s, extra) = (
            self.valid.len(),
            cfg.suffix_len(),
            cfg.variant.suffix_extra(),
        );
        let sees = |i: usize, j: usize| {
            if j < p {
                self.valid[j]
            } else {
                i >= extra || j - p == i
            }
        };
        let mask: Vec<f32> = (0..s)
            .flat_map(|i| (0..p + s).map(move |j| (i, j)))
            .map(|(i, j)| f32::from(u8::from(sees(i, j))))
            .collect();
        Ok([
            (
                "positions",
                Tensor::from_f32(
                    vec![s],
                    (0..s)
                        .map(|i| (self.n_valid + i) as f32)
                        .collect::<Vec<_>>(),
                )?,
            ),
            ("mask", Tensor::from_f32(vec![s, p + s], mask)?),
        ])
    }
}

/// The [`graphs::denoise`] input `time_emb` at time `t`: the sinusoidal embedding, one row
/// per action for pi0, one row for pi0.5.
pub fn time_input(cfg: &Pi0Config, t: f32) -> Result<Tensor<'static>> {
    let emb = sinusoidal_time_embedding(
        f64::from(t),
        cfg.expert_hidden,
        cfg.min_period,
        cfg.max_period,
    );
    let rows = match cfg.variant {
        Variant::Pi0 => cfg.chunk_size,
        Variant::Pi05 => 1,
    };
    Tensor::from_f32(vec![rows, cfg.expert_hidden], emb.repeat(rows))
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

/// Graph indices in [`LoadedGraphs`].
const VISION: usize = 0;
const PREFILL: usize = 1;
const DENOISE: usize = 2;

pub struct Pi0 {
    cfg: Pi0Config,
    info: PolicyInfo,
    state_norm: Normalizer,
    action_norm: Normalizer,
    tokenizer: Option<Tokenizer>,
    graphs: LoadedGraphs,
}

impl Pi0 {
    pub fn new(file: GgufFile, opts: &RuntimeOptions) -> Result<Self> {
        let mut cfg = Pi0Config::read(&file)?;
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
            ..graphs.info(cfg.arch())
        };
        Ok(Pi0 {
            cfg,
            info,
            state_norm,
            action_norm,
            tokenizer,
            graphs,
        })
    }

    pub fn config(&self) -> &Pi0Config {
        &self.cfg
    }

    pub fn tokenizer(&self) -> Option<&Tokenizer> {
        self.tokenizer.as_ref()
    }

    /// The text lerobot's preprocessor tokenizes for this request: pi0 appends a newline
    /// (`Pi0NewLineProcessor`), pi0.5 builds its state prompt ([`pi05_prompt`]).
    pub fn prompt_text(&self, task: &str, normalised_state: &[f32]) -> String {
        match self.cfg.variant {
            Variant::Pi0 if task.ends_with('\n') => task.to_owned(),
            Variant::Pi0 => format!("{task}\n"),
            Variant::Pi05 => pi05_prompt(task, normalised_state),
        }
    }

    /// [`Self::prompt_text`] tokenized with right truncation to `tokenizer_max_length`.
    pub fn tokenize_prompt(&self, task: &str, normalised_state: &[f32]) -> Result<Vec<u32>> {
        let tok = common::require_tokenizer(self.tokenizer.as_ref())?;
        let mut ids = tok.encode(&self.prompt_text(task, normalised_state))?;
        ids.truncate(self.cfg.tokenizer_max_length);
        Ok(ids)
    }

    /// The normalised state, zero-padded to `max_state_dim`.
    pub fn normalised_state(&self, obs: &Observation) -> Result<Vec<f32>> {
        let cfg = &self.cfg;
        self.state_norm
            .normalize_state(obs, cfg.state_dim, cfg.max_state_dim)
    }

    /// Runs the vision tower on each camera view: `[n_images * n_img_tokens, hidden]`.
    pub fn image_tokens(&mut self, obs: &Observation) -> Result<Vec<f32>> {
        let (n, s) = (self.cfg.n_images, self.cfg.vision.image_size);
        common::image_tokens(
            self.graphs.exec(VISION),
            obs,
            n,
            s,
            PAD_UNIT,
            PadAlign::Center,
        )
    }
}

impl Policy for Pi0 {
    fn info(&self) -> &PolicyInfo {
        &self.info
    }

    fn predict(&mut self, obs: &Observation) -> Result<ActionChunk> {
        let t0 = Instant::now();
        let state = self.normalised_state(obs)?;
        let cfg = &self.cfg;
        let (tokens, n_tokens) = instruction_ids(
            obs,
            cfg.tokenizer_max_length,
            cfg.vocab_size,
            cfg.pad_token_id,
            |p| self.tokenize_prompt(p, &state),
        )?;
        let (c, ad) = (cfg.chunk_size, cfg.max_action_dim);
        let noise = common::noise_or_draw(obs, c, ad)?;
        let img = self.image_tokens(obs)?;
        let vision_ms = ms_since(t0);

        let t1 = Instant::now();
        let (cfg, graphs) = (&self.cfg, &mut self.graphs);
        let layout = PrefixLayout::new(cfg, n_tokens);
        let p = cfg.prefix_len();
        let img = Tensor::from_f32(vec![cfg.n_images * cfg.n_img_tokens(), cfg.hidden], img)?;
        let tokens = Tensor::from_f32(vec![cfg.tokenizer_max_length], tokens)?;
        let positions = Tensor::from_f32(vec![p], &layout.positions[..])?;
        let mask = Tensor::from_f32(vec![p, p], &layout.mask[..])?;
        let kv = graphs.exec(PREFILL).run(&[
            ("img_tokens", &img),
            ("tokens", &tokens),
            ("positions", &positions),
            ("mask", &mask),
        ])?;
        let prefill_ms = ms_since(t1);

        let t2 = Instant::now();
        let names: Vec<String> = (0..cfg.n_layers)
            .flat_map(|i| [format!("kv.{i}.k"), format!("kv.{i}.v")])
            .collect();
        let suffix = layout.suffix_inputs(cfg)?;
        let state = Tensor::from_f32(vec![1, cfg.max_state_dim], state)?;
        let x = euler_integrate(noise, cfg.num_steps, |x, t| {
            let time = time_input(cfg, t)?;
            let x_t = Tensor::from_f32(vec![c, ad], x)?;
            let mut inputs: Vec<(&str, &Tensor)> = vec![("x_t", &x_t), ("time_emb", &time)];
            if cfg.variant == Variant::Pi0 {
                inputs.push(("state", &state));
            }
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

/// A small config of `variant`'s shape for tests and demos (the real sizes come from the
/// converter: SigLIP So400m/14 at 224, Gemma 2B, Gemma 300M expert).
pub fn small_config(variant: Variant) -> Pi0Config {
    Pi0Config {
        variant,
        vision: VisionConfig {
            hidden: 48,
            layers: 2,
            heads: 4,
            inter: 96,
            image_size: 32,
            patch_size: 8,
            ln_eps: 1e-6,
            positions: PatchPositions::Grid,
        },
        hidden: 64,
        n_layers: 3,
        lm_inter: 160,
        vocab_size: 512,
        attn: DecoderConfig {
            q_heads: 4,
            kv_heads: 1,
            head_dim: 16,
            rope_theta: 10000.0,
            norm_eps: 1e-6,
            ffn: GatedActivation::GeluTanh,
        },
        expert_hidden: 40,
        expert_inter: 96,
        n_images: 2,
        tokenizer_max_length: 24,
        pad_token_id: 0,
        chunk_size: 10,
        num_steps: 10,
        max_state_dim: 32,
        max_action_dim: 32,
        state_dim: 6,
        action_dim: 6,
        min_period: 4e-3,
        max_period: 4.0,
    }
}

/// openpi's sizes (SigLIP So400m/14 at 224, Gemma 2B, Gemma 300M expert), two cameras,
/// lerobot's defaults otherwise: for benchmarks of full-size random-weight models.
pub fn full_config(variant: Variant) -> Pi0Config {
    Pi0Config {
        variant,
        vision: VisionConfig {
            hidden: 1152,
            layers: 27,
            heads: 16,
            inter: 4304,
            image_size: 224,
            patch_size: 14,
            ln_eps: 1e-6,
            positions: PatchPositions::Grid,
        },
        hidden: 2048,
        n_layers: 18,
        lm_inter: 16384,
        vocab_size: 257152,
        attn: DecoderConfig {
            q_heads: 8,
            kv_heads: 1,
            head_dim: 256,
            rope_theta: 10000.0,
            norm_eps: 1e-6,
            ffn: GatedActivation::GeluTanh,
        },
        expert_hidden: 1024,
        expert_inter: 4096,
        n_images: 2,
        tokenizer_max_length: match variant {
            Variant::Pi0 => 48,
            Variant::Pi05 => 200,
        },
        pad_token_id: 0,
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

/// A GGUF for `cfg` with random weights drawn from `seed` and random statistics (mean/std
/// for pi0, quantiles for pi0.5, as lerobot's defaults); no tokenizer.
pub fn random_gguf(cfg: &Pi0Config, seed: u64, ty: GgmlType) -> Result<Vec<u8>> {
    random_writer(cfg, seed, ty)?.to_bytes()
}

/// [`random_gguf`] as a writer, for files too large to build twice in memory.
pub fn random_writer(cfg: &Pi0Config, seed: u64, ty: GgmlType) -> Result<GgufWriter<'static>> {
    let mut w = GgufWriter::new();
    cfg.write(&mut w)?;
    w.add_metadata(
        "general.name",
        format!("{} random-weight model", cfg.arch()),
    )?;
    let mut shapes = cfg.tensor_shapes();
    let stats = match cfg.variant {
        Variant::Pi0 => ["mean", "std"],
        Variant::Pi05 => ["q01", "q99"],
    };
    for (what, dim) in [("state", cfg.state_dim), ("action", cfg.action_dim)] {
        shapes.extend(stats.iter().map(|s| (format!("{what}_{s}"), vec![dim])));
    }
    let is_float_matrix = |name: &str| {
        !name.starts_with("state_") && !name.starts_with("action_") && !name.contains("time_mlp")
    };
    common::add_random_tensors(&mut w, &shapes, seed, ty, is_float_matrix)?;
    Ok(w)
}
