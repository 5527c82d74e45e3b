//! What the OpenVLA family shares (VLA-Adapter, OpenVLA-OFT, BitVLA): the language model's config
//! part (`lm.*`), the camera inputs and the graph's inputs (a frame per camera through
//! Prismatic's two towers, [`crate::modules::prismatic`]), the proprio projector, OpenVLA's
//! BOUNDS_Q99 statistics per suite, random-weight files, and the one-pass policy
//! ([`OpenVlaPolicy`]) an arch plugs into through [`OpenVlaArch`].

mod policy;

pub use policy::{suite, OpenVlaPolicy};

use crate::config::limits::{MAX_CHUNK, MAX_LAYERS, MAX_ROBOT_DIM, MAX_SEQUENCE};
use crate::config::{self, bounded, positive, Keys, Section};
use crate::gguf::{GgmlType, GgufFile, GgufWriter};
use crate::graph::{declared_weights, matmul_weights, Graph, GraphBuilder, NodeId};
use crate::layers::{frame_map, linear, GatedActivation};
use crate::modules::decoder::DecoderConfig;
use crate::modules::prismatic::{image_features, project, PrismaticConfig};
use crate::preprocess::{CameraInput, PadAlign, PixelMap, Resize};
use crate::tokenizer::Tokenizer;
use crate::Result;

/// An OpenVLA-family arch served by [`OpenVlaPolicy`].
pub trait OpenVlaArch: Section + Clone + Default + Send + 'static {
    /// `general.architecture`.
    const ARCH: &'static str;
    /// How many cameras a request carries.
    fn num_images(&self) -> usize;
    /// One camera's host-side input (every camera's: the model's square frame).
    fn camera(&self) -> CameraInput;
    fn lm(&self) -> &LmDims;
    fn io(&self) -> &ActionIo;
    /// The reference client's prompt around the task.
    fn prompt(&self, task: &str) -> String;
    /// The prompt's ids as the model reads them (OpenVLA-OFT appends its empty token where
    /// the ids do not end with it); as given by default.
    fn model_ids(&self, ids: Vec<u32>) -> Vec<u32> {
        ids
    }
    /// The sequence's rows besides the prompt's.
    fn other_rows(&self) -> usize;
    /// Where the model's ids place the images: 0 where they precede the prompt (the
    /// default); BitVLA's prompt holds placeholders, whose run this finds and checks.
    fn image_start(&self, _ids: &[u32]) -> Result<usize> {
        Ok(0)
    }
    /// The placeholders a request's token ids must hold ([`crate::policy::PolicyInfo`]).
    fn placeholders(&self) -> Vec<(u32, usize)> {
        Vec::new()
    }
    /// The prompt the graph is first compiled for (its length and [`Self::image_start`]),
    /// given the file's tokenizer where it has one.
    fn first_prompt(&self, _tokenizer: Option<&Tokenizer>) -> PromptShape {
        PromptShape {
            len: 48, // LIBERO's tasks run 30-60 tokens
            image_start: 0,
        }
    }
    /// The predict graph for a prompt of `p.len` tokens: inputs [`IDS`] `[p.len + 1]`,
    /// [`STATE`] and each camera's [`frame_input`]; output the normalised chunk
    /// `[chunk, action_dim]`.
    fn predict(&self, g: &mut GraphBuilder, p: PromptShape) -> Result<NodeId>;
    /// vla.cpp's layout of the arch translated at load ([`crate::models::vlacpp`]).
    fn translate(file: GgufFile) -> Result<GgufFile> {
        Ok(file)
    }

    fn read(file: &GgufFile) -> Result<Self> {
        config::read(file, Self::ARCH, Self::default())
    }

    fn write(&self, w: &mut GgufWriter) -> Result<()> {
        w.add_metadata("general.architecture", Self::ARCH)?;
        config::write(self, w, Self::ARCH)
    }

    /// The longest prompt (in tokens) a request may carry: the references have no bound but
    /// their language model's, this runtime one on the sequence ([`MAX_SEQUENCE`] rows, room
    /// left for the token [`Self::model_ids`] may add).
    fn max_prompt(&self) -> usize {
        MAX_SEQUENCE.saturating_sub(self.other_rows() + 1)
    }

    /// Every weight the graph reads with its shape, then the statistics.
    fn tensor_shapes(&self) -> Result<Vec<(String, Vec<usize>)>> {
        let mut shapes = declared_weights(&[declaring_graph(self)?])?;
        shapes.extend(statistics(self.io(), None));
        Ok(shapes)
    }
}

