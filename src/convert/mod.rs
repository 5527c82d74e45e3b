//! Converting published checkpoints (lerobot's `model.safetensors` + `config.json` and its
//! normaliser files) into vla-rs GGUF files. One module per architecture; this one holds
//! what they share: reading safetensors and JSON with errors that name the file and tensor.

pub mod act;
pub mod bitvla;
pub mod cameras;
pub mod detect;
pub mod evo1;
pub mod gr00t;
pub mod gr00t_n1_6;
pub mod gr00t_n1_7;
mod json;
pub mod msgpack;
pub mod octo;
pub mod openvla;
pub mod openvla_oft;
pub mod pi0;
pub mod qwen;
pub mod qwen_vl;
pub mod smolvla;
pub mod torch_pt;
pub mod turbovla;
pub mod vla_adapter;
pub mod vla_jepa;

pub(crate) use crate::checkpoint::{ckpt_err, processor_stats, processor_steps};
pub use crate::checkpoint::{read_json, Safetensors};
pub use detect::{detect, Kind};
pub use json::{Json, JsonFile};

use crate::gguf::{GgmlType, GgufWriter};
use crate::models::common::ActionIo;
use crate::models::flow::FlowArch;
use crate::modules::flow::TimeEmbedding;
use crate::modules::vision::{PatchPositions, VisionConfig};
use crate::{Error, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The instruction bound of an arch whose reference has none (GR00T, VLA-JEPA): what the
/// graphs' longest sequence ([`MAX_SEQUENCE`]) leaves around `prompt`.
///
/// [`MAX_SEQUENCE`]: crate::config::limits::MAX_SEQUENCE
pub fn unbounded_text(prompt: &crate::models::prompt::PromptIds) -> usize {
    prompt.text_bound(crate::config::limits::MAX_SEQUENCE)
}

/// Part `part` (0: q, 1: k, 2: v) of a fused `nn.MultiheadAttention.in_proj_weight` or
/// `in_proj_bias` (the three stacked along the first dimension): its values, row-major.
pub(crate) fn in_proj_part(values: &[f32], part: usize) -> Vec<f32> {
    let n = values.len() / 3;
    values[part * n..(part + 1) * n].to_vec()
}

pub(crate) fn ggml_dims(shape: &[usize]) -> Vec<u64> {
    shape.iter().rev().map(|&d| d as u64).collect()
}

/// The `--dtype` of a converter's 2-D matmul weights: F32 by default, else F32, F16 or BF16.
pub(crate) fn float_dtype(dtype: Option<GgmlType>) -> Result<GgmlType> {
    let dtype = dtype.unwrap_or(GgmlType::F32);
    match dtype {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => Ok(dtype),
        _ => Err(Error::InvalidArgument(format!(
            "--dtype {dtype}: expected f32, f16 or bf16"
        ))),
    }
}

/// The test fixture `name` (`tests/fixtures/<name>`).
#[cfg(test)]
pub(crate) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A GGUF writer holding `config`'s metadata, `general.name` (the checkpoint folder's name,
/// else the arch), `general.source` and the camera names of checkpoint `ckpt`, a `kind`
/// ([`cameras::write`]: a note where they do not fit the model).
pub(crate) fn arch_writer<A: FlowArch>(
    config: &A,
    ckpt: &Path,
    kind: Kind,
    source: &str,
    notes: &mut Vec<String>,
) -> Result<GgufWriter<'static>> {
    let mut w = GgufWriter::new();
    config.write(&mut w)?;
    let name = ckpt
        .file_name()
        .map_or(config.arch().into(), |n| n.to_string_lossy().into_owned());
    w.add_metadata("general.name", name)?;
    w.add_metadata("general.source", source)?;
    cameras::write(&mut w, ckpt, kind, config.spec().io.n_images, notes)?;
    Ok(w)
}

/// The folder a config value `named` names (it must hold a `config.json`): `given`, else
/// `named` relative to `ckpt`, as written, or as a hub repository in the Hugging Face cache;
/// the error names the key `what` and the option `flag` that gives the folder.
pub(crate) fn config_folder(
    ckpt: &Path,
    given: Option<&Path>,
    named: &str,
    (what, flag): (&str, &str),
) -> Result<PathBuf> {
    if let Some(g) = given {
        return Ok(g.to_owned());
    }
    named_folder(vec![ckpt.join(named)], named, has_config)
        .ok_or_else(|| ckpt_err(ckpt, missing_folder(what, named, flag)))
}

