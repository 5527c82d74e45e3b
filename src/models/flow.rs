//! The driver every flow-matching VLM + action-expert policy shares (SmolVLA, pi0, pi0.5):
//! camera views through the vision graph, the prefix through the prefill graph (every
//! layer's keys and values), then the denoise graph integrated over the arch's step
//! schedule, and the actions unnormalised. An arch supplies its config, its three graphs and
//! the hooks below ([`FlowArch`]); archs that predict in one pass implement
//! [`Policy`] directly instead.

use super::common::{
    gguf_tokenizer, instruction_ids, ms_since, noise_or_draw, require_tokenizer, steps_override,
    ActionIo, LoadedGraphs,
};
use crate::config::Section;
use crate::gguf::{GgufFile, GgufWriter};
use crate::graph::{declared_weights, Graph, WeightStore};
use crate::modules::flow::{euler_integrate, Schedule};
use crate::policy::{ActionChunk, Observation, Policy, PolicyInfo, RuntimeOptions, StageTimes};
use crate::preprocess::{CameraInput, Normalizer};
use crate::tokenizer::Tokenizer;
use crate::{Error, Result, Tensor};
use std::time::Instant;

/// Named graph inputs.
pub type Inputs = Vec<(String, Tensor<'static>)>;

/// What one request gives the prefill and denoise graphs besides the image tokens, `x_t`,
/// the time input and the cached keys and values.
pub struct RequestInputs {
    /// Prefill inputs: instruction tokens, positions, mask, ...
    pub prefix: Inputs,
    /// Denoise inputs fixed over the steps: positions, masks, ...
    pub suffix: Inputs,
}

/// An arch the [`FlowPolicy`] driver runs: a config (read from and written to the GGUF) that
/// builds the three graphs and answers the hooks.
///
/// Graph contract: `vision` takes `image.{i}` `[3, S, S]` for every camera and returns their
/// image tokens `[n_images * T, D]` (one run for all views); `prefill` takes `img_tokens`
/// (that output) plus [`RequestInputs::prefix`]
/// and returns keys and values, `(k, v)` per layer; `denoise` takes `x_t`
/// `[chunk, max_action_dim]`, `time_emb`, [`RequestInputs::suffix`] and `kv.{i}.k` /
/// `kv.{i}.v` (the prefill's outputs), and returns the velocity `[chunk, max_action_dim]`.
pub trait FlowArch: Section + Clone + Send + Sized {
    /// The `general.architecture` of this config.
    fn arch(&self) -> &'static str;
    /// Reads and checks the config of a file of an arch this type serves.
    fn read(file: &GgufFile) -> Result<Self>;
    /// What the driver needs to know of the config.
    fn spec(&self) -> FlowSpec;
    /// The vision, prefill and denoise graphs, in that order.
    fn graphs(&self, store: Option<&dyn WeightStore>) -> Result<[Graph; 3]>;
    /// The text the reference tokenizes for `task` (given the normalised, padded state).
    fn prompt_text(&self, task: &str, state: &[f32]) -> String;
    /// The prefill and fixed denoise inputs for `tokens` (padded, `n_tokens` real) and the
    /// normalised, padded state.
    fn request_inputs(
        &self,
        tokens: Vec<f32>,
        n_tokens: usize,
        state: &[f32],
    ) -> Result<RequestInputs>;
    /// The denoise graph's `time_emb` at model time `t`.
    fn time_input(&self, t: f32) -> Result<Tensor<'static>>;
    /// Normalisation statistics the arch stores besides its graph weights, with shapes
    /// (for random-weight models; [`Normalizer::from_gguf`] reads them).
    fn statistics(&self) -> Vec<(String, Vec<usize>)>;

    /// Every weight the graphs read, with its shape: derived from the graphs, so a weight
    /// is named and shaped in one place only.
    fn tensor_shapes(&self) -> Result<Vec<(String, Vec<usize>)>> {
        declared_weights(&self.graphs(None)?)
    }

    /// Writes `general.architecture` and the config's metadata.
    fn write(&self, w: &mut GgufWriter) -> Result<()> {
        w.add_metadata("general.architecture", self.arch())?;
        crate::config::write(self, w, self.arch())
    }
}

/// The sizes and settings the driver reads from an arch's config.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowSpec {
    pub io: ActionIo,
    pub vocab_size: usize,
    pub camera: CameraInput,
    pub schedule: Schedule,
}

/// lerobot's `NewLineProcessor` (SmolVLA, pi0): the task with a newline appended unless it
/// ends with one.
pub fn newline_terminated(task: &str) -> String {
    match task.ends_with('\n') {
        true => task.to_owned(),
        false => format!("{task}\n"),
    }
}

