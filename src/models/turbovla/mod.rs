//! TurboVLA (H-EmbodVis/TurboVLA): two camera views through DINOv3 (axial rotary ViT-B/16)
//! and a projection, the instruction through BERT under Grounding DINO's sub-sentence mask,
//! six fusion layers (image and text tokens cross-attending both ways, then a text
//! enhancer), and an ACT decoder whose action queries attend to [image, text, state]
//! tokens: one pass, no noise. Stored in vla.cpp's `turbovla` layout (docs/GGUF.md), plus
//! the statistics and tokenizer vla.cpp's files lack.

pub mod config;
mod file;
pub mod graphs;
pub mod rules;
pub mod stats;

pub use config::{SpecialIds, TextGroup, TurboConfig};
pub use file::{demo_writer, is_matrix, random_writer, tensor_shapes};
pub use rules::TextPlan;
pub use stats::TurboStats;

use super::batch::{self, Named, OneRun, Outputs, Staged};
use super::common::LoadedGraphs;
use crate::backend::RunCounters;
use crate::gguf::GgufFile;
use crate::graph::{Graph, GraphBuilder};
use crate::policy::{ActionChunk, Observation, Policy, PolicyInfo, RuntimeOptions, StageTimes};
use crate::preprocess::{FrameKey, Normalizer};
use crate::tokenizer::Tokenizer;
use crate::{Error, Result, Tensor};

pub const ARCH: &str = "turbovla";

/// What a compiled graph is for: the views' frames and the text's two lengths (BERT's, the
/// fusion's).
type GraphKey = (Vec<FrameKey>, usize, usize);

/// A TurboVLA policy.
pub struct TurboPolicy {
    cfg: TurboConfig,
    info: PolicyInfo,
    stats: TurboStats,
    state_norm: Normalizer,
    tokenizer: Option<Tokenizer>,
    graphs: LoadedGraphs<GraphKey>,
}

impl TurboPolicy {
    pub fn new(file: GgufFile, opts: &RuntimeOptions) -> Result<Self> {
        let cfg = TurboConfig::read(&file)?;
        let stats = statistics(&file, opts)?;
        stats.check(cfg.state_dim, cfg.action_dim)?;
        super::common::one_pass_options(
            ARCH,
            &RuntimeOptions {
                statistics: None,
                ..opts.clone()
            },
        )?;
        if let Some(e) = &opts.embodiment {
            return Err(Error::InvalidArgument(format!(
                "embodiment {e:?}: turbovla carries a single set of normalisation statistics"
            )));
        }
        let tokenizer = super::common::gguf_tokenizer(&file, cfg.bert.vocab)?;
        let s = cfg.vit.image_size;
        let frame = FrameKey {
            height: s,
            width: s,
            bytes: true,
        };
        let key = (vec![frame; cfg.num_views], cfg.text_len, cfg.text_len);
        let graphs =
            LoadedGraphs::compile(file, opts, key.clone(), |f| Self::build(f, &cfg, &key))?;
        let mut info = graphs.info(ARCH);
        info.n_images = cfg.num_views;
        info.image_height = s;
        info.image_width = s;
        info.image_sizes = vec![[s, s]; cfg.num_views];
        info.max_state_dim = cfg.state_dim;
        info.state_dim = cfg.state_dim;
        info.chunk_size = cfg.horizon;
        info.action_rows = cfg.horizon;
        info.max_action_dim = cfg.action_dim;
        info.action_dim = cfg.action_dim;
        info.wrap_ids = Some([cfg.special.cls as u32, cfg.special.sep as u32]);
        graphs.report_memory(&mut info);
        Ok(TurboPolicy {
            state_norm: stats.state(),
            cfg,
            info,
            stats,
            tokenizer,
            graphs,
        })
    }

    fn build(file: &GgufFile, cfg: &TurboConfig, key: &GraphKey) -> Result<Vec<Graph>> {
        let (frames, bert_len, len) = key;
        let g = GraphBuilder::new(file);
        Ok(vec![graphs::predict(g, cfg, frames, (*bert_len, *len))?])
    }

    pub fn config(&self) -> &TurboConfig {
        &self.cfg
    }

    /// The request's frames as they arrived: each view at the model's size (the reference
    /// refuses any other; LIBERO's frames are rotated by the client, as the reference's).
    fn frames(&self, obs: &Observation) -> Result<Vec<(FrameKey, Tensor<'static>)>> {
        let (n, s) = (self.cfg.num_views, self.cfg.vit.image_size);
        if obs.images.len() != n {
            return Err(Error::InvalidArgument(format!(
                "turbovla takes {n} camera images, got {}",
                obs.images.len()
            )));
        }
        obs.images
            .iter()
            .enumerate()
            .map(|(i, img)| {
                let (key, t) = crate::preprocess::frames::as_sent(img)?;
                if (key.height, key.width) != (s, s) {
                    return Err(Error::InvalidArgument(format!(
                        "image {i}: {}x{}, turbovla takes {s}x{s} frames (the reference refuses other sizes; resize on the client)",
                        key.width, key.height
                    )));
                }
                Ok((key, t))
            })
            .collect()
    }

