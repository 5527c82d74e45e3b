//! TurboVLA checkpoint (H-EmbodVis/TurboVLA) -> `turbovla` GGUF in vla.cpp's layout
//! (schema: docs/GGUF.md), plus the statistics and the tokenizer vla.cpp's files lack.
//!
//! Reads the released `.pth` (`torch.save({"model_state_dict": ..., "model_config":
//! TurboVLAConfig.to_dict()})`, or a folder holding exactly one), or a folder with
//! `model.safetensors` and `config.json` (the model_config), as vla.cpp's
//! `convert_turbovla_to_gguf.py` does; the BERT folder the text encoder was built from
//! (`config.json` for the head count, the WordPiece tokenizer: shipped, and it gives the
//! special ids and the training instructions' ids); DINOv3's `config.json` (head count,
//! rotary theta, registers), else ViT-B/16's values where the config names that backbone;
//! and the normalisation statistics, which the checkpoint does not carry (`--statistics`).
//!
//! The tensors are vla.cpp's: DINOv3's LayerScale folded into `attn_o` and `fc2` (rows and
//! bias), a missing `k_proj` bias written as zeros, the patch kernel as the matrix
//! `[hidden, 3 p p]`, the class and register tokens without their leading 1; DINOv3's final
//! norm, BERT's pooler and the mask token are left out. Every other checkpoint tensor must be
//! converted: one the layout does not know (another variant's) is an error. Without
//! `--dtype` each tensor keeps its stored type as vla.cpp's `gguf_common.add` does (F32 and
//! BF16 as they are, F16 widened to F32; the folded products rounded to the type PyTorch
//! computes them in); with it, the matrices take that type and the rest F32.

use super::torch_pt::{TorchCheckpoint, TorchDtype, TorchState};
use super::{ckpt_err, Safetensors};
use crate::gguf::{GgmlType, GgufWriter};
use crate::models::turbovla::{
    is_matrix, tensor_shapes, SpecialIds, TextGroup, TurboConfig, TurboStats, ARCH,
};
use crate::modules::bert::BertConfig;
use crate::modules::dinov3::Dinov3Config;
use crate::tokenizer::{Model, Tokenizer};
use crate::{Error, Result};
use serde_json::Value as Json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const VIT: &str = "vision_encoder.backbone";
const TEXT: &str = "text_encoder.bert";
const VIT_PROJ: &str = "vision_projection";
const FUSION: &str = "vision_language_interaction.fusion_layers";
const VL_TEXT: &str = "vision_language_interaction.text_layers";
const ACT_DEC: &str = "action_head.decoder";
const STATE_PROJ: &str = "action_head.state_projection";
const VIEW_EMB: &str = "view_embedding";
const TEXT_PROJ: &str = "text_encoder.text_projection";

/// What inference never reads (vla.cpp leaves them out too): DINOv3's final norm (TurboVLA
/// taps the last layer before it), BERT's pooler, the MAE mask token.
const UNUSED: [&str; 3] = [
    "vision_encoder.backbone.norm.",
    "text_encoder.bert.pooler.",
    "vision_encoder.backbone.embeddings.mask_token",
];

/// The values vla.cpp uses for `facebook/dinov3-vitb16-pretrain-lvd1689m` (a gated
/// repository; the fine-tuned weights are in the checkpoint): rope theta, registers, heads.
const DINOV3_VITB16: (f32, usize, usize) = (100.0, 4, 12);

/// The runtime's epsilons (modules::bert, modules::dinov3): other values are refused.
const BERT_EPS: f64 = 1e-12;
const DINOV3_EPS: f64 = 1e-5;

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Type of the matrices; `None`: every tensor as stored (vla.cpp's rule).
    pub dtype: Option<GgmlType>,
    /// `libero` or a JSON file (required: the checkpoint has none).
    pub statistics: Option<PathBuf>,
    /// The BERT folder (`config.json`, `vocab.txt` or `tokenizer.json`); default: the
    /// model_config's `text.model_name_or_path` as a folder.
    pub bert: Option<PathBuf>,
    /// DINOv3's `config.json` (or its folder); default: `vision.model_name_or_path` as a
    /// folder, else ViT-B/16's values where it names `dinov3-vitb16`.
    pub dinov3: Option<PathBuf>,
}

pub struct Converted {
    pub config: TurboConfig,
    pub writer: GgufWriter<'static>,
    pub notes: Vec<String>,
}

/// The `.pth` a checkpoint path names: the file itself, or the one `.pth`/`.pt` in a folder
/// without `model.safetensors`; `None` for the safetensors form.
pub fn torch_file(ckpt: &Path) -> Result<Option<PathBuf>> {
    if ckpt.is_file() {
        return Ok(Some(ckpt.to_owned()));
    }
    if !ckpt.is_dir() {
        return Err(ckpt_err(ckpt, "does not exist"));
    }
    if ckpt.join("model.safetensors").is_file()
        || ckpt.join("model.safetensors.index.json").is_file()
    {
        return Ok(None);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(ckpt)
        .map_err(|e| ckpt_err(ckpt, format!("cannot list: {e}")))?
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .is_some_and(|x| x.eq_ignore_ascii_case("pth") || x.eq_ignore_ascii_case("pt"))
        })
        .collect();
    found.sort();
    match found.len() {
        1 => Ok(found.pop()),
        n => Err(ckpt_err(
            ckpt,
            format!(
                "no model.safetensors and {n} .pth/.pt files: a TurboVLA checkpoint is its .pth \
                 (pass the file), or a folder with model.safetensors + config.json"
            ),
        )),
    }
}

/// Whether `config` is a TurboVLA model_config (`TurboVLAConfig.to_dict()`).
pub fn is_turbovla_config(config: &Json) -> bool {
    config.get("name").and_then(Json::as_str) == Some("TurboVLA")
        || (config.get("interaction").is_some_and(Json::is_object)
            && config.get("action").is_some_and(Json::is_object)
            && config.get("vision").is_some_and(Json::is_object))
}

/// The checkpoint's weights, either form, by our reading of their names ([`our_name`]).
struct Weights {
    file: File,
    /// Our name -> the file's.
    names: BTreeMap<String, String>,
}