/// Graph indices in [`LoadedGraphs`].
const VISION: usize = 0;
const PREFILL: usize = 1;
const DENOISE: usize = 2;

/// A flow-matching policy: an arch's config and compiled graphs, its tokenizer and
/// normalisers.
pub struct FlowPolicy<A: FlowArch> {
    cfg: A,
    /// `cfg`'s spec, with the step count `--steps` asks for.
    spec: FlowSpec,
    info: PolicyInfo,
    state_norm: Normalizer,
    action_norm: Normalizer,
    /// From the GGUF's `tokenizer.ggml.*` metadata; without it only token ids are accepted.
    tokenizer: Option<Tokenizer>,
    graphs: LoadedGraphs,
}

impl<A: FlowArch> FlowPolicy<A> {
    pub fn new(file: GgufFile, opts: &RuntimeOptions) -> Result<Self> {
        let cfg = A::read(&file)?;
        let mut spec = cfg.spec();
        spec.io.num_steps = steps_override(spec.io.num_steps, opts)?;
        let io = spec.io.clone();
        let tokenizer = gguf_tokenizer(&file, spec.vocab_size)?;
        let e = opts.embodiment.as_deref();
        let state_norm = Normalizer::from_gguf(&file, "state", io.state_dim, e)?;
        let action_norm = Normalizer::from_gguf(&file, "action", io.action_dim, e)?;
        let graphs = LoadedGraphs::compile(file, opts, |f| Ok(cfg.graphs(Some(f))?.into()))?;
        let size = spec.camera.size;
        let info = PolicyInfo {
            n_images: io.n_images,
            image_height: size,
            image_width: size,
            max_state_dim: io.max_state_dim,
            state_dim: io.state_dim,
            chunk_size: io.chunk_size,
            max_action_dim: io.max_action_dim,
            action_dim: io.action_dim,
            num_steps: io.num_steps,
            ..graphs.info(cfg.arch())
        };
        Ok(FlowPolicy {
            cfg,
            spec,
            info,
            state_norm,
            action_norm,
            tokenizer,
            graphs,
        })
    }

    pub fn config(&self) -> &A {
        &self.cfg
    }

    /// The tokenizer shipped in the GGUF, if any.
    pub fn tokenizer(&self) -> Option<&Tokenizer> {
        self.tokenizer.as_ref()
    }

    /// The request's state, normalised and zero-padded to `max_state_dim`.
    pub fn normalised_state(&self, obs: &Observation) -> Result<Vec<f32>> {
        let io = &self.spec.io;
        self.state_norm
            .normalize_state(obs, io.state_dim, io.max_state_dim)
    }

    /// The text lerobot's preprocessor tokenizes for `task` ([`FlowArch::prompt_text`]).
    pub fn prompt_text(&self, task: &str, normalised_state: &[f32]) -> String {
        self.cfg.prompt_text(task, normalised_state)
    }

    /// [`Self::prompt_text`] tokenized, right-truncated to `tokenizer_max_length`.
    pub fn tokenize_prompt(&self, task: &str, normalised_state: &[f32]) -> Result<Vec<u32>> {
        let tok = require_tokenizer(self.tokenizer.as_ref())?;
        let mut ids = tok.encode(&self.prompt_text(task, normalised_state))?;
        ids.truncate(self.spec.io.tokenizer_max_length);
        Ok(ids)
    }

    /// Runs the vision graph on every camera view, all in one run: their image tokens,
    /// stacked `[n_images * T, D]`.
    pub fn run_vision(&mut self, obs: &Observation) -> Result<Tensor<'static>> {
        let n = self.spec.io.n_images;
        if obs.images.len() != n {
            return Err(Error::InvalidArgument(format!(
                "{} images, this model takes {n}",
                obs.images.len()
            )));
        }
        let (camera, s) = (self.spec.camera, self.spec.camera.size);
        let pixels = obs
            .images
            .iter()
            .map(|img| Tensor::from_f32(vec![3, s, s], camera.pixels(img)?))
            .collect::<Result<Vec<_>>>()?;
        let names: Vec<String> = (0..n).map(|i| format!("image.{i}")).collect();
        let inputs: Vec<(&str, &Tensor)> = names.iter().map(String::as_str).zip(&pixels).collect();
        let mut out = self.graphs.exec(VISION).run(&inputs)?;
        Ok(out.remove(0))
    }
}

impl<A: FlowArch> Policy for FlowPolicy<A> {
    fn info(&self) -> &PolicyInfo {
        &self.info
    }

