//! LeRobot's ACT (Action Chunking Transformer): a ResNet per camera, a transformer encoder
//! over [latent, state, image tokens] and a decoder whose chunk queries cross-attend to it,
//! one pass, no language, no noise. The VAE encoder trains the latent and is dropped at
//! inference (the latent is zero, as the reference's eval). Stored in vla.cpp's `act`
//! layout (docs/GGUF.md): the same file runs in both.

pub mod graphs;

use super::batch::{self, Named, OneRun, Outputs, Staged};
use super::common::LoadedGraphs;
use crate::backend::RunCounters;
use crate::config::{self, bounded, positive, Keys, Section};
use crate::gguf::{GgmlType, GgufFile, GgufWriter, Value, ValueType};
use crate::graph::{declared_weights, Graph, GraphBuilder};
use crate::policy::{ActionChunk, Observation, Policy, PolicyInfo, RuntimeOptions, StageTimes};
use crate::preprocess::{normalize::state_values, FrameKey, Normalizer};
use crate::{Error, Result, Tensor};

pub const ARCH: &str = "act";
/// lerobot's normaliser epsilon, added to the image statistics' std.
const NORM_EPS: f32 = 1e-8;
/// Stages of torchvision's ResNet.
pub const STAGES: usize = 4;

/// ACT's sizes and settings (`act.*` keys, vla.cpp's names), plus what the weights say: the
/// ResNet's widths.
#[derive(Clone, Debug, PartialEq)]
pub struct ActConfig {
    pub dim_model: usize,
    pub n_heads: usize,
    pub dim_feedforward: usize,
    pub n_encoder_layers: usize,
    pub n_decoder_layers: usize,
    pub pre_norm: bool,
    /// The FFN's activation: GELU (erf) or ReLU.
    pub gelu: bool,
    /// Rows a predict returns (the decoder's queries).
    pub chunk_size: usize,
    /// How many of them the reference executes before predicting again (informational: the
    /// client's choice).
    pub n_action_steps: usize,
    /// 0 where the policy takes no robot state.
    pub state_dim: usize,
    pub action_dim: usize,
    pub num_views: usize,
    /// The training frames' size (informational: ACT runs at the size a camera sends, as
    /// the reference).
    pub image_height: usize,
    pub image_width: usize,
    /// BasicBlocks per stage: `[2, 2, 2, 2]` ResNet-18, `[3, 4, 6, 3]` ResNet-34.
    pub blocks: [usize; STAGES],
    /// The stem's width, then each stage's (`[64, 64, 128, 256, 512]` for torchvision's);
    /// from the weights' shapes, not keys.
    pub widths: [usize; STAGES + 1],
    /// The reference's camera features (`observation.images.<name>`), in request order.
    pub cameras: Vec<String>,
}

impl Section for ActConfig {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        k.usize("dim_model", &mut self.dim_model)?;
        k.usize("n_heads", &mut self.n_heads)?;
        k.usize("dim_feedforward", &mut self.dim_feedforward)?;
        k.usize("n_encoder_layers", &mut self.n_encoder_layers)?;
        k.usize("n_decoder_layers", &mut self.n_decoder_layers)?;
        flag(k, "pre_norm", &mut self.pre_norm)?;
        flag(k, "gelu", &mut self.gelu)?;
        k.usize("chunk_size", &mut self.chunk_size)?;
        k.usize("n_action_steps", &mut self.n_action_steps)?;
        k.usize("state_dim", &mut self.state_dim)?;
        k.usize("action_dim", &mut self.action_dim)?;
        k.usize("num_views", &mut self.num_views)?;
        k.usize("image_height", &mut self.image_height)?;
        k.usize("image_width", &mut self.image_width)
    }

    fn check(&self) -> std::result::Result<(), String> {
        use config::limits::*;
        positive("dim_model", self.dim_model)?;
        bounded("n_heads", self.n_heads, 1, self.dim_model)?;
        positive("dim_feedforward", self.dim_feedforward)?;
        bounded("n_encoder_layers", self.n_encoder_layers, 1, MAX_LAYERS)?;
        bounded("n_decoder_layers", self.n_decoder_layers, 1, MAX_LAYERS)?;
        bounded("chunk_size", self.chunk_size, 1, MAX_CHUNK)?;
        bounded("n_action_steps", self.n_action_steps, 1, self.chunk_size)?;
        bounded("state_dim", self.state_dim, 0, MAX_ROBOT_DIM)?;
        bounded("action_dim", self.action_dim, 1, MAX_ROBOT_DIM)?;
        bounded("num_views", self.num_views, 1, MAX_IMAGES)?;
        let side = crate::preprocess::image::MAX_SIDE;
        bounded("image_height", self.image_height, 1, side)?;
        bounded("image_width", self.image_width, 1, side)?;
        for (i, &b) in self.blocks.iter().enumerate() {
            bounded(&format!("backbone_blocks[{i}]"), b, 1, MAX_LAYERS)?;
        }
        if !self.dim_model.is_multiple_of(self.n_heads) {
            return Err(format!(
                "dim_model {} must be a multiple of n_heads {}",
                self.dim_model, self.n_heads
            ));
        }
        if !self.dim_model.is_multiple_of(4) {
            // the 2-D position table's halves alternate sin and cos
            return Err(format!(
                "dim_model {}: expected a multiple of 4",
                self.dim_model
            ));
        }
        if self.cameras.len() != self.num_views {
            return Err(format!(
                "cameras: {} names for num_views {}",
                self.cameras.len(),
                self.num_views
            ));
        }
        Ok(())
    }
}