/// Whether folder `d` holds a `config.json`.
pub(crate) fn has_config(d: &Path) -> bool {
    d.join("config.json").is_file()
}

/// The first of `local`, then `named` as written, then `named`'s Hugging Face cache
/// snapshots, that `holds` what is looked for.
pub(crate) fn named_folder(
    mut local: Vec<PathBuf>,
    named: &str,
    holds: impl Fn(&Path) -> bool,
) -> Option<PathBuf> {
    local.push(PathBuf::from(named));
    local
        .into_iter()
        .chain(hf_cache_snapshots(named))
        .find(|d| holds(d))
}

/// The error for a config value `named` (key `what`) whose folder is nowhere: how to fetch a
/// hub repository, and the option `flag` that gives the folder.
pub(crate) fn missing_folder(what: &str, named: &str, flag: &str) -> String {
    let fetch = if is_hub_name(named) {
        format!(
            " nor in the Hugging Face cache: `huggingface-cli download {named} --local-dir DIR` \
             fetches it"
        )
    } else {
        String::new()
    };
    format!("{what} {named:?}: no folder with a config.json there{fetch}; pass {flag} DIR")
}

/// Whether `--dtype` applies to our tensor `name` of `shape`: 2-D matmul weights only
/// (vla.cpp's rule: embeddings, norms, positions, the state/action/time projections and
/// adaRMS maps stay f32).
pub(crate) fn takes_float_dtype(name: &str, shape: &[usize]) -> bool {
    let skip = [
        "token_embd",
        "patch_embd",
        "pos_embd",
        "norm",
        "action",
        "state",
        "time",
        "future_tokens",
    ];
    shape.len() == 2 && name.ends_with(".weight") && !skip.iter().any(|s| name.contains(s))
}

/// Every checkpoint tensor is either converted (`map`'s second column) or known to be
/// unused; an unknown one means a model variant the converter does not understand.
pub(crate) fn check_coverage(
    st: &Safetensors,
    map: &[(String, String)],
    ignored: &[&str],
    ignored_prefixes: &[&str],
) -> Result<()> {
    let used: BTreeSet<&str> = map.iter().map(|(_, t)| t.as_str()).collect();
    let unknown: Vec<&str> = st
        .names()
        .filter(|n| {
            !used.contains(n)
                && !ignored.contains(n)
                && !ignored_prefixes.iter().any(|p| n.starts_with(p))
        })
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let shown: Vec<_> = unknown.iter().take(8).collect();
    Err(ckpt_err(
        st.path(),
        format!(
            "{} tensors this converter does not map, e.g. {shown:?}",
            unknown.len()
        ),
    ))
}

/// A SigLIP vision tower under `prefix` (`...vision_model.`), sized from its weights' shapes.
/// Those do not fix the head count (`heads` gets the width), the epsilon or the position
/// layout: the caller supplies them.
pub(crate) fn vision_tower(
    st: &Safetensors,
    prefix: &str,
    heads: impl FnOnce(usize) -> usize,
    ln_eps: f32,
    positions: PatchPositions,
) -> Result<VisionConfig> {
    let patch = st.config_shape(&format!("{prefix}embeddings.patch_embedding.weight"), 4)?;
    if patch[1] != 3 || patch[2] != patch[3] {
        return Err(ckpt_err(
            st.path(),
            format!("patch embedding has shape {patch:?}, expected [hidden, 3, p, p]"),
        ));
    }
    let (hidden, patch_size) = (patch[0], patch[2]);
    let n_pos = st.config_shape(&format!("{prefix}embeddings.position_embedding.weight"), 2)?[0];
    let side = (n_pos as f64).sqrt().round() as usize;
    if side * side != n_pos {
        return Err(ckpt_err(
            st.path(),
            format!("{n_pos} vision positions: not a square grid"),
        ));
    }
    Ok(VisionConfig {
        hidden,
        layers: count_layers(
            st,
            &format!("{prefix}encoder.layers."),
            ".layer_norm1.weight",
        ),
        heads: heads(hidden),
        inter: st.config_shape(&format!("{prefix}encoder.layers.0.mlp.fc1.weight"), 2)?[0],
        image_size: side * patch_size,
        patch_size,
        ln_eps,
        positions,
        ..Default::default()
    })
}