    fn predict(&mut self, obs: &Observation) -> Result<ActionChunk> {
        let t0 = Instant::now();
        let counters = self.graphs.counters();
        let state = self.normalised_state(obs)?;
        let (io, schedule) = (self.spec.io.clone(), self.spec.schedule);
        let (tokens, n_tokens) = instruction_ids(
            obs,
            io.tokenizer_max_length,
            self.spec.vocab_size,
            io.pad_token_id,
            |p| self.tokenize_prompt(p, &state),
        )?;
        let (c, ad) = (io.chunk_size, io.max_action_dim);
        let noise = noise_or_draw(obs, c, ad)?;
        let img = self.run_vision(obs)?;
        let vision_ms = ms_since(t0);

        let t1 = Instant::now();
        let (cfg, graphs) = (&self.cfg, &mut self.graphs);
        let req = cfg.request_inputs(tokens, n_tokens, &state)?;
        let mut prefill: Vec<(&str, &Tensor)> = vec![("img_tokens", &img)];
        prefill.extend(req.prefix.iter().map(|(n, t)| (n.as_str(), t)));
        let kv = graphs.exec(PREFILL).run(&prefill)?;
        let prefill_ms = ms_since(t1);

        let t2 = Instant::now();
        let names: Vec<String> = (0..kv.len() / 2)
            .flat_map(|i| [format!("kv.{i}.k"), format!("kv.{i}.v")])
            .collect();
        let x = euler_integrate(noise, schedule, io.num_steps, |x, t| {
            let time = cfg.time_input(t)?;
            let x_t = Tensor::from_f32(vec![c, ad], x)?;
            let mut inputs: Vec<(&str, &Tensor)> = vec![("x_t", &x_t), ("time_emb", &time)];
            inputs.extend(req.suffix.iter().map(|(n, t)| (n.as_str(), t)));
            inputs.extend(names.iter().map(String::as_str).zip(kv.iter()));
            let out = graphs.exec(DENOISE).run(&inputs)?;
            out[0].to_vec_f32()
        })?;
        let denoise_ms = ms_since(t2);

        let d = io.action_dim;
        let actions = self.action_norm.unnormalize_rows(&x, ad, d);
        Ok(ActionChunk {
            actions,
            chunk_size: c,
            action_dim: d,
            times: StageTimes {
                vision_ms,
                prefill_ms,
                denoise_ms,
                total_ms: ms_since(t0),
            },
            counters: self.graphs.counters().since(&counters),
        })
    }
}

/// A run of prefix tokens: `len` tokens, the first `real` of them not padding, in attention
/// block `block`.
#[derive(Clone, Copy, Debug)]
pub struct Segment {
    pub len: usize,
    pub real: usize,
    pub block: usize,
}

/// Masks and positions of one request's prefix.
pub struct PrefixLayout {
    /// Per prefix token: not padding.
    pub valid: Vec<bool>,
    /// The reference's `cumsum(pad_mask) - 1`.
    pub positions: Vec<f32>,
    /// `[P, P]`: 1 where query i may attend key j: real tokens see the real tokens of their
    /// own and earlier blocks (the references' block-causal `att_masks`).
    pub mask: Vec<f32>,
    pub n_valid: usize,
}

impl Segment {
    pub fn new(len: usize, real: usize, block: usize) -> Self {
        Segment { len, real, block }
    }
}

impl PrefixLayout {
    pub fn new(segments: &[Segment]) -> Self {
        let (mut valid, mut block) = (Vec::new(), Vec::new());
        for s in segments {
            valid.extend((0..s.len).map(|i| i < s.real));
            block.extend(std::iter::repeat_n(s.block, s.len));
        }
        let p = valid.len();
        let mut positions = Vec::with_capacity(p);
        let mut count = 0f32;
        for &v in &valid {
            count += f32::from(u8::from(v));
            positions.push(count - 1.0);
        }
        let mut mask = vec![0f32; p * p];
        for i in 0..p {
            for j in 0..p {
                let ok = valid[i] && valid[j] && block[j] <= block[i];
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

    /// The prefill's `positions` `[P]`, `mask` `[P, P]` and instruction `tokens` `[L]`
    /// (padded ids as f32); the suffix inputs, which need the layout, come first.
    pub fn into_inputs(self, tokens: Vec<f32>) -> Result<Inputs> {
        let p = self.valid.len();
        Ok(vec![
            (
                "positions".into(),
                Tensor::from_f32(vec![p], self.positions)?,
            ),
            ("mask".into(), Tensor::from_f32(vec![p, p], self.mask)?),
            (
                "tokens".into(),
                Tensor::from_f32(vec![tokens.len()], tokens)?,
            ),
        ])
    }

    /// `[rows, P]`: 1 at the real prefix tokens, for a suffix's view of the prefix.
    pub fn valid_row(&self) -> impl Iterator<Item = f32> + Clone + '_ {
        self.valid.iter().map(|&v| f32::from(u8::from(v)))
    }
}