enum File {
    Torch(TorchState),
    St(Safetensors),
}

/// The name vla.cpp's layout knows `name` by: without a leading `module.`
/// (DistributedDataParallel's), and DINOv3's layers as transformers 4 names them
/// (`backbone.layer.{i}`; transformers 5 nests them as `backbone.model.layer.{i}`).
fn our_name(name: &str) -> String {
    let name = name.strip_prefix("module.").unwrap_or(name);
    match name.strip_prefix("vision_encoder.backbone.model.layer.") {
        Some(rest) => format!("{VIT}.layer.{rest}"),
        None => name.to_owned(),
    }
}

/// A stored tensor's element type, as far as the written type goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stored {
    F32,
    Bf16,
    F16,
    /// F64 (and any other: such a tensor fails to read anyway).
    Wide,
}

impl Stored {
    /// The GGUF type vla.cpp's `gguf_common.add` writes it as.
    fn as_written(self) -> GgmlType {
        match self {
            Stored::Bf16 => GgmlType::BF16,
            _ => GgmlType::F32,
        }
    }

    /// The type of a product of the two, as PyTorch promotes it.
    fn times(self, other: Stored) -> Stored {
        match self == other {
            true => self,
            false => match (self, other) {
                (Stored::Wide, _) | (_, Stored::Wide) => Stored::Wide,
                _ => Stored::F32,
            },
        }
    }

    /// `x` rounded to this type.
    fn round(self, x: f32) -> f32 {
        match self {
            Stored::Bf16 => half::bf16::from_f32(x).to_f32(),
            Stored::F16 => half::f16::from_f32(x).to_f32(),
            _ => x,
        }
    }
}

impl Weights {
    fn new(file: File) -> Result<Self> {
        let theirs: Vec<String> = match &file {
            File::Torch(t) => t.names().map(str::to_owned).collect(),
            File::St(st) => st.names().map(str::to_owned).collect(),
        };
        let mut names = BTreeMap::new();
        for n in theirs {
            let ours = our_name(&n);
            if let Some(other) = names.insert(ours.clone(), n.clone()) {
                let path = match &file {
                    File::Torch(t) => t.path().to_owned(),
                    File::St(st) => st.path().to_owned(),
                };
                return Err(ckpt_err(
                    &path,
                    format!(
                        "{other:?} and {n:?} are both {ours:?} (a `module.` or `model.` prefix)"
                    ),
                ));
            }
        }
        Ok(Weights { file, names })
    }

    fn path(&self) -> &Path {
        match &self.file {
            File::Torch(t) => t.path(),
            File::St(st) => st.path(),
        }
    }

    fn names(&self) -> Vec<&str> {
        self.names.keys().map(String::as_str).collect()
    }

    fn contains(&self, name: &str) -> bool {
        self.names.contains_key(name)
    }

    fn shape(&self, name: &str) -> Option<&[usize]> {
        let n = self.names.get(name)?;
        match &self.file {
            File::Torch(t) => t.shape(n),
            File::St(st) => st.shape(n),
        }
    }

    fn require_shape(&self, name: &str) -> Result<&[usize]> {
        self.shape(name).ok_or_else(|| {
            ckpt_err(
                self.path(),
                format!("tensor {name:?} is missing (required by vla.cpp's turbovla layout)"),
            )
        })
    }

    /// The shape of a tensor sizes are read from: `rank` dims, none zero.
    fn sized(&self, name: &str, rank: usize) -> Result<&[usize]> {
        let shape = self.require_shape(name)?;
        if shape.len() != rank || shape.contains(&0) {
            return Err(ckpt_err(
                self.path(),
                format!("tensor {name:?} has shape {shape:?}, expected {rank} non-zero dimensions"),
            ));
        }
        Ok(shape)
    }

    fn stored(&self, name: &str) -> Stored {
        use safetensors::Dtype as D;
        let Some(n) = self.names.get(name) else {
            return Stored::Wide;
        };
        match &self.file {
            File::Torch(t) => match t.dtype(n) {
                Some(TorchDtype::F32) => Stored::F32,
                Some(TorchDtype::BF16) => Stored::Bf16,
                Some(TorchDtype::F16) => Stored::F16,
                _ => Stored::Wide,
            },
            File::St(st) => match st.dtype(n) {
                Some(D::F32) => Stored::F32,
                Some(D::BF16) => Stored::Bf16,
                Some(D::F16) => Stored::F16,
                _ => Stored::Wide,
            },
        }
    }

    fn f32(&self, name: &str) -> Result<Vec<f32>> {
        let Some(n) = self.names.get(name) else {
            return Err(ckpt_err(self.path(), format!("tensor {name:?} is missing")));
        };
        match &self.file {
            File::Torch(t) => t.f32(n),
            File::St(st) => st.f32(n),
        }
    }

    /// vla.cpp's `max_layer`: one more than the largest `{prefix}{i}.` index.
    fn layers(&self, prefix: &str) -> usize {
        self.names()
            .iter()
            .filter_map(|n| {
                n.strip_prefix(prefix)?
                    .split('.')
                    .next()?
                    .parse::<usize>()
                    .ok()
            })
            .map(|i| i + 1)
            .max()
            .unwrap_or(0)
    }
}

/// The checkpoint at `ckpt`: its weights, its model_config, and a note on where they came from.
fn open(ckpt: &Path) -> Result<(Weights, Json, String)> {
    if let Some(file) = torch_file(ckpt)? {
        let c = TorchCheckpoint::open(&file, "model_state_dict").map_err(|e| match e {
            Error::Checkpoint { path, reason } if reason.contains("\"model_state_dict\"") => {
                Error::Checkpoint {
                    path,
                    reason: format!("not a TurboVLA checkpoint: {reason}"),
                }
            }
            e => e,
        })?;
        let config = c.plain("model_config")?.ok_or_else(|| {
            ckpt_err(
                &file,
                "no model_config entry: the model's sizes and variant are unknown (TurboVLA's \
                 trainer saves TurboVLAConfig.to_dict() there)",
            )
        })?;
        let n = c.state.names().count();
        let note = format!("weights: {} ({n} tensors)", file.display());
        return Ok((Weights::new(File::Torch(c.state))?, config, note));
    }
    let st = Safetensors::open_dir(ckpt)?;
    let config_path = ckpt.join("config.json");
    if !config_path.is_file() {
        return Err(ckpt_err(
            ckpt,
            "model.safetensors without config.json: the model_config (TurboVLAConfig.to_dict()) is needed",
        ));
    }
    let config = super::read_json(&config_path)?;
    let w = Weights::new(File::St(st))?;
    let note = format!(
        "weights: {} ({} tensors)",
        w.path().display(),
        w.names.len()
    );
    Ok((w, config, note))
}

