//! What the OpenVLA-family converters share (`vla_adapter`, `openvla_oft`): the checkpoint
//! folder the references' LIBERO evaluations load (`config.json`: `OpenVLAConfig`, its
//! `text_config` the language model; `model.safetensors`: Prismatic's towers under
//! `vision_backbone.{featurizer,fused_featurizer}.`, the projector, the language model;
//! `action_head--*checkpoint.pt` and `proprio_projector--*checkpoint.pt`, [`super::torch_pt`];
//! `dataset_statistics.json`, every suite's BOUNDS_Q99 statistics, selected at load with
//! `--embodiment`; the tokenizer files), the towers' and the language model's tensor maps
//! (only the blocks the references read, all but each tower's last; the fused `qkv` split),
//! and the writing loop with its coverage checks.

mod plan;

use plan::check_component;
pub(crate) use plan::{
    head, head_blocks, head_outer, ignored, lm_plan, pair, proprio_plan, shared_plan, vla, Source,
};

use super::torch_pt::TorchState;
use super::{ckpt_err, count_layers, JsonFile, Safetensors};
use crate::gguf::{GgmlType, GgufWriter};
use crate::models::openvla::{ActionIo, LmDims, OpenVlaArch};
use crate::modules::prismatic::{PrismaticConfig, TowerDims};
use crate::tokenizer::Tokenizer;
use crate::Result;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub(crate) const VB: &str = "vision_backbone.";
pub(crate) const LM: &str = "language_model.model.";

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Type of the matrices; embeddings, norms and statistics stay f32.
    pub dtype: Option<GgmlType>,
    /// Cameras (the evaluation's `num_images_in_input`; absent: 2, LIBERO's third-person and
    /// wrist views). The checkpoint does not record it.
    pub num_images: Option<usize>,
    /// The chunk (`NUM_ACTIONS_CHUNK`, a constant of the references' code; absent: its
    /// platform's, from the action and state widths: LIBERO / CALVIN 8, BRIDGE 5, ALOHA 25).
    pub chunk: Option<usize>,
}

pub struct Converted<A> {
    pub config: A,
    pub writer: GgufWriter<'static>,
    pub notes: Vec<String>,
}

/// The towers' epsilon and head count (timm's ViT-L and so400m), and the stop token
/// (`STOP_INDEX`): constants of the references' code.
const TOWER_LN_EPS: f32 = 1e-6;
const TOWER_HEADS: usize = 16;
pub(crate) const STOP_ID: usize = 2;

/// A checkpoint folder, opened.
pub(crate) struct Checkpoint {
    pub config: JsonFile,
    pub st: Safetensors,
    pub head: TorchState,
    pub proprio: TorchState,
    pub tokenizer: Tokenizer,
}

impl Checkpoint {
    pub fn open(ckpt: &Path, kind: super::Kind) -> Result<Self> {
        super::detect::expect(ckpt, kind)?;
        Ok(Checkpoint {
            config: JsonFile::read(ckpt.join("config.json"))?,
            st: Safetensors::open_dir(ckpt)?,
            head: TorchState::open(&component(ckpt, "action_head")?)?,
            proprio: TorchState::open(&component(ckpt, "proprio_projector")?)?,
            tokenizer: Tokenizer::from_hf_path(ckpt)?,
        })
    }

    /// A tensor's shape in `model.safetensors`.
    pub fn shape(&self, name: &str) -> Result<Vec<usize>> {
        Ok(self.st.require_shape(name)?.to_vec())
    }

    /// A tensor's shape in the head's `.pt`.
    pub fn head_shape(&self, name: &str) -> Result<Vec<usize>> {
        self.head
            .shape(name)
            .map(<[usize]>::to_vec)
            .ok_or_else(|| ckpt_err(self.head.path(), format!("no {name}")))
    }