/// What a predict graph is compiled for: the prompt's length (in the model's ids) and where
/// its image placeholders start ([`OpenVlaArch::image_start`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PromptShape {
    pub len: usize,
    pub image_start: usize,
}

/// The predict graph for the first prompt, weights declared only.
fn declaring_graph<A: OpenVlaArch>(cfg: &A) -> Result<Graph> {
    let mut g = GraphBuilder::over(None);
    let out = cfg.predict(&mut g, cfg.first_prompt(None))?;
    g.build(&[out])
}

/// The language model: `lm.{hidden,layers,q_heads,kv_heads,head_dim,inter,vocab}`,
/// `lm.rope_theta`, `lm.rms_eps` (SwiGLU; q/k/v biases as the arch says: Qwen2.5's).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LmDims {
    pub hidden: usize,
    pub layers: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub inter: usize,
    pub vocab: usize,
    pub rope_theta: f32,
    pub rms_eps: f32,
}

impl Section for LmDims {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        k.usize("lm.hidden", &mut self.hidden)?;
        k.usize("lm.layers", &mut self.layers)?;
        k.usize("lm.q_heads", &mut self.q_heads)?;
        k.usize("lm.kv_heads", &mut self.kv_heads)?;
        k.usize("lm.head_dim", &mut self.head_dim)?;
        k.usize("lm.inter", &mut self.inter)?;
        k.usize("lm.vocab", &mut self.vocab)?;
        k.f32("lm.rope_theta", &mut self.rope_theta)?;
        k.f32("lm.rms_eps", &mut self.rms_eps)
    }

    fn check(&self) -> std::result::Result<(), String> {
        positive("lm.hidden", self.hidden)?;
        positive("lm.inter", self.inter)?;
        positive("lm.vocab", self.vocab)?;
        bounded("lm.layers", self.layers, 1, MAX_LAYERS)?;
        bounded("lm.q_heads", self.q_heads, 1, self.hidden)?;
        bounded("lm.kv_heads", self.kv_heads, 1, self.q_heads)?;
        self.decoder(false).check().map_err(|e| format!("lm: {e}"))
    }
}

impl LmDims {
    /// Its layers as [`crate::modules::decoder`] builds them.
    pub fn decoder(&self, qkv_bias: bool) -> DecoderConfig {
        DecoderConfig {
            q_heads: self.q_heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            rope_theta: self.rope_theta,
            norm_eps: self.rms_eps,
            ffn: GatedActivation::Silu,
            qk_norm: false,
            qkv_bias,
        }
    }
}

/// The robot's side: `action.{chunk,action_dim,proprio_dim}` and the stop token
/// (`tokens.stop_id`) that ends the sequence.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ActionIo {
    pub chunk: usize,
    pub action_dim: usize,
    pub proprio_dim: usize,
    pub stop_id: usize,
}

impl Section for ActionIo {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        k.usize("action.chunk", &mut self.chunk)?;
        k.usize("action.action_dim", &mut self.action_dim)?;
        k.usize("action.proprio_dim", &mut self.proprio_dim)?;
        k.usize("tokens.stop_id", &mut self.stop_id)
    }

    fn check(&self) -> std::result::Result<(), String> {
        bounded("action.chunk", self.chunk, 1, MAX_CHUNK)?;
        bounded("action.action_dim", self.action_dim, 1, MAX_ROBOT_DIM)?;
        bounded("action.proprio_dim", self.proprio_dim, 1, MAX_ROBOT_DIM)?;
        Ok(())
    }
}

