//! What every arch's policy does the same way: the action I/O part of its config, owning
//! the GGUF and the graphs compiled from it, turning a request's instruction and noise into
//! model inputs, and making random-weight models for tests and demos.

use crate::backend::{Backend, Executable, RunCounters};
use crate::config::limits::{MAX_CHUNK, MAX_IMAGES, MAX_ROBOT_DIM, MAX_SEQUENCE, MAX_STEPS};
use crate::config::{bounded, first_failing, Keys, Section};
use crate::gguf::{GgmlType, GgufFile, GgufWriter};
use crate::graph::{matmul_weights, Graph};
use crate::policy::{Observation, PolicyInfo, RuntimeOptions};
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};
use std::sync::Arc;
use std::time::Instant;

/// What a policy takes and returns. Keys: `n_images`, `tokenizer_max_length`,
/// `pad_token_id`, `chunk_size`, `num_steps`, `max_state_dim`, `max_action_dim`,
/// `real_state_dim`, `real_action_dim`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ActionIo {
    /// Camera views per request.
    pub n_images: usize,
    pub tokenizer_max_length: usize,
    pub pad_token_id: u32,
    pub chunk_size: usize,
    pub num_steps: usize,
    pub max_state_dim: usize,
    pub max_action_dim: usize,
    pub state_dim: usize,
    pub action_dim: usize,
}

impl Section for ActionIo {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        k.usize("n_images", &mut self.n_images)?;
        k.usize("tokenizer_max_length", &mut self.tokenizer_max_length)?;
        k.u32("pad_token_id", &mut self.pad_token_id)?;
        k.usize("chunk_size", &mut self.chunk_size)?;
        k.usize("num_steps", &mut self.num_steps)?;
        k.usize("max_state_dim", &mut self.max_state_dim)?;
        k.usize("max_action_dim", &mut self.max_action_dim)?;
        k.usize("real_state_dim", &mut self.state_dim)?;
        k.usize("real_action_dim", &mut self.action_dim)
    }

    fn check(&self) -> std::result::Result<(), String> {
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
        first_failing(&[(
            self.state_dim <= self.max_state_dim && self.action_dim <= self.max_action_dim,
            "real dims exceed max dims",
        )])
    }
}

impl ActionIo {
    /// The check that needs the vocabulary's size.
    pub fn check_vocab(&self, vocab_size: usize) -> std::result::Result<(), String> {
        first_failing(&[(
            (self.pad_token_id as usize) < vocab_size,
            "pad_token_id must be below vocab_size",
        )])
    }
}

/// A GGUF and the graphs compiled against it, as sets keyed by what they were compiled for
/// (FlowPolicy: the camera frames and the instruction's row bucket). The sets are kept, the
/// most recently used last, up to [`Self::keep`]; the executables share the file (cpu reads
/// its weights there at each run).
pub struct LoadedGraphs<K: PartialEq = ()> {
    sets: Vec<(K, Vec<Box<dyn Executable>>)>,
    /// A set's graph for several requests at once, by key and batch size
    /// ([`super::batch`]), the most recently used last, [`Self::keep`] at most.
    pub(super) batched: Vec<((K, usize), Box<dyn Executable>)>,
    /// Whether batched graphs stack the requests' rows ([`RuntimeOptions::stack_batch`]).
    pub(super) stack: bool,
    /// How many sets are kept: several where the backend borrows the weights or shares what
    /// it makes of them between executables (cpu), one where each executable holds its own
    /// copy of them (wgpu, ggml).
    pub(super) keep: usize,
    /// What compiled them, kept for [`Self::select`].
    pub(super) compiler: Box<dyn Backend>,
    /// The run counters of executables dropped.
    pub(super) retired: RunCounters,
    backend: String,
    pub(super) file: Arc<GgufFile>,
}

/// Compiled sets kept where the backend borrows every weight from the file or shares its
/// packed forms of them between executables (cpu).
const KEEP_BORROWING: usize = 4;

