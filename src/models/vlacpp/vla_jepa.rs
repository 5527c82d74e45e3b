//! VLA-JEPA files (`convert_vla_jepa_to_gguf.py` with `gguf_blocks.py`'s `write_qwen3vl_vit`
//! and `write_qwen3_lm`, from lerobot's checkpoint): the Qwen3-VL tower and language model
//! as GR00T N1.7's ([`super::qwen_tower`]), the head under `ah.` with other names, the sizes
//! under other keys, no prompt template (its clients send the whole chat-templated sequence:
//! image slots, action tokens and the embodied tokens) and nothing of what lerobot's
//! processors do around the model: vla.cpp returns normalised actions and its clients
//! normalise, clip, snap the gripper and resize the frames. We stay in world units and run
//! those steps from the lerobot checkpoint folder the file was converted from
//! ([`RuntimeOptions::statistics`]): the state's mean / std and the actions' min / max
//! (the processors' files), the post-processing steps its `policy_postprocessor.json` runs,
//! the area step (`resize_images_to`) and the cameras (`config.json`).
//!
//! Keys besides [`super::lm_keys`] (`lm_layers`: every layer): `spatial_merge_size`,
//! `embodied_action_token_id`, `dit_hidden`, `output_dim`, `action_horizon`,
//! `num_inference_timesteps`, `num_future_tokens` (ours `vit_merge`, `embodied_token_id`,
//! `input_embedding_dim`, `action_hidden`, `chunk_size`, `num_steps`,
//! `num_target_vision_tokens`); `state_dim`, `action_dim` (ours the real and max widths);
//! `image_target_size` (ours `image_height` = `image_width`); `deepstack_idx_{0,1,2}`. The
//! loader's fixed M-RoPE sections [24, 20, 20] (head_dim 128), epsilons and 256-wide time
//! projection are fixed here too; `max_seq_len` is `ah.pos_embd`'s rows.
//!
//! Tensors: `ah.dit.{i}.*` -> `aex.dit.{i}.*`, `ah.time_emb.*` / `ah.proj_out{1,2}.*` ->
//! `aex.dit.*`, `ah.act_enc.l{1,2,3}` -> `aex.act_enc.W{1,2,3}`, `ah.{state_enc, act_dec}.*`
//! -> `aex.*`, `ah.future_tokens` / `ah.pos_embd` -> `aex.*.weight`.

use std::path::Path;

use crate::checkpoint::{processor_stats, processor_steps, read_json};
use crate::config::limits::MAX_SEQUENCE;
use crate::gguf::{GgufFile, Value};
use crate::models::vla_jepa::ARCH;
use crate::policy::RuntimeOptions;
use crate::{Error, Result};

use super::u32_of;

fn key(k: &str) -> String {
    format!("{ARCH}.{k}")
}

/// vla.cpp's key -> ours, both u32 (besides the language model's, [`super::lm_keys`]).
const RENAMED: [(&str, &str); 8] = [
    ("spatial_merge_size", "vit_merge"),
    ("embodied_action_token_id", "embodied_token_id"),
    ("dit_hidden", "input_embedding_dim"),
    ("output_dim", "action_hidden"),
    ("action_horizon", "chunk_size"),
    ("num_inference_timesteps", "num_steps"),
    ("num_future_tokens", "num_target_vision_tokens"),
    ("state_dim", "real_state_dim"),
];

/// Integer keys and epsilons whose value ours fixes (VLA-JEPA's own).
const FIXED_U32: [(&str, u64); 2] = [("temporal_patch_size", 2), ("time_proj_dim", 256)];
const FIXED_F32: [(&str, f32); 5] = [
    ("vit_ln_eps", 1e-6),
    ("connector_ln_eps", 1e-6),
    ("vit_rope_theta", 10000.0),
    ("dit_ln_eps", 1e-5),
    ("dit_norm_out_eps", 1e-6),
];

/// The head's names: vla.cpp's prefix -> ours.
const HEAD: [(&str, &str); 8] = [
    ("ah.dit.", "aex.dit."),
    ("ah.time_emb.", "aex.dit.time_emb."),
    ("ah.proj_out", "aex.dit.proj_out"),
    ("ah.act_enc.l", "aex.act_enc.W"),
    ("ah.state_enc.", "aex.state_enc."),
    ("ah.act_dec.", "aex.act_dec."),
    ("ah.future_tokens", "aex.future_tokens.weight"),
    ("ah.pos_embd", "aex.pos_embd.weight"),
];