/// A 0/1 key (vla.cpp writes flags as u32).
fn flag(k: &mut dyn Keys, key: &str, v: &mut bool) -> Result<()> {
    let mut x = usize::from(*v);
    k.usize(key, &mut x)?;
    if x > 1 {
        return Err(Error::InvalidArgument(format!(
            "{ARCH}.{key} = {x}: expected 0 or 1"
        )));
    }
    *v = x == 1;
    Ok(())
}

impl ActConfig {
    /// The learned 1-D position rows: the latent's, and the state's when there is one.
    pub fn n_1d(&self) -> usize {
        1 + usize::from(self.state_dim > 0)
    }

    /// Whether block `block` of stage `stage` (0-based) has a downsampling shortcut: as
    /// torchvision, where it strides or changes the width.
    pub fn has_downsample(&self, stage: usize, block: usize) -> bool {
        block == 0 && (stage > 0 || self.widths[0] != self.widths[1])
    }

    /// Reads and checks the config of an `act` file; the ResNet's widths from its kernels.
    pub fn read(file: &GgufFile) -> Result<Self> {
        let blocks = config::read_u32s(file, ARCH, "backbone_blocks")?;
        let blocks: [usize; STAGES] = blocks
            .iter()
            .map(|&b| b as usize)
            .collect::<Vec<_>>()
            .try_into()
            .map_err(|_| bad(format!("backbone_blocks: expected {STAGES} stages")))?;
        let key = format!("{ARCH}.cameras");
        let cameras = file
            .get_array(&key)?
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad(format!("{key}: expected an array of strings")))?;
        let out = |name: &str| -> Result<usize> {
            let t = file.tensor_info(name)?;
            let o = t.dims.last().copied().unwrap_or(0);
            usize::try_from(o).map_err(|_| bad(format!("{name}: {o} output channels")))
        };
        let mut widths = [0; STAGES + 1];
        widths[0] = out("bb.conv1.weight")?;
        for (s, w) in widths[1..].iter_mut().enumerate() {
            *w = out(&format!("bb.layer{}.0.conv1.weight", s + 1))?;
        }
        let cfg = ActConfig {
            blocks,
            widths,
            cameras,
            ..Self::empty()
        };
        config::read(file, ARCH, cfg)
    }

    fn empty() -> Self {
        ActConfig {
            dim_model: 0,
            n_heads: 0,
            dim_feedforward: 0,
            n_encoder_layers: 0,
            n_decoder_layers: 0,
            pre_norm: false,
            gelu: false,
            chunk_size: 0,
            n_action_steps: 0,
            state_dim: 0,
            action_dim: 0,
            num_views: 0,
            image_height: 0,
            image_width: 0,
            blocks: [0; STAGES],
            widths: [0; STAGES + 1],
            cameras: vec![],
        }
    }

    /// Writes `general.architecture`, the `act.*` keys (the arrays as vla.cpp writes them:
    /// the block counts as INT32).
    pub fn write(&self, w: &mut GgufWriter) -> Result<()> {
        w.add_metadata("general.architecture", ARCH)?;
        config::write(self, w, ARCH)?;
        let blocks = self.blocks.iter().map(|&b| Value::I32(b as i32)).collect();
        w.add_metadata(
            format!("{ARCH}.backbone_blocks"),
            Value::Array(ValueType::I32, blocks),
        )?;
        let cameras = self
            .cameras
            .iter()
            .map(|c| Value::String(c.clone()))
            .collect();
        w.add_metadata(
            format!("{ARCH}.cameras"),
            Value::Array(ValueType::String, cameras),
        )
    }

    /// Every weight the graph reads, with its shape as stored (convolution kernels 4-D,
    /// PyTorch's `[O, C, KH, KW]`), then the statistics.
    pub fn tensor_shapes(&self) -> Result<Vec<(String, Vec<usize>)>> {
        let key = FrameKey {
            height: self.image_height.max(1),
            width: self.image_width.max(1),
            bytes: true,
        };
        let pixels = vec![[[1.0, 0.0]; 3]; self.num_views];
        let graph = graphs::predict(
            GraphBuilder::over(None),
            self,
            &vec![key; self.num_views],
            &pixels,
        )?;
        let mut shapes = declared_weights(&[graph])?;
        for (name, shape) in &mut shapes {
            if let Some(k) = kernel_side(name) {
                let (o, cols) = (shape[0], shape[1]);
                *shape = vec![o, cols / (k * k), k, k];
            }
        }
        shapes.extend(self.statistics());
        Ok(shapes)
    }

    /// The normalisation statistics' tensors (vla.cpp's names): per camera and channel,
    /// then the state's (where there is one) and the action's.
    pub fn statistics(&self) -> Vec<(String, Vec<usize>)> {
        let mut v = vec![
            ("image_mean".to_owned(), vec![self.num_views, 3]),
            ("image_std".to_owned(), vec![self.num_views, 3]),
        ];
        for (what, dim) in [("state", self.state_dim), ("action", self.action_dim)] {
            if dim > 0 {
                v.push((format!("{what}_mean"), vec![dim]));
                v.push((format!("{what}_std"), vec![dim]));
            }
        }
        v
    }
}

