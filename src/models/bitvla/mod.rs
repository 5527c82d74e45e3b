//! BitVLA (ustcwhy/BitVLA): LLaVA around BitNet b1.58 — a SigLIP tower whose linears are
//! ternary (BitLinear: absmean ternary weights, per-token int8 activations), read at its last
//! layer without the final norm; LLaVA's two-layer GELU projector; BitNet b1.58-2B (GQA,
//! ReLU² gated FFN, `attn_sub_norm` before `attn_o` and `ffn_sub_norm` before `ffn_down`, every
//! projection ternary) run **bidirectionally** over the chat-templated prompt whose image and
//! proprio placeholders hold the patches and the proprio feature, then 56 zeroed action slots
//! and the stop token; OpenVLA-OFT's L1 head at the rows before the slots. One pass, served by
//! [`OpenVlaPolicy`]. Keys and tensor names are vla.cpp's `bitvla` layout where it has them;
//! ternary matrices are stored in [`crate::ops::ternary`]'s packing (`<site>.weight` I8
//! `[N, K / 4]`, `<site>.scale` F32 `[1]`: the step) and run as integer sites
//! ([`crate::foldquant::ternary_form`]).

pub mod graphs;

use super::common::SplitMix64;
use super::openvla::{self, ActionIo, LmDims, OpenVlaArch, OpenVlaPolicy, PromptShape};
use super::openvla_oft::OftHead;
use crate::config::limits::{MAX_IMAGES, MAX_LAYERS};
use crate::config::{bounded, first_failing, positive, Keys, Section};
use crate::gguf::{GgmlType, GgufFile, GgufWriter};
use crate::graph::{GraphBuilder, NodeId};
use crate::modules::vision::{check_geometry, PatchPositions, TowerStyle, VisionConfig};
use crate::ops::ternary;
use crate::preprocess::{CameraInput, PadAlign, PixelMap, Resize};
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};

pub const ARCH: &str = "bitvla";

/// A BitVLA policy.
pub type BitvlaPolicy = OpenVlaPolicy<BitvlaConfig>;

/// The SigLIP tower: `vit.{hidden,layers,heads,inter,image_size,patch_size,num_images}`,
/// `vit.ln_eps` (`vit.head_dim`, `vit.n_patches` written for vla.cpp).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TowerConfig {
    pub hidden: usize,
    /// Layers kept: LLaVA reads the last one's output (no final norm).
    pub layers: usize,
    pub heads: usize,
    pub inter: usize,
    pub image_size: usize,
    pub patch_size: usize,
    pub ln_eps: f32,
    pub num_images: usize,
}

impl Section for TowerConfig {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        k.usize("vit.hidden", &mut self.hidden)?;
        k.usize("vit.layers", &mut self.layers)?;
        k.usize("vit.heads", &mut self.heads)?;
        let (h, n) = (self.hidden, self.heads.max(1));
        k.derived("vit.head_dim", &|| h / n)?;
        k.usize("vit.inter", &mut self.inter)?;
        k.usize("vit.image_size", &mut self.image_size)?;
        k.usize("vit.patch_size", &mut self.patch_size)?;
        let p = match self.patch_size {
            0 => 0,
            p => (self.image_size / p).pow(2),
        };
        k.derived("vit.n_patches", &|| p)?;
        k.usize("vit.num_images", &mut self.num_images)?;
        k.f32("vit.ln_eps", &mut self.ln_eps)
    }

    fn check(&self) -> std::result::Result<(), String> {
        positive("vit.hidden", self.hidden)?;
        positive("vit.inter", self.inter)?;
        bounded("vit.layers", self.layers, 1, MAX_LAYERS)?;
        bounded("vit.heads", self.heads, 1, self.hidden)?;
        bounded("vit.num_images", self.num_images, 1, MAX_IMAGES)?;
        first_failing(&[(
            self.hidden.is_multiple_of(self.heads),
            "vit.hidden must be a multiple of vit.heads",
        )])?;
        check_geometry(self.image_size, self.patch_size, self.ln_eps)
    }
}

impl TowerConfig {
    /// Patches per camera.
    pub fn n_patches(&self) -> usize {
        (self.image_size / self.patch_size).pow(2)
    }

    /// The tower as [`crate::modules::vision::vision_tower`] builds it (`vit.*`).
    pub fn tower(&self) -> VisionConfig {
        VisionConfig {
            prefix: "vit",
            hidden: self.hidden,
            layers: self.layers,
            heads: self.heads,
            inter: self.inter,
            image_size: self.image_size,
            patch_size: self.patch_size,
            ln_eps: self.ln_eps,
            positions: PatchPositions::Grid,
            style: TowerStyle::SiglipLast,
        }
    }
}

