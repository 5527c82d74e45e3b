//! vla.cpp's own layouts, translated at load into ours, so that its files (float or
//! FoldQuant) serve as they are. Only where the layouts differ: pi0.5 (docs/GGUF.md
//! "vla.cpp's pi0.5 files"); every other arch reads vla.cpp's names as they are or not at all.
//!
//! vla.cpp's pi0.5 file (its `convert_pi05_to_gguf.py`) is told from ours by the
//! `pi05.intermediate` key (ours: `lm_inter`). It differs in:
//! - keys: `intermediate` (ours `lm_inter`), `rms_norm_eps` (ours `norm_eps`; its `norm_eps`
//!   is the statistics' epsilon), no `vit_inter` (the `fc1` rows), `n_images` (vla.cpp takes
//!   any number a request brings; we compile for [`VLACPP_PI05_IMAGES`]) or `pad_token_id`
//!   (PaliGemma's 0); both statistics sets, `norm_mode` saying which is used (`quantiles`:
//!   q01 / q99, else mean / std; we keep that set only);
//! - Gemma's norm gains stored as the checkpoint's `w` (the runtime adds 1, in f32; ours
//!   store `1 + w`); a FoldQuant file stores the folded gain minus 1 there, the same way;
//! - adaRMS dense `aex.blk.{i}.attn_norm` / `ffn_norm` (ours `ada_attn_norm` /
//!   `ada_ffn_norm`), `aex.output_norm` (ours `aex.ada_output_norm`), `vit.pos_embd` (ours
//!   `vit.pos_embd.weight`).

use crate::gguf::{metadata_writer, GgmlType, GgufFile, Value};
use crate::{Error, Result};

use super::pi0::ARCH_PI05;

/// Camera views a vla.cpp pi0.5 file is compiled for (vla.cpp's LIBERO setup: agent view and
/// wrist); its files do not say, since vla.cpp takes as many as a request brings.
pub const VLACPP_PI05_IMAGES: usize = 2;

/// `file` in our layout when it is one of vla.cpp's that differs from ours; otherwise as is.
pub fn translate(file: GgufFile) -> Result<GgufFile> {
    let is_vlacpp_pi05 =
        file.architecture()? == ARCH_PI05 && file.get("pi05.intermediate").is_some();
    if !is_vlacpp_pi05 {
        return Ok(file);
    }
    tracing::info!("vla.cpp pi0.5 file: names and keys translated at load");
    pi05(&file)
}

/// Our name of a tensor of vla.cpp's pi0.5 file, and whether it is a Gemma gain stored as
/// `w` (which we store as `1 + w`).
fn pi05_tensor(name: &str) -> (String, bool) {
    if name == "vit.pos_embd" {
        return ("vit.pos_embd.weight".into(), false);
    }
    if let Some(rest) = name.strip_prefix("aex.output_norm.") {
        return (format!("aex.ada_output_norm.{rest}"), false);
    }
    if let Some(rest) = name.strip_prefix("aex.blk.") {
        for (theirs, ours) in [
            (".attn_norm.", ".ada_attn_norm."),
            (".ffn_norm.", ".ada_ffn_norm."),
        ] {
            if let Some((layer, param)) = rest.split_once(theirs) {
                return (format!("aex.blk.{layer}{ours}{param}"), false);
            }
        }
    }
    let gain = name == "vlm.output_norm.weight"
        || (name.starts_with("vlm.blk.")
            && (name.ends_with(".attn_norm.weight") || name.ends_with(".ffn_norm.weight")));
    (name.to_owned(), gain)
}

fn pi05(file: &GgufFile) -> Result<GgufFile> {
    let key = |k: &str| format!("{ARCH_PI05}.{k}");
    // vla.cpp normalises with quantiles when `norm_mode` says so, else with mean / std; its
    // files hold both sets, and ours pick mean / std when present
    let quantiles = file
        .get_str(&key("norm_mode"))
        .is_ok_and(|m| m == "quantiles");
    let unused = |name: &str| {
        let stats = ["state_", "action_"].iter().any(|p| name.starts_with(p));
        let dropped: &[&str] = match quantiles {
            true => &["_mean", "_std"],
            false => &["_q01", "_q99"],
        };
        stats && dropped.iter().any(|s| name.ends_with(s))
    };
    let mut w = metadata_writer(file)?;
    let inter = file.get_u64(&key("intermediate"))?;
    w.set_metadata(
        key("lm_inter"),
        Value::U32(u32_of(&key("intermediate"), inter)?),
    )?;
    let eps = match file.get_f64(&key("rms_norm_eps")) {
        Ok(e) => e as f32,
        Err(Error::MetadataNotFound(_)) => 1e-6, // vla.cpp's default
        Err(e) => return Err(e),
    };
    w.set_metadata(key("norm_eps"), Value::F32(eps))?;
    if file.get("pi05.rope_theta").is_none() {
        w.set_metadata(key("rope_theta"), Value::F32(10000.0))?; // vla.cpp's default
    }
    let fc1 = file.tensor_info("vit.blk.0.fc1.weight")?;
    let vit_inter = *fc1
        .dims
        .get(1)
        .ok_or_else(|| Error::InvalidArgument("vit.blk.0.fc1.weight: expected a matrix".into()))?;
    w.set_metadata(
        key("vit_inter"),
        Value::U32(u32_of("vit_inter", vit_inter)?),
    )?;
    if file.get(&key("n_images")).is_none() {
        w.set_metadata(key("n_images"), Value::U32(VLACPP_PI05_IMAGES as u32))?;
    }
    if file.get(&key("pad_token_id")).is_none() {
        w.set_metadata(key("pad_token_id"), Value::U32(0))?;
    }
    for t in file.tensors().iter().filter(|t| !unused(&t.name)) {
        let (name, gain) = pi05_tensor(&t.name);
        if gain {
            let plus_one: Vec<f32> = file.dequantize(&t.name)?.iter().map(|g| g + 1.0).collect();
            w.add_f32(name, GgmlType::F32, &t.dims, &plus_one)?;
        } else {
            w.add_tensor(name, t.ty, &t.dims, file.tensor_bytes(t))?;
        }
    }
    GgufFile::from_bytes(w.to_bytes()?)
}

fn u32_of(key: &str, v: u64) -> Result<u32> {
    u32::try_from(v)
        .map_err(|_| Error::InvalidArgument(format!("metadata {key:?} = {v} is out of range")))
}