fn bad(why: String) -> Error {
    Error::InvalidArgument(format!("{ARCH} config: {why}"))
}

/// The side of the square kernel `name` holds, for the ResNet's convolutions (`bb.*`): the
/// stem's 7, a shortcut's 1, a block's 3.
pub fn kernel_side(name: &str) -> Option<usize> {
    let conv = name.strip_prefix("bb.")?.strip_suffix(".weight")?;
    Some(match conv {
        "conv1" => 7,
        c if c.ends_with(".down") => 1,
        _ => 3,
    })
}

/// Per camera and channel, the affine map `x * a + b` of `(x - mean) / (std + 1e-8)`.
pub fn pixel_maps(file: &GgufFile, cfg: &ActConfig) -> Result<Vec<[[f32; 2]; 3]>> {
    let read = |name: &str| -> Result<Vec<f32>> {
        let v = file.dequantize(name)?;
        if v.len() != cfg.num_views * 3 || v.iter().any(|x| !x.is_finite()) {
            return Err(bad(format!(
                "{name}: expected {} finite values (3 per camera)",
                cfg.num_views * 3
            )));
        }
        Ok(v)
    };
    let (mean, std) = (read("image_mean")?, read("image_std")?);
    Ok((0..cfg.num_views)
        .map(|v| {
            [0, 1, 2].map(|c| {
                let s = std[v * 3 + c] + NORM_EPS;
                [1.0 / s, -mean[v * 3 + c] / s]
            })
        })
        .collect())
}

/// An ACT policy: its config, compiled graphs (one per set of frame sizes) and normalisers.
pub struct ActPolicy {
    cfg: ActConfig,
    info: PolicyInfo,
    pixels: Vec<[[f32; 2]; 3]>,
    state_norm: Option<Normalizer>,
    action_norm: Normalizer,
    graphs: LoadedGraphs<Vec<FrameKey>>,
}

impl ActPolicy {
    pub fn new(file: GgufFile, opts: &RuntimeOptions) -> Result<Self> {
        let cfg = ActConfig::read(&file)?;
        super::common::one_pass_options(ARCH, opts)?;
        if let Some(e) = &opts.embodiment {
            return Err(Error::InvalidArgument(format!(
                "embodiment {e:?}: act carries a single set of normalisation statistics"
            )));
        }
        let file = super::common::kernels_as_matrices(file)?;
        let pixels = pixel_maps(&file, &cfg)?;
        let state_norm = match cfg.state_dim {
            0 => None,
            d => Some(Normalizer::from_gguf(&file, "state", d, None)?),
        };
        let action_norm = Normalizer::from_gguf(&file, "action", cfg.action_dim, None)?;
        let key = vec![
            FrameKey {
                height: cfg.image_height,
                width: cfg.image_width,
                bytes: true,
            };
            cfg.num_views
        ];
        let build = |f: &GgufFile| Self::build(f, &cfg, &key, &pixels);
        let graphs = LoadedGraphs::compile(file, opts, key.clone(), build)?;
        let mut info = graphs.info(ARCH);
        info.n_images = cfg.num_views;
        info.image_height = cfg.image_height;
        info.image_width = cfg.image_width;
        info.max_state_dim = cfg.state_dim;
        info.state_dim = cfg.state_dim;
        info.chunk_size = cfg.chunk_size;
        info.action_rows = cfg.chunk_size;
        info.max_action_dim = cfg.action_dim;
        info.action_dim = cfg.action_dim;
        info.camera_names = cfg.cameras.clone();
        info.n_action_steps = Some(cfg.n_action_steps);
        info.reads_instruction = false;
        info.memory_bytes = graphs.memory_bytes();
        info.activation_bytes = graphs.activation_bytes();
        Ok(ActPolicy {
            cfg,
            info,
            pixels,
            state_norm,
            action_norm,
            graphs,
        })
    }

