//! An OpenVLA-family policy served: the request's cameras, state and instruction to the
//! chunk in one pass, one graph per prompt shape (length, where the images sit).

use super::{frame_input, OpenVlaArch, PromptShape, IDS, STATE};
use crate::backend::RunCounters;
use crate::config::limits::MAX_SEQUENCE;
use crate::gguf::GgufFile;
use crate::graph::{Graph, GraphBuilder};
use crate::models::batch::{self, Named, OneRun, Outputs, Staged};
use crate::models::common::{
    gguf_tokenizer, instruction_ids, one_pass_options, require_tokenizer, LoadedGraphs,
};
use crate::policy::{
    ActionChunk, InstructionRows, Observation, Policy, PolicyInfo, RuntimeOptions, StageTimes,
};
use crate::preprocess::{normalize, CameraInput, Normalizer};
use crate::tokenizer::Tokenizer;
use crate::{Error, Result, Tensor};

pub struct OpenVlaPolicy<A: OpenVlaArch> {
    cfg: A,
    info: PolicyInfo,
    tokenizer: Option<Tokenizer>,
    camera: CameraInput,
    state_norm: Normalizer,
    action_norm: Normalizer,
    graphs: LoadedGraphs<PromptShape>,
}

impl<A: OpenVlaArch> OpenVlaPolicy<A> {
    pub fn new(file: GgufFile, opts: &RuntimeOptions) -> Result<Self> {
        let arch = A::ARCH;
        let file = A::translate(file)?;
        let cfg = A::read(&file)?;
        one_pass_options(arch, opts)?;
        let suite = suite(&file, opts.embodiment.as_deref())?;
        let a = cfg.io().clone();
        let state_norm = Normalizer::from_gguf(&file, "state", a.proprio_dim, suite.as_deref())?;
        let action_norm = Normalizer::from_gguf(&file, "action", a.action_dim, suite.as_deref())?;
        let tokenizer = gguf_tokenizer(&file, cfg.lm().vocab)?;
        let first = cfg.first_prompt(tokenizer.as_ref());
        let build = |f: &GgufFile| Self::build(f, &cfg, first);
        let graphs = LoadedGraphs::compile(file, opts, first, build)?;
        let mut info = graphs.info(arch);
        let camera = cfg.camera();
        info.n_images = cfg.num_images();
        info.image_height = camera.height;
        info.image_width = camera.width;
        info.max_state_dim = a.proprio_dim;
        info.state_dim = a.proprio_dim;
        info.chunk_size = a.chunk;
        info.action_rows = a.chunk;
        info.max_action_dim = a.action_dim;
        info.action_dim = a.action_dim;
        info.embodiment = suite;
        info.placeholders = cfg.placeholders();
        info.memory_bytes = graphs.memory_bytes();
        info.activation_bytes = graphs.activation_bytes();
        Ok(OpenVlaPolicy {
            cfg,
            info,
            tokenizer,
            camera,
            state_norm,
            action_norm,
            graphs,
        })
    }

    fn build(file: &GgufFile, cfg: &A, p: PromptShape) -> Result<Vec<Graph>> {
        let mut g = GraphBuilder::new(file);
        let out = cfg.predict(&mut g, p)?;
        Ok(vec![g.build(&[out])?])
    }

    pub fn config(&self) -> &A {
        &self.cfg
    }

    /// The request's instruction as prompt ids: its text through the template and the
    /// tokenizer, or its token ids as given (the whole prompt, as a client built it); at most
    /// [`OpenVlaArch::max_prompt`].
    pub fn prompt_ids(&self, obs: &Observation) -> Result<Vec<u32>> {
        let vocab = self.cfg.lm().vocab;
        let ids = instruction_ids(obs, vocab, "", |task| {
            let t = require_tokenizer(self.tokenizer.as_ref())?;
            t.encode(&self.cfg.prompt(task))
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

    /// [`Self::prompt_ids`] as the model reads them ([`OpenVlaArch::model_ids`]).
    pub fn model_ids(&self, obs: &Observation) -> Result<Vec<u32>> {
        Ok(self.cfg.model_ids(self.prompt_ids(obs)?))
    }
}

/// The statistics set `--embodiment` names (the reference's `unnorm_key`), or none where the
/// file carries one set; a file with several needs the choice, as the reference asks.
pub fn suite(file: &GgufFile, chosen: Option<&str>) -> Result<Option<String>> {
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

impl<A: OpenVlaArch> Policy for OpenVlaPolicy<A> {
    batch::one_run_policy!();
}

impl<A: OpenVlaArch> OneRun for OpenVlaPolicy<A> {
    type Key = PromptShape;
    /// The ids the request gave and the rows the model read.
    type Ctx = InstructionRows;

    fn stage(&self, obs: &Observation) -> Result<Staged<PromptShape, InstructionRows>> {
        let (cfg, arch) = (&self.cfg, A::ARCH);
        let n_images = cfg.num_images();
        if obs.images.len() != n_images {
            return Err(Error::InvalidArgument(format!(
                "{arch} takes {n_images} camera images, got {}",
                obs.images.len()
            )));
        }
        let ids = self.prompt_ids(obs)?;
        let given = ids.len();
        let ids = self.cfg.model_ids(ids);
        let shape = PromptShape {
            len: ids.len(),
            image_start: cfg.image_start(&ids)?,
        };
        let a = cfg.io();
        let state = self
            .state_norm
            .normalize_state(obs, a.proprio_dim, a.proprio_dim)?;
        let mut named: Named = Vec::new();
        for (i, img) in obs.images.iter().enumerate() {
            // the towers differ in their value maps alone: one frame for both
            let (_, frame) = self.camera.frame(img)?;
            named.push((frame_input(i), frame));
        }
        let n = ids.len();
        let ids: Vec<f32> = ids
            .iter()
            .chain([&(a.stop_id as u32)])
            .map(|&t| t as f32)
            .collect();
        named.push((IDS.into(), Tensor::from_f32(vec![n + 1], ids)?));
        named.push((STATE.into(), Tensor::from_f32(vec![1, state.len()], state)?));
        Ok(Staged {
            key: shape,
            inputs: named,
            ctx: InstructionRows {
                tokens: given,
                rows: n,
            },
        })
    }

    fn run(&mut self, key: &PromptShape, requests: &[Named]) -> Result<Outputs> {
        let cfg = &self.cfg;
        self.graphs
            .run(key, requests, |f| Self::build(f, cfg, *key))
    }

    fn finish(
        &mut self,
        obs: &Observation,
        instruction: InstructionRows,
        outputs: Vec<Vec<f32>>,
        _: Option<&[f32]>,
    ) -> Result<ActionChunk> {
        let a = self.cfg.io();
        let dim = a.action_dim;
        let warnings = crate::models::common::unread_noise(obs, A::ARCH)
            .into_iter()
            .collect();
        Ok(ActionChunk {
            actions: self.action_norm.unnormalize_rows(&outputs[0], dim, dim),
            chunk_size: a.chunk,
            action_dim: dim,
            times: StageTimes::default(),
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