impl<K: PartialEq> LoadedGraphs<K> {
    /// Opens the backend `opts` names and compiles the graphs `build` makes from `file`
    /// (which checks every weight's shape) as the set `key`. With `opts.weight_dtype`, the
    /// float weights that some matmul of those graphs multiplies by are re-encoded first.
    pub fn compile(
        file: GgufFile,
        opts: &RuntimeOptions,
        key: K,
        build: impl Fn(&GgufFile) -> Result<Vec<Graph>>,
    ) -> Result<Self> {
        let file = match opts.weight_dtype {
            Some(ty) => {
                super::check_weight_dtype(ty)?;
                let targets = matmul_weights(&build(&file)?);
                super::with_weight_dtype(file, ty, |name| targets.contains(name))?
            }
            None => file,
        };
        let compiler = super::open_backend(opts)?;
        let mut graphs = LoadedGraphs {
            sets: Vec::new(),
            batched: Vec::new(),
            stack: opts.stack_batch.unwrap_or(opts.backend != "cpu"),
            keep: match compiler.borrows_weights() {
                true => KEEP_BORROWING,
                false => 1,
            },
            backend: compiler.description(),
            compiler,
            retired: RunCounters::default(),
            file: Arc::new(file),
        };
        graphs.select(key, build)?;
        Ok(graphs)
    }

    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// How many compiled sets are kept at most.
    pub fn keep(&self) -> usize {
        self.keep
    }

    /// Makes the set `key` the current one: a kept set, or else the graphs `build` makes
    /// from the same file, compiled on the same backend (the least recently used set is
    /// dropped first when [`Self::keep`] are kept). Returns whether it compiled.
    pub fn select(
        &mut self,
        key: K,
        build: impl Fn(&GgufFile) -> Result<Vec<Graph>>,
    ) -> Result<bool> {
        if let Some(i) = self.sets.iter().position(|(k, _)| *k == key) {
            let set = self.sets.remove(i);
            self.sets.push(set);
            return Ok(false);
        }
        while self.sets.len() >= self.keep {
            let (_, execs) = self.sets.remove(0);
            for e in execs {
                self.retired.add(&e.stats().runs);
            }
        }
        let graphs = build(&self.file)?;
        let mut execs = Vec::with_capacity(graphs.len());
        for g in &graphs {
            execs.push(self.compiler.compile_shared(g, self.file.clone())?);
        }
        self.sets.push((key, execs));
        Ok(true)
    }