/// The action I/O and time-embedding parts of a lerobot flow policy's `config.json`
/// (`steps_key`: `num_steps` for SmolVLA, `num_inference_steps` for pi0 / pi0.5). The pad id
/// is 0: pad positions are masked out, so any id in the vocabulary gives the same chunk.
pub(crate) fn flow_io(policy: &Json, steps_key: &str) -> Result<(ActionIo, TimeEmbedding)> {
    let features = policy.obj("input_features")?;
    let io = ActionIo {
        n_images: count_visual_features(&features),
        tokenizer_max_length: policy.usize("tokenizer_max_length")?,
        pad_token_id: 0,
        chunk_size: policy.usize("chunk_size")?,
        num_steps: policy.usize(steps_key)?,
        max_state_dim: policy.usize("max_state_dim")?,
        max_action_dim: policy.usize("max_action_dim")?,
        state_dim: feature_dim(&features, "observation.state")?,
        action_dim: feature_dim(&policy.obj("output_features")?, "action")?,
    };
    let time = TimeEmbedding {
        min_period: policy.f64("min_period")?,
        max_period: policy.f64("max_period")?,
    };
    Ok((io, time))
}

/// A SigLIP tower under `vit` (`...vision_model.`): our `vit.*` name -> the checkpoint's, for
/// the patch and position embeddings, `layers` encoder layers and the post-LayerNorm.
pub(crate) fn siglip_name_map(vit: &str, layers: usize) -> Vec<(String, String)> {
    let mut m = vec![(
        "vit.pos_embd.weight".to_owned(),
        format!("{vit}embeddings.position_embedding.weight"),
    )];
    let mut pairs = vec![
        (
            "vit.patch_embd".to_owned(),
            format!("{vit}embeddings.patch_embedding"),
        ),
        ("vit.post_ln".to_owned(), format!("{vit}post_layernorm")),
    ];
    for i in 0..layers {
        let (ours, theirs) = (format!("vit.blk.{i}"), format!("{vit}encoder.layers.{i}"));
        for (a, b) in [
            ("ln1", "layer_norm1"),
            ("ln2", "layer_norm2"),
            ("attn_q", "self_attn.q_proj"),
            ("attn_k", "self_attn.k_proj"),
            ("attn_v", "self_attn.v_proj"),
            ("attn_o", "self_attn.out_proj"),
            ("fc1", "mlp.fc1"),
            ("fc2", "mlp.fc2"),
        ] {
            pairs.push((format!("{ours}.{a}"), format!("{theirs}.{b}")));
        }
    }
    for (ours, theirs) in pairs {
        for p in ["weight", "bias"] {
            m.push((format!("{ours}.{p}"), format!("{theirs}.{p}")));
        }
    }
    m
}

/// Counts `<prefix>{i}<suffix>` for i = 0, 1, ... present in the checkpoint.
pub(crate) fn count_layers(st: &Safetensors, prefix: &str, suffix: &str) -> usize {
    (0..)
        .take_while(|i| st.contains(&format!("{prefix}{i}{suffix}")))
        .count()
}

/// Camera inputs among a lerobot config's `input_features`.
pub(crate) fn count_visual_features(features: &Json) -> usize {
    features.value.as_object().map_or(0, |o| {
        o.values()
            .filter(|f| f.get("type").and_then(|t| t.as_str()) == Some("VISUAL"))
            .count()
    })
}

/// The first dimension of feature `key`'s shape.
pub(crate) fn feature_dim(features: &Json, key: &str) -> Result<usize> {
    use crate::config::limits::MAX_ROBOT_DIM;
    let dim = features
        .obj(key)?
        .get("shape")
        .and_then(|s| s.get(0))
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| ckpt_err(features.path, format!("feature {key:?} has no shape")))?;
    // Bounded before the identity statistics are built from it (the model's check comes later).
    if !(1..=MAX_ROBOT_DIM as u64).contains(&dim) {
        return Err(ckpt_err(
            features.path,
            format!("feature {key:?} has {dim} dimensions: expected 1 to {MAX_ROBOT_DIM}"),
        ));
    }
    Ok(dim as usize)
}