    /// The head's residual blocks (`model.mlp_resnet_blocks.{i}` in its `.pt`), after checking
    /// its input width: `action_dim` x the language model's width.
    pub fn head_blocks(&self, io: &ActionIo, lm: &LmDims) -> Result<usize> {
        let ln1 = self.head_shape("model.layer_norm1.weight")?[0];
        if ln1 != io.action_dim * lm.hidden {
            return Err(ckpt_err(
                self.head.path(),
                format!(
                    "model.layer_norm1 has {ln1} features, not action_dim {} x hidden {}",
                    io.action_dim, lm.hidden
                ),
            ));
        }
        let blocks = self.head.names().filter_map(|n| {
            let rest = n.strip_prefix("model.mlp_resnet_blocks.")?;
            rest.split('.').next()?.parse::<usize>().ok()
        });
        Ok(blocks.max().map_or(0, |m| m + 1))
    }

    /// The towers: sizes from the weights, `num_images` from `opts`.
    pub fn vision(&self, opts: &Options) -> Result<PrismaticConfig> {
        let p = self.config.json();
        let vision_id = p.str("vision_backbone_id")?;
        if vision_id != "dinosiglip-vit-so-224px" {
            return Err(ckpt_err(
                &self.config.path,
                format!("vision_backbone_id {vision_id:?}: vla-rs reads Prismatic's fused DINOv2 + SigLIP at 224 (dinosiglip-vit-so-224px)"),
            ));
        }
        let tower = |name: &str| -> Result<TowerDims> {
            let p = format!("{VB}{name}.");
            let blocks = count_layers(&self.st, &format!("{p}blocks."), ".norm1.weight");
            Ok(TowerDims {
                hidden: self.shape(&format!("{p}patch_embed.proj.weight"))?[0],
                layers: blocks.saturating_sub(1),
                heads: TOWER_HEADS,
                inter: self.shape(&format!("{p}blocks.0.mlp.fc1.weight"))?[0],
            })
        };
        let patch = self.shape(&format!("{VB}featurizer.patch_embed.proj.weight"))?;
        let pos = self.shape(&format!("{VB}featurizer.pos_embed"))?;
        let reg = self.shape(&format!("{VB}featurizer.reg_token"))?;
        let side = (pos[pos.len() - 2] as f64).sqrt() as usize;
        Ok(PrismaticConfig {
            dino: tower("featurizer")?,
            sig: tower("fused_featurizer")?,
            registers: reg[reg.len() - 2],
            image_size: side * patch[2],
            patch_size: patch[2],
            ln_eps: TOWER_LN_EPS,
            proj_mid: self.shape("projector.fc1.weight")?[0],
            num_images: opts.num_images.unwrap_or(2),
        })
    }

    /// The language model from `text_config`, with the defaults of transformers 4.40's
    /// config classes where the checkpoint leaves a field out (OpenVLA's conversion wrote
    /// none of `rms_norm_eps`, `rope_theta`, `num_key_value_heads`).
    pub fn lm(&self, default_theta: f64) -> Result<LmDims> {
        let p = self.config.json();
        let text = p.obj("text_config")?;
        let hidden = text.usize("hidden_size")?;
        let q_heads = text.usize("num_attention_heads")?;
        let or = |key: &str, v: usize| -> Result<usize> {
            match text.get(key) {
                Some(_) => text.usize(key),
                None => Ok(v),
            }
        };
        let real = |key: &str, v: f64| -> Result<f64> {
            match text.get(key) {
                Some(_) => text.f64(key),
                None => Ok(v),
            }
        };
        let theta = match (text.get("rope_theta"), text.get("rope_parameters")) {
            (None, None) => default_theta,
            _ => text.rope_theta()?,
        };
        Ok(LmDims {
            hidden,
            layers: text.usize("num_hidden_layers")?,
            q_heads,
            kv_heads: or("num_key_value_heads", q_heads)?,
            head_dim: or("head_dim", hidden / q_heads.max(1))?,
            inter: text.usize("intermediate_size")?,
            vocab: self.shape(&format!("{LM}embed_tokens.weight"))?[0],
            rope_theta: theta as f32,
            rms_eps: real("rms_norm_eps", 1e-6)? as f32,
        })
    }