/// A model_config section's values, with the reference's dataclass defaults for missing keys.
struct Section<'a> {
    path: &'a Path,
    name: &'static str,
    value: Option<&'a Json>,
}

impl<'a> Section<'a> {
    fn new(path: &'a Path, config: &'a Json, name: &'static str) -> Result<Self> {
        let value = config.get(name);
        if value.is_some_and(|v| !v.is_object() && !v.is_null()) {
            return Err(ckpt_err(
                path,
                format!("model_config.{name} is not an object"),
            ));
        }
        Ok(Section {
            path,
            name,
            value: value.filter(|v| v.is_object()),
        })
    }

    fn get(&self, key: &str) -> Option<&'a Json> {
        self.value?.get(key).filter(|v| !v.is_null())
    }

    fn bad(&self, key: &str, want: &str) -> Error {
        ckpt_err(
            self.path,
            format!(
                "model_config.{}.{key} = {}: expected {want}",
                self.name,
                self.get(key).map_or("null".into(), Json::to_string)
            ),
        )
    }

    fn usize_or(&self, key: &str, default: usize) -> Result<usize> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_u64()
                .and_then(|x| usize::try_from(x).ok())
                .ok_or_else(|| self.bad(key, "a non-negative integer")),
        }
    }

    fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        self.get(key).map(|_| self.usize_or(key, 0)).transpose()
    }

    fn str_or(&self, key: &str, default: &'a str) -> Result<&'a str> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.as_str().ok_or_else(|| self.bad(key, "a string")),
        }
    }

    fn bool_or(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.as_bool().ok_or_else(|| self.bad(key, "true or false")),
        }
    }
}

/// Refuses what the runtime does not compute (vla.cpp's refusals, and the vision variants
/// it would convert wrongly); notes what it computes another way with the same result.
fn check_variant(path: &Path, config: &Json, notes: &mut Vec<String>) -> Result<()> {
    if let Some(name) = config.get("name").and_then(Json::as_str) {
        if name != "TurboVLA" {
            return Err(ckpt_err(
                path,
                format!("model_config.name {name:?}: not a TurboVLA config"),
            ));
        }
    }
    let text = Section::new(path, config, "text")?;
    let vision = Section::new(path, config, "vision")?;
    let inter = Section::new(path, config, "interaction")?;
    let refusals = [
        (
            inter.str_or("residual_style", "normalized")? != "normalized",
            "interaction.residual_style",
            "normalized",
        ),
        (
            inter.str_or("padding_strategy", "key_padding_mask")? != "key_padding_mask",
            "interaction.padding_strategy",
            "key_padding_mask",
        ),
        (
            text.bool_or("zero_padded_tokens", false)?,
            "text.zero_padded_tokens",
            "false",
        ),
        (
            !text.bool_or("sub_sentence_present", true)?,
            "text.sub_sentence_present",
            "true",
        ),
        (
            vision.str_or("position_embedding", "view")? != "view",
            "vision.position_embedding",
            "\"view\"",
        ),
    ];
    for (refused, key, supported) in refusals {
        if refused {
            let (section, k) = key.split_once('.').unwrap_or(("", key));
            let got = config
                .get(section)
                .and_then(|s| s.get(k))
                .map_or("?".into(), Json::to_string);
            return Err(ckpt_err(
                path,
                format!(
                    "unsupported TurboVLA variant: model_config.{key} = {got}; the runtime \
                     implements {key} = {supported} only (as vla.cpp)"
                ),
            ));
        }
    }
    if !vision.bool_or("encode_views_separately", true)? {
        notes.push(
            "vision.encode_views_separately = false: the reference encodes the views as one \
             batch, which gives each view the same tokens as encoding it alone"
                .into(),
        );
    }
    let groups = text.get("padding_length_by_instruction");
    let has_groups = groups
        .and_then(Json::as_object)
        .is_some_and(|g| !g.is_empty());
    if has_groups && text.get("padding_length").is_none() {
        return Err(ckpt_err(
            path,
            "model_config.text.padding_length_by_instruction without text.padding_length: the \
             reference refuses it (\"text.padding_length is required when instruction-specific \
             lengths are configured\")",
        ));
    }
    Ok(())
}

/// A config key the runtime implements one value of: the key, the test, the value.
type KeyCheck = (&'static str, fn(&Json) -> bool, &'static str);

const DINOV3_KEYS: [KeyCheck; 5] = [
    ("layer_norm_eps", |v| v.as_f64() == Some(DINOV3_EPS), "1e-5"),
    ("hidden_act", |v| v.as_str() == Some("gelu"), "\"gelu\""),
    ("use_gated_mlp", |v| v.as_bool() == Some(false), "false"),
    (
        "rope_normalize_coords",
        |v| v.as_str() == Some("separate"),
        "\"separate\"",
    ),
    (
        "model_type",
        |v| v.as_str().is_some_and(|t| t.starts_with("dinov3")),
        "a dinov3 model",
    ),
];

const BERT_KEYS: [KeyCheck; 3] = [
    ("layer_norm_eps", |v| v.as_f64() == Some(BERT_EPS), "1e-12"),
    ("hidden_act", |v| v.as_str() == Some("gelu"), "\"gelu\""),
    (
        "position_embedding_type",
        |v| v.as_str() == Some("absolute"),
        "\"absolute\"",
    ),
];

