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

mod config;
mod plan;
mod weights;

use super::ckpt_err;
use crate::gguf::{GgmlType, GgufWriter};
use crate::models::turbovla::{is_matrix, tensor_shapes, TurboConfig, TurboStats, ARCH};
use crate::modules::bert::BertConfig;
use crate::modules::dinov3::Dinov3Config;
use crate::{Error, Result};
use config::{bert, check_variant, dinov3, special_ids, text_groups, Section};
use plan::plan;
use serde_json::Value as Json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use weights::{open, File};
use weights::{ACT_DEC, FUSION, STATE_PROJ, TEXT, VIEW_EMB, VIT, VIT_PROJ, VL_TEXT};

pub use weights::torch_file;

/// What inference never reads (vla.cpp leaves them out too): DINOv3's final norm (TurboVLA
/// taps the last layer before it), BERT's pooler, the MAE mask token.
const UNUSED: [&str; 3] = [
    "vision_encoder.backbone.norm.",
    "text_encoder.bert.pooler.",
    "vision_encoder.backbone.embeddings.mask_token",
];

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

/// Whether `config` is a TurboVLA model_config (`TurboVLAConfig.to_dict()`).
pub fn is_turbovla_config(config: &Json) -> bool {
    config.get("name").and_then(Json::as_str) == Some("TurboVLA")
        || (config.get("interaction").is_some_and(Json::is_object)
            && config.get("action").is_some_and(Json::is_object)
            && config.get("vision").is_some_and(Json::is_object))
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
                format!(
                "{VIEW_EMB} has shape {other:?}, expected [1, views, hidden] or [views, hidden]"
            ),
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
        flat_views: view_shape.len() == 2,
    };
    cfg.groups = text_groups(cp, &text, &tok)?;
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
