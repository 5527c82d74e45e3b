//! Octo (octo-models/octo, JAX): SmallStem convolutional tokenizers per camera, a T5
//! encoder for the instruction, a block-causal transformer over a window of steps with
//! readout tokens, and a DDPM head (an MLP-ResNet denoising 20 steps, fresh noise each
//! step) or an L1 head. One graph a predict; the mask, the schedule and the proprio bins
//! are the host's ([`rules`]).

pub mod config;
mod file;
pub mod graphs;
pub mod rules;
pub mod stats;

pub use config::{Head, OctoConfig};
pub use file::{kernel_side, random_writer, standardize_stems, tensor_shapes};
pub use rules::{sequence_mask, time_features, token_groups};
pub use stats::{DatasetStats, Stats};

use super::batch::{self, Named, OneRun, Outputs, Staged};
use super::common::LoadedGraphs;
use crate::backend::RunCounters;
use crate::gguf::GgufFile;
use crate::graph::{Graph, GraphBuilder};
use crate::policy::{
    ActionChunk, ImageData, Observation, Policy, PolicyInfo, RuntimeOptions, StageTimes,
};
use crate::preprocess::FrameKey;
use crate::tokenizer::Tokenizer;
use crate::{Error, Result, Tensor};
use rules::Step;

pub const ARCH: &str = "octo";

/// An Octo policy.
pub struct OctoPolicy {
    cfg: OctoConfig,
    info: PolicyInfo,
    stats: Stats,
    tokenizer: Option<Tokenizer>,
    /// The proprio's bin edges (`BinTokenizer`) and whether the bins are uniform.
    bins: Option<(Vec<f32>, bool)>,
    /// What the graphs are built from besides the file and config.
    head: HeadInputs,
    /// The transformer's mask with the first `i` window steps padding, for each `i`, and
    /// T5's position buckets: the host's constants, made once.
    masks: Vec<Tensor<'static>>,
    buckets: Tensor<'static>,
    /// One set of graphs per kind of frames (bytes, or floats in [0, 1]).
    graphs: LoadedGraphs<bool>,
}

/// The host's constants of the head: the DDPM steps, their time features, the embodiment's
/// action mask.
struct HeadInputs {
    steps: Vec<Step>,
    tff: Vec<f32>,
    keep: Option<Vec<f32>>,
}