/// Refuses a key of `json` (the config.json at `file`) set to another value than the
/// runtime's `what` implements; an absent key is the model's default.
fn check_keys(file: &Path, json: &Json, what: &str, checks: &[KeyCheck]) -> Result<()> {
    for (key, ok, want) in checks {
        if let Some(v) = json.get(*key).filter(|v| !v.is_null() && !ok(v)) {
            return Err(ckpt_err(
                file,
                format!("{key} = {v}: the runtime's {what} implements {want} only"),
            ));
        }
    }
    Ok(())
}

/// What DINOv3's config gives: the rotary theta, the register count (checked against the
/// weights where given), the head count, and the file that says so (`None`: ViT-B/16's).
struct Dino {
    rope_theta: f32,
    registers: Option<usize>,
    heads: usize,
    file: Option<PathBuf>,
}

/// DINOv3's config: its config.json (given, or the folder `vision.model_name_or_path`
/// names), else ViT-B/16's values where that name says so.
fn dinov3(
    ckpt_dir: &Path,
    config_path: &Path,
    given: Option<&Path>,
    named: &str,
    notes: &mut Vec<String>,
) -> Result<Dino> {
    let file = match given {
        Some(g) if g.is_dir() => Some(g.join("config.json")),
        Some(g) => Some(g.to_owned()),
        None => super::named_folder(vec![ckpt_dir.join(named)], named, super::has_config)
            .map(|d| d.join("config.json")),
    };
    let Some(file) = file else {
        if !named.contains("dinov3-vitb16") {
            return Err(ckpt_err(
                config_path,
                format!(
                    "unknown DINOv3 backbone {named:?} (model_config.vision.model_name_or_path): \
                     no folder with its config.json found; pass --dinov3 DIR (its config.json \
                     has num_attention_heads, rope_theta, num_register_tokens)"
                ),
            ));
        }
        let (rope_theta, registers, heads) = DINOV3_VITB16;
        notes.push(format!(
            "DINOv3: ViT-B/16's values (rope_theta {rope_theta}, {registers} registers, {heads} heads), as vla.cpp: {named:?} is not a local folder"
        ));
        return Ok(Dino {
            rope_theta,
            registers: Some(registers),
            heads,
            file: None,
        });
    };
    let json = super::read_json(&file)?;
    let bad = |why: String| ckpt_err(&file, why);
    let number = |key: &str| json.get(key).filter(|v| !v.is_null());
    let heads = number("num_attention_heads")
        .and_then(Json::as_u64)
        .filter(|&h| h > 0)
        .ok_or_else(|| bad("num_attention_heads missing or not a positive integer".into()))?
        as usize;
    let theta = number("rope_theta")
        .and_then(Json::as_f64)
        .ok_or_else(|| bad("rope_theta missing or not a number".into()))? as f32;
    let registers = match number("num_register_tokens") {
        None => None,
        Some(v) => Some(
            v.as_u64()
                .ok_or_else(|| bad("num_register_tokens: not a count".into()))?
                as usize,
        ),
    };
    check_keys(&file, &json, "DINOv3", &DINOV3_KEYS)?;
    notes.push(format!(
        "DINOv3: {} ({heads} heads, rope_theta {theta})",
        file.display()
    ));
    Ok(Dino {
        rope_theta: theta,
        registers,
        heads,
        file: Some(file),
    })
}

/// The BERT folder's head count (its config.json, checked against the weights' sizes and the
/// runtime's BERT) and tokenizer.
fn bert(dir: &Path, hidden: usize, layers: usize) -> Result<(usize, Tokenizer)> {
    let file = dir.join("config.json");
    let json = super::read_json(&file)?;
    let bad = |why: String| ckpt_err(&file, why);
    let get = |key: &str| json.get(key).filter(|v| !v.is_null());
    let heads = get("num_attention_heads")
        .and_then(Json::as_u64)
        .filter(|&h| h > 0)
        .ok_or_else(|| bad("num_attention_heads missing or not a positive integer".into()))?
        as usize;
    for (key, want) in [("hidden_size", hidden), ("num_hidden_layers", layers)] {
        if let Some(v) = get(key).filter(|v| v.as_u64() != Some(want as u64)) {
            return Err(bad(format!(
                "{key} = {v}, the checkpoint's BERT has {want}: not the BERT this checkpoint was trained from"
            )));
        }
    }
    check_keys(&file, &json, "BERT", &BERT_KEYS)?;
    let tok = Tokenizer::from_hf_path(dir)?;
    if tok.model() != Model::WordPiece {
        return Err(ckpt_err(
            dir,
            format!("the tokenizer is {:?}, not BERT's WordPiece", tok.model()),
        ));
    }
    Ok((heads, tok))
}

/// The ids of `[PAD]`, `[CLS]`, `[SEP]`, `.` and `?` in `tok`'s vocabulary (the reference
/// looks the last four up to split sub-sentences; `[CLS] ... [SEP]` must be what it adds). A
/// token on two lines of a `vocab.txt` is the later one's, as `tokenizers` reads it.
fn special_ids(tok: &Tokenizer, dir: &Path) -> Result<SpecialIds> {
    let mut ids: BTreeMap<&str, usize> = BTreeMap::new();
    for id in 0..tok.len() as u32 {
        if let Some(t) = tok.token(id) {
            if ["[PAD]", "[CLS]", "[SEP]", ".", "?"].contains(&t) {
                ids.insert(t, id as usize);
            }
        }
    }
    let id = |t: &str| {
        ids.get(t)
            .copied()
            .ok_or_else(|| ckpt_err(dir, format!("the tokenizer has no {t:?} token")))
    };
    let special = SpecialIds {
        pad: id("[PAD]")?,
        cls: id("[CLS]")?,
        sep: id("[SEP]")?,
        period: id(".")?,
        question: id("?")?,
    };
    let s = tok.special();
    let adds = s.add_bos && s.add_eos;
    if !adds || s.bos != Some(special.cls as u32) || s.eos != Some(special.sep as u32) {
        return Err(ckpt_err(
            dir,
            "the tokenizer does not wrap the text in [CLS] ... [SEP] (BERT's post-processor), as the reference's does",
        ));
    }
    Ok(special)
}