impl ActionIo {
    /// Checks `stop_id` against the vocabulary.
    pub fn check_vocab(&self, vocab: usize) -> std::result::Result<(), String> {
        match self.stop_id < vocab {
            true => Ok(()),
            false => Err(format!(
                "tokens.stop_id {} is outside the vocabulary ({vocab})",
                self.stop_id
            )),
        }
    }
}

/// The statistics' tensors, OpenVLA's BOUNDS_Q99 (`<what>_{q01,q99,mask}`, with `.<suite>`
/// after the name for a file carrying several).
pub fn statistics(io: &ActionIo, suite: Option<&str>) -> Vec<(String, Vec<usize>)> {
    let e = suite.map_or(String::new(), |s| format!(".{s}"));
    let mut v = Vec::new();
    for (what, dim) in [("state", io.proprio_dim), ("action", io.action_dim)] {
        for stat in ["q01", "q99", "mask"] {
            v.push((format!("{what}_{stat}{e}"), vec![dim]));
        }
    }
    v
}

/// DINOv2's pixels: ImageNet's statistics as the released processor config stores them
/// (`tvf_normalize_params`, rounded to bf16), which override the exact ones. Written out in
/// full: each is exactly a bf16 value.
#[allow(clippy::excessive_precision)]
pub const DINO_PIXELS: PixelMap = PixelMap::MeanStd {
    mean: [0.484375, 0.455078125, 0.40625],
    std: [0.228515625, 0.2236328125, 0.224609375],
};
/// SigLIP's pixels: `2x - 1`.
pub const SIG_PIXELS: PixelMap = PixelMap::MinusOneToOne;

/// The two towers' camera inputs (DINOv2's, SigLIP's): the processor's stretch to the model's
/// size, then each tower's value map.
pub fn cameras(vision: &PrismaticConfig) -> [CameraInput; 2] {
    [DINO_PIXELS, SIG_PIXELS].map(|pixels| {
        CameraInput::square(
            vision.image_size,
            Resize::StretchBicubicPillow,
            0.0,
            PadAlign::Center,
            pixels,
        )
    })
}

/// Input: the prompt's token ids, then the stop token's: `[P + 1]` (f32).
pub const IDS: &str = "ids";
/// Input: the normalised state `[1, proprio_dim]`.
pub const STATE: &str = "state";

/// Camera `i`'s frame, stretched to the model's size on the host: bytes `[S, S, 3]`.
pub fn frame_input(i: usize) -> String {
    format!("frame.{i}")
}

/// The towers' pixels `[3, S, S]` (DINOv2's, SigLIP's) from a frame `x` `[S, S, 3]` of bytes:
/// each tower's value map ([`cameras`]).
pub fn tower_pixels(
    g: &mut GraphBuilder,
    vision: &PrismaticConfig,
    x: NodeId,
) -> Result<[NodeId; 2]> {
    let mut out = [x; 2];
    for ((cam, id), o) in cameras(vision).iter().zip(["dino", "sig"]).zip(&mut out) {
        *o = pixels(g, cam, x, id)?;
    }
    Ok(out)
}

/// A tower's pixels `[3, S, S]` from a frame `x` `[S, S, 3]` of bytes through `camera`'s
/// value map (constants `pixels.<id>.*`).
pub fn pixels(g: &mut GraphBuilder, camera: &CameraInput, x: NodeId, id: &str) -> Result<NodeId> {
    let plan = camera.frame_plan(camera.model_frame());
    let name = format!("pixels.{id}");
    let y = frame_map(g, x, &name, &plan.scale, Some(&plan.offset))?;
    g.permute(y, &[2, 0, 1])
}