impl OctoPolicy {
    pub fn new(file: GgufFile, opts: &RuntimeOptions) -> Result<Self> {
        let cfg = OctoConfig::read(&file)?;
        if opts.stepwise {
            return Err(Error::InvalidArgument(
                "octo runs its DDPM steps in one graph: stepwise runs are for flow policies".into(),
            ));
        }
        if opts.num_steps.is_some_and(|n| n != cfg.steps) {
            return Err(Error::InvalidArgument(format!(
                "octo denoises in the {} steps it was trained with (its DDPM schedule)",
                cfg.steps
            )));
        }
        let all = DatasetStats::read(&file)?;
        let (name, stats) = all.select(opts.embodiment.as_deref())?;
        let tokenizer = match super::common::gguf_tokenizer(&file, cfg.t5_vocab)? {
            Some(t) => Some(t),
            None => file::vlacpp_tokenizer(&file, cfg.t5_vocab)?,
        };
        let bins = match cfg.proprio_dim {
            0 => None,
            _ => {
                let thr = file.dequantize("octo.obs.proprio.bin_thresholds")?;
                let uniform = match file.get_str("octo.proprio.bin_type") {
                    Ok(t) => t == "uniform",
                    // vla.cpp's files do not say: evenly spaced edges are uniform bins
                    Err(_) => rules::uniform_bins(&thr),
                };
                Some((thr, uniform))
            }
        };
        if cfg.proprio_dim > 0 && stats.proprio.is_none() {
            return Err(Error::InvalidArgument(format!(
                "dataset {name:?}: no proprio statistics, which this model's proprio tokens need"
            )));
        }
        let file = standardize_stems(file, &cfg)?;
        let file = super::common::kernels_as_matrices(file)?;
        let keep = stats.keep_mask(&cfg)?;
        let steps = rules::ddpm_steps(cfg.steps, cfg.schedule_s);
        let tff = match cfg.head {
            Head::Diffusion => time_features(
                &file.dequantize("octo.head.diffusion.time_fourier.weight")?,
                &steps,
            ),
            Head::L1 => vec![],
        };
        let head = HeadInputs { steps, tff, keep };
        let masks = (0..cfg.window)
            .map(|padded| {
                let m = sequence_mask(&cfg, padded);
                let n = (m.len() as f64).sqrt() as usize;
                Tensor::from_f32(vec![n, n], m)
            })
            .collect::<Result<Vec<_>>>()?;
        let s = cfg.lang_tokens;
        let buckets = rules::t5_buckets(s, cfg.t5_buckets, cfg.t5_max_distance);
        let buckets = Tensor::from_f32(vec![s * s], buckets)?;
        let graphs =
            LoadedGraphs::compile(file, opts, true, |f| Self::build(f, &cfg, &head, true))?;
        let mut info = graphs.info(ARCH);
        let ncams = cfg.cameras().count();
        let first = cfg.cameras().next().map(|(_, s)| s.side).unwrap_or(0);
        info.n_images = ncams * cfg.window;
        info.window = cfg.window;
        info.image_height = first;
        info.image_width = first;
        info.image_sizes = (0..cfg.window)
            .flat_map(|_| cfg.cameras().map(|(_, s)| [s.side, s.side]))
            .collect();
        // every window step's proprio, oldest first
        info.state_dim = cfg.window * cfg.proprio_dim;
        info.max_state_dim = cfg.window * cfg.proprio_dim;
        info.chunk_size = cfg.horizon;
        info.action_rows = cfg.horizon;
        info.max_action_dim = cfg.action_dim;
        info.action_dim = stats.action.mean.len();
        info.num_steps = match cfg.head {
            Head::Diffusion => cfg.steps,
            Head::L1 => 0,
        };
        info.noise_shape =
            (cfg.head == Head::Diffusion).then_some([cfg.steps + 1, cfg.horizon * cfg.action_dim]);
        info.embodiment = Some(name.clone());
        info.camera_names = (0..cfg.window)
            .flat_map(|t| {
                let back = cfg.window - 1 - t;
                cfg.cameras().map(move |(c, _)| match back {
                    0 => c.to_owned(),
                    b => format!("{c}@t-{b}"),
                })
            })
            .collect();
        graphs.report_memory(&mut info);
        Ok(OctoPolicy {
            cfg,
            info,
            stats,
            tokenizer,
            bins,
            head,
            masks,
            buckets,
            graphs,
        })
    }

    fn build(
        file: &GgufFile,
        cfg: &OctoConfig,
        head: &HeadInputs,
        bytes: bool,
    ) -> Result<Vec<Graph>> {
        let frames = Self::frame_keys(cfg, bytes);
        let g = GraphBuilder::new(file);
        let keep = head.keep.as_deref();
        Ok(vec![graphs::predict(
            g,
            cfg,
            &frames,
            &head.tff,
            &head.steps,
            keep,
        )?])
    }

    pub fn config(&self) -> &OctoConfig {
        &self.cfg
    }

    /// Every frame at its camera's size (bytes, or floats), window steps oldest first.
    fn frame_keys(cfg: &OctoConfig, bytes: bool) -> Vec<FrameKey> {
        (0..cfg.window)
            .flat_map(|_| {
                cfg.cameras().map(move |(_, s)| FrameKey {
                    height: s.side,
                    width: s.side,
                    bytes,
                })
            })
            .collect()
    }

