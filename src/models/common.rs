//! What every arch's policy does the same way: owning the GGUF and the graphs compiled from
//! it, checking tensor shapes, turning a request's instruction, state, noise and images into
//! model inputs, and making random-weight models for tests and demos.

use super::limits::MAX_STEPS;
use crate::backend::Executable;
use crate::gguf::{GgmlType, GgufFile, GgufWriter};
use crate::graph::Graph;
use crate::modules::image::{resize_with_pad, to_chw_unit, PadAlign};
use crate::policy::{Image, Observation, PolicyInfo, RuntimeOptions};
use crate::tokenizer::Tokenizer;
use crate::Tensor;
use crate::{Error, Result};
use std::time::Instant;

/// A GGUF and the graphs compiled against it. The executables borrow the file, so the file
/// is leaked into a raw pointer and reclaimed in `Drop` after them.
pub struct LoadedGraphs {
    execs: Vec<Box<dyn Executable>>,
    backend: String,
    file: *mut GgufFile,
}

// SAFETY: `file` is owned by this struct alone (a leaked Box) and only read; the
// executables are Send.
unsafe impl Send for LoadedGraphs {}

impl Drop for LoadedGraphs {
    fn drop(&mut self) {
        self.execs.clear();
        // SAFETY: created by Box::into_raw in `compile`; nothing borrows it once `execs` is gone.
        unsafe { drop(Box::from_raw(self.file)) };
    }
}

impl LoadedGraphs {
    /// Opens the backend `opts` names and compiles the graphs `build` makes from `file`.
    pub fn compile(
        file: GgufFile,
        opts: &RuntimeOptions,
        build: impl FnOnce(&GgufFile) -> Result<Vec<Graph>>,
    ) -> Result<Self> {
        let backend = super::open_backend(opts)?;
        let file: &'static GgufFile = Box::leak(Box::new(file));
        let ptr = file as *const GgufFile as *mut GgufFile;
        let execs = build(file).and_then(|graphs| {
            graphs
                .iter()
                .map(|g| backend.compile(g, file))
                .collect::<Result<Vec<_>>>()
        });
        match execs {
            Ok(execs) => Ok(LoadedGraphs {
                execs,
                backend: backend.description(),
                file: ptr,
            }),
            Err(e) => {
                // SAFETY: as in Drop; nothing borrows `file` after a failed compile.
                unsafe { drop(Box::from_raw(ptr)) };
                Err(e)
            }
        }
    }

    pub fn file(&self) -> &GgufFile {
        // SAFETY: valid until Drop.
        unsafe { &*self.file }
    }

    /// The `i`-th graph passed to [`Self::compile`].
    pub fn exec(&mut self, i: usize) -> &mut dyn Executable {
        self.execs[i].as_mut()
    }

    /// Bytes the backend holds: weights plus peak activations, summed over the graphs.
    pub fn memory_bytes(&self) -> u64 {
        self.execs
            .iter()
            .map(|e| e.stats())
            .map(|s| s.weight_bytes + s.peak_activation_bytes)
            .sum()
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
            max_action_dim: 0,
            action_dim: 0,
            num_steps: 0,
            param_count: file.tensors().iter().map(|t| t.n_elements()).sum(),
            weight_dtypes: super::dtype_summary(file),
            backend: self.backend.clone(),
            memory_bytes: self.memory_bytes(),
        }
    }
}

/// Fails naming the first tensor whose shape differs from `shapes` (row-major).
pub fn check_tensors(file: &GgufFile, shapes: &[(String, Vec<usize>)]) -> Result<()> {
    for (name, shape) in shapes {
        let info = file.tensor_info(name)?;
        if info.shape() != shape.as_slice() {
            return Err(Error::InvalidArgument(format!(
                "tensor {name:?} has shape {:?}, the config implies {shape:?}",
                info.shape()
            )));
        }
    }
    Ok(())
}

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

