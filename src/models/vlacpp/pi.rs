//! pi0 and pi0.5 files (`convert_pi0_to_gguf.py`, `convert_pi05_to_gguf.py`): see the
//! module above for what differs.

use crate::gguf::{GgufFile, Value};
use crate::{Error, Result};

use super::{common_keys, u32_of};
use crate::models::pi0::ARCH_PI05;

/// Our name of a tensor of vla.cpp's pi0 or pi0.5 (`adarms`) file, and whether it is a Gemma
/// gain stored as `w` (which we store as `1 + w`).
fn pi_tensor(name: &str, adarms: bool) -> (String, bool) {
    if name == "vit.pos_embd" {
        return ("vit.pos_embd.weight".into(), false);
    }
    let gain = |stack: &str| {
        name == format!("{stack}.output_norm.weight")
            || (name.starts_with(&format!("{stack}.blk."))
                && (name.ends_with(".attn_norm.weight") || name.ends_with(".ffn_norm.weight")))
    };
    if !adarms {
        return (name.to_owned(), gain("vlm") || gain("aex"));
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
    (name.to_owned(), gain("vlm"))
}

pub(super) fn pi(file: &mut GgufFile, arch: &str) -> Result<()> {
    let key = |k: &str| format!("{arch}.{k}");
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
    let eps = match file.get_f64(&key("rms_norm_eps")) {
        Ok(e) => e as f32,
        Err(Error::MetadataNotFound(_)) => 1e-6, // vla.cpp's default
        Err(e) => return Err(e),
    };
    // vla.cpp's default RoPE base
    common_keys(file, arch, eps, 10000.0)?;
    let fc1 = file.tensor_info("vit.blk.0.fc1.weight")?;
    let vit_inter = *fc1
        .dims
        .get(1)
        .ok_or_else(|| Error::InvalidArgument("vit.blk.0.fc1.weight: expected a matrix".into()))?;
    let vit_inter = Value::U32(u32_of("vit_inter", vit_inter)?);
    file.set_metadata(key("vit_inter"), vit_inter);
    file.retain_tensors(|name| !unused(name));
    let adarms = arch == ARCH_PI05;
    let names: Vec<String> = file.tensors().iter().map(|t| t.name.clone()).collect();
    for theirs in names {
        let (ours, gain) = pi_tensor(&theirs, adarms);
        if gain {
            file.map_f32(&theirs, |g| g + 1.0)?;
        }
        file.rename_tensor(&theirs, &ours)?;
    }
    Ok(())
}
