//! The driver every flow-matching VLM + action-expert policy shares (SmolVLA, pi0, pi0.5):
//! camera views through the vision graph, the prefix through the prefill graph (every
//! layer's keys and values), then the denoise graph integrated over the arch's step
//! schedule, and the actions unnormalised. An arch supplies its config, its three graphs and
//! the hooks below ([`FlowArch`]); archs that predict in one pass implement
//! [`Policy`] directly instead.
//!
//! By default the three graphs are composed into one predict graph ([`predict_graph`]):
//! vision, prefill and every denoise step with its Euler update, so a predict is one backend
//! run (one upload of the request, one readback of the chunk) and nothing the model computes
//! crosses the bus. `RuntimeOptions::stepwise` runs the three graphs separately with the
//! host integrating between them: the reference the one-run path is tested against.

use super::batch::{self, Named, OneRun, Outputs, Staged};
use super::common::{
    gguf_tokenizer, instruction_ids, ms_since, noise_or_draw, prompt_bound, require_tokenizer,
    steps_override, text_rows, ActionIo, LoadedGraphs, NoiseDraw,
};
use super::embodiment::{self, Embodiments};
use crate::backend::RunCounters;
use crate::config::Section;
use crate::gguf::{GgufFile, GgufWriter};
use crate::graph::{declared_weights, Graph, GraphBuilder, WeightStore};
use crate::modules::flow::names;
use crate::modules::flow::{euler_integrate, Schedule};
use crate::policy::{
    ActionChunk, InstructionRows, Observation, Policy, PolicyInfo, RuntimeOptions, StageTimes,
};
use crate::preprocess::actions::unnormalize_actions;
pub use crate::preprocess::actions::{Clipping, GripperSnap, RelativeActions};
use crate::preprocess::{CameraInput, FrameKey, Normalizer};
use crate::tokenizer::Tokenizer;
use crate::{Error, Result, Tensor};
use std::time::Instant;

pub use super::predict::{predict_graph, stage_graphs};
use super::predict::{DENOISE, PREFILL, STAGES, VISION};
pub use super::prefix::{mask_constant, valid_rows, Inputs, PrefixLayout, Segment, VALID};

/// How an arch builds one of its graphs from its config.
pub type GraphFn<A> = for<'w, 'a> fn(GraphBuilder<'w>, &'a A) -> Result<Graph>;

/// What one request gives the prefill and denoise graphs besides the image tokens, `x_t`,
/// the time input and the cached keys and values.
pub struct RequestInputs {
    /// Prefill inputs: instruction tokens, positions, [`VALID`], ...
    pub prefix: Inputs,
    /// Denoise inputs fixed over the steps (positions, ...), besides [`VALID`], which the
    /// denoise graph takes from the prefix.
    pub suffix: Inputs,
}

