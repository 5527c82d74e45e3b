//! The checkpoint's tensors, either form (`.pth` or safetensors), by vla.cpp's names.

use crate::convert::torch_pt::{TorchCheckpoint, TorchDtype, TorchState};
use crate::convert::{ckpt_err, read_json, Safetensors};
use crate::gguf::GgmlType;
use crate::{Error, Result};
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub(super) const VIT: &str = "vision_encoder.backbone";
pub(super) const TEXT: &str = "text_encoder.bert";
pub(super) const VIT_PROJ: &str = "vision_projection";
pub(super) const FUSION: &str = "vision_language_interaction.fusion_layers";
pub(super) const VL_TEXT: &str = "vision_language_interaction.text_layers";
pub(super) const ACT_DEC: &str = "action_head.decoder";
pub(super) const STATE_PROJ: &str = "action_head.state_projection";
pub(super) const VIEW_EMB: &str = "view_embedding";
pub(super) const TEXT_PROJ: &str = "text_encoder.text_projection";

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

/// The checkpoint's weights, either form, by our reading of their names ([`our_name`]).
pub(super) struct Weights {
    pub(super) file: File,
    /// Our name -> the file's.
    names: BTreeMap<String, String>,
}

pub(super) enum File {
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
pub(super) enum Stored {
    F32,
    Bf16,
    F16,
    /// F64 (and any other: such a tensor fails to read anyway).
    Wide,
}

impl Stored {
    /// The GGUF type vla.cpp's `gguf_common.add` writes it as.
    pub(super) fn as_written(self) -> GgmlType {
        match self {
            Stored::Bf16 => GgmlType::BF16,
            _ => GgmlType::F32,
        }
    }

    /// The type of a product of the two, as PyTorch promotes it.
    pub(super) fn times(self, other: Stored) -> Stored {
        match self == other {
            true => self,
            false => match (self, other) {
                (Stored::Wide, _) | (_, Stored::Wide) => Stored::Wide,
                _ => Stored::F32,
            },
        }
    }

    /// `x` rounded to this type.
    pub(super) fn round(self, x: f32) -> f32 {
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

    pub(super) fn path(&self) -> &Path {
        match &self.file {
            File::Torch(t) => t.path(),
            File::St(st) => st.path(),
        }
    }

    pub(super) fn names(&self) -> Vec<&str> {
        self.names.keys().map(String::as_str).collect()
    }

    pub(super) fn contains(&self, name: &str) -> bool {
        self.names.contains_key(name)
    }

    pub(super) fn shape(&self, name: &str) -> Option<&[usize]> {
        let n = self.names.get(name)?;
        match &self.file {
            File::Torch(t) => t.shape(n),
            File::St(st) => st.shape(n),
        }
    }

    pub(super) fn require_shape(&self, name: &str) -> Result<&[usize]> {
        self.shape(name).ok_or_else(|| {
            ckpt_err(
                self.path(),
                format!("tensor {name:?} is missing (required by vla.cpp's turbovla layout)"),
            )
        })
    }

    /// The shape of a tensor sizes are read from: `rank` dims, none zero.
    pub(super) fn sized(&self, name: &str, rank: usize) -> Result<&[usize]> {
        let shape = self.require_shape(name)?;
        if shape.len() != rank || shape.contains(&0) {
            return Err(ckpt_err(
                self.path(),
                format!("tensor {name:?} has shape {shape:?}, expected {rank} non-zero dimensions"),
            ));
        }
        Ok(shape)
    }

    pub(super) fn stored(&self, name: &str) -> Stored {
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

    pub(super) fn f32(&self, name: &str) -> Result<Vec<f32>> {
        let Some(n) = self.names.get(name) else {
            return Err(ckpt_err(self.path(), format!("tensor {name:?} is missing")));
        };
        match &self.file {
            File::Torch(t) => t.f32(n),
            File::St(st) => st.f32(n),
        }
    }

    /// vla.cpp's `max_layer`: one more than the largest `{prefix}{i}.` index.
    pub(super) fn layers(&self, prefix: &str) -> usize {
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
pub(super) fn open(ckpt: &Path) -> Result<(Weights, Json, String)> {
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
    let config = read_json(&config_path)?;
    let w = Weights::new(File::St(st))?;
    let note = format!(
        "weights: {} ({} tensors)",
        w.path().display(),
        w.names.len()
    );
    Ok((w, config, note))
}
