//! What vla.cpp's GR00T N1.6 and N1.7 files share (`convert_gr00t_n1_6_to_gguf.py`,
//! `convert_gr00t_n1_7_to_gguf.py`): Isaac-GR00T's `statistics.json`,
//! `processor_config.json` and `embodiment_id.json` as strings (`statistics_json`,
//! `processor_config_json`, `embodiment_id_mapping`), which vla.cpp's server never reads (it
//! returns normalised actions; its clients normalise) and we read to stay in world units;
//! the head's keys ours derives.

use serde_json::Value as Json;

use crate::config::limits::MAX_SEQUENCE;
use crate::gguf::{GgufFile, Value};
use crate::models::common::CAMERA_NAMES_KEY;
use crate::models::embodiment;
use crate::models::gr00t_n1_7::stats::{group_bounds, relative_refs, zscore_stats, Relative};
use crate::policy::RuntimeOptions;
use crate::{Error, Result};

use super::u32_of;

/// The head's keys vla.cpp's file leaves out or names otherwise: `frame_crop` (vla.cpp's
/// `crop_fraction`), `action_hidden` (the state encoder's width), no future tokens, padding
/// id 0, and the client's whole sequence as the instruction's bound (the reference bounds it
/// by nothing but the graphs' longest).
pub(super) fn head_keys(file: &mut GgufFile, arch: &str) -> Result<()> {
    let key = |k: &str| format!("{arch}.{k}");
    let crop = file.get_f64(&key("crop_fraction"))? as f32;
    let hidden = action_hidden(file)?;
    let set = [
        ("frame_crop", Value::F32(crop)),
        ("action_hidden", Value::U32(hidden)),
        ("num_target_vision_tokens", Value::U32(0)),
        ("pad_token_id", Value::U32(0)),
        ("tokenizer_max_length", Value::U32(MAX_SEQUENCE as u32)),
    ];
    for (k, v) in set {
        file.set_metadata(key(k), v);
    }
    Ok(())
}

/// The action encoder's width: the state encoder's first layer's output
/// (`aex.state_enc.l1.W`, ggml dims `[hidden, in, embodiments]`).
fn action_hidden(file: &GgufFile) -> Result<u32> {
    let l1 = file.tensor_info("aex.state_enc.l1.W")?;
    let hidden = *l1.dims.first().ok_or_else(|| {
        Error::InvalidArgument("aex.state_enc.l1.W: expected [E, in, hidden]".into())
    })?;
    u32_of("action_hidden", hidden)
}

/// The file's embodiment map as ours, the default vla.cpp's loader picks: `tag` where the map
/// has it, else `id`.
pub(super) fn embodiments(file: &mut GgufFile, arch: &str, (tag, id): (&str, &str)) -> Result<()> {
    let key = |k: &str| format!("{arch}.{k}");
    let tags = file.get_str(&key("embodiment_id_mapping"))?.to_owned();
    let default = match embodiment::tag_map(&tags)?.contains_key(tag) {
        true => tag,
        false => id,
    };
    file.set_metadata(key(embodiment::KEY_TAGS), Value::String(tags));
    file.set_metadata(key(embodiment::KEY_DEFAULT), Value::String(default.into()));
    Ok(())
}

/// Whose processor the statistics follow: lerobot's port (N1.7: bounds only, relative
/// groups refused) or Isaac-GR00T's own (N1.6: z-scored groups, and relative groups applied
/// with `use_relative_action`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Processor {
    Lerobot,
    Isaac,
}