    /// The keys of the kept sets, the most recently used last.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.sets.iter().map(|(k, _)| k)
    }

    /// The current set's `i`-th graph.
    pub fn exec(&mut self, i: usize) -> &mut dyn Executable {
        let (_, execs) = self.sets.last_mut().expect("a set is compiled");
        execs[i].as_mut()
    }

    fn execs(&self) -> impl Iterator<Item = &Box<dyn Executable>> {
        let batched = self.batched.iter().map(|(_, e)| e);
        self.sets.iter().flat_map(|(_, e)| e).chain(batched)
    }

    /// The backend's run counters, summed over the graphs (those dropped too).
    pub fn counters(&self) -> RunCounters {
        let mut sum = self.retired;
        for e in self.execs() {
            sum.add(&e.stats().runs);
        }
        sum
    }

    /// The kernels of the current set's last runs, where the backend profiles (see
    /// [`Executable::profile`]).
    pub fn profile(&self) -> Option<Vec<crate::backend::KernelTime>> {
        let (_, execs) = self.sets.last()?;
        let parts: Vec<_> = execs.iter().filter_map(|e| e.profile()).collect();
        (!parts.is_empty()).then(|| parts.concat())
    }

    /// Bytes the backend holds: weights plus peak activations of the kept sets (weights
    /// counted once where several sets are kept: they borrow the same file's).
    pub fn memory_bytes(&self) -> u64 {
        let batched = self.batched.iter().map(|(_, e)| e.stats().weight_bytes);
        let set_weights = self
            .sets
            .iter()
            .map(|(_, execs)| execs.iter().map(|e| e.stats().weight_bytes).sum::<u64>())
            .chain(batched);
        let weights = match self.keep > 1 {
            true => set_weights.max().unwrap_or(0),
            false => set_weights.sum(),
        };
        weights + self.activation_bytes()
    }

    /// Of [`Self::activation_bytes`], the kept sets' scratch buffers.
    pub fn scratch_bytes(&self) -> u64 {
        self.execs().map(|e| e.stats().scratch_bytes).sum::<u64>()
    }

    /// `info`'s memory figures after a run: weights plus peak activations, the activations,
    /// the backend's scratch.
    pub fn report_memory(&self, info: &mut PolicyInfo) {
        info.memory_bytes = self.memory_bytes();
        info.activation_bytes = self.activation_bytes();
        info.scratch_bytes = self.scratch_bytes();
    }

    /// Of [`Self::memory_bytes`], the kept sets' peak activations.
    pub fn activation_bytes(&self) -> u64 {
        self.execs()
            .map(|e| e.stats().peak_activation_bytes)
            .sum::<u64>()
    }

    /// The [`PolicyInfo`] fields that come from the file and the backend; the caller fills
    /// in the arch's sizes.
    pub fn info(&self, arch: &str) -> PolicyInfo {
        let file = self.file();
        PolicyInfo {
            arch: arch.into(),
            n_images: 0,
            image_height: 0,
            image_width: 0,
            max_state_dim: 0,
            state_dim: 0,
            chunk_size: 0,
            action_rows: 0,
            max_action_dim: 0,
            action_dim: 0,
            num_steps: 0,
            param_count: param_count(file),
            weight_dtypes: super::dtype_summary(file),
            backend: self.backend.clone(),
            memory_bytes: self.memory_bytes(),
            activation_bytes: self.activation_bytes(),
            scratch_bytes: self.scratch_bytes(),
            kv_bytes: 0,
            stage_flops: Vec::new(),
            embodiment: None,
            camera_names: camera_names(file),
            n_action_steps: None,
            reads_instruction: true,
            placeholders: Vec::new(),
            wrap_ids: None,
            noise_shape: None,
            image_sizes: Vec::new(),
            window: 1,
        }
    }
}

/// The parameters `file` holds: an integer site's packed codes (`<site>.weight` I8 beside a
/// `<site>.fq` of weight bits `b`) count `8 / b` a byte.
fn param_count(file: &GgufFile) -> u64 {
    let per_byte = |name: &str| -> u64 {
        let fq = name.strip_suffix(".weight").map(|s| format!("{s}.fq"));
        let bits = fq
            .and_then(|f| file.dequantize(&f).ok())
            .and_then(|v| v.first().copied());
        match bits {
            Some(b) if b == 2.0 || b == 4.0 => (8.0 / b) as u64,
            _ => 1,
        }
    };
    (file.tensors().iter())
        .map(|t| match t.ty == GgmlType::I8 {
            true => t.n_elements() * per_byte(&t.name),
            false => t.n_elements(),
        })
        .sum()
}