/// The training instructions' groups: each instruction's ids (`tok(instruction,
/// truncation=True, max_length=pad_to)`, as vla.cpp), sorted by instruction as vla.cpp sorts.
fn text_groups(path: &Path, text: &Section, tok: &Tokenizer, sep: u32) -> Result<Vec<TextGroup>> {
    let Some(groups) = text.get("padding_length_by_instruction") else {
        return Ok(vec![]);
    };
    let groups = groups.as_object().ok_or_else(|| {
        ckpt_err(
            path,
            "model_config.text.padding_length_by_instruction is not an object of instruction -> length",
        )
    })?;
    let mut sorted: Vec<(&String, &Json)> = groups.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    sorted
        .into_iter()
        .map(|(instruction, len)| {
            let pad_to = len
                .as_u64()
                .and_then(|l| usize::try_from(l).ok())
                .filter(|&l| l >= 2)
                .ok_or_else(|| {
                    ckpt_err(
                        path,
                        format!(
                            "padding_length_by_instruction[{instruction:?}] = {len}: expected a length >= 2"
                        ),
                    )
                })?;
            let mut tokens = tok.encode(instruction)?;
            if tokens.len() > pad_to {
                tokens.truncate(pad_to - 1);
                tokens.push(sep);
            }
            Ok(TextGroup { tokens, pad_to })
        })
        .collect()
}

/// Where one of our tensors comes from.
#[derive(Clone, Debug)]
enum Source {
    /// A checkpoint tensor as it is (leading unit dims dropped).
    Copy(String),
    /// The patch convolution `[D, 3, p, p]` as the matrix `[D, 3 p p]`.
    Patch(String),
    /// A weight's rows (or a bias's values) times LayerScale `.1` (`lambda1`, one per row).
    Scaled(String, String),
    /// Zeros of this many values (a missing `k_proj` bias).
    Zeros(usize),
}

/// The tensor plan being built: our name and its source, in vla.cpp's order.
#[derive(Default)]
struct Plan(Vec<(String, Source)>);

impl Plan {
    fn copy(&mut self, ours: impl Into<String>, theirs: impl Into<String>) {
        self.0.push((ours.into(), Source::Copy(theirs.into())));
    }

    /// `{ours}.{weight,bias}` from `{theirs}.{weight,bias}`.
    fn pair(&mut self, ours: &str, theirs: &str) {
        for p in ["weight", "bias"] {
            self.copy(format!("{ours}.{p}"), format!("{theirs}.{p}"));
        }
    }

    /// [`Self::pair`] of each `(ours, theirs)` under the prefixes `o` and `t`.
    fn pairs(&mut self, o: &str, t: &str, parts: &[(&str, &str)]) {
        for (ours, theirs) in parts {
            self.pair(&format!("{o}.{ours}"), &format!("{t}.{theirs}"));
        }
    }
}