/// Statistics `keys` (e.g. mean and std) of `feature` from lerobot's processor files, else
/// from the in-model normaliser buffers of older checkpoints (`st`).
pub(crate) fn find_stats(
    ckpt: &Path,
    st: Option<&Safetensors>,
    feature: &str,
    keys: [&str; 2],
    notes: &mut Vec<String>,
) -> Result<[Vec<f32>; 2]> {
    if let Some((file, pair)) = processor_stats(ckpt, feature, keys)? {
        notes.push(format!("{feature} statistics from {file}"));
        return Ok(pair);
    }
    let buffer = feature.replace('.', "_");
    for module in [
        "normalize_inputs",
        "unnormalize_outputs",
        "normalize_targets",
    ] {
        let names = keys.map(|k| format!("{module}.buffer_{buffer}.{k}"));
        if let Some(st) = st.filter(|st| names.iter().all(|n| st.contains(n))) {
            notes.push(format!(
                "{feature} statistics from model.safetensors ({module})"
            ));
            return Ok([st.f32(&names[0])?, st.f32(&names[1])?]);
        }
    }
    Err(ckpt_err(
        ckpt,
        format!(
            "no {} for {feature:?}: neither a normaliser file named by policy_preprocessor.json/policy_postprocessor.json nor normaliser buffers in model.safetensors",
            keys.join("/")
        ),
    ))
}

/// Ships `tok` (read from `source`) in the GGUF, so the server takes text.
pub(crate) fn ship_tokenizer(
    w: &mut crate::gguf::GgufWriter,
    tok: &crate::tokenizer::Tokenizer,
    source: &Path,
    vocab_size: usize,
    notes: &mut Vec<String>,
) -> Result<()> {
    if tok.len() > vocab_size {
        return Err(ckpt_err(
            source,
            format!(
                "{} tokens, more than the model's vocab_size {vocab_size}",
                tok.len()
            ),
        ));
    }
    tok.write_gguf(w)?;
    notes.push(format!(
        "tokenizer: {} ({} tokens)",
        source.display(),
        tok.len()
    ));
    Ok(())
}

/// The tokenizer of an arch whose prompt is the instruction's ids alone (SmolVLA, pi0,
/// pi0.5), so a GGUF without one still serves requests that carry token ids: `given`
/// (`--tokenizer`: a file or folder), else the folder the reference's pre-processor loads
/// it from ([`reference_tokenizer`]), else the first of `beside` that holds one. None found
/// is an error saying how to get it, unless `skip` (`--no-tokenizer`), which is noted.
pub(crate) fn optional_tokenizer(
    ckpt: &Path,
    given: Option<&Path>,
    beside: &[PathBuf],
    skip: bool,
    notes: &mut Vec<String>,
) -> Result<Option<(PathBuf, crate::tokenizer::Tokenizer)>> {
    use crate::tokenizer::{hf_tokenizer_in, Tokenizer};
    if skip {
        notes.push("no tokenizer (--no-tokenizer): the GGUF takes token ids only, not text".into());
        return Ok(None);
    }
    if let Some(p) = given {
        return Ok(Some((p.to_owned(), Tokenizer::from_hf_path(p)?)));
    }
    let reference = reference_tokenizer(ckpt)?;
    let found = reference
        .as_ref()
        .and_then(|(_, dir)| dir.clone())
        .or_else(|| beside.iter().find(|d| hf_tokenizer_in(d)).cloned());
    if let Some(dir) = found {
        let tok = Tokenizer::from_hf_path(&dir)?;
        return Ok(Some((dir, tok)));
    }
    let how = match reference {
        Some((name, _)) if is_hub_name(&name) => format!(
            "lerobot's pre-processor loads the tokenizer of {name:?}, which lerobot does not \
             save in the checkpoint and is not in the Hugging Face cache: run \
             `huggingface-cli download {name} tokenizer.json tokenizer_config.json` (a gated \
             repo asks you to accept its license on the hub first) and convert again, or \
             pass --tokenizer FILE_OR_DIR"
        ),
        Some((name, _)) => format!(
            "lerobot's pre-processor loads the tokenizer from {name:?}, which is not a folder \
             next to the checkpoint: pass --tokenizer FILE_OR_DIR"
        ),
        None => "no tokenizer found: pass --tokenizer FILE_OR_DIR".to_owned(),
    };
    Err(ckpt_err(
        ckpt,
        format!("{how} (or --no-tokenizer for a GGUF that takes token ids only, not text)"),
    ))
}