/// The file's camera names (`vla.camera_names`, written by the converters), or none.
fn camera_names(file: &GgufFile) -> Vec<String> {
    let items = file.get(CAMERA_NAMES_KEY).and_then(|v| v.as_array());
    items
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

/// GGUF key of the reference's camera feature names, in the model's camera order (written
/// by `vla-convert`; vla.cpp's files and random-weight models have none).
pub const CAMERA_NAMES_KEY: &str = "vla.camera_names";

/// `--steps` over the model's own count.
pub fn steps_override(own: usize, opts: &RuntimeOptions) -> Result<usize> {
    match opts.num_steps {
        None => Ok(own),
        Some(s) if (1..=MAX_STEPS).contains(&s) => Ok(s),
        Some(s) => Err(Error::InvalidArgument(format!(
            "steps {s}: expected 1..={MAX_STEPS}"
        ))),
    }
}

pub fn ms_since(t0: Instant) -> f32 {
    t0.elapsed().as_secs_f32() * 1e3
}

/// The reply's warning where a request brings noise to `who`, which draws none (vla.cpp's
/// clients send noise to every arch).
pub fn unread_noise(obs: &Observation, who: &str) -> Option<String> {
    let noise = obs.noise.as_ref().is_some_and(|n| !n.is_empty());
    noise.then(|| format!("{who} predicts without noise: the request's noise was not used"))
}

/// Refuses the load options a one-pass arch has no use for: `--steps`, stepwise runs and
/// `--statistics` (its file carries its own).
pub fn one_pass_options(arch: &str, opts: &RuntimeOptions) -> Result<()> {
    if opts.num_steps.is_some() {
        return Err(Error::InvalidArgument(format!(
            "{arch} predicts in one pass: it has no denoising steps to set"
        )));
    }
    if opts.stepwise {
        return Err(Error::InvalidArgument(format!(
            "{arch} predicts in one pass: stepwise runs are for flow policies"
        )));
    }
    match &opts.statistics {
        Some(p) => Err(Error::InvalidArgument(format!(
            "--statistics {}: the {arch} file carries its own statistics",
            p.display()
        ))),
        None => Ok(()),
    }
}

/// The request's instruction as token ids: `tokens` as given, or else its prompt through
/// `tokenize` (`missing` when the request has neither), each id checked against the
/// vocabulary. Bounds on their number are the caller's ([`prompt_bound`]).
pub fn instruction_ids(
    obs: &Observation,
    vocab_size: usize,
    missing: &str,
    tokenize: impl FnOnce(&str) -> Result<Vec<u32>>,
) -> Result<Vec<u32>> {
    let ids: Vec<i64> = match (&obs.tokens, &obs.prompt) {
        (Some(t), None) => t.iter().map(|&t| i64::from(t)).collect(),
        (None, Some(p)) => tokenize(p)?.into_iter().map(i64::from).collect(),
        (None, None) => tokenize(missing)
            .map_err(|e| Error::InvalidArgument(format!("no instruction: send token ids ({e})")))?
            .into_iter()
            .map(i64::from)
            .collect(),
        (Some(_), Some(_)) => {
            return Err(Error::InvalidArgument(
                "give a prompt or tokens, not both".into(),
            ))
        }
    };
    if let Some(bad) = ids.iter().find(|&&t| t < 0 || t as usize >= vocab_size) {
        return Err(Error::InvalidArgument(format!(
            "token id {bad} outside the vocabulary (0..{vocab_size})"
        )));
    }
    Ok(ids.into_iter().map(|t| t as u32).collect())
}

/// The refusal of an instruction of `n` tokens past the model's bound `max`
/// (`tokenizer_max_length`).
pub fn prompt_bound(n: usize, max: usize) -> Error {
    Error::InvalidArgument(format!(
        "instruction: {n} tokens, more than this model's bound of {max} (tokenizer_max_length in the GGUF); shorten it"
    ))
}

/// The statistics tensors `{what}_{stat}` (each `[dim]`) of the state, then of the actions,
/// named by the arch's normalisation modes (`["mean", "std"]`, `["min", "max"]`,
/// `["q01", "q99"]`).
pub fn statistics(io: &ActionIo, state: [&str; 2], action: [&str; 2]) -> Vec<(String, Vec<usize>)> {
    let stat = |what: &str, s: &str, d: usize| (format!("{what}_{s}"), vec![d]);
    let state = state.map(|s| stat("state", s, io.state_dim));
    let action = action.map(|s| stat("action", s, io.action_dim));
    state.into_iter().chain(action).collect()
}

/// Rows the prefill gives the instruction: `n` tokens rounded up to a whole bucket of
/// [`TEXT_BUCKET`], at most `max` (the bound, itself a valid size), at least one row. Graphs
/// are compiled per bucket, so a prompt's cost follows its length; the padding is masked.
pub fn text_rows(n: usize, max: usize) -> usize {
    n.max(1).next_multiple_of(TEXT_BUCKET).min(max.max(1))
}

/// The step between the instruction lengths graphs are compiled for.
pub const TEXT_BUCKET: usize = 16;

/// The tokenizer in the GGUF's `tokenizer.ggml.*` metadata, if any, checked to fit the
/// model's vocabulary.
pub fn gguf_tokenizer(file: &GgufFile, vocab_size: usize) -> Result<Option<Tokenizer>> {
    let tokenizer = Tokenizer::in_gguf(file)
        .then(|| Tokenizer::from_gguf(file))
        .transpose()?;
    if let Some(t) = &tokenizer {
        check_tokenizer_vocab(t, vocab_size)?;
    }
    Ok(tokenizer)
}

/// Checks that every id of `tokenizer` is inside the model's vocabulary.
pub fn check_tokenizer_vocab(tokenizer: &Tokenizer, vocab_size: usize) -> Result<()> {
    if tokenizer.len() > vocab_size {
        return Err(Error::InvalidArgument(format!(
            "the tokenizer has {} tokens, more than the model's vocab_size {vocab_size}",
            tokenizer.len()
        )));
    }
    Ok(())
}

/// The tokenizer, or the error a text prompt gets from a model without one.
pub fn require_tokenizer(tokenizer: Option<&Tokenizer>) -> Result<&Tokenizer> {
    tokenizer.ok_or_else(|| {
        Error::InvalidArgument(
            "this model's GGUF has no tokenizer (tokenizer.ggml.* metadata): send token ids, not a prompt".into(),
        )
    })
}

/// `noise` from the request (checked to be `chunk x dim`), or a fresh draw of `draw`'s
/// distribution.
pub fn noise_or_draw(
    obs: &Observation,
    chunk: usize,
    dim: usize,
    draw: NoiseDraw,
) -> Result<Vec<f32>> {
    match &obs.noise {
        Some(n) if n.len() == chunk * dim => Ok(n.clone()),
        Some(n) => Err(Error::InvalidArgument(format!(
            "noise has {} values, expected {chunk} x {dim}",
            n.len()
        ))),
        None => Ok(match draw {
            NoiseDraw::Gaussian => gaussian_noise(chunk * dim, noise_seed()),
            NoiseDraw::Uniform => uniform_noise(chunk * dim, noise_seed()),
        }),
    }
}

/// The distribution of the initial noise a policy draws when a request brings none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NoiseDraw {
    /// Standard normal (every flow policy but Evo-1).
    #[default]
    Gaussian,
    /// Uniform in [-1, 1) (Evo-1's `torch.rand(...) * 2 - 1`).
    Uniform,
}

