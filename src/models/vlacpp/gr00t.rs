//! GR00T N1.5 files (`convert_gr00t_n1_5_to_gguf.py` with `gguf_blocks.py`'s
//! `write_siglip_tower`, `write_qwen3_lm`, `write_vlsa_blocks`, `write_gr00t_projectors`,
//! `write_gr00t_time_embed`, `write_dit_blocks`, `write_gr00t_proj_out`): our tensor names
//! but for three, the language model's and the head's sizes under other keys, no prompt
//! template (its clients send the whole chat-templated sequence, image slots included) and
//! no statistics (vla.cpp returns normalised actions; its converter writes a lerobot
//! checkpoint's min / max to `dataset_statistics.json` beside the GGUF, which
//! [`RuntimeOptions::statistics`] reads).
//!
//! Keys: `lm_hidden`, `lm_layers_used`, `lm_q_heads`, `lm_kv_heads`, `lm_head_dim`,
//! `lm_rope_theta` (f64), `lm_rms_eps` (ours `hidden`, `n_layers`, `n_q_heads`, `n_kv_heads`,
//! `head_dim`, `rope_theta`, `norm_eps`); `action_horizon`, `action_dim`,
//! `num_inference_timesteps` (ours `chunk_size`, `max_action_dim`, `num_steps`); the
//! action encoder's width is the state encoder's (ours `action_hidden`). Sizes ours fixes
//! (`dit_interleave` 1, `vit_pixel_shuffle` 0, `mlp_connector_layers` 1, the norms'
//! epsilons, `vlsa_inter` = 4 x width) are checked, not assumed. The embodiment defaults
//! to vla.cpp's (id 24); `--embodiment` is its `VLA_GR00T_EMBODIMENT`.

use std::collections::BTreeMap;
use std::path::Path;

use crate::config::limits::MAX_SEQUENCE;
use crate::gguf::{GgufFile, Value};
use crate::models::embodiment;
use crate::models::gr00t::ARCH;
use crate::policy::RuntimeOptions;
use crate::{Error, Result};

use super::{u32_of, VLACPP_IMAGES};

fn key(k: &str) -> String {
    format!("{ARCH}.{k}")
}

/// vla.cpp's key -> ours, both u32 (besides the language model's, [`super::lm_keys`]).
const RENAMED: [(&str, &str); 3] = [
    ("action_horizon", "chunk_size"),
    ("action_dim", "max_action_dim"),
    ("num_inference_timesteps", "num_steps"),
];

/// Keys whose value ours fixes: integers, then epsilons (GR00T N1.5's own values).
const FIXED_U32: [(&str, u64); 3] = [
    ("dit_interleave", 1),
    ("vit_pixel_shuffle", 0),
    ("mlp_connector_layers", 1),
];
const FIXED_EPS: [(&str, f32); 3] = [("ln_eps", 1e-5), ("norm_out_eps", 1e-6), ("vlln_eps", 1e-5)];

/// vla.cpp's default embodiment (`VLA_GR00T_EMBODIMENT` unset): id 24.
const VLACPP_EMBODIMENT: &str = "24";

/// vla.cpp's tensor names that differ from ours.
const TENSORS: [(&str, &str); 3] = [
    ("vit.pos_embd", "vit.pos_embd.weight"),
    ("aex.pos_embd", "aex.pos_embd.weight"),
    ("aex.future_tokens", "aex.future_tokens.weight"),
];

pub(super) fn gr00t_n1_5(file: &mut GgufFile, opts: &RuntimeOptions) -> Result<()> {
    super::lm_keys(file, ARCH, &RENAMED)?;
    check_fixed(file)?;
    let l1 = file.tensor_info("aex.state_enc.l1.W")?;
    let hidden = *l1.dims.first().ok_or_else(|| {
        Error::InvalidArgument("aex.state_enc.l1.W: expected [E, in, hidden]".into())
    })?;
    file.set_metadata(
        key("action_hidden"),
        Value::U32(u32_of("action_hidden", hidden)?),
    );
    let absent = [
        ("n_images", Value::U32(VLACPP_IMAGES as u32)),
        ("pad_token_id", Value::U32(0)),
        // the whole sequence: lerobot bounds it by nothing but the graphs' longest
        ("tokenizer_max_length", Value::U32(MAX_SEQUENCE as u32)),
        ("embodiment", Value::String(VLACPP_EMBODIMENT.into())),
    ];
    for (k, v) in absent {
        if file.get(&key(k)).is_none() {
            file.set_metadata(key(k), v);
        }
    }
    for (theirs, ours) in TENSORS {
        file.rename_tensor(theirs, ours)?;
    }
    statistics(file, opts)
}