    /// The request's frames as the graph's inputs, how many leading steps are padding and
    /// whether the frames are bytes: a request may carry the whole window (oldest first) or
    /// only its last steps' frames, the earlier steps then padding (as Octo's history wrapper
    /// pads an episode's first steps).
    fn frames(&self, obs: &Observation) -> Result<(Vec<Tensor<'static>>, usize, bool)> {
        let cfg = &self.cfg;
        let sides: Vec<(&str, usize)> = cfg.cameras().map(|(c, s)| (c, s.side)).collect();
        let ncams = sides.len();
        let n = obs.images.len();
        if n == 0 || !n.is_multiple_of(ncams) || n / ncams > cfg.window {
            return Err(Error::InvalidArgument(format!(
                "octo takes {} images per step ({}), for the last 1..={} steps of its window: got {n}",
                ncams,
                sides.iter().map(|s| s.0).collect::<Vec<_>>().join(", "),
                cfg.window
            )));
        }
        let padded = cfg.window - n / ncams;
        let bytes = matches!(obs.images[0].data, ImageData::RgbU8(_));
        let mut out = Vec::with_capacity(cfg.window * ncams);
        for t in 0..cfg.window {
            for (c, &(cam, side)) in sides.iter().enumerate() {
                let shape = vec![side, side, 3];
                let len = side * side * 3;
                if t < padded {
                    out.push(match bytes {
                        true => Tensor::from_u8(shape, vec![0; len])?,
                        false => Tensor::from_f32(shape, vec![0.0; len])?,
                    });
                    continue;
                }
                let img = &obs.images[(t - padded) * ncams + c];
                crate::preprocess::image::check_size(img)?;
                if (img.height, img.width) != (side, side) {
                    return Err(Error::InvalidArgument(format!(
                        "{cam} camera image: {}x{}, octo takes {side}x{side} images (resize them as the policy's training data was: Octo's data pipeline and gym wrappers use TF's lanczos3 with antialiasing)",
                        img.width, img.height
                    )));
                }
                out.push(match (&img.data, bytes) {
                    (ImageData::RgbU8(d), true) => Tensor::from_u8(shape, d.clone())?,
                    (ImageData::RgbF32(d), false) => Tensor::from_f32(shape, d.clone())?,
                    _ => {
                        return Err(Error::InvalidArgument(
                            "images: all bytes or all floats, not a mix".into(),
                        ))
                    }
                });
            }
        }
        Ok((out, padded, bytes))
    }

    /// Each window step's proprio as one-hot bins `[proprio_dim * bins]` (padded steps': all
    /// zero, never attended to); none where the model takes no proprio. The request's state
    /// is the given steps' proprio, oldest first.
    fn proprio_bins(&self, obs: &Observation, padded: usize) -> Result<Vec<Vec<f32>>> {
        let cfg = &self.cfg;
        let (pd, n) = (cfg.proprio_dim, cfg.proprio_bins);
        let Some((thr, uniform)) = &self.bins else {
            crate::preprocess::normalize::state_values(obs, 0, 0)?;
            return Ok(vec![]);
        };
        let given = (cfg.window - padded) * pd;
        let state = crate::preprocess::normalize::state_values(obs, given, given)?;
        let mut out = vec![vec![0.0; pd * n]; padded];
        for x in state.chunks(pd) {
            let z = self.stats.normalize_proprio(x)?;
            let mut one_hot = vec![0.0; pd * n];
            for (i, &v) in z.iter().enumerate() {
                one_hot[i * n + rules::bin(v, thr, *uniform)] = 1.0;
            }
            out.push(one_hot);
        }
        Ok(out)
    }