/// The request's instruction ids (given, or `tokenize(prompt)`), checked against the
/// vocabulary, right-padded with `pad` to `max`; returns them as f32 and how many are real.
pub fn instruction_ids(
    obs: &Observation,
    max: usize,
    vocab_size: usize,
    pad: u32,
    tokenize: impl FnOnce(&str) -> Result<Vec<u32>>,
) -> Result<(Vec<f32>, usize)> {
    let ids: Vec<i64> = match (&obs.tokens, &obs.prompt) {
        (Some(t), None) => t.iter().map(|&t| i64::from(t)).collect(),
        (None, Some(p)) => tokenize(p)?.into_iter().map(i64::from).collect(),
        (Some(_), Some(_)) => {
            return Err(Error::InvalidArgument(
                "give a prompt or tokens, not both".into(),
            ))
        }
        (None, None) => {
            return Err(Error::InvalidArgument(
                "no instruction: give a prompt or tokens".into(),
            ))
        }
    };
    if ids.is_empty() || ids.len() > max {
        return Err(Error::InvalidArgument(format!(
            "{} instruction tokens: expected 1..={max}",
            ids.len()
        )));
    }
    if let Some(bad) = ids.iter().find(|&&t| t < 0 || t as usize >= vocab_size) {
        return Err(Error::InvalidArgument(format!(
            "token id {bad} outside the vocabulary (0..{vocab_size})"
        )));
    }
    let n = ids.len();
    let mut out: Vec<f32> = ids.iter().map(|&t| t as f32).collect();
    out.resize(max, pad as f32);
    Ok((out, n))
}

/// The request's state, `real` values or zero-padded to `max`, checked.
pub fn state_values(obs: &Observation, real: usize, max: usize) -> Result<&[f32]> {
    let s = &obs.state;
    if s.len() != real && s.len() != max {
        return Err(Error::InvalidArgument(format!(
            "state has {} values, expected {real} (or {max} zero-padded)",
            s.len()
        )));
    }
    if let Some(bad) = s.iter().find(|v| !v.is_finite()) {
        return Err(Error::InvalidArgument(format!(
            "state value {bad} is not finite"
        )));
    }
    Ok(&s[..real])
}

/// The tokenizer in the GGUF's `tokenizer.ggml.*` metadata, if any, checked to fit the
/// model's vocabulary.
pub fn gguf_tokenizer(file: &GgufFile, vocab_size: usize) -> Result<Option<Tokenizer>> {
    let tokenizer = Tokenizer::in_gguf(file)
        .then(|| Tokenizer::from_gguf(file))
        .transpose()?;
    if let Some(t) = tokenizer.as_ref().filter(|t| t.len() > vocab_size) {
        return Err(Error::InvalidArgument(format!(
            "the tokenizer has {} tokens, more than the model's vocab_size {vocab_size}",
            t.len()
        )));
    }
    Ok(tokenizer)
}

/// The tokenizer, or the error a text prompt gets from a model without one.
pub fn require_tokenizer(tokenizer: Option<&Tokenizer>) -> Result<&Tokenizer> {
    tokenizer.ok_or_else(|| {
        Error::InvalidArgument(
            "this model's GGUF has no tokenizer (tokenizer.ggml.* metadata): send token ids, not a prompt".into(),
        )
    })
}

/// Runs the vision graph `exec` on each camera view (after [`camera_pixels`] with `pad`
/// and `align`), checking the view count: the image tokens of all views, concatenated.
pub fn image_tokens(
    exec: &mut dyn crate::backend::Executable,
    obs: &Observation,
    n_images: usize,
    size: usize,
    pad: f32,
    align: PadAlign,
) -> Result<Vec<f32>> {
    if obs.images.len() != n_images {
        return Err(Error::InvalidArgument(format!(
            "{} images, this model takes {n_images}",
            obs.images.len()
        )));
    }
    let mut all = Vec::new();
    for img in &obs.images {
        let t = Tensor::from_f32(vec![3, size, size], camera_pixels(img, size, pad, align)?)?;
        let out = exec.run(&[("image", &t)])?;
        all.extend_from_slice(out[0].as_f32()?);
    }
    Ok(all)
}

/// lerobot's normalisation of states and actions, per dimension.
#[derive(Clone, Debug, PartialEq)]
pub enum Normalizer {
    /// `(x - mean) / (std + 1e-8)`; inverse `x * std + mean`.
    MeanStd { mean: Vec<f32>, std: Vec<f32> },
    /// `2 (x - q01) / (q99 - q01) - 1` (a zero range counts as 1e-8); inverse accordingly.
    Quantiles { q01: Vec<f32>, q99: Vec<f32> },
}

/// lerobot's normaliser epsilon.
const NORM_EPS: f32 = 1e-8;