    /// The robot's widths from the head's output and the proprio projector's input; the
    /// chunk from `opts` or the platform those widths name.
    pub fn io(&self, opts: &Options) -> Result<ActionIo> {
        let action_dim = self.head_shape("model.fc2.weight")?[0];
        let proprio_dim = self
            .proprio
            .shape("fc1.weight")
            .ok_or_else(|| ckpt_err(self.proprio.path(), "no fc1.weight"))?[1];
        // prismatic/vla/constants.py's platforms
        let chunk = match (opts.chunk, action_dim, proprio_dim) {
            (Some(c), ..) => c,
            (None, 7, 8) => 8,
            (None, 7, 7) => 5,
            (None, 14, 14) => 25,
            (None, a, s) => {
                return Err(ckpt_err(
                    self.head.path(),
                    format!("action {a}, state {s}: no platform of the reference's has these widths; pass --chunk"),
                ))
            }
        };
        Ok(ActionIo {
            chunk,
            action_dim,
            proprio_dim,
            stop_id: STOP_ID,
        })
    }
}

/// The one `<what>--*checkpoint.pt` file in `ckpt`.
fn component(ckpt: &Path, what: &str) -> Result<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(ckpt)
        .map_err(|e| ckpt_err(ckpt, e.to_string()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                n.starts_with(&format!("{what}--")) && n.ends_with("checkpoint.pt")
            })
        })
        .collect();
    found.sort();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(ckpt_err(
            ckpt,
            format!("no {what}--*checkpoint.pt: the head's weights are missing"),
        )),
        _ => Err(ckpt_err(
            ckpt,
            format!("several {what}--*checkpoint.pt files: keep the one to convert"),
        )),
    }
}

/// The conversion's first note: the towers' and the language model's sizes (`lm`: its name).
pub(crate) fn sizes_note(v: &PrismaticConfig, lm: &str, dims: &LmDims) -> String {
    format!(
        "DINOv2 {} x {} blocks ({} registers), SigLIP {} x {} blocks (the reference's penultimate), {} cameras; {lm} {} x {} layers",
        v.dino.hidden, v.dino.layers, v.registers, v.sig.hidden, v.sig.layers, v.num_images,
        dims.hidden, dims.layers
    )
}

/// Every tensor of the GGUF (statistics apart) and where it comes from; `head_unused`: a name
/// part of the head's `.pt` the reference never runs.
pub(crate) struct Plan {
    pub tensors: Vec<(String, Source)>,
    pub head_unused: &'static str,
    /// Name prefixes of the VLA's tensors the reference never runs.
    pub ignored: Vec<String>,
    /// Our matrices stored ternary ([`crate::models::bitvla::add_ternary`]).
    pub ternary: Vec<String>,
    /// Tensors besides the matmul weights that take `--dtype` (BitVLA's token table: bf16
    /// in its checkpoint and in vla.cpp's files).
    pub float_extra: Vec<String>,
}