/// Every tensor vla.cpp writes, in its order, and where it comes from.
fn plan(w: &Weights, cfg: &TurboConfig) -> Vec<(String, Source)> {
    let mut p = Plan::default();
    p.copy("vit.cls_token", format!("{VIT}.embeddings.cls_token"));
    p.0.push((
        "vit.patch_embed.weight".into(),
        Source::Patch(format!("{VIT}.embeddings.patch_embeddings.weight")),
    ));
    p.copy(
        "vit.patch_embed.bias",
        format!("{VIT}.embeddings.patch_embeddings.bias"),
    );
    let reg = format!("{VIT}.embeddings.register_tokens");
    if w.contains(&reg) {
        p.copy("vit.register_tokens", reg);
    }
    for i in 0..cfg.vit.layers {
        let (o, l) = (format!("vit.blk.{i}"), format!("{VIT}.layer.{i}"));
        let a = format!("{l}.attention");
        for (ours, theirs) in [
            ("attn_q", "q_proj"),
            ("attn_k", "k_proj"),
            ("attn_v", "v_proj"),
        ] {
            p.copy(format!("{o}.{ours}.weight"), format!("{a}.{theirs}.weight"));
            let bias = format!("{a}.{theirs}.bias");
            match theirs == "k_proj" && !w.contains(&bias) {
                true => {
                    p.0.push((format!("{o}.{ours}.bias"), Source::Zeros(cfg.vit.hidden)))
                }
                false => p.copy(format!("{o}.{ours}.bias"), bias),
            }
        }
        let scaled = |ours: &str, theirs: &str, scale: &str| {
            ["weight", "bias"].map(|x| {
                let src = Source::Scaled(format!("{theirs}.{x}"), format!("{l}.{scale}.lambda1"));
                (format!("{o}.{ours}.{x}"), src)
            })
        };
        p.0.extend(scaled("attn_o", &format!("{a}.o_proj"), "layer_scale1"));
        p.pairs(
            &o,
            &l,
            &[("ln1", "norm1"), ("ln2", "norm2"), ("fc1", "mlp.up_proj")],
        );
        p.0.extend(scaled("fc2", &format!("{l}.mlp.down_proj"), "layer_scale2"));
    }
    let e = format!("{TEXT}.embeddings");
    for t in [
        "word_embeddings",
        "position_embeddings",
        "token_type_embeddings",
    ] {
        p.copy(format!("text.embed.{t}"), format!("{e}.{t}.weight"));
    }
    p.pair("text.embed.LayerNorm", &format!("{e}.LayerNorm"));
    for i in 0..cfg.bert.layers {
        let (o, l) = (
            format!("text.encoder.layer.{i}"),
            format!("{TEXT}.encoder.layer.{i}"),
        );
        for part in [
            "attention.self.query",
            "attention.self.key",
            "attention.self.value",
            "attention.output.dense",
            "attention.output.LayerNorm",
            "intermediate.dense",
            "output.dense",
            "output.LayerNorm",
        ] {
            p.pair(&format!("{o}.{part}"), &format!("{l}.{part}"));
        }
    }
    p.pair("text_proj", TEXT_PROJ);
    let parts = [
        ("input_norm", "input_norm"),
        ("mlp.0", "mlp.0"),
        ("mlp.3", "mlp.3"),
    ];
    p.pairs("vit_proj", VIT_PROJ, &parts);
    p.copy("vit_proj.skip.weight", format!("{VIT_PROJ}.skip.weight"));
    p.pair("vit_proj.output_norm", &format!("{VIT_PROJ}.output_norm"));
    for i in 0..cfg.fusion_layers {
        let (o, l) = (format!("vl_fusion.{i}"), format!("{FUSION}.{i}"));
        let parts = [
            ("v_proj", "v_proj"),
            ("l_proj", "l_proj"),
            ("values_v", "values_v_proj"),
            ("values_l", "values_l_proj"),
            ("out_v", "out_v_proj"),
            ("out_l", "out_l_proj"),
        ];
        p.pairs(&o, &format!("{l}.attn"), &parts);
        p.pairs(
            &o,
            &l,
            &[("norm_v", "layer_norm_v"), ("norm_l", "layer_norm_l")],
        );
        p.copy(format!("{o}.gamma_v"), format!("{l}.gamma_v"));
        p.copy(format!("{o}.gamma_l"), format!("{l}.gamma_l"));
    }
    for i in 0..cfg.enhancer_layers {
        let (o, l) = (format!("vl_text.{i}"), format!("{VL_TEXT}.{i}"));
        p.copy(
            format!("{o}.attn_qkv.weight"),
            format!("{l}.self_attn.in_proj_weight"),
        );
        p.copy(
            format!("{o}.attn_qkv.bias"),
            format!("{l}.self_attn.in_proj_bias"),
        );
        let parts = [
            ("attn_o", "self_attn.out_proj"),
            ("ln1", "norm1"),
            ("fc1", "linear1"),
            ("fc2", "linear2"),
            ("ln2", "norm2"),
        ];
        p.pairs(&o, &l, &parts);
    }
    p.copy("act.q.weight", format!("{ACT_DEC}.action_queries.weight"));
    for i in 0..cfg.decoder_layers {
        let (o, l) = (
            format!("act.dec.{i}"),
            format!("{ACT_DEC}.decoder.layers.{i}"),
        );
        for (ours, theirs) in [("self", "self_attn"), ("cross", "multihead_attn")] {
            p.copy(
                format!("{o}.{ours}_qkv.weight"),
                format!("{l}.{theirs}.in_proj_weight"),
            );
            p.copy(
                format!("{o}.{ours}_qkv.bias"),
                format!("{l}.{theirs}.in_proj_bias"),
            );
            p.pair(
                &format!("{o}.{ours}_out"),
                &format!("{l}.{theirs}.out_proj"),
            );
        }
        let parts = [
            ("ln1", "norm1"),
            ("ln2", "norm2"),
            ("ln3", "norm3"),
            ("fc1", "linear1"),
            ("fc2", "linear2"),
        ];
        p.pairs(&o, &l, &parts);
    }
    let ap = format!("{ACT_DEC}.action_projection.layers");
    p.pairs("act.proj", &ap, &[("0", "0"), ("1", "1"), ("2", "2")]);
    let parts = [
        ("0", "net.0"),
        ("1", "net.1"),
        ("4", "net.4"),
        ("output_norm", "output_norm"),
    ];
    p.pairs("state.proj", STATE_PROJ, &parts);
    p.copy("state.proj.position", format!("{STATE_PROJ}.position"));
    p.copy("view_emb", VIEW_EMB);
    p.0
}

impl Source {
    /// The checkpoint tensors it reads.
    fn reads(&self) -> Vec<&str> {
        match self {
            Source::Copy(n) | Source::Patch(n) => vec![n],
            Source::Scaled(n, s) => vec![n, s],
            Source::Zeros(_) => vec![],
        }
    }

    /// The shape it has as vla.cpp writes it, checked against the graph's `want` where the
    /// graph reads it: the values, and the type they are stored in.
    fn read(
        &self,
        w: &Weights,
        ours: &str,
        want: Option<&[usize]>,
    ) -> Result<(Vec<usize>, Vec<f32>, Stored)> {
        let mismatch = |theirs: &str, got: &[usize], want: &[usize]| {
            ckpt_err(
                w.path(),
                format!(
                    "tensor {theirs:?} (-> {ours}) has shape {got:?}, the config implies {want:?}"
                ),
            )
        };
        match self {
            Source::Zeros(n) => {
                let shape = vec![*n];
                if want.is_some_and(|s| s != shape.as_slice()) {
                    return Err(mismatch(ours, &shape, want.unwrap_or_default()));
                }
                Ok((shape, vec![0.0; *n], Stored::F32))
            }
            Source::Patch(n) => {
                let got = w.require_shape(n)?;
                let flat = match got {
                    [d, c, p, q] => vec![*d, c * p * q],
                    _ => return Err(mismatch(n, got, want.unwrap_or_default())),
                };
                if want.is_some_and(|s| s != flat.as_slice()) {
                    return Err(mismatch(n, got, want.unwrap_or_default()));
                }
                Ok((flat, w.f32(n)?, w.stored(n)))
            }
            Source::Copy(n) => {
                let got = w.require_shape(n)?;
                let shape = squeezed(got, want);
                if let Some(want) = want.filter(|s| *s != shape.as_slice()) {
                    return Err(mismatch(n, got, want));
                }
                Ok((shape, w.f32(n)?, w.stored(n)))
            }
            Source::Scaled(n, s) => {
                let got = w.require_shape(n)?;
                if let Some(want) = want.filter(|s| *s != got) {
                    return Err(mismatch(n, got, want));
                }
                let rows = got.first().copied().unwrap_or(1);
                let scale_shape = w.require_shape(s)?;
                if scale_shape != [rows] {
                    return Err(mismatch(s, scale_shape, &[rows]));
                }
                let ty = w.stored(n).times(w.stored(s));
                let (mut vals, scale) = (w.f32(n)?, w.f32(s)?);
                let per = vals.len() / rows.max(1);
                for (i, x) in vals.iter_mut().enumerate() {
                    *x = ty.round(*x * scale[i / per.max(1)]);
                }
                Ok((got.to_vec(), vals, ty))
            }
        }
    }
}