    /// The instruction's ids: BERT's whole encoding, `[CLS] ... [SEP]`, at most
    /// `max_text_length` (the reference would cut a longer one; it is refused), and the
    /// length the request padded them to where it sent padding ids (vla.cpp's clients may).
    pub fn instruction(&self, obs: &Observation) -> Result<(Vec<u32>, Option<usize>)> {
        let cfg = &self.cfg;
        let tok = self.tokenizer.as_ref();
        let mut ids = super::common::instruction_ids(obs, cfg.bert.vocab, "", |p| {
            super::common::require_tokenizer(tok)?.encode(p)
        })?;
        let given = ids.len();
        let pad = cfg.special.pad as u32;
        ids.truncate(ids.iter().rposition(|&t| t != pad).map_or(0, |i| i + 1));
        let padded = (ids.len() < given).then_some(given);
        let (cls, sep) = (cfg.special.cls as u32, cfg.special.sep as u32);
        if given == 0 {
            return Err(Error::InvalidArgument(format!(
                "instruction: empty token ids: send BERT's whole encoding, [CLS] ({cls}) ... [SEP] ({sep})"
            )));
        }
        if ids.len() < 2 || ids[0] != cls || ids[ids.len() - 1] != sep {
            return Err(Error::InvalidArgument(format!(
                "instruction: token ids must be BERT's whole encoding, [CLS] ({cls}) first and [SEP] ({sep}) last (then only padding, {pad})"
            )));
        }
        if given > cfg.text_len {
            return Err(Error::InvalidArgument(format!(
                "instruction: {given} tokens, more than this model's bound of {} (turbovla.max_text_length: the reference would cut the rest); shorten it",
                cfg.text_len
            )));
        }
        Ok((ids, padded))
    }
}

/// The file's statistics, or for a file without (vla.cpp's) those `--statistics` names.
fn statistics(file: &GgufFile, opts: &RuntimeOptions) -> Result<TurboStats> {
    match (TurboStats::in_gguf(file), &opts.statistics) {
        (true, None) => TurboStats::read(file),
        (true, Some(p)) => Err(Error::InvalidArgument(format!(
            "--statistics {}: this turbovla file carries its own statistics",
            p.display()
        ))),
        (false, Some(p)) => TurboStats::load(p),
        (false, None) => Err(Error::InvalidArgument(format!(
            "this turbovla file carries no normalisation statistics (vla.cpp's do not): load it with --statistics {} (the released LIBERO model's numbers) or --statistics FILE.json",
            stats::LIBERO
        ))),
    }
}

impl Policy for TurboPolicy {
    batch::one_run_policy!();
}

impl OneRun for TurboPolicy {
    type Key = GraphKey;
    /// The instruction's ids and rows.
    type Ctx = crate::policy::InstructionRows;

    fn stage(&self, obs: &Observation) -> Result<Staged<GraphKey, Self::Ctx>> {
        let frames = self.frames(obs)?;
        let (ids, padded) = self.instruction(obs)?;
        let cfg = &self.cfg;
        let plan = TextPlan::new(cfg, &ids, padded);
        if let Some(p) = plan
            .positions
            .iter()
            .find(|&&p| p as usize >= cfg.bert.max_positions)
        {
            return Err(Error::InvalidArgument(format!(
                "instruction: a sentence of {} tokens, more than BERT's {} positions; split it",
                *p as usize + 1,
                cfg.bert.max_positions
            )));
        }
        let state = self
            .state_norm
            .normalize_state(obs, cfg.state_dim, cfg.state_dim)?;
        let key: GraphKey = (
            frames.iter().map(|(k, _)| *k).collect(),
            plan.bert_len,
            plan.len,
        );
        let rows = cfg.num_views * cfg.vit.n_patches();
        let keys: Vec<f32> = (0..rows).flat_map(|_| plan.keys.iter().copied()).collect();
        let (b, l) = (plan.bert_len, plan.len);
        let n_ids = ids.len();
        let ids: Vec<f32> = plan.ids.iter().map(|&i| i as f32).collect();
        let mut named: Named = frames
            .into_iter()
            .enumerate()
            .map(|(v, (_, t))| (graphs::frame_input(v), t))
            .collect();
        named.extend([
            (graphs::IDS.into(), Tensor::from_f32(vec![b], ids)?),
            (
                graphs::POSITIONS.into(),
                Tensor::from_f32(vec![b], plan.positions.clone())?,
            ),
            (
                graphs::BERT_MASK.into(),
                Tensor::from_f32(vec![b, b], plan.bert_mask())?,
            ),
            (
                graphs::TEXT_MASK.into(),
                Tensor::from_f32(vec![l, l], plan.mask.clone())?,
            ),
            (graphs::KEYS.into(), Tensor::from_f32(vec![rows, l], keys)?),
            (
                graphs::STATE.into(),
                Tensor::from_f32(vec![1, cfg.state_dim], state)?,
            ),
        ]);
        Ok(Staged {
            key,
            inputs: named,
            ctx: crate::policy::InstructionRows {
                tokens: n_ids,
                rows: plan.len,
            },
        })
    }

    fn run(&mut self, key: &GraphKey, requests: &[Named]) -> Result<Outputs> {
        let cfg = &self.cfg;
        self.graphs.run(key, requests, |f| Self::build(f, cfg, key))
    }

    fn finish(
        &mut self,
        obs: &Observation,
        instruction: Self::Ctx,
        outputs: Vec<Vec<f32>>,
        _: Option<&[f32]>,
    ) -> Result<ActionChunk> {
        let cfg = &self.cfg;
        let x: Vec<f32> = outputs[0].iter().map(|v| v.tanh()).collect();
        Ok(ActionChunk {
            actions: self.stats.actions(&x, cfg.action_dim),
            chunk_size: cfg.horizon,
            action_dim: cfg.action_dim,
            times: StageTimes::default(),
            counters: Default::default(),
            batch: 1,
            warnings: super::common::unread_noise(obs, ARCH).into_iter().collect(),
            instruction,
        })
    }

    fn counters(&self) -> RunCounters {
        self.graphs.counters()
    }
}