/// An arch the [`FlowPolicy`] driver runs: a config (read from and written to the GGUF) that
/// builds the three graphs and answers the hooks.
///
/// Graph contract: `vision` takes `image.{i}` `[3, S, S]` for every camera and returns their
/// image tokens `[n_images * T, D]` (one run for all views); `prefill` takes `img_tokens`
/// (that output) plus [`RequestInputs::prefix`]
/// and returns keys and values, `(k, v)` per layer; `denoise` takes `x_t`
/// `[chunk, max_action_dim]`, `time_emb`, [`RequestInputs::suffix`], the prefix's
/// [`VALID`] and `kv.{i}.k` / `kv.{i}.v` (the prefill's outputs), and returns the velocity
/// `[chunk, max_action_dim]`.
pub trait FlowArch: Section + Clone + Send + Sized {
    /// The `general.architecture` of this config.
    fn arch(&self) -> &'static str;
    /// Reads and checks the config of a file of an arch this type serves.
    fn read(file: &GgufFile) -> Result<Self>;
    /// What the driver needs to know of the config.
    fn spec(&self) -> FlowSpec;
    /// The action I/O part of the config; its `tokenizer_max_length` sizes the graphs'
    /// instruction rows ([`FlowArch::with_text_rows`]).
    fn io_mut(&mut self) -> &mut ActionIo;
    /// The builders of the vision, prefill and denoise graphs, in that order.
    const GRAPHS: [GraphFn<Self>; 3];
    /// The task a request without an instruction stands for (the wire cannot tell an empty
    /// prompt from none): lerobot's default where it has one (VLA-JEPA), else the empty
    /// instruction.
    fn missing_task(&self) -> &'static str {
        ""
    }
    /// The text the reference tokenizes for `task` (given the normalised, padded state).
    fn prompt_text(&self, task: &str, state: &[f32]) -> String;
    /// A request's instruction ids as the graphs take them: as they are, except in a file
    /// without a prompt template, where they are the whole sequence and the arch places the
    /// image slots (vla.cpp's convention).
    fn whole_prompt(&self, ids: Vec<u32>) -> Result<Vec<u32>> {
        Ok(ids)
    }
    /// Whether a request's ids are the whole sequence (a file without a prompt template), so
    /// that a [`Observation::token_mask`] can name its positions.
    fn whole_sequence(&self) -> bool {
        false
    }
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

    /// The vision, prefill and denoise graphs ([`FlowArch::GRAPHS`]), over `store` (which
    /// checks every weight's shape) or declaring their weights.
    fn graphs(&self, store: Option<&dyn WeightStore>) -> Result<[Graph; 3]> {
        let [vision, prefill, denoise] = Self::GRAPHS;
        Ok([
            vision(GraphBuilder::over(store), self)?,
            prefill(GraphBuilder::over(store), self)?,
            denoise(GraphBuilder::over(store), self)?,
        ])
    }

    /// This config with graphs of `rows` instruction rows (a bucket of [`text_rows`]): the
    /// prefill and denoise graphs and [`FlowArch::request_inputs`] of a config size the
    /// instruction by its `tokenizer_max_length`, which the GGUF keeps as the bound.
    fn with_text_rows(&self, rows: usize) -> Self {
        let mut cfg = self.clone();
        cfg.io_mut().tokenizer_max_length = rows;
        cfg
    }

    /// The graphs declaring the weights (no store): at the shortest instruction bucket, as
    /// the weights do not depend on the instruction's length and the bound's graphs can
    /// hold mask constants of 8192 x 8192.
    fn declaring_graphs(&self) -> Result<[Graph; 3]> {
        let max = self.spec().io.tokenizer_max_length;
        self.with_text_rows(text_rows(0, max)).graphs(None)
    }

    /// The embodiments the per-embodiment weights are indexed by, and how many slices those
    /// hold (GR00T: [`crate::modules::gr00t_head::embodiment_weights`]). `None`: every
    /// weight serves every embodiment, and `--embodiment` selects statistics only.
    fn embodiments(&self) -> Option<(&Embodiments, usize)> {
        None
    }

    /// Every weight the graphs read, with its shape: derived from the graphs, so a weight
    /// is named and shaped in one place only; per-embodiment weights with their leading
    /// embodiment axis.
    fn tensor_shapes(&self) -> Result<Vec<(String, Vec<usize>)>> {
        let shapes = declared_weights(&self.declaring_graphs()?)?;
        Ok(match self.embodiments() {
            Some((_, n)) => embodiment::with_embodiment_axis(shapes, n),
            None => shapes,
        })
    }

    /// Narrows the file's per-embodiment weights to the embodiment `requested` (a tag or id;
    /// `None`: the file's default) before the graphs are compiled, and names it (for
    /// [`PolicyInfo::embodiment`]). `Ok(None)`: the arch has no embodiment-specific weights,
    /// and `requested` selects normalisation statistics only.
    fn select_weights(
        &self,
        file: &mut GgufFile,
        requested: Option<&str>,
    ) -> Result<Option<String>> {
        match self.embodiments() {
            Some((e, n)) => embodiment::select(file, &e.tags, &e.default, requested, n),
            None => Ok(None),
        }
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
    /// Rows of the chunk a predict returns: the first `output_rows` of the `io.chunk_size`
    /// the model integrates (GR00T N1.7 returns 16 of 40; the noise keeps all rows).
    pub output_rows: usize,
    pub clip: Clipping,
    /// A gripper dimension snapped to two values (VLA-JEPA's LIBERO post-processing).
    pub gripper: Option<GripperSnap>,
    /// The reference cuts a tokenized prompt at `tokenizer_max_length` (lerobot's tokenizers
    /// with `truncation=True`: SmolVLA, pi0, pi0.5, Evo-1); so does the server, with a warning
    /// in the reply. Otherwise a longer prompt is refused.
    pub truncates_prompt: bool,
    /// How the initial noise is drawn when a request brings none.
    pub noise: NoiseDraw,
    /// Min/max statistics follow lerobot's generic MIN_MAX processor
    /// ([`Normalizer::lerobot_min_max`]) rather than GR00T's own normaliser.
    pub lerobot_min_max: bool,
    /// Why f16 activations may overflow in this arch's trained checkpoints, if known (a
    /// warning at load names it and suggests bf16).
    pub f16_risk: Option<&'static str>,
}

