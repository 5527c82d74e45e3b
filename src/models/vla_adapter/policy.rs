//! VLA-Adapter served: the request's cameras, state and instruction to the chunk, one graph
//! per prompt length.

use super::{cameras, graphs, VlaAdapterConfig, ARCH};
use crate::config::limits::MAX_SEQUENCE;
use crate::gguf::GgufFile;
use crate::graph::{Graph, GraphBuilder};
use crate::models::common::{
    gguf_tokenizer, instruction_ids, ms_since, require_tokenizer, LoadedGraphs,
};
use crate::policy::{
    ActionChunk, InstructionRows, Observation, Policy, PolicyInfo, RuntimeOptions, StageTimes,
};
use crate::preprocess::{normalize, CameraInput, Normalizer};
use crate::tokenizer::Tokenizer;
use crate::{Error, Result, Tensor};
use std::time::Instant;

/// The prompt the reference's client builds around the task (its `use_minivlm` form, the
/// default: the Qwen chat template, no BOS), the task lower-cased.
pub fn prompt(task: &str) -> String {
    format!(
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat action should the robot take to {}?<|im_end|>\n<|im_start|>assistant\n",
        task.to_lowercase()
    )
}

pub struct VlaAdapterPolicy {
    cfg: VlaAdapterConfig,
    info: PolicyInfo,
    tokenizer: Option<Tokenizer>,
    cameras: [CameraInput; 2],
    state_norm: Normalizer,
    action_norm: Normalizer,
    graphs: LoadedGraphs<usize>,
}

/// The prompt length the graph is first compiled for (LIBERO's tasks run 40-60 tokens).
const FIRST_PROMPT: usize = 48;

impl VlaAdapterPolicy {
    pub fn new(file: GgufFile, opts: &RuntimeOptions) -> Result<Self> {
        let file = crate::models::vlacpp::vla_adapter::translate(file)?;
        let cfg = VlaAdapterConfig::read(&file)?;
        if opts.num_steps.is_some() {
            return Err(Error::InvalidArgument(format!(
                "{ARCH} predicts in one pass: it has no denoising steps to set"
            )));
        }
        if opts.stepwise {
            return Err(Error::InvalidArgument(format!(
                "{ARCH} predicts in one pass: stepwise runs are for flow policies"
            )));
        }
        if let Some(p) = &opts.statistics {
            return Err(Error::InvalidArgument(format!(
                "--statistics {}: a {ARCH} file carries its own statistics",
                p.display()
            )));
        }
        let suite = suite(&file, opts.embodiment.as_deref())?;
        let a = &cfg.action;
        let state_norm = Normalizer::from_gguf(&file, "state", a.proprio_dim, suite.as_deref())?;
        let action_norm = Normalizer::from_gguf(&file, "action", a.action_dim, suite.as_deref())?;
        let tokenizer = gguf_tokenizer(&file, cfg.lm.vocab)?;
        let build = |f: &GgufFile| Self::build(f, &cfg, FIRST_PROMPT);
        let graphs = LoadedGraphs::compile(file, opts, FIRST_PROMPT, build)?;
        let mut info = graphs.info(ARCH);
        let v = &cfg.vision;
        info.n_images = v.num_images;
        info.image_height = v.image_size;
        info.image_width = v.image_size;
        info.max_state_dim = a.proprio_dim;
        info.state_dim = a.proprio_dim;
        info.chunk_size = a.chunk;
        info.action_rows = a.chunk;
        info.max_action_dim = a.action_dim;
        info.action_dim = a.action_dim;
        info.memory_bytes = graphs.memory_bytes();
        info.activation_bytes = graphs.activation_bytes();
        Ok(VlaAdapterPolicy {
            cameras: cameras(&cfg),
            cfg,
            info,
            tokenizer,
            state_norm,
            action_norm,
            graphs,
        })
    }

    fn build(file: &GgufFile, cfg: &VlaAdapterConfig, n_prompt: usize) -> Result<Vec<Graph>> {
        let mut g = GraphBuilder::new(file);
        let out = graphs::predict(&mut g, cfg, n_prompt)?;
        Ok(vec![g.build(&[out])?])
    }

    pub fn config(&self) -> &VlaAdapterConfig {
        &self.cfg
    }