/// The tokenizer the reference's pre-processor loads: its `tokenizer_processor` step's
/// `tokenizer_name`, with the folder that holds it if there is one (relative to the
/// checkpoint, as written, or a hub repository in the Hugging Face cache).
pub(crate) fn reference_tokenizer(ckpt: &Path) -> Result<Option<(String, Option<PathBuf>)>> {
    let pre = ckpt.join("policy_preprocessor.json");
    if !pre.is_file() {
        return Ok(None);
    }
    let steps = processor_steps(&pre, "tokenizer_processor")?;
    let Some(name) = steps
        .iter()
        .find_map(|s| s["config"]["tokenizer_name"].as_str())
    else {
        return Ok(None);
    };
    let found = named_folder(
        vec![ckpt.join(name)],
        name,
        crate::tokenizer::hf_tokenizer_in,
    );
    Ok(Some((name.to_owned(), found)))
}

/// Whether `name` reads as a hub repository (`org/name`) rather than a path.
fn is_hub_name(name: &str) -> bool {
    let mut parts = name.split('/');
    let (org, repo) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    parts.next().is_none() && !org.is_empty() && !repo.is_empty() && !org.starts_with('.')
}

/// The snapshot folders of hub repository `repo` in the Hugging Face cache
/// (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`).
pub(crate) fn hf_cache_snapshots(repo: &str) -> Vec<PathBuf> {
    let var = |k: &str| std::env::var_os(k).map(PathBuf::from);
    let Some(hub) = var("HF_HUB_CACHE")
        .or_else(|| var("HF_HOME").map(|h| h.join("hub")))
        .or_else(|| var("HOME").map(|h| h.join(".cache/huggingface/hub")))
    else {
        return Vec::new();
    };
    let snapshots = hub
        .join(format!("models--{}", repo.replace('/', "--")))
        .join("snapshots");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(snapshots)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    dirs.sort();
    dirs
}

/// What a converter writes: every tensor of `map` (our name, checkpoint key), checked
/// against the shape `shapes` gives our name, as `dtype` where [`takes_float_dtype`] allows
/// (else F32); then the statistics as F32.
pub(crate) struct Tensors<'a, S> {
    pub map: &'a [(String, String)],
    pub shapes: Vec<(String, Vec<usize>)>,
    pub dtype: GgmlType,
    pub stats: Vec<(S, Vec<f32>)>,
}

/// Writes `tensors` ([`Tensors`]), each mapped one passed through `adjust`.
/// `progress(done, total, name)` is called once per tensor.
pub(crate) fn write_tensors<S: AsRef<str>>(
    w: &mut GgufWriter,
    st: &Safetensors,
    tensors: Tensors<S>,
    adjust: impl Fn(&str, &mut [f32]),
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<()> {
    let Tensors {
        map,
        shapes,
        dtype,
        stats,
    } = tensors;
    let shapes: BTreeMap<String, Vec<usize>> = shapes.into_iter().collect();
    let mapped: BTreeSet<&str> = map.iter().map(|(ours, _)| ours.as_str()).collect();
    if let Some(missing) = shapes.keys().find(|n| !mapped.contains(n.as_str())) {
        return Err(Error::InvalidArgument(format!(
            "converter: no checkpoint tensor is mapped to {missing:?}, which the model reads"
        )));
    }
    let total = map.len() + stats.len();
    for (done, (ours, theirs)) in map.iter().enumerate() {
        let mut got = st.require_shape(theirs)?;
        // A mapped tensor no graph reads (the decoder's last layer past the keys and values
        // the expert takes) is copied as it is, so the file stays complete for other readers.
        let want = shapes.get(ours).map_or(got, Vec::as_slice);
        // Leading unit dims of a stored parameter or buffer (`[1, 1, D]` tokens, `[1, N, D]`
        // tables) are dropped.
        while got.len() > want.len() && got[0] == 1 {
            got = &got[1..];
        }
        if got != want {
            return Err(ckpt_err(
                st.path(),
                format!(
                    "tensor {theirs:?} (-> {ours}) has shape {got:?}, the config implies {want:?}"
                ),
            ));
        }
        let mut vals = st.f32(theirs)?;
        adjust(ours, &mut vals);
        let ty = if takes_float_dtype(ours, want) {
            dtype
        } else {
            GgmlType::F32
        };
        w.add_f32(ours.clone(), ty, &ggml_dims(want), &vals)?;
        progress(done + 1, total, ours);
    }
    for (k, (name, vals)) in stats.into_iter().enumerate() {
        let name = name.as_ref();
        w.add_f32(name.to_owned(), GgmlType::F32, &[vals.len() as u64], &vals)?;
        progress(map.len() + k + 1, total, name);
    }
    Ok(())
}