/// Every camera's fused features through the projector: `[num_images * n_patches, out]`.
pub fn patches(
    g: &mut GraphBuilder,
    vision: &PrismaticConfig,
    views: &[(NodeId, NodeId)],
    out: usize,
) -> Result<NodeId> {
    let feats = views
        .iter()
        .map(|&(d, s)| image_features(g, d, s, vision))
        .collect::<Result<Vec<_>>>()?;
    let x = match feats.as_slice() {
        [one] => *one,
        _ => g.concat(&feats, 0)?,
    };
    project(g, x, vision, out)
}

/// The graph's inputs ([`IDS`], [`STATE`], the frames) and the projected patches of every
/// camera: `(ids, state, patches)`.
pub fn inputs(
    g: &mut GraphBuilder,
    vision: &PrismaticConfig,
    io: &ActionIo,
    n_prompt: usize,
    out: usize,
) -> Result<(NodeId, NodeId, NodeId)> {
    let s = vision.image_size;
    let views = (0..vision.num_images)
        .map(|i| {
            let x = g.input_u8(frame_input(i), &[s, s, 3]);
            let [d, sg] = tower_pixels(g, vision, x)?;
            Ok((d, sg))
        })
        .collect::<Result<Vec<_>>>()?;
    let ids = g.input(IDS, &[n_prompt + 1]);
    let state = g.input(STATE, &[1, io.proprio_dim]);
    let patches = patches(g, vision, &views, out)?;
    Ok((ids, state, patches))
}

/// The proprio projector over the normalised state `[1, proprio_dim]`: `fc1`, GELU, `fc2`,
/// `[1, hidden]`.
pub fn proprio(g: &mut GraphBuilder, state: NodeId, hidden: usize) -> Result<NodeId> {
    let x = linear(g, state, "aex.proprio.fc1", hidden, true)?;
    let x = g.gelu_erf(x);
    linear(g, x, "aex.proprio.fc2", hidden, true)
}

/// A random-weight file of `cfg`'s sizes (the matmul weights of type `ty`, the rest f32),
/// with `tokenizer` if given; its statistics mask every dimension but the last (a gripper).
pub fn random_writer<A: OpenVlaArch>(
    cfg: &A,
    seed: u64,
    ty: GgmlType,
    tokenizer: Option<&Tokenizer>,
) -> Result<GgufWriter<'static>> {
    random_writer_with(cfg, seed, ty, tokenizer, |_| false, |_| false)
}

/// [`random_writer`] where `also_typed` names the tensors besides the matmul weights that
/// take `ty`, and `skip` those the caller adds itself (BitVLA's ternary matrices).
pub fn random_writer_with<A: OpenVlaArch>(
    cfg: &A,
    seed: u64,
    ty: GgmlType,
    tokenizer: Option<&Tokenizer>,
    also_typed: impl Fn(&str) -> bool,
    skip: impl Fn(&str) -> bool,
) -> Result<GgufWriter<'static>> {
    let mut w = GgufWriter::new();
    cfg.write(&mut w)?;
    w.add_metadata("general.name", format!("{} random-weight model", A::ARCH))?;
    if let Some(t) = tokenizer {
        t.write_gguf(&mut w)?;
    }
    let shapes = cfg.tensor_shapes()?;
    let matmul = matmul_weights(&[declaring_graph(cfg)?]);
    let (masks, rest): (Vec<_>, Vec<_>) = (shapes.into_iter())
        .filter(|(n, _)| !skip(n))
        .partition(|(n, _)| n.ends_with("_mask"));
    let matrix = |name: &str| matmul.contains(name) || also_typed(name);
    super::common::add_random_tensors(&mut w, &rest, seed, ty, matrix)?;
    for (name, shape) in masks {
        let d = shape[0];
        let v: Vec<f32> = (0..d).map(|i| f32::from(u8::from(i + 1 < d))).collect();
        w.add_f32(name, GgmlType::F32, &[d as u64], &v)?;
    }
    Ok(w)
}