pub(super) fn vla_jepa(file: &mut GgufFile, opts: &RuntimeOptions) -> Result<()> {
    let Some(ckpt) = opts.statistics.as_deref() else {
        return Err(Error::InvalidArgument(format!(
            "vla.cpp's {ARCH} file carries no normalisation statistics or post-processing (vla.cpp returns normalised actions; its clients read them from the lerobot checkpoint): give that checkpoint folder with --statistics"
        )));
    };
    super::lm_keys(file, ARCH, &RENAMED)?;
    check_fixed(file)?;
    let target = super::qwen_vl_keys(file, ARCH)?;
    let u = |k: &str| file.get_u64(&key(k));
    let (state, action) = (u("state_dim")?, u("action_dim")?);
    let rows = file.tensor_info("ah.pos_embd")?.dims.get(1).copied();
    let rows =
        rows.ok_or_else(|| Error::InvalidArgument("ah.pos_embd: expected [rows, E]".into()))?;
    let set = [
        ("max_state_dim", Value::U32(u32_of("state_dim", state)?)),
        ("max_action_dim", Value::U32(u32_of("action_dim", action)?)),
        ("real_action_dim", Value::U32(u32_of("action_dim", action)?)),
        ("max_seq_len", Value::U32(u32_of("ah.pos_embd", rows)?)),
        ("max_num_embodiments", Value::U32(1)),
        ("pad_token_id", Value::U32(0)),
        // the whole sequence: lerobot bounds it by nothing but the graphs' longest
        ("tokenizer_max_length", Value::U32(MAX_SEQUENCE as u32)),
    ];
    for (k, v) in set {
        file.set_metadata(key(k), v);
    }
    checkpoint(file, ckpt, (state, action))?;
    super::qwen_tower(file, ARCH, target as usize)?;
    let names: Vec<String> = file
        .tensors()
        .iter()
        .map(|t| t.name.clone())
        .filter(|n| n.starts_with("ah."))
        .collect();
    for name in names {
        let Some((theirs, ours)) = HEAD.iter().find(|(t, _)| name.starts_with(t)) else {
            return Err(Error::InvalidArgument(format!(
                "vla.cpp's {ARCH} file: unknown head tensor {name:?}"
            )));
        };
        file.rename_tensor(&name, &name.replacen(theirs, ours, 1))?;
    }
    Ok(())
}

/// The sizes and epsilons ours fixes or derives, as the file states them.
fn check_fixed(file: &GgufFile) -> Result<()> {
    let u = |k: &str| file.get_u64(&key(k)).ok();
    let derived = [
        ("cross_dim", u("lm_hidden")),
        (
            "dit_hidden",
            u("dit_heads").zip(u("dit_head_dim")).map(|(h, d)| h * d),
        ),
        ("vit_patch_flat", u("patch_size").map(|p| 3 * 2 * p * p)),
    ];
    super::check_keys(file, (ARCH, "VLA-JEPA"), &FIXED_U32, &FIXED_F32, &derived)
}

/// What the lerobot checkpoint folder `ckpt` says of the steps around the model: the
/// statistics (`dims`: the file's state and action widths), the post-processing steps, the
/// area step and the cameras.
fn checkpoint(file: &mut GgufFile, ckpt: &Path, (state, action): (u64, u64)) -> Result<()> {
    let err = |what: String| {
        Error::Checkpoint {
        path: ckpt.to_owned(),
        reason: format!("{what} (--statistics: the lerobot VLA-JEPA checkpoint folder vla.cpp's file was converted from)"),
    }
    };
    let config = read_json(&ckpt.join("config.json"))?;
    if config.get("type").and_then(|t| t.as_str()) != Some(ARCH) {
        return Err(err("config.json is not a lerobot vla_jepa config".into()));
    }
    let stats = [
        ("observation.state", ["mean", "std"], "state", state),
        ("action", ["min", "max"], "action", action),
    ];
    for (feature, names, ours, dim) in stats {
        let (_, pair) = processor_stats(ckpt, feature, names)?.ok_or_else(|| {
            err(format!(
                "no {feature} {} in the processor files",
                names.join("/")
            ))
        })?;
        for (values, s) in pair.iter().zip(names) {
            if values.len() as u64 != dim {
                return Err(err(format!(
                    "{feature}.{s}: {} values for this file's {dim}",
                    values.len()
                )));
            }
            file.add_tensor_f32(&format!("{ours}_{s}"), &[dim], values)?;
        }
    }
    let post = ckpt.join("policy_postprocessor.json");
    let runs = |step: &str| -> Result<u32> {
        Ok(u32::from(
            post.is_file() && !processor_steps(&post, step)?.is_empty(),
        ))
    };
    let area = match config.get("resize_images_to").and_then(|r| r.as_array()) {
        Some(r) if r.len() == 2 => [0, 1].map(|i| r[i].as_u64().unwrap_or(0)),
        _ => [0, 0],
    };
    let cameras = config
        .get("input_features")
        .and_then(|f| f.as_object())
        .map_or(0, |f| {
            f.values()
                .filter(|v| v.get("type").and_then(|t| t.as_str()) == Some("VISUAL"))
                .count()
        });
    let number = |k: &str, default: f64| config.get(k).and_then(|v| v.as_f64()).unwrap_or(default);
    let set = [
        (
            "area_height",
            Value::U32(u32_of("resize_images_to", area[0])?),
        ),
        (
            "area_width",
            Value::U32(u32_of("resize_images_to", area[1])?),
        ),
        ("n_images", Value::U32(u32_of("cameras", cameras as u64)?)),
        ("clip_actions", Value::U32(runs("vla_jepa_clip_actions")?)),
        (
            "gripper_pre_snap",
            Value::U32(runs("vla_jepa_pre_snap_gripper")?),
        ),
        (
            "gripper_binarize",
            Value::U32(runs("vla_jepa_binarize_gripper")?),
        ),
        ("gripper_dim", Value::U32(number("gripper_dim", 6.0) as u32)),
        (
            "gripper_threshold",
            Value::F32(number("gripper_threshold", 0.5) as f32),
        ),
    ];
    for (k, v) in set {
        file.set_metadata(key(k), v);
    }
    Ok(())
}