/// BitVLA's sizes and settings.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BitvlaConfig {
    pub vision: TowerConfig,
    pub lm: LmDims,
    pub io: ActionIo,
    pub head: OftHead,
    /// The placeholders the patches and the proprio feature replace (`tokens.image_id`,
    /// `tokens.proprio_id`: `<|image_pad|>` 128010, `<proprio_pad>` 128011).
    pub image_id: usize,
    pub proprio_id: usize,
}

impl Section for BitvlaConfig {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        self.vision.keys(k)?;
        self.lm.keys(k)?;
        self.io.keys(k)?;
        self.head.keys(k)?;
        k.usize("tokens.image_id", &mut self.image_id)?;
        k.usize("tokens.proprio_id", &mut self.proprio_id)
    }

    fn check(&self) -> std::result::Result<(), String> {
        self.vision.check()?;
        self.lm.check()?;
        self.io.check()?;
        self.head.check()?;
        self.io.check_vocab(self.lm.vocab)?;
        for (key, id) in [
            ("tokens.image_id", self.image_id),
            ("tokens.proprio_id", self.proprio_id),
        ] {
            if id >= self.lm.vocab {
                return Err(format!(
                    "{key} {id} is outside the vocabulary ({})",
                    self.lm.vocab
                ));
            }
        }
        match self.image_id != self.proprio_id {
            true => Ok(()),
            false => Err("tokens.image_id and tokens.proprio_id must differ".into()),
        }
    }
}

impl BitvlaConfig {
    /// Every camera's patches: the image placeholders a prompt holds.
    pub fn image_rows(&self) -> usize {
        self.vision.n_patches() * self.vision.num_images
    }

    /// The action slots: chunk x action_dim.
    pub fn slots(&self) -> usize {
        self.io.chunk * self.io.action_dim
    }
}

/// The fine-tunes' chat template (BitVLA's `convert_ckpt.py`), the content as the LIBERO
/// client builds it: every camera's 256 image placeholders, the proprio placeholder, the
/// question with the task lower-cased.
const SYSTEM: &str = "System: A chat between a curious human and an artificial intelligence assistant. The assistant gives helpful, detailed, and polite answers to the human's questions.<|eot_id|>";

impl OpenVlaArch for BitvlaConfig {
    const ARCH: &'static str = ARCH;

    fn num_images(&self) -> usize {
        self.vision.num_images
    }

    /// SigLIP's processor: a bicubic stretch to the model's size, then `2x - 1`.
    fn camera(&self) -> CameraInput {
        CameraInput::square(
            self.vision.image_size,
            Resize::StretchBicubicPillow,
            0.0,
            PadAlign::Center,
            PixelMap::MinusOneToOne,
        )
    }

    fn lm(&self) -> &LmDims {
        &self.lm
    }

    fn io(&self) -> &ActionIo {
        &self.io
    }

    /// The chat-templated prompt (the tokenizer adds BOS).
    fn prompt(&self, task: &str) -> String {
        let images = "<|image_pad|>".repeat(self.image_rows());
        format!(
            "{SYSTEM}User: {images}<proprio_pad>What action should the robot take to {}?<|eot_id|>Assistant: ",
            task.to_lowercase().trim()
        )
    }

    fn other_rows(&self) -> usize {
        self.slots() + 1
    }

    /// The start of the prompt's one run of image placeholders (every camera's patches),
    /// which the proprio placeholder must follow; any other placeholder is an error.
    fn image_start(&self, ids: &[u32]) -> Result<usize> {
        let (img, pro) = (self.image_id as u32, self.proprio_id as u32);
        let n = self.image_rows();
        let bad = |why: String| Error::InvalidArgument(format!("bitvla prompt: {why}"));
        let start = ids.iter().position(|&t| t == img).ok_or_else(|| {
            bad(format!(
                "no image placeholders (id {img}): the prompt must hold {n} of them, then the proprio placeholder (id {pro})"
            ))
        })?;
        let run = ids[start..].iter().take_while(|&&t| t == img).count();
        let others = ids.iter().filter(|&&t| t == img).count() - run;
        let pro_at = ids.iter().position(|&t| t == pro);
        let pros = ids.iter().filter(|&&t| t == pro).count();
        if run != n || others != 0 || pro_at != Some(start + n) || pros != 1 {
            return Err(bad(format!(
                "{} image placeholders ({run} in the first run) and {pros} proprio placeholders; it must hold one run of {n} (every camera's patches) followed by one proprio placeholder",
                run + others
            )));
        }
        Ok(start)
    }