fn noise_seed() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Uniform draws in [-1, 1) (SplitMix64), deterministic per seed.
pub fn uniform_noise(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = SplitMix64(seed);
    (0..n)
        .map(|_| (rng.next_f64() * 2.0 - 1.0) as f32)
        .collect()
}

/// Standard normal draws (Box-Muller over SplitMix64), deterministic per seed.
pub fn gaussian_noise(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = SplitMix64(seed);
    (0..n)
        .map(|_| {
            let u1 = (rng.next_f64()).max(f64::MIN_POSITIVE);
            let u2 = rng.next_f64();
            ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
        })
        .collect()
}

/// Adds random tensors of `shapes` to `w` (norm gains and `*_std` near 1, means and biases
/// small, `*_q01` / `*_min` near -1 and `*_q99` / `*_max` near 1, matrices scaled by fan-in) drawn from `seed`; 2-D `.weight` tensors for
/// which `is_float_matrix` holds are stored as `ty`, the rest as F32.
pub fn add_random_tensors(
    w: &mut GgufWriter,
    shapes: &[(String, Vec<usize>)],
    seed: u64,
    ty: GgmlType,
    is_float_matrix: impl Fn(&str) -> bool,
) -> Result<()> {
    let mut rng = SplitMix64(seed);
    for (name, shape) in shapes {
        let n: usize = shape.iter().product();
        let fan_in = *shape.last().unwrap_or(&1) as f64;
        let gain_like = (name.contains("norm") || name.contains("ln") || name.ends_with("_std"))
            && !name.contains("ada_");
        let vals: Vec<f32> = (0..n)
            .map(|_| {
                let u = rng.next_f64() * 2.0 - 1.0;
                if gain_like {
                    (1.0 + 0.1 * u) as f32
                } else if name.ends_with("_mean") || name.ends_with(".bias") {
                    (0.1 * u) as f32
                } else if name.ends_with("_q01") || name.ends_with("_min") {
                    (-1.0 + 0.1 * u) as f32
                } else if name.ends_with("_q99") || name.ends_with("_max") {
                    (1.0 + 0.1 * u) as f32
                } else {
                    (u * (3.0 / fan_in).sqrt()) as f32
                }
            })
            .collect();
        let dims: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
        let t = if shape.len() == 2 && name.ends_with(".weight") && is_float_matrix(name) {
            ty
        } else {
            GgmlType::F32
        };
        w.add_f32(name.clone(), t, &dims, &vals)?;
    }
    Ok(())
}