/// The run's embodiment's bounds, widths, valid horizon and cameras from the file's
/// Isaac-GR00T statistics and processor config (`use_percentiles` where the processor does not
/// say: `percentiles`, the reference processor's default); with [`Processor::Isaac`] its
/// z-scored groups ([`zscore_stats`]) and relative groups ([`relative_refs`]) too, and the
/// cameras' names (its video keys).
pub(super) fn statistics(
    file: &mut GgufFile,
    arch: &str,
    opts: &RuntimeOptions,
    (percentiles, processor_kind): (bool, Processor),
) -> Result<()> {
    let key = |k: &str| format!("{arch}.{k}");
    if let Some(path) = &opts.statistics {
        return Err(Error::InvalidArgument(format!(
            "--statistics {}: this {arch} file carries its own (statistics_json)",
            path.display()
        )));
    }
    let json = |k: &str| -> Result<Json> {
        let text = file.get_str(&key(k))?;
        serde_json::from_str(text)
            .map_err(|e| Error::InvalidArgument(format!("vla.cpp's {arch} file: {k}: {e}")))
    };
    let (stats, processor) = (json("statistics_json")?, json("processor_config_json")?);
    let tags = file.get_str(&key(embodiment::KEY_TAGS))?;
    let default = file.get_str(&key(embodiment::KEY_DEFAULT))?;
    let n = file.get_u64(&key("max_num_embodiments"))? as usize;
    let (tag, id) = embodiment::resolve(tags, default, opts.embodiment.as_deref(), n)?;
    let kwargs = processor.get("processor_kwargs").unwrap_or(&Json::Null);
    let (raw, modality) = match (
        stats.get(&tag),
        kwargs.get("modality_configs").and_then(|m| m.get(&tag)),
    ) {
        (Some(r), Some(m)) => (r, m),
        _ => {
            let known: Vec<&str> = stats
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k.as_str())
                .collect();
            return Err(Error::InvalidArgument(format!(
                "vla.cpp's {arch} file has no statistics or modality config for embodiment {tag:?} ({id}), which this run uses; it has statistics for [{}] (choose with --embodiment)",
                known.join(", ")
            )));
        }
    };
    let flag = |k: &str, default| kwargs.get(k).and_then(Json::as_bool).unwrap_or(default);
    if !flag("clip_outliers", true) {
        return Err(Error::InvalidArgument(format!(
            "vla.cpp's {arch} file: clip_outliers off: not supported"
        )));
    }
    let relative = match processor_kind {
        Processor::Lerobot => Relative::Refuse,
        Processor::Isaac if flag("use_relative_action", false) => Relative::Apply,
        Processor::Isaac => Relative::Absolute,
    };
    let err = |e: String| Error::InvalidArgument(format!("vla.cpp's {arch} file, {tag}: {e}"));
    let percentiles = flag("use_percentiles", percentiles);
    let bounds = group_bounds(raw, modality, percentiles, None, relative).map_err(err)?;
    let mut tensors = bounds.clone();
    if processor_kind == Processor::Isaac {
        tensors.extend(zscore_stats(raw, modality, relative).map_err(err)?);
        tensors.extend(relative_refs(raw, modality, relative).map_err(err)?);
    }
    for (name, values) in &tensors {
        file.add_tensor_f32(name, &[values.len() as u64], values)?;
    }
    let count = |path: [&str; 2]| {
        modality
            .get(path[0])
            .and_then(|m| m.get(path[1]))
            .and_then(Json::as_array)
            .map_or(0, Vec::len)
    };
    let set = [
        ("real_state_dim", bounds[0].1.len()),
        ("real_action_dim", bounds[2].1.len()),
        ("valid_horizon", count(["action", "delta_indices"])),
        ("n_images", count(["video", "modality_keys"])),
    ];
    for (k, v) in set {
        file.set_metadata(key(k), Value::U32(u32_of(k, v as u64)?));
    }
    if processor_kind == Processor::Isaac {
        // the cameras by the names `vla-convert` keeps for Isaac-GR00T's checkpoints: the
        // embodiment's video keys, in order
        let cameras: Vec<&str> = modality
            .get("video")
            .and_then(|m| m.get("modality_keys"))
            .and_then(Json::as_array)
            .into_iter()
            .flatten()
            .filter_map(Json::as_str)
            .collect();
        file.set_metadata(CAMERA_NAMES_KEY, Value::from_strs(&cameras));
    }
    Ok(())
}