    fn build(
        file: &GgufFile,
        cfg: &ActConfig,
        frames: &[FrameKey],
        pixels: &[[[f32; 2]; 3]],
    ) -> Result<Vec<Graph>> {
        Ok(vec![graphs::predict(
            GraphBuilder::new(file),
            cfg,
            frames,
            pixels,
        )?])
    }

    pub fn config(&self) -> &ActConfig {
        &self.cfg
    }

    /// The request's frames as the graph takes them (as they arrived: ACT never resizes).
    fn frames(&self, obs: &Observation) -> Result<Vec<(FrameKey, Tensor<'static>)>> {
        if obs.images.len() != self.cfg.num_views {
            return Err(Error::InvalidArgument(format!(
                "act takes {} camera images ({}), got {}",
                self.cfg.num_views,
                self.cfg.cameras.join(", "),
                obs.images.len()
            )));
        }
        obs.images
            .iter()
            .map(crate::preprocess::frames::as_sent)
            .collect()
    }
}

/// What a request carries that ACT does not read, as reply warnings (vla.cpp's clients send
/// noise and token ids to every arch).
fn unread_fields(obs: &Observation) -> Vec<String> {
    let mut w: Vec<String> = super::common::unread_noise(obs, ARCH).into_iter().collect();
    let tokens = obs.tokens.as_ref().is_some_and(|t| !t.is_empty());
    if obs.prompt.as_ref().is_some_and(|p| !p.is_empty()) || tokens {
        w.push("act takes no instruction: the request's prompt was not used".to_owned());
    }
    w
}

impl Policy for ActPolicy {
    batch::one_run_policy!();
}

/// A random-weight ACT file of `cfg`'s sizes (matrices of type `ty`, kernels and the rest
/// f32), camera names `cam{i}`.
pub fn random_writer(cfg: &ActConfig, seed: u64, ty: GgmlType) -> Result<GgufWriter<'static>> {
    let mut w = GgufWriter::new();
    cfg.write(&mut w)?;
    w.add_metadata("general.name", "act random-weight model")?;
    let shapes = cfg.tensor_shapes()?;
    let matrix = |name: &str| kernel_side(name).is_none() && !["pos_1d", "dec.pos"].contains(&name);
    super::common::add_random_tensors(&mut w, &shapes, seed, ty, matrix)?;
    Ok(w)
}

impl OneRun for ActPolicy {
    type Key = Vec<FrameKey>;
    type Ctx = ();

    fn stage(&self, obs: &Observation) -> Result<Staged<Vec<FrameKey>, ()>> {
        let frames = self.frames(obs)?;
        let cfg = &self.cfg;
        let state = match &self.state_norm {
            Some(n) => Some(n.normalize_state(obs, cfg.state_dim, cfg.state_dim)?),
            None => {
                state_values(obs, 0, 0)?;
                None
            }
        };
        let key: Vec<FrameKey> = frames.iter().map(|(k, _)| *k).collect();
        let mut named: Named = frames
            .into_iter()
            .enumerate()
            .map(|(i, (_, t))| (graphs::frame_input(i), t))
            .collect();
        if let Some(s) = state {
            named.push((graphs::STATE.into(), Tensor::from_f32(vec![1, s.len()], s)?));
        }
        Ok(Staged {
            key,
            inputs: named,
            ctx: (),
        })
    }

    fn run(&mut self, key: &Vec<FrameKey>, requests: &[Named]) -> Result<Outputs> {
        let (cfg, pixels) = (&self.cfg, &self.pixels);
        self.graphs
            .run(key, requests, |f| Self::build(f, cfg, key, pixels))
    }

    fn finish(
        &mut self,
        obs: &Observation,
        _: (),
        outputs: Vec<Vec<f32>>,
        _: Option<&[f32]>,
    ) -> Result<ActionChunk> {
        let dim = self.cfg.action_dim;
        Ok(ActionChunk {
            actions: self.action_norm.unnormalize_rows(&outputs[0], dim, dim),
            chunk_size: self.cfg.chunk_size,
            action_dim: dim,
            times: StageTimes::default(),
            counters: Default::default(),
            batch: 1,
            warnings: unread_fields(obs),
            instruction: Default::default(),
        })
    }

    fn counters(&self) -> RunCounters {
        self.graphs.counters()
    }
}