impl FlowSpec {
    /// The settings most archs share: every integrated row returned, nothing clipped or
    /// snapped, a prompt past the bound refused, Gaussian noise, GR00T's min/max, no known
    /// f16 risk.
    pub fn new(io: ActionIo, vocab_size: usize, camera: CameraInput, schedule: Schedule) -> Self {
        FlowSpec {
            output_rows: io.chunk_size,
            io,
            vocab_size,
            camera,
            schedule,
            clip: Clipping::default(),
            gripper: None,
            truncates_prompt: false,
            noise: NoiseDraw::Gaussian,
            lerobot_min_max: false,
            f16_risk: None,
        }
    }

    /// Every camera's frame as bytes at the model's size (what the graphs are compiled for
    /// at load).
    pub fn model_frames(&self) -> Vec<FrameKey> {
        vec![self.camera.model_frame(); self.io.n_images]
    }
}

/// lerobot's `NewLineProcessor` (SmolVLA, pi0): the task with a newline appended unless it
/// ends with one.
pub fn newline_terminated(task: &str) -> String {
    match task.ends_with('\n') {
        true => task.to_owned(),
        false => format!("{task}\n"),
    }
}

/// One request as model inputs, made on the host.
struct Request {
    /// Per camera, the frame as the backend takes it ([`CameraInput::frame`]).
    frames: Vec<(FrameKey, Tensor<'static>)>,
    /// The instruction's ids and rows in the graphs ([`text_rows`]).
    instruction: InstructionRows,
    inputs: RequestInputs,
    noise: Vec<f32>,
    /// What the reply tells the client (a prompt cut as the reference cuts it).
    warnings: Vec<String>,
}

/// What a compiled predict is specific to: every camera's frame and the instruction's rows.
type GraphKey = (Vec<FrameKey>, usize);

/// A flow-matching policy: an arch's config and compiled graphs, its tokenizer and
/// normalisers.
pub struct FlowPolicy<A: FlowArch> {
    cfg: A,
    /// `cfg`'s spec, with the step count `--steps` asks for.
    spec: FlowSpec,
    info: PolicyInfo,
    state_norm: Normalizer,
    action_norm: Normalizer,
    /// Isaac-GR00T's relative action groups, where the file has them.
    relative: Option<RelativeActions>,
    /// From the GGUF's `tokenizer.ggml.*` metadata; without it only token ids are accepted.
    tokenizer: Option<Tokenizer>,
    /// [`predict_graph`], or the vision, prefill and denoise graphs when stepwise
    /// ([`stage_graphs`]), per camera frames and instruction rows.
    graphs: LoadedGraphs<GraphKey>,
    /// Each kept set's compute by stage and prefill hand-over ([`PolicyInfo::stage_flops`]
    /// and [`PolicyInfo::kv_bytes`] are the current one's).
    set_flops: Vec<(GraphKey, SetFacts)>,
    /// Bytes an activation element takes (f32, or the 16-bit activations' 2).
    act_bytes: u64,
    stepwise: bool,
}

/// Of one compiled set: its compute by stage, and the elements its prefill hands the denoise
/// steps ([`Graph::handed_over`]).
type SetFacts = (Vec<(String, u64)>, u64);

impl<A: FlowArch> FlowPolicy<A> {
    pub fn new(file: GgufFile, opts: &RuntimeOptions) -> Result<Self> {
        let cfg = A::read(&file)?;
        let mut spec = cfg.spec();
        if let (crate::backend::ActDtype::F16, Some(why)) = (opts.act_dtype, spec.f16_risk) {
            tracing::warn!(
                "{}: f16 activations saturate at +-65504 and {why}; bf16 keeps f32's range",
                cfg.arch()
            );
        }
        spec.io.num_steps = steps_override(spec.io.num_steps, opts)?;
        let io = spec.io.clone();
        let tokenizer = gguf_tokenizer(&file, spec.vocab_size)?;
        let mut file = file;
        let mut e = opts.embodiment.as_deref();
        let embodiment = cfg.select_weights(&mut file, e)?;
        if embodiment.is_some() && crate::preprocess::embodiments(&file).is_empty() {
            // The embodiment chose weights; the file has one set of statistics.
            e = None;
        }
        let mut state_norm = Normalizer::from_gguf(&file, "state", io.state_dim, e)?;
        let mut action_norm = Normalizer::from_gguf(&file, "action", io.action_dim, e)?;
        let suffix = e.map_or(String::new(), |e| format!(".{e}"));
        let dims = (io.action_dim, io.state_dim);
        let relative = RelativeActions::from_gguf(&file, &suffix, dims)?;
        if spec.lerobot_min_max {
            state_norm = state_norm.lerobot_min_max();
            action_norm = action_norm.lerobot_min_max();
        }
        let stage_flops = std::cell::Cell::new((Vec::new(), 0));
        // Compiled for bytes at the model's size and the bucket of the instruction a request
        // without one gets (pi0.5's prompt holds the state, VLA-JEPA's a template: the
        // bucket most first requests need); other frames and lengths compile on first sight.
        let zeros = vec![0.0; io.max_state_dim];
        let first = tokenizer.as_ref().map_or(0, |t| {
            let text = cfg.prompt_text(cfg.missing_task(), &zeros);
            t.encode(&text).map_or(0, |ids| ids.len())
        });
        let key = (
            spec.model_frames(),
            text_rows(first, io.tokenizer_max_length),
        );
        let at = cfg.with_text_rows(key.1);
        let build = set_builder(&at, &spec, &key.0, opts.stepwise, &stage_flops);
        let graphs = LoadedGraphs::compile(file, opts, key.clone(), build)?;
        let (flops, handed) = stage_flops.take();
        let act_bytes = match opts.act_dtype {
            crate::backend::ActDtype::F32 => 4,
            _ => 2,
        };
        let info = PolicyInfo {
            n_images: io.n_images,
            image_height: spec.camera.height,
            image_width: spec.camera.width,
            max_state_dim: io.max_state_dim,
            state_dim: io.state_dim,
            chunk_size: io.chunk_size,
            action_rows: spec.output_rows,
            max_action_dim: io.max_action_dim,
            action_dim: io.action_dim,
            num_steps: io.num_steps,
            stage_flops: flops.clone(),
            kv_bytes: handed * act_bytes,
            embodiment,
            ..graphs.info(cfg.arch())
        };
        let set_flops = vec![(key, (flops, handed))];
        Ok(FlowPolicy {
            cfg,
            spec,
            info,
            state_norm,
            action_norm,
            relative,
            tokenizer,
            set_flops,
            graphs,
            act_bytes,
            stepwise: opts.stepwise,
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
        let mut state = self
            .state_norm
            .normalize_state(obs, io.state_dim, io.max_state_dim)?;
        if self.spec.clip.state {
            for (i, x) in state.iter_mut().enumerate() {
                if self.state_norm.clips(i) {
                    *x = x.clamp(-1.0, 1.0);
                }
            }
        }
        Ok(state)
    }

    /// The text lerobot's preprocessor tokenizes for `task` ([`FlowArch::prompt_text`]).
    pub fn prompt_text(&self, task: &str, normalised_state: &[f32]) -> String {
        self.cfg.prompt_text(task, normalised_state)
    }

    /// [`Self::prompt_text`] tokenized, whole (see [`Self::instruction`] for the bound).
    pub fn tokenize_prompt(&self, task: &str, normalised_state: &[f32]) -> Result<Vec<u32>> {
        let tok = require_tokenizer(self.tokenizer.as_ref())?;
        tok.encode(&self.prompt_text(task, normalised_state))
    }

    /// The request's instruction ids within the bound `tokenizer_max_length`: a longer
    /// tokenized prompt is cut where the reference cuts it, with a warning (logged here,
    /// returned for the reply); otherwise, and for token ids given by the client, a longer
    /// one is refused.
    pub fn instruction(
        &self,
        obs: &Observation,
        normalised_state: &[f32],
    ) -> Result<(Vec<u32>, Option<String>)> {
        let max = self.spec.io.tokenizer_max_length;
        let missing = self.cfg.missing_task();
        let ids = instruction_ids(obs, self.spec.vocab_size, missing, |p| {
            self.tokenize_prompt(p, normalised_state)
        })?;
        let mut ids = self.cfg.whole_prompt(ids)?;
        if ids.len() <= max {
            return Ok((ids, None));
        }
        if !self.spec.truncates_prompt || obs.tokens.is_some() {
            return Err(prompt_bound(ids.len(), max));
        }
        let warning = format!(
            "instruction: {} tokens cut to the first {max} (tokenizer_max_length), as the reference's tokenizer does",
            ids.len()
        );
        tracing::warn!("{warning}");
        ids.truncate(max);
        Ok((ids, Some(warning)))
    }

    /// Checks `obs` and turns it into model inputs: pixels, instruction, state, noise.
    fn request(&self, obs: &Observation) -> Result<Request> {
        let io = &self.spec.io;
        if obs.images.len() != io.n_images {
            return Err(Error::InvalidArgument(format!(
                "{} images, this model takes {}",
                obs.images.len(),
                io.n_images
            )));
        }
        let state = self.normalised_state(obs)?;
        let (ids, warning) = self.instruction(obs, &state)?;
        let (n_tokens, rows) = (ids.len(), text_rows(ids.len(), io.tokenizer_max_length));
        let mut tokens: Vec<f32> = ids.into_iter().map(|t| t as f32).collect();
        tokens.resize(rows, io.pad_token_id as f32);
        let noise = noise_or_draw(obs, io.chunk_size, io.max_action_dim, self.spec.noise)?;
        let frames = obs
            .images
            .iter()
            .map(|img| self.spec.camera.frame(img))
            .collect::<Result<Vec<_>>>()?;
        let cfg = self.cfg.with_text_rows(rows);
        let mut inputs = cfg.request_inputs(tokens, n_tokens, &state)?;
        if let Some(mask) = &obs.token_mask {
            hide_tokens(&mut inputs.prefix, mask, n_tokens, cfg.whole_sequence())?;
        }
        Ok(Request {
            frames,
            instruction: InstructionRows {
                tokens: n_tokens,
                rows,
            },
            inputs,
            noise,
            warnings: warning.into_iter().collect(),
        })
    }

    /// Makes the graphs for camera frames `frames` and `rows` instruction rows the current
    /// ones: kept from before, or compiled now (once per frame size and instruction bucket
    /// while kept: a deployment's cameras keep their sizes, a task its instruction).
    fn select_graphs(&mut self, frames: Vec<FrameKey>, rows: usize) -> Result<()> {
        let t0 = Instant::now();
        let (spec, stepwise) = (&self.spec, self.stepwise);
        let cfg = self.cfg.with_text_rows(rows);
        let stage_flops = std::cell::Cell::new((Vec::new(), 0));
        let build = set_builder(&cfg, spec, &frames, stepwise, &stage_flops);
        let compiled = self.graphs.select((frames.clone(), rows), build)?;
        // what the info reports follows the graphs a predict runs
        let key = (frames.clone(), rows);
        if compiled {
            let kept: Vec<GraphKey> = self.graphs.keys().cloned().collect();
            self.set_flops.retain(|(k, _)| kept.contains(k));
            self.set_flops.push((key.clone(), stage_flops.take()));
        }
        if let Some((_, (flops, handed))) = self.set_flops.iter().find(|(k, _)| *k == key) {
            self.info.stage_flops = flops.clone();
            self.info.kv_bytes = handed * self.act_bytes;
        }
        self.graphs.report_memory(&mut self.info);
        if !compiled {
            return Ok(());
        }
        let sizes: Vec<String> = frames
            .iter()
            .map(|k| {
                format!(
                    "{}x{} {}",
                    k.width,
                    k.height,
                    if k.bytes { "u8" } else { "f32" }
                )
            })
            .collect();
        tracing::info!(
            "compiled the predict for camera frames {} and {rows} instruction rows in {:.0} ms ({} kept at most)",
            sizes.join(", "),
            ms_since(t0),
            self.graphs.keep()
        );
        Ok(())
    }

    /// A request's inputs to [`predict_graph`], by name.
    fn named(&self, req: Request) -> Result<Named> {
        let io = &self.spec.io;
        let mut named: Named = Vec::new();
        for (i, (_, f)) in req.frames.into_iter().enumerate() {
            named.push((format!("{}.frame.{i}", STAGES[VISION]), f));
        }
        for (n, t) in req.inputs.prefix {
            named.push((format!("{}.{n}", STAGES[PREFILL]), t));
        }
        for (n, t) in req.inputs.suffix {
            named.push((format!("{}.{n}", STAGES[DENOISE]), t));
        }
        let noise = Tensor::from_f32(vec![io.chunk_size, io.max_action_dim], req.noise)?;
        named.push(("noise".into(), noise));
        Ok(named)
    }

    /// The three stage graphs with the host between them: image tokens and keys and values
    /// come back to the host, and each step uploads them again.
    fn run_stepwise(&mut self, req: Request) -> Result<(Vec<f32>, Option<Vec<f32>>)> {
        let (io, schedule) = (self.spec.io.clone(), self.spec.schedule);
        let t0 = Instant::now();
        let names: Vec<String> = (0..io.n_images).map(|i| format!("frame.{i}")).collect();
        let frames = req.frames.iter().map(|(_, f)| f);
        let inputs: Vec<(&str, &Tensor)> = names.iter().map(String::as_str).zip(frames).collect();
        let img = self.graphs.exec(VISION).run(&inputs)?.remove(0);
        let vision_ms = ms_since(t0);

        let t1 = Instant::now();
        let (cfg, graphs, prefix) = (&self.cfg, &mut self.graphs, &req.inputs.prefix);
        let mut prefill: Vec<(&str, &Tensor)> = vec![(names::IMG_TOKENS, &img)];
        prefill.extend(prefix.iter().map(|(n, t)| (n.as_str(), t)));
        let kv = graphs.exec(PREFILL).run(&prefill)?;
        let prefill_ms = ms_since(t1);

        let t2 = Instant::now();
        let names: Vec<String> = (0..kv.len() / 2)
            .flat_map(|i| [names::key(i), names::value(i)])
            .collect();
        let fixed = prefix.iter().filter(|(n, _)| n == VALID);
        let fixed: Vec<(&str, &Tensor)> = fixed
            .chain(&req.inputs.suffix)
            .map(|(n, t)| (n.as_str(), t))
            .chain(names.iter().map(String::as_str).zip(kv.iter()))
            .collect();
        let (c, ad) = (io.chunk_size, io.max_action_dim);
        let x = euler_integrate(req.noise, schedule, io.num_steps, |x, t| {
            let time = cfg.time_input(t)?;
            let x_t = Tensor::from_f32(vec![c, ad], x)?;
            let mut inputs: Vec<(&str, &Tensor)> =
                vec![(names::X_T, &x_t), (names::TIME_EMB, &time)];
            inputs.extend(fixed.iter().copied());
            let out = graphs.exec(DENOISE).run(&inputs)?;
            out[0].to_vec_f32()
        })?;
        Ok((x, Some(vec![vision_ms, prefill_ms, ms_since(t2)])))
    }
}

/// The prefill's [`VALID`] with the positions `mask` hides (false) cleared: the whole
/// sequence's `n` ids, in a model that takes whole sequences.
fn hide_tokens(prefix: &mut Inputs, mask: &[bool], n: usize, whole: bool) -> Result<()> {
    if !whole {
        return Err(Error::InvalidArgument(
            "a token mask with hidden ids: only for models whose requests bring the whole sequence (vla.cpp's files without a prompt template)".into(),
        ));
    }
    if mask.len() != n {
        return Err(Error::InvalidArgument(format!(
            "token mask: {} values for the {n} ids of the whole sequence (the image slots must be among the ids)",
            mask.len()
        )));
    }
    let valid = prefix
        .iter_mut()
        .find(|(name, _)| name == VALID)
        .map(|(_, t)| t)
        .ok_or_else(|| Error::InvalidArgument("token mask: no valid input".into()))?;
    let valid = valid.as_f32_mut()?;
    for (v, &keep) in valid.iter_mut().zip(mask) {
        if !keep {
            *v = 0.0;
        }
    }
    Ok(())
}

/// What compiles one set of graphs for `cfg` (its instruction rows) and camera frames
/// `frames`: the [`predict_graph`], or the [`stage_graphs`] when `stepwise`; the predict
/// graph's compute by stage goes to `flops`.
fn set_builder<'a, A: FlowArch>(
    cfg: &'a A,
    spec: &'a FlowSpec,
    frames: &'a [FrameKey],
    stepwise: bool,
    flops: &'a std::cell::Cell<SetFacts>,
) -> impl Fn(&GgufFile) -> Result<Vec<Graph>> + 'a {
    move |f| {
        let whole = predict_graph(cfg, spec, Some(f), frames)?;
        let handed = whole.handed_over(STAGES[PREFILL], STAGES[DENOISE]);
        flops.set((whole.flops_by_stage(), handed));
        match stepwise {
            true => stage_graphs(cfg, spec, Some(f), frames),
            false => Ok(vec![whole]),
        }
    }
}

impl<A: FlowArch> Policy for FlowPolicy<A> {
    fn info(&self) -> &PolicyInfo {
        &self.info
    }