/// The sizes and epsilons ours fixes or derives, as the file states them.
fn check_fixed(file: &GgufFile) -> Result<()> {
    let u = |k: &str| file.get_u64(&key(k)).ok();
    let derived = [
        ("backbone_embedding_dim", u("lm_hidden")),
        (
            "dit_hidden",
            u("dit_heads").zip(u("dit_head_dim")).map(|(h, d)| h * d),
        ),
        (
            "vlsa_inter",
            u("vlsa_heads")
                .zip(u("vlsa_head_dim"))
                .map(|(h, d)| 4 * h * d),
        ),
        (
            "n_img_tokens",
            u("image_size")
                .zip(u("patch_size"))
                .filter(|(_, p)| *p > 0)
                .map(|(s, p)| (s / p) * (s / p)),
        ),
    ];
    super::check_keys(file, (ARCH, "GR00T N1.5"), &FIXED_U32, &FIXED_EPS, &derived)
}

/// vla.cpp's `dataset_statistics.json`: `{tag: {"state": {"min", "max"}, "action": {"min",
/// "max"}}}`.
type StatisticsFile = BTreeMap<String, BTreeMap<String, BTreeMap<String, Vec<f32>>>>;

/// The statistics of the embodiment the run uses, from [`RuntimeOptions::statistics`], as
/// our `state_min`, `state_max`, `action_min`, `action_max` and real dimensions (a file
/// that carries them keeps its own, and refuses others).
fn statistics(file: &mut GgufFile, opts: &RuntimeOptions) -> Result<()> {
    let carried: Vec<u64> = ["state_min", "action_min"]
        .iter()
        .filter_map(|t| file.tensor_info(t).ok().map(|t| t.n_elements()))
        .collect();
    if let [state, action] = carried[..] {
        if let Some(path) = &opts.statistics {
            return Err(Error::InvalidArgument(format!(
                "--statistics {}: this {ARCH} file carries its own",
                path.display()
            )));
        }
        for (what, n) in [("state", state), ("action", action)] {
            let real = Value::U32(u32_of("statistics", n)?);
            file.set_metadata(key(&format!("real_{what}_dim")), real);
        }
        return Ok(());
    }
    let Some(path) = opts.statistics.as_deref() else {
        return Err(Error::InvalidArgument(format!(
            "vla.cpp's {ARCH} file carries no normalisation statistics (vla.cpp returns normalised actions; its converter writes a lerobot checkpoint's to dataset_statistics.json beside the GGUF): give that file with --statistics"
        )));
    };
    let stats = read_statistics(path)?;
    let tags = file.get_str(&key(embodiment::KEY_TAGS))?.to_owned();
    let default = file.get_str(&key(embodiment::KEY_DEFAULT))?.to_owned();
    let n = file.get_u64(&key("max_num_embodiments"))? as usize;
    let (tag, id) = embodiment::resolve(&tags, &default, opts.embodiment.as_deref(), n)?;
    let Some(set) = stats.get(&tag) else {
        let known: Vec<&str> = stats.keys().map(String::as_str).collect();
        return Err(Error::InvalidArgument(format!(
            "{}: no statistics for embodiment {tag:?} ({id}), which this run uses; it has {} (choose with --embodiment)",
            path.display(),
            known.join(", ")
        )));
    };
    for what in ["state", "action"] {
        let get = |s: &str| {
            set.get(what).and_then(|m| m.get(s)).ok_or_else(|| {
                Error::InvalidArgument(format!("{}: {tag}.{what}.{s} missing", path.display()))
            })
        };
        let (min, max) = (get("min")?, get("max")?);
        if min.len() != max.len() || min.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "{}: {tag}.{what}: {} min and {} max values",
                path.display(),
                min.len(),
                max.len()
            )));
        }
        let dim = min.len() as u64;
        file.add_tensor_f32(&format!("{what}_min"), &[dim], min)?;
        file.add_tensor_f32(&format!("{what}_max"), &[dim], max)?;
        let real = Value::U32(u32_of("statistics", dim)?);
        file.set_metadata(key(&format!("real_{what}_dim")), real);
    }
    Ok(())
}

fn read_statistics(path: &Path) -> Result<StatisticsFile> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::InvalidArgument(format!("{}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| {
        Error::InvalidArgument(format!(
            "{}: not vla.cpp's dataset_statistics.json ({{tag: {{state: {{min, max}}, action: {{min, max}}}}}}): {e}",
            path.display()
        ))
    })
}