    fn placeholders(&self) -> Vec<(u32, usize)> {
        vec![
            (self.image_id as u32, self.image_rows()),
            (self.proprio_id as u32, 1),
        ]
    }

    /// A LIBERO task through the template where the file has a tokenizer (a task of another
    /// length compiles its own graph on first sight); else the placeholders first, as
    /// `vla-bench` sends them, and 32 ids after.
    fn first_prompt(&self, tokenizer: Option<&Tokenizer>) -> PromptShape {
        let task = "pick up the black bowl next to the plate and place it on the plate";
        let ids = tokenizer.and_then(|t| t.encode(&self.prompt(task)).ok());
        let shape = ids.and_then(|ids| {
            let image_start = self.image_start(&ids).ok()?;
            Some(PromptShape {
                len: ids.len(),
                image_start,
            })
        });
        shape.unwrap_or(PromptShape {
            len: self.image_rows() + 1 + 32,
            image_start: 0,
        })
    }

    fn predict(&self, g: &mut GraphBuilder, p: PromptShape) -> Result<NodeId> {
        graphs::predict(g, self, p)
    }

    fn translate(file: GgufFile) -> Result<GgufFile> {
        crate::foldquant::ternary_form(crate::models::vlacpp::bitvla::translate(file)?)
    }
}

/// Whether tensor `name` is one of BitVLA's ternary matrices: every linear of the tower's and
/// the language model's layers (the projector, embeddings, proprio projector and head are
/// float, as in the reference).
pub fn is_ternary(name: &str) -> bool {
    const LINEARS: [&str; 9] = [
        "attn_q", "attn_k", "attn_v", "attn_o", "fc1", "fc2", "ffn_gate", "ffn_up", "ffn_down",
    ];
    let layer = name.starts_with("vit.blk.") || name.starts_with("lm.blk.");
    let linear = name
        .strip_suffix(".weight")
        .and_then(|s| s.rsplit('.').next())
        .is_some_and(|l| LINEARS.contains(&l));
    layer && linear
}

/// Adds the ternary matrix `<site>.weight` of the f32 `values` `[n, k]`: quantized as
/// BitNet does ([`ternary::absmean`]), the codes packed (`<site>.weight` I8 `[n, k / 4]`) and
/// the step (`<site>.scale` F32 `[1]`).
pub fn add_ternary(
    w: &mut GgufWriter,
    name: &str,
    n: usize,
    k: usize,
    values: &[f32],
) -> Result<()> {
    let site = name.strip_suffix(".weight").unwrap_or(name);
    if !k.is_multiple_of(ternary::CODES_PER_WORD) {
        return Err(Error::InvalidArgument(format!(
            "{site}: {k} inputs; ternary matrices here take a multiple of {} (every released BitVLA size is)",
            ternary::CODES_PER_WORD
        )));
    }
    let (codes, step) = ternary::absmean(values);
    let packed = ternary::pack(&codes, k)?;
    w.add_tensor(
        format!("{site}.weight"),
        GgmlType::I8,
        &[(k / 4) as u64, n as u64],
        packed,
    )?;
    w.add_f32(format!("{site}.scale"), GgmlType::F32, &[1], &[step])
}

/// A random-weight file of `cfg`'s sizes: the ternary matrices as [`add_ternary`] stores
/// them, the other matrices and the token table of type `ty` (as `vla-convert bitvla
/// --dtype`), the rest f32 ([`openvla::random_writer_with`]).
pub fn random_writer(cfg: &BitvlaConfig, seed: u64, ty: GgmlType) -> Result<GgufWriter<'static>> {
    let table = |name: &str| name == "token_embd.weight";
    let mut w = openvla::random_writer_with(cfg, seed, ty, None, table, is_ternary)?;
    let mut rng = SplitMix64(seed ^ 0x7E57_7E57);
    for (name, shape) in cfg.tensor_shapes()?.iter().filter(|(n, _)| is_ternary(n)) {
        let [n, k] = shape[..] else { continue };
        let bound = (3.0 / k as f64).sqrt();
        let v: Vec<f32> = (0..n * k)
            .map(|_| ((rng.next_f64() * 2.0 - 1.0) * bound) as f32)
            .collect();
        add_ternary(&mut w, name, n, k, &v)?;
    }
    Ok(w)
}