    fn predict(&mut self, obs: &Observation) -> Result<ActionChunk> {
        if !self.stepwise {
            return self.predict_batch(std::slice::from_ref(obs)).remove(0);
        }
        let t0 = Instant::now();
        let counters = self.graphs.counters();
        let mut req = self.request(obs)?;
        let frames: Vec<FrameKey> = req.frames.iter().map(|(k, _)| *k).collect();
        self.select_graphs(frames, req.instruction.rows)?;
        let ctx = (std::mem::take(&mut req.warnings), req.instruction);
        let (x, stages) = self.run_stepwise(req)?;
        let mut chunk = self.finish(obs, ctx, vec![x], stages.as_deref())?;
        self.graphs.report_memory(&mut self.info);
        chunk.times.total_ms = ms_since(t0);
        chunk.counters = self.graphs.counters().since(&counters);
        Ok(chunk)
    }

    /// Stepwise runs (the host between the stages) take the requests in turn.
    fn predict_batch(&mut self, batch: &[Observation]) -> Vec<Result<ActionChunk>> {
        if self.stepwise {
            return batch.iter().map(|obs| self.predict(obs)).collect();
        }
        let out = batch::predict_batch(self, batch);
        // the cpu backend measures its activations' peak as it runs
        self.graphs.report_memory(&mut self.info);
        out
    }