/// `got` without leading unit dims: down to `want`'s rank where the graph reads the tensor,
/// else as vla.cpp's `squeeze(0)` of the class and register tokens leaves them.
fn squeezed(got: &[usize], want: Option<&[usize]>) -> Vec<usize> {
    let mut g = got;
    match want {
        Some(want) => {
            while g.len() > want.len() && g[0] == 1 {
                g = &g[1..];
            }
        }
        None if g.len() == 3 && g[0] == 1 => g = &g[1..],
        None => {}
    }
    g.to_vec()
}

/// Converts the TurboVLA checkpoint `ckpt` (a `.pth`, or a folder: see the module docs).
pub fn convert(
    ckpt: &Path,
    opts: &Options,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Converted> {
    super::detect::expect(ckpt, super::Kind::Turbovla)?;
    let dtype = opts
        .dtype
        .map(|d| super::float_dtype(Some(d)))
        .transpose()?;
    let stats_source = opts.statistics.as_deref().ok_or_else(|| {
        ckpt_err(
            ckpt,
            format!(
                "a TurboVLA checkpoint carries no normalisation statistics (the reference's \
                 evaluation code holds them): pass --statistics {} (the released LIBERO model's \
                 numbers) or --statistics FILE.json (state_mean, state_std, action_min, \
                 action_max, optional gripper_sign_dim)",
                crate::models::turbovla::stats::LIBERO
            ),
        )
    })?;
    let stats = TurboStats::load(stats_source)?;
    let (w, config, weights_note) = open(ckpt)?;
    let config_path = match &w.file {
        File::Torch(t) => t.path().to_owned(),
        File::St(_) => ckpt.join("config.json"),
    };
    let cp = config_path.as_path();
    if !config.is_object() {
        return Err(ckpt_err(cp, "model_config is not a dict"));
    }
    let mut notes = vec![weights_note];
    check_variant(cp, &config, &mut notes)?;
    let text = Section::new(cp, &config, "text")?;
    let vision = Section::new(cp, &config, "vision")?;
    let inter = Section::new(cp, &config, "interaction")?;
    let action = Section::new(cp, &config, "action")?;
    let ckpt_dir = match ckpt.is_dir() {
        true => ckpt.to_owned(),
        false => ckpt
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_owned),
    };

    // sizes from the weights' shapes
    let vit_hidden = w.sized(&format!("{VIT}.layer.0.attention.q_proj.weight"), 2)?[0];
    let patch = w.sized(&format!("{VIT}.embeddings.patch_embeddings.weight"), 4)?;
    if patch[1] != 3 || patch[2] != patch[3] {
        return Err(ckpt_err(
            w.path(),
            format!("DINOv3's patch kernel has shape {patch:?}, expected [hidden, 3, p, p]"),
        ));
    }
    let patch_size = patch[2];
    let reg_key = format!("{VIT}.embeddings.register_tokens");
    let registers = match w.shape(&reg_key) {
        Some([1, r, _]) => *r,
        Some(other) => {
            return Err(ckpt_err(
                w.path(),
                format!("{reg_key} has shape {other:?}, expected [1, registers, hidden]"),
            ))
        }
        None => 0,
    };
    let named_vit = vision.str_or(
        "model_name_or_path",
        "facebook/dinov3-vitb16-pretrain-lvd1689m",
    )?;
    let dino = dinov3(&ckpt_dir, cp, opts.dinov3.as_deref(), named_vit, &mut notes)?;
    let dino_path = dino.file.clone().unwrap_or_else(|| cp.to_owned());
    if let Some(r) = dino.registers.filter(|&r| r != registers) {
        return Err(ckpt_err(
            &dino_path,
            format!("num_register_tokens {r}, but the checkpoint's weights have {registers} register tokens"),
        ));
    }
    let (rope_theta, vit_heads) = (dino.rope_theta, dino.heads);
    if vit_hidden % vit_heads != 0 {
        return Err(ckpt_err(
            &dino_path,
            format!("num_attention_heads {vit_heads} does not divide DINOv3's width {vit_hidden}"),
        ));
    }
    let image_size = match vision.get("image_size") {
        None => 256,
        Some(Json::Array(a)) => {
            let sides: Vec<Option<u64>> = a.iter().map(Json::as_u64).collect();
            match sides.as_slice() {
                [Some(h)] => *h as usize,
                [Some(h), Some(w)] if h == w => *h as usize,
                _ => return Err(vision.bad("image_size", "a size, or [size, size] (square views)")),
            }
        }
        Some(_) => vision.usize_or("image_size", 256)?,
    };
    let text_hidden = w.sized(
        &format!("{TEXT}.encoder.layer.0.attention.self.query.weight"),
        2,
    )?[0];
    let text_layers = w.layers(&format!("{TEXT}.encoder.layer."));
    let named_bert = text.str_or("model_name_or_path", "bert-base-uncased")?;
    let bert_dir = super::config_folder(
        &ckpt_dir,
        opts.bert.as_deref(),
        named_bert,
        ("model_config.text.model_name_or_path", "--bert"),
    )?;
    let (text_heads, tok) = bert(&bert_dir, text_hidden, text_layers)?;
    notes.push(format!(
        "BERT: {} ({text_heads} heads; vla.cpp writes 12 whatever the model)",
        bert_dir.display()
    ));
    let special = special_ids(&tok, &bert_dir)?;
    let view_shape = w.require_shape(VIEW_EMB)?;
    let num_views = match view_shape {
        [1, v, _] | [v, _] => *v,
        other => {
            return Err(ckpt_err(
                w.path(),
                format!("{VIEW_EMB} has shape {other:?}, expected [1, views, hidden]"),
            ))
        }
    };
    if let Some(v) = vision.opt_usize("num_views")?.filter(|&v| v != num_views) {
        return Err(ckpt_err(
            cp,
            format!("model_config.vision.num_views {v}, but {VIEW_EMB} has {num_views} views"),
        ));
    }
    let nheads = inter.usize_or("nheads", 8)?;
    let half = (nheads / 2).max(1);
    let padding = text.opt_usize("padding_length")?;
    let max_length = text.usize_or("max_length", 256)?;
    let rows = |name: String| -> Result<usize> { Ok(w.sized(&name, 2)?[0]) };
    let mut cfg = TurboConfig {
        hidden: inter.usize_or("hidden_dim", 256)?,
        vit: Dinov3Config {
            hidden: vit_hidden,
            layers: w.layers(&format!("{VIT}.layer.")),
            heads: vit_heads,
            inter: rows(format!("{VIT}.layer.0.mlp.up_proj.weight"))?,
            image_size,
            patch_size,
            registers,
            rope_theta,
        },
        bert: BertConfig {
            hidden: text_hidden,
            layers: text_layers,
            heads: text_heads,
            inter: rows(format!("{TEXT}.encoder.layer.0.intermediate.dense.weight"))?,
            vocab: rows(format!("{TEXT}.embeddings.word_embeddings.weight"))?,
            max_positions: rows(format!("{TEXT}.embeddings.position_embeddings.weight"))?,
            token_types: rows(format!("{TEXT}.embeddings.token_type_embeddings.weight"))?,
        },
        fusion_layers: w.layers(&format!("{FUSION}.")),
        fusion_heads: half,
        fusion_dim: inter.usize_or("enhancer_inner_dim", 1024)?,
        enhancer_layers: w.layers(&format!("{VL_TEXT}.")),
        enhancer_heads: half,
        enhancer_ffn: rows(format!("{VL_TEXT}.0.linear1.weight"))?,
        action_heads: nheads,
        decoder_layers: w.layers(&format!("{ACT_DEC}.decoder.layers.")),
        decoder_ffn: rows(format!("{ACT_DEC}.decoder.layers.0.linear1.weight"))?,
        action_dim: rows(format!("{ACT_DEC}.action_projection.layers.2.weight"))?,
        state_dim: w.sized(&format!("{STATE_PROJ}.net.1.weight"), 2)?[1],
        state_tokens: action.usize_or("num_state_tokens", 2)?,
        horizon: rows(format!("{ACT_DEC}.action_queries.weight"))?,
        num_views,
        proj_hidden: rows(format!("{VIT_PROJ}.mlp.0.weight"))?,
        state_hidden: rows(format!("{STATE_PROJ}.net.1.weight"))?,
        action_hidden: rows(format!("{ACT_DEC}.action_projection.layers.0.weight"))?,
        text_len: padding.unwrap_or(max_length),
        pad_to_longest: padding.is_none(),
        special,
        groups: vec![],
    };
    cfg.groups = text_groups(cp, &text, &tok, special.sep as u32)?;
    crate::config::check(&cfg, ARCH)?;
    stats.check(cfg.state_dim, cfg.action_dim)?;
    notes.push(match cfg.pad_to_longest {
        true => format!(
            "text: no padding_length, so each instruction is its own length (at most max_length {}); vla.cpp refuses such checkpoints",
            cfg.text_len
        ),
        false => format!(
            "text: padded to {} ids, {} training instructions to lengths of their own",
            cfg.text_len,
            cfg.groups.len()
        ),
    });
    notes.push(format!(
        "statistics: {} (state {} dims, actions {}{})",
        stats_source.display(),
        cfg.state_dim,
        cfg.action_dim,
        stats
            .gripper_sign_dim
            .map_or(String::new(), |d| format!(", gripper sign at {d}"))
    ));

    let plan = plan(&w, &cfg);
    let shapes: BTreeMap<String, Vec<usize>> = tensor_shapes(&cfg)?.into_iter().collect();
    let planned: BTreeSet<&str> = plan.iter().map(|(o, _)| o.as_str()).collect();
    if let Some(missing) = shapes.keys().find(|n| !planned.contains(n.as_str())) {
        return Err(Error::InvalidArgument(format!(
            "turbovla converter: no checkpoint tensor is mapped to {missing:?}, which the model reads"
        )));
    }
    // every checkpoint tensor converted, or one inference never reads (vla.cpp's --verify)
    let read: BTreeSet<&str> = plan.iter().flat_map(|(_, s)| s.reads()).collect();
    let left: Vec<&str> = w
        .names()
        .into_iter()
        .filter(|n| !read.contains(n) && !UNUSED.iter().any(|u| n.starts_with(u)))
        .collect();
    if !left.is_empty() {
        let shown: Vec<_> = left.iter().take(8).collect();
        return Err(ckpt_err(
            w.path(),
            format!(
                "{} checkpoint tensors vla.cpp's turbovla layout does not hold, e.g. {shown:?}: another TurboVLA variant",
                left.len()
            ),
        ));
    }

    let mut out = GgufWriter::new();
    cfg.write(&mut out)?;
    let name = ckpt
        .file_stem()
        .map_or(ARCH.into(), |n| n.to_string_lossy().into_owned());
    out.add_metadata("general.name", name)?;
    out.add_metadata("general.source", "TurboVLA checkpoint (vla-convert)")?;
    out.add_metadata(format!("{ARCH}.config_json"), config.to_string())?;
    super::ship_tokenizer(&mut out, &tok, &bert_dir, cfg.bert.vocab, &mut notes)?;
    let total = plan.len() + 1;
    let mut stored = BTreeMap::<String, usize>::new();
    for (done, (ours, src)) in plan.iter().enumerate() {
        let want = shapes.get(ours).map(Vec::as_slice);
        let (shape, vals, ty) = src.read(&w, ours, want)?;
        let ty = match dtype {
            None => ty.as_written(),
            Some(d) if shape.len() == 2 && ours.ends_with(".weight") && is_matrix(ours) => d,
            Some(_) => GgmlType::F32,
        };
        *stored.entry(ty.to_string()).or_default() += 1;
        out.add_f32(ours.clone(), ty, &super::ggml_dims(&shape), &vals)?;
        progress(done + 1, total, ours);
    }
    stats.write(&mut out)?;
    progress(total, total, "statistics");
    notes.push(format!(
        "tensors: {}",
        stored
            .iter()
            .map(|(t, n)| format!("{n} {t}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    Ok(Converted {
        config: cfg,
        writer: out,
        notes,
    })
}