    /// The instruction's T5 ids padded to the model's length, and their key mask.
    fn instruction(&self, obs: &Observation) -> Result<(Vec<f32>, Vec<f32>)> {
        let s = self.cfg.lang_tokens;
        let tok = self.tokenizer.as_ref();
        let ids = super::common::instruction_ids(obs, self.cfg.t5_vocab, "", |p| {
            super::common::require_tokenizer(tok)?.encode(p)
        })?;
        if ids.len() > s {
            return Err(super::common::prompt_bound(ids.len(), s));
        }
        let mut t: Vec<f32> = ids.iter().map(|&i| i as f32).collect();
        let mut mask = vec![0.0; ids.len()];
        t.resize(s, 0.0);
        mask.resize(s, graphs::MASKED);
        Ok((t, mask))
    }
}

/// The reply's warning where a request brings noise to the L1 head, which draws none.
fn unread_noise(cfg: &OctoConfig, obs: &Observation) -> Vec<String> {
    match cfg.head {
        Head::L1 => super::common::unread_noise(obs, "octo's L1 head")
            .into_iter()
            .collect(),
        Head::Diffusion => vec![],
    }
}

impl Policy for OctoPolicy {
    batch::one_run_policy!();
}

impl OneRun for OctoPolicy {
    /// Whether the frames came as bytes.
    type Key = bool;
    /// The instruction's tokens.
    type Ctx = usize;

    fn stage(&self, obs: &Observation) -> Result<Staged<bool, usize>> {
        let cfg = &self.cfg;
        let (frames, padded, bytes) = self.frames(obs)?;
        let (ids, t5_mask) = self.instruction(obs)?;
        let tokens = t5_mask.iter().filter(|&&m| m == 0.0).count();
        let mut named: Named = frames
            .into_iter()
            .enumerate()
            .map(|(i, t)| (format!("image.{i}"), t))
            .collect();
        let s = cfg.lang_tokens;
        named.push((graphs::TOKENS.into(), Tensor::from_f32(vec![s], ids)?));
        named.push((
            graphs::T5_MASK.into(),
            Tensor::from_f32(vec![1, 1, s], t5_mask)?,
        ));
        named.push((graphs::T5_BUCKETS.into(), self.buckets.clone()));
        named.push((graphs::MASK.into(), self.masks[padded].clone()));
        for (t, bins) in self.proprio_bins(obs, padded)?.into_iter().enumerate() {
            let shape = vec![cfg.proprio_dim, cfg.proprio_bins];
            named.push((graphs::proprio_input(t), Tensor::from_f32(shape, bins)?));
        }
        if cfg.head == Head::Diffusion {
            let [rows, cols] = self.info.noise_dims();
            let noise = super::common::noise_or_draw(obs, rows, cols, Default::default())?;
            named.push((
                graphs::NOISE.into(),
                Tensor::from_f32(vec![rows, cols], noise)?,
            ));
        }
        Ok(Staged {
            key: bytes,
            inputs: named,
            ctx: tokens,
        })
    }

    fn run(&mut self, key: &bool, requests: &[Named]) -> Result<Outputs> {
        let (cfg, head, bytes) = (&self.cfg, &self.head, *key);
        self.graphs
            .run(key, requests, |f| Self::build(f, cfg, head, bytes))
    }

    fn finish(
        &mut self,
        obs: &Observation,
        tokens: usize,
        outputs: Vec<Vec<f32>>,
        _: Option<&[f32]>,
    ) -> Result<ActionChunk> {
        let cfg = &self.cfg;
        let mut x = outputs.into_iter().next().unwrap_or_default();
        if cfg.head == Head::L1 {
            let m = cfg.max_action;
            x.iter_mut().for_each(|v| *v = (*v / m).tanh() * m);
        }
        Ok(ActionChunk {
            actions: self.stats.unnormalize_rows(&x, cfg.action_dim),
            chunk_size: cfg.horizon,
            action_dim: self.info.action_dim,
            times: StageTimes::default(),
            counters: Default::default(),
            batch: 1,
            warnings: unread_noise(cfg, obs),
            instruction: crate::policy::InstructionRows {
                tokens,
                rows: cfg.lang_tokens,
            },
        })
    }

    fn counters(&self) -> RunCounters {
        self.graphs.counters()
    }
}