    /// The request's instruction as the model's prompt ids: its text through the template
    /// and the tokenizer, or its token ids as given (the whole prompt, as a client built it).
    pub fn prompt_ids(&self, obs: &Observation) -> Result<Vec<u32>> {
        let ids = instruction_ids(obs, self.cfg.lm.vocab, "", |task| {
            let t = require_tokenizer(self.tokenizer.as_ref())?;
            t.encode(&prompt(task))
        })?;
        if ids.is_empty() {
            return Err(Error::InvalidArgument(
                "an empty instruction (no token ids): the sequence starts with the prompt's first token".into(),
            ));
        }
        let max = self.cfg.max_prompt();
        if ids.len() > max {
            return Err(Error::InvalidArgument(format!(
                "instruction: {} tokens, more than this model's bound of {max} (a sequence of at most {MAX_SEQUENCE} rows); shorten it",
                ids.len()
            )));
        }
        Ok(ids)
    }
}

/// The statistics set `--embodiment` names (the reference's `unnorm_key`), or none where the
/// file carries one set; a file with several needs the choice, as the reference asks.
fn suite(file: &GgufFile, chosen: Option<&str>) -> Result<Option<String>> {
    let known = normalize::embodiments(file);
    match (chosen, known.len()) {
        (Some(c), _) => Ok(Some(c.to_owned())),
        (None, 0) => Ok(None),
        (None, 1) => Ok(known.into_iter().next()),
        (None, _) => Err(Error::InvalidArgument(format!(
            "this model carries statistics for several suites ({}): choose one with --embodiment",
            known.join(", ")
        ))),
    }
}

impl Policy for VlaAdapterPolicy {
    fn info(&self) -> &PolicyInfo {
        &self.info
    }

    fn predict(&mut self, obs: &Observation) -> Result<ActionChunk> {
        let t0 = Instant::now();
        let counters = self.graphs.counters();
        let cfg = &self.cfg;
        let v = &cfg.vision;
        if obs.images.len() != v.num_images {
            return Err(Error::InvalidArgument(format!(
                "{ARCH} takes {} camera images, got {}",
                v.num_images,
                obs.images.len()
            )));
        }
        let ids = self.prompt_ids(obs)?;
        let a = &cfg.action;
        let state = self
            .state_norm
            .normalize_state(obs, a.proprio_dim, a.proprio_dim)?;
        let mut named: Vec<(String, Tensor)> = Vec::new();
        for (i, img) in obs.images.iter().enumerate() {
            // the towers differ in their value maps alone: one frame for both
            let (_, frame) = self.cameras[0].frame(img)?;
            named.push((graphs::frame_input(i), frame));
        }
        let n = ids.len();
        let ids: Vec<f32> = ids
            .iter()
            .chain([&(cfg.stop_id as u32)])
            .map(|&t| t as f32)
            .collect();
        named.push((graphs::IDS.into(), Tensor::from_f32(vec![n + 1], ids)?));
        named.push((
            graphs::STATE.into(),
            Tensor::from_f32(vec![1, state.len()], state)?,
        ));
        self.graphs.select(n, |f| Self::build(f, cfg, n))?;
        let inputs: Vec<(&str, &Tensor)> = named.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let out = self.graphs.exec(0).run(&inputs)?;
        let x = out[0].to_vec_f32()?;
        self.info.memory_bytes = self.graphs.memory_bytes();
        self.info.activation_bytes = self.graphs.activation_bytes();
        self.info.scratch_bytes = self.graphs.scratch_bytes();
        let dim = a.action_dim;
        Ok(ActionChunk {
            actions: self.action_norm.unnormalize_rows(&x, dim, dim),
            chunk_size: a.chunk,
            action_dim: dim,
            times: StageTimes {
                vision_ms: None,
                prefill_ms: None,
                denoise_ms: None,
                total_ms: ms_since(t0),
            },
            counters: self.graphs.counters().since(&counters),
            warnings: match obs.noise.as_ref().is_some_and(|n| !n.is_empty()) {
                true => vec![format!(
                    "{ARCH} predicts without noise: the request's noise was not used"
                )],
                false => vec![],
            },
            instruction: InstructionRows { tokens: n, rows: n },
        })
    }

    fn profile(&self) -> Option<Vec<crate::backend::KernelTime>> {
        self.graphs.profile()
    }
}