/// Writes `config`, the tokenizer, `plan`'s tensors and every suite's statistics, after
/// checking that every checkpoint tensor is mapped or known to be unused.
pub(crate) fn write<A: OpenVlaArch>(
    ckpt: &Path,
    c: &Checkpoint,
    config: A,
    plan: Plan,
    dtype: GgmlType,
    mut notes: Vec<String>,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Converted<A>> {
    let Plan {
        tensors: plan,
        head_unused,
        ignored,
        ternary,
        float_extra,
    } = plan;
    let stats = read_stats(ckpt, config.io(), &mut notes)?;
    let mut w = GgufWriter::new();
    config.write(&mut w)?;
    let name = ckpt
        .file_name()
        .map_or(A::ARCH.into(), |n| n.to_string_lossy().into_owned());
    w.add_metadata("general.name", name)?;
    w.add_metadata(
        "general.source",
        format!("{} checkpoint (vla-convert)", A::ARCH),
    )?;
    super::ship_tokenizer(&mut w, &c.tokenizer, ckpt, config.lm().vocab, &mut notes)?;
    let shapes: BTreeMap<String, Vec<usize>> = config.tensor_shapes()?.into_iter().collect();
    let used: Vec<(String, String)> = plan
        .iter()
        .filter(|(_, s)| matches!(s, Source::Vla(..)))
        .map(|(o, s)| (o.clone(), s.name().to_owned()))
        .collect();
    let ignored: Vec<&str> = ignored.iter().map(String::as_str).collect();
    super::check_coverage(&c.st, &used, &[], &ignored)?;
    check_component(
        &c.head,
        &plan,
        |s| matches!(s, Source::Head(_)),
        head_unused,
    )?;
    check_component(&c.proprio, &plan, |s| matches!(s, Source::Proprio(_)), "")?;
    let total = plan.len() + stats.len();
    for (done, (ours, src)) in plan.iter().enumerate() {
        let shape = shapes
            .get(ours)
            .ok_or_else(|| ckpt_err(ckpt, format!("converter: {ours} is not a model tensor")))?;
        let vals = src.values(c, shape)?;
        if let (true, &[n, k]) = (ternary.contains(ours), &shape[..]) {
            crate::models::bitvla::add_ternary(&mut w, ours, n, k, &vals)?;
            progress(done + 1, total, ours);
            continue;
        }
        let matrix = super::takes_float_dtype(ours, shape) && ours != "action_queries.weight";
        let ty = match matrix || float_extra.contains(ours) {
            true => dtype,
            false => GgmlType::F32,
        };
        w.add_f32(ours.clone(), ty, &super::ggml_dims(shape), &vals)?;
        progress(done + 1, total, ours);
    }
    if let Some(missing) = shapes.keys().find(|n| {
        !plan.iter().any(|(o, _)| o == *n) && !stats.iter().any(|(s, _)| s.starts_with(n.as_str()))
    }) {
        return Err(ckpt_err(
            ckpt,
            format!("converter: nothing maps to {missing}"),
        ));
    }
    for (k, (name, vals)) in stats.into_iter().enumerate() {
        w.add_f32(name.clone(), GgmlType::F32, &[vals.len() as u64], &vals)?;
        progress(plan.len() + k + 1, total, &name);
    }
    Ok(Converted {
        config,
        writer: w,
        notes,
    })
}

/// Every suite's statistics of `dataset_statistics.json` (`action` and `proprio`: q01, q99,
/// mask, all ones where absent, as the references' default), as `state_*.<suite>` and
/// `action_*.<suite>`.
fn read_stats(
    ckpt: &Path,
    io: &ActionIo,
    notes: &mut Vec<String>,
) -> Result<Vec<(String, Vec<f32>)>> {
    let path = ckpt.join("dataset_statistics.json");
    let json = crate::checkpoint::read_json(&path)?;
    let suites = json
        .as_object()
        .ok_or_else(|| ckpt_err(&path, "expected an object of suites"))?;
    let mut out = Vec::new();
    for (suite, s) in suites {
        for (what, key, dim) in [
            ("state", "proprio", io.proprio_dim),
            ("action", "action", io.action_dim),
        ] {
            let e = |why: &str| ckpt_err(&path, format!("{suite}.{key}: {why}"));
            let stats = s.get(key).ok_or_else(|| e("missing"))?;
            for stat in ["q01", "q99"] {
                let v: Vec<f32> = stats
                    .get(stat)
                    .and_then(|x| x.as_array())
                    .ok_or_else(|| e(&format!("no {stat}")))?
                    .iter()
                    .map(|x| x.as_f64().map(|f| f as f32))
                    .collect::<Option<_>>()
                    .ok_or_else(|| e(&format!("{stat}: not numbers")))?;
                if v.len() != dim {
                    let n = v.len();
                    return Err(e(&format!("{stat}: {n} values, the model has {dim}")));
                }
                out.push((format!("{what}_{stat}.{suite}"), v));
            }
            let mask: Vec<f32> = match stats.get("mask").and_then(|x| x.as_array()) {
                None => vec![1.0; dim],
                Some(m) => m
                    .iter()
                    .map(|x| x.as_bool().map(|b| f32::from(u8::from(b))))
                    .collect::<Option<_>>()
                    .ok_or_else(|| e("mask: not booleans"))?,
            };
            if mask.len() != dim {
                let n = mask.len();
                return Err(e(&format!("mask: {n} values, the model has {dim}")));
            }
            out.push((format!("{what}_mask.{suite}"), mask));
        }
    }
    notes.push(format!(
        "statistics for {}: choose one with --embodiment when there are several",
        suites.keys().cloned().collect::<Vec<_>>().join(", ")
    ));
    Ok(out)
}