/// SplitMix64: a tiny, well-mixed, seedable generator (no dependency needed for test data).
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The file with its convolution kernels read as matrices `[O, C * KH * KW]` (what the
/// convolutions multiply by, [`crate::gguf::matrix_dims`]), header only; kernels already 2-D
/// (`vla-quantize` stores packed ones so) stay.
pub fn kernels_as_matrices(mut file: GgufFile) -> Result<GgufFile> {
    let convs: Vec<(String, Vec<u64>)> = file
        .tensors()
        .iter()
        .filter_map(|t| Some((t.name.clone(), crate::gguf::matrix_dims(t)?)))
        .collect();
    for (name, dims) in convs {
        file.reshape_tensor(&name, &dims)?;
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::GraphBuilder;
    use crate::Tensor;

    /// One graph passing an input of `n` values through (a set's key is `n`).
    fn pass_through(n: usize) -> impl Fn(&GgufFile) -> Result<Vec<Graph>> {
        move |f| {
            let mut g = GraphBuilder::new(f);
            let x = g.input("x", &[n]);
            let y = g.scale(x, 2.0);
            Ok(vec![g.build(&[y])?])
        }
    }

    #[test]
    fn kept_sets_are_reused_and_the_least_recent_dropped() {
        let file = GgufFile::from_bytes(super::super::demo_gguf().unwrap()).unwrap();
        let opts = RuntimeOptions::default();
        let mut lg = LoadedGraphs::compile(file, &opts, 1, pass_through(1)).unwrap();
        assert_eq!(lg.keep(), KEEP_BORROWING, "cpu, f32 weights");
        for k in 2..=KEEP_BORROWING {
            assert!(lg.select(k, pass_through(k)).unwrap(), "{k}: compiled");
        }
        assert!(!lg.select(1, pass_through(1)).unwrap(), "1 is kept");
        assert!(lg.select(9, pass_through(9)).unwrap());
        let keys: Vec<usize> = lg.keys().copied().collect();
        assert_eq!(keys, [3, 4, 1, 9], "2 was the least recently used");
        // a failed compile leaves no set of its key; the next select compiles it
        let fail = |_: &GgufFile| Err(Error::InvalidArgument("no".into()));
        assert!(lg.select(6, fail).is_err());
        assert!(!lg.keys().any(|&k| k == 6));
        assert!(lg.select(6, pass_through(6)).unwrap());
        let x = Tensor::from_f32(vec![6], vec![1.0; 6]).unwrap();
        let y = lg.exec(0).run(&[("x", &x)]).unwrap();
        assert_eq!(
            y[0].to_vec_f32().unwrap(),
            vec![2.0; 6],
            "the current set is 6's"
        );
    }
}