    fn profile(&self) -> Option<Vec<crate::backend::KernelTime>> {
        self.graphs.profile()
    }
}

impl<A: FlowArch> OneRun for FlowPolicy<A> {
    type Key = GraphKey;
    /// The reply's warnings and the instruction's rows.
    type Ctx = (Vec<String>, InstructionRows);

    fn stage(&self, obs: &Observation) -> Result<Staged<GraphKey, Self::Ctx>> {
        let mut req = self.request(obs)?;
        let key = (
            req.frames.iter().map(|(k, _)| *k).collect(),
            req.instruction.rows,
        );
        let ctx = (std::mem::take(&mut req.warnings), req.instruction);
        Ok(Staged {
            key,
            inputs: self.named(req)?,
            ctx,
        })
    }

    fn run(&mut self, key: &GraphKey, requests: &[Named]) -> Result<Outputs> {
        let (frames, rows) = key;
        if requests.len() == 1 {
            self.select_graphs(frames.clone(), *rows)?;
        }
        let cfg = self.cfg.with_text_rows(*rows);
        let flops = std::cell::Cell::new((Vec::new(), 0));
        let build = set_builder(&cfg, &self.spec, frames, false, &flops);
        self.graphs.run(key, requests, build)
    }

    /// x at the schedule's end to the chunk: the returned rows, unnormalised (and made
    /// absolute where the file has relative groups).
    fn finish(
        &mut self,
        obs: &Observation,
        (warnings, instruction): Self::Ctx,
        outputs: Vec<Vec<f32>>,
        stages: Option<&[f32]>,
    ) -> Result<ActionChunk> {
        let io = &self.spec.io;
        let mut x = outputs.into_iter().next().unwrap_or_default();
        x.truncate(self.spec.output_rows * io.max_action_dim);
        let (clip, snap) = (self.spec.clip.actions, self.spec.gripper);
        let mut actions = unnormalize_actions(
            &self.action_norm,
            x,
            clip,
            snap,
            (io.max_action_dim, io.action_dim),
        );
        if let Some(r) = &self.relative {
            r.apply(&mut actions, &obs.state);
        }
        let stage = |k: usize| stages.and_then(|s| s.get(k).copied());
        Ok(ActionChunk {
            actions,
            chunk_size: self.spec.output_rows,
            action_dim: io.action_dim,
            times: StageTimes {
                vision_ms: stage(0),
                prefill_ms: stage(1),
                denoise_ms: stage(2),
                total_ms: 0.0,
            },
            counters: Default::default(),
            batch: 1,
            warnings,
            instruction,
        })
    }

    fn counters(&self) -> RunCounters {
        self.graphs.counters()
    }
}