impl Normalizer {
    /// `<what>_mean` / `<what>_std` or `<what>_q01` / `<what>_q99` from the file, whichever
    /// it has, each of `dim` values.
    pub fn from_gguf(file: &GgufFile, what: &str, dim: usize) -> Result<Self> {
        let has = |n: &str| file.tensor_info(&format!("{what}_{n}")).is_ok();
        let read = |n: &str| -> Result<Vec<f32>> {
            let name = format!("{what}_{n}");
            // The size first: dequantizing a large tensor just to refuse it would cost memory.
            let found = file.tensor_info(&name)?.n_elements();
            if found != dim as u64 {
                return Err(Error::InvalidArgument(format!(
                    "{name}: expected {dim} values, found {found}"
                )));
            }
            let v = file.dequantize(&name)?;
            if v.iter().any(|x| !x.is_finite()) {
                return Err(Error::InvalidArgument(format!(
                    "{name}: expected {dim} finite values"
                )));
            }
            Ok(v)
        };
        if has("mean") {
            Ok(Normalizer::MeanStd {
                mean: read("mean")?,
                std: read("std")?,
            })
        } else if has("q01") {
            Ok(Normalizer::Quantiles {
                q01: read("q01")?,
                q99: read("q99")?,
            })
        } else {
            Err(Error::InvalidArgument(format!(
                "no normalisation statistics: expected {what}_mean/_std or {what}_q01/_q99"
            )))
        }
    }

    pub fn normalize(&self, i: usize, x: f32) -> f32 {
        match self {
            Normalizer::MeanStd { mean, std } => (x - mean[i]) / (std[i] + NORM_EPS),
            Normalizer::Quantiles { q01, q99 } => {
                2.0 * (x - q01[i]) / quantile_range(q01[i], q99[i]) - 1.0
            }
        }
    }

    /// The request's state (see [`state_values`]) normalised and zero-padded to `max`.
    pub fn normalize_state(&self, obs: &Observation, real: usize, max: usize) -> Result<Vec<f32>> {
        let mut out = vec![0f32; max];
        for (i, &x) in state_values(obs, real, max)?.iter().enumerate() {
            out[i] = self.normalize(i, x);
        }
        Ok(out)
    }

    /// The first `dim` columns of each `width`-wide row of `x`, unnormalised.
    pub fn unnormalize_rows(&self, x: &[f32], width: usize, dim: usize) -> Vec<f32> {
        x.chunks(width)
            .flat_map(|row| (0..dim).map(move |j| self.unnormalize(j, row[j])))
            .collect()
    }

    pub fn unnormalize(&self, i: usize, x: f32) -> f32 {
        match self {
            Normalizer::MeanStd { mean, std } => x * std[i] + mean[i],
            Normalizer::Quantiles { q01, q99 } => {
                (x + 1.0) * quantile_range(q01[i], q99[i]) / 2.0 + q01[i]
            }
        }
    }
}

fn quantile_range(q01: f32, q99: f32) -> f32 {
    let d = q99 - q01;
    if d == 0.0 {
        NORM_EPS
    } else {
        d
    }
}

/// `noise` from the request (checked to be `chunk x dim`), or a fresh Gaussian draw.
pub fn noise_or_draw(obs: &Observation, chunk: usize, dim: usize) -> Result<Vec<f32>> {
    match &obs.noise {
        Some(n) if n.len() == chunk * dim => Ok(n.clone()),
        Some(n) => Err(Error::InvalidArgument(format!(
            "noise has {} values, expected {chunk} x {dim}",
            n.len()
        ))),
        None => Ok(gaussian_noise(chunk * dim, noise_seed())),
    }
}

fn noise_seed() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Standard normal draws (Box-Muller over SplitMix64), deterministic per seed.
pub fn gaussian_noise(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = super::schema::SplitMix64(seed);
    (0..n)
        .map(|_| {
            let u1 = (rng.next_f64()).max(f64::MIN_POSITIVE);
            let u2 = rng.next_f64();
            ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
        })
        .collect()
}

/// One camera view as a `[3, size, size]` model input in [-1, 1]: to [0, 1], resized with
/// padding (`pad` in [0, 1] units, as the reference pads before rescaling), then `2x - 1`.
pub fn camera_pixels(img: &Image, size: usize, pad: f32, align: PadAlign) -> Result<Vec<f32>> {
    let unit = to_chw_unit(img)?;
    Ok(
        resize_with_pad(&unit, img.height, img.width, size, size, pad, align)
            .into_iter()
            .map(|v| v * 2.0 - 1.0)
            .collect(),
    )
}

/// Adds random tensors of `shapes` to `w` (norm gains and `*_std` near 1, statistics and
/// biases small, matrices scaled by fan-in) drawn from `seed`; 2-D `.weight` tensors for
/// which `is_float_matrix` holds are stored as `ty`, the rest as F32.
pub fn add_random_tensors(
    w: &mut GgufWriter,
    shapes: &[(String, Vec<usize>)],
    seed: u64,
    ty: GgmlType,
    is_float_matrix: impl Fn(&str) -> bool,
) -> Result<()> {
    let mut rng = super::schema::SplitMix64(seed);
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
                } else if name.ends_with("_q01") {
                    (-1.0 + 0.1 * u) as f32
                } else if name.ends_with("_q99") {
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
