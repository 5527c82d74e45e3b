//! vla.cpp's own layouts, translated at load into ours, so that its files (float or
//! FoldQuant) serve as they are: pi0, pi0.5, SmolVLA, GR00T N1.5 / N1.6 / N1.7, VLA-JEPA, Evo-1,
//! VLA-Adapter and OpenVLA-OFT, whose files vla.cpp's converters write with other names and
//! keys than ours (docs/GGUF.md "vla.cpp's files"). VLA-Adapter's and OpenVLA-OFT's, whose
//! keys are ours, are told by their tensor names and translated by their policy's constructor
//! ([`vla_adapter`], [`openvla_oft`], sharing [`prismatic`]).
//! Such a file is told from ours by its `<arch>.intermediate` key (ours: `lm_inter`), or
//! GR00T's, VLA-JEPA's and Evo-1's `lm_hidden` ([`gr00t`], [`gr00t16`], [`gr00t17`],
//! [`vla_jepa`], [`evo1`]).
//!
//! pi0, pi0.5 and SmolVLA: `intermediate` (ours `lm_inter`); `norm_eps` is the statistics'
//! epsilon there, the RMSNorm's is `rms_norm_eps` (pi0.5, default 1e-6) or SmolLM2's fixed
//! 1e-5 (SmolVLA), ours `norm_eps`; no `n_images` (vla.cpp takes any number a request brings; we compile for
//! [`VLACPP_IMAGES`]), `pad_token_id` (0: padding is masked) or tokenizer (clients send
//! token ids, as vla.cpp's do); `vit.pos_embd` (ours `vit.pos_embd.weight`).
//!
//! pi0 and pi0.5 (`convert_pi0_to_gguf.py`, `convert_pi05_to_gguf.py`, sharing
//! `gguf_blocks.write_pi_kv` and `write_decoder_blocks`): no `vit_inter` (the `fc1` rows);
//! Gemma's norm gains stored as the checkpoint's `w` (the runtime adds 1, in f32: vla.cpp's
//! `f32_gemma_norm`; ours store `1 + w`; a FoldQuant file stores the folded gain minus 1
//! there, the same way): the language model's, and pi0's expert's and its output norm.
//! pi0.5's expert is adaRMS: dense `aex.blk.{i}.attn_norm` / `ffn_norm` (ours
//! `ada_attn_norm` / `ada_ffn_norm`), `aex.output_norm` (ours `aex.ada_output_norm`).
//! Statistics: pi0 files hold mean / std; pi0.5 files both sets, `norm_mode` saying which is
//! used (`quantiles`: q01 / q99, else mean / std; we keep that set only).
//!
//! SmolVLA (`convert_smolvla_to_gguf.py`): `vit_pixel_shuffle` (ours `scale_factor`), the
//! connector `mm.fc.weight` (ours `mm.proj.weight`), RoPE base 10000 (lerobot's, ours too),
//! plain patch positions (ours `vit_positions` absent = grid: vla.cpp's computation, not
//! lerobot 0.4.4's shifted rows).

use crate::gguf::{GgufFile, Value, ValueType};
use crate::modules::qwen_vision::{resample_positions, still_frame_kernel};
use crate::policy::RuntimeOptions;
use crate::{Error, Result};

use super::evo1::ARCH as EVO1;
use super::gr00t::ARCH as GR00T_N1_5;
use super::gr00t_n1_6::ARCH as GR00T_N1_6;
use super::gr00t_n1_7::ARCH as GR00T_N1_7;
use super::pi0::{ARCH_PI0, ARCH_PI05};
use super::smolvla::ARCH as SMOLVLA;
use super::vla_jepa::ARCH as VLA_JEPA;

pub(crate) mod bitvla;
mod evo1;
mod gr00t;
mod gr00t16;
mod gr00t17;
mod isaac;
pub(crate) mod openvla_oft;
mod pi;
mod prismatic;
pub(crate) mod vla_adapter;
mod vla_jepa;

/// Camera views a vla.cpp file is compiled for (vla.cpp's LIBERO setup: agent view and
/// wrist); its files do not say, since vla.cpp takes as many as a request brings.
pub const VLACPP_IMAGES: usize = 2;

/// `file` in our layout when it is one of vla.cpp's that differs from ours; otherwise as is.
/// Edited in place: tensors renamed and dropped where they lie in the mapped file, the few
/// values that change (Gemma's gains) and what comes from beside the file
/// ([`RuntimeOptions::statistics`]) held in memory, keys set in the parsed header.
pub fn translate(mut file: GgufFile, opts: &RuntimeOptions) -> Result<GgufFile> {
    let arch = file.architecture()?.to_owned();
    let pi_like = file.get(&format!("{arch}.intermediate")).is_some();
    match arch.as_str() {
        ARCH_PI0 | ARCH_PI05 if pi_like => {
            tracing::info!("vla.cpp {arch} file: names and keys translated at load");
            pi::pi(&mut file, &arch)?;
        }
        SMOLVLA if pi_like => {
            tracing::info!("vla.cpp SmolVLA file: names and keys translated at load");
            smolvla(&mut file)?;
        }
        EVO1 if lm_prefixed(&file, EVO1) => {
            tracing::info!("vla.cpp {arch} file: names and keys translated at load");
            evo1::evo1(&mut file)?;
        }
        GR00T_N1_5 if lm_prefixed(&file, GR00T_N1_5) => {
            tracing::info!("vla.cpp {arch} file: names and keys translated at load");
            // the one translation that reads the statistics option
            return gr00t::gr00t_n1_5(&mut file, opts).map(|()| file);
        }
        GR00T_N1_6 if lm_prefixed(&file, GR00T_N1_6) => {
            tracing::info!("vla.cpp {arch} file: names, keys and tables translated at load");
            return gr00t16::gr00t_n1_6(&mut file, opts).map(|()| file);
        }
        GR00T_N1_7 if lm_prefixed(&file, GR00T_N1_7) => {
            tracing::info!("vla.cpp {arch} file: names, keys and tables translated at load");
            return gr00t17::gr00t_n1_7(&mut file, opts).map(|()| file);
        }
        VLA_JEPA if lm_prefixed(&file, VLA_JEPA) => {
            tracing::info!("vla.cpp {arch} file: names, keys and tables translated at load, the steps around the model from --statistics");
            return vla_jepa::vla_jepa(&mut file, opts).map(|()| file);
        }
        _ => {}
    }
    if let Some(path) = &opts.statistics {
        return Err(Error::InvalidArgument(format!(
            "--statistics {}: only for files that carry no statistics (vla.cpp's GR00T N1.5 and VLA-JEPA files); this {arch} file carries its own",
            path.display()
        )));
    }
    Ok(file)
}

/// What vla.cpp's pi0, pi0.5 and SmolVLA files miss or name otherwise among our keys
/// (`rms_eps`: the RMSNorm's epsilon; `rope_theta`: the RoPE base where the file has none).
fn common_keys(file: &mut GgufFile, arch: &str, rms_eps: f32, rope_theta: f32) -> Result<()> {
    let key = |k: &str| format!("{arch}.{k}");
    let inter = file.get_u64(&key("intermediate"))?;
    file.set_metadata(key("lm_inter"), Value::U32(u32_of("intermediate", inter)?));
    file.set_metadata(key("norm_eps"), Value::F32(rms_eps));
    let absent = [
        ("rope_theta", Value::F32(rope_theta)),
        ("n_images", Value::U32(VLACPP_IMAGES as u32)),
        ("pad_token_id", Value::U32(0)),
    ];
    for (k, v) in absent {
        if file.get(&key(k)).is_none() {
            file.set_metadata(key(k), v);
        }
    }
    Ok(())
}

fn smolvla(file: &mut GgufFile) -> Result<()> {
    // SmolLM2's RMSNorm epsilon and lerobot's RoPE base, both fixed in vla.cpp
    common_keys(file, SMOLVLA, 1e-5, 10000.0)?;
    let shuffle = file.get_u64(&format!("{SMOLVLA}.vit_pixel_shuffle"))?;
    let shuffle = Value::U32(u32_of("vit_pixel_shuffle", shuffle)?);
    file.set_metadata(format!("{SMOLVLA}.scale_factor"), shuffle);
    for (theirs, ours) in [
        ("mm.fc.weight", "mm.proj.weight"),
        ("vit.pos_embd", "vit.pos_embd.weight"),
    ] {
        if file.tensor_info(theirs).is_ok() {
            file.rename_tensor(theirs, ours)?;
        }
    }
    Ok(())
}

/// vla.cpp's GR00T, VLA-JEPA and Evo-1 files name the language model's sizes `lm_*` (ours
/// without the prefix; its layers `lm_layers_used` or `lm_layers`): those, `renamed`
/// (vla.cpp's u32 key -> ours), `lm_rope_theta` (f64, ours `rope_theta`) and `lm_rms_eps`
/// (default 1e-6, ours `norm_eps`).
fn lm_keys(file: &mut GgufFile, arch: &str, renamed: &[(&str, &str)]) -> Result<()> {
    let key = |k: &str| format!("{arch}.{k}");
    const LM: [(&str, &str); 4] = [
        ("lm_hidden", "hidden"),
        ("lm_q_heads", "n_q_heads"),
        ("lm_kv_heads", "n_kv_heads"),
        ("lm_head_dim", "head_dim"),
    ];
    // GR00T's files keep the layers the policy reads (`lm_layers_used`), VLA-JEPA's all
    let layers = match file.get(&key("lm_layers_used")) {
        Some(_) => ("lm_layers_used", "n_layers"),
        None => ("lm_layers", "n_layers"),
    };
    for (theirs, ours) in LM.iter().chain([&layers]).chain(renamed) {
        let v = file.get_u64(&key(theirs))?;
        file.set_metadata(key(ours), Value::U32(u32_of(theirs, v)?));
    }
    let theta = file.get_f64(&key("lm_rope_theta"))?;
    file.set_metadata(key("rope_theta"), Value::F32(theta as f32));
    let eps = match file.get_f64(&key("lm_rms_eps")) {
        Ok(e) => e as f32,
        Err(Error::MetadataNotFound(_)) => 1e-6, // vla.cpp's default
        Err(e) => return Err(e),
    };
    file.set_metadata(key("norm_eps"), Value::F32(eps));
    Ok(())
}

/// The keys a translation checks rather than reads: `fixed_u32` / `fixed_f32` (the value
/// ours fixes) and `derived` (what ours derives from other keys; `None` where the file cannot
/// say). A file stating another value is refused, naming the key and `model`.
fn check_keys(
    file: &GgufFile,
    (arch, model): (&str, &str),
    fixed_u32: &[(&str, u64)],
    fixed_f32: &[(&str, f32)],
    derived: &[(&str, Option<u64>)],
) -> Result<()> {
    let key = |k: &str| format!("{arch}.{k}");
    let refuse = |k: &str, v: String, want: String| {
        Err(Error::InvalidArgument(format!(
            "vla.cpp's {arch} file: {k} = {v}; vla-rs runs {model} with {want} only"
        )))
    };
    for &(k, want) in fixed_u32 {
        match file.get_u64(&key(k)) {
            Ok(v) if v != want => return refuse(k, v.to_string(), want.to_string()),
            _ => {}
        }
    }
    for &(k, want) in fixed_f32 {
        match file.get_f64(&key(k)) {
            Ok(v) if v as f32 != want => return refuse(k, v.to_string(), want.to_string()),
            _ => {}
        }
    }
    for &(k, want) in derived {
        if let (Ok(v), Some(want)) = (file.get_u64(&key(k)), want) {
            if v != want {
                return refuse(k, v.to_string(), want.to_string());
            }
        }
    }
    Ok(())
}

/// The keys vla.cpp's Qwen3-VL files (GR00T N1.7, VLA-JEPA) share: M-RoPE sections [24, 20,
/// 20], which its loaders run whatever the file says (they fill a head of 128: another
/// `lm_head_dim` is refused), the square frame of side `image_target_size` (ours
/// `image_height` = `image_width`; returned) and the deepstack taps `deepstack_idx_{0,1,2}`
/// (ours `vit_deepstack_layers`).
fn qwen_vl_keys(file: &mut GgufFile, arch: &str) -> Result<u32> {
    let key = |k: &str| format!("{arch}.{k}");
    let hd = file.get_u64(&key("lm_head_dim"))?;
    if hd != 128 {
        return Err(Error::InvalidArgument(format!(
            "vla.cpp's {arch} file: lm_head_dim = {hd}; vla.cpp runs these files with M-RoPE sections [24, 20, 20], which fill a head of 128 only"
        )));
    }
    let target = u32_of(
        "image_target_size",
        file.get_u64(&key("image_target_size"))?,
    )?;
    let taps = (0..3)
        .map(|j| {
            let k = format!("deepstack_idx_{j}");
            Ok(Value::U32(u32_of(&k, file.get_u64(&key(&k))?)?))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut set = vec![
        ("image_height".to_owned(), Value::U32(target)),
        ("image_width".to_owned(), Value::U32(target)),
        (
            "vit_deepstack_layers".to_owned(),
            Value::Array(ValueType::U32, taps),
        ),
    ];
    for (k, v) in [("t", 24), ("h", 20), ("w", 20)] {
        set.push((format!("mrope_section_{k}"), Value::U32(v)));
    }
    for (k, v) in set {
        file.set_metadata(key(&k), v);
    }
    Ok(target)
}

/// vla.cpp's Qwen3-VL tower tables (GR00T N1.7, VLA-JEPA: `write_qwen3vl_vit`) as ours:
/// `vit.patch_embd.weight` `[hidden, 3 * 2 * p * p]` (the Conv3d flattened) becomes the
/// still-frame kernel (the temporal slices summed), `vit.pos_embd` (the learned table as
/// trained) the table resampled to the `target` x `target` frame's patch grid
/// (`vit.pos_embd.weight`); `vlm.output_norm.weight`, which neither applies, goes.
fn qwen_tower(file: &mut GgufFile, arch: &str, target: usize) -> Result<()> {
    let d = file.get_u64(&format!("{arch}.vit_hidden"))? as usize;
    let p = file.get_u64(&format!("{arch}.patch_size"))? as usize;
    let flat = file.dequantize("vit.patch_embd.weight")?;
    if p == 0 || flat.len() != d * 3 * 2 * p * p {
        return Err(Error::InvalidArgument(format!(
            "vit.patch_embd.weight: {} values, expected [{d}, 3 * 2 * {p} * {p}]",
            flat.len()
        )));
    }
    let kernel = still_frame_kernel(&flat, p);
    let dims = [p as u64, p as u64, 3, d as u64];
    file.replace_f32("vit.patch_embd.weight", &dims, &kernel)?;
    let table = file.dequantize("vit.pos_embd")?;
    let n = table.len() / d.max(1);
    let side = (n as f64).sqrt().round() as usize;
    if side == 0 || side * side * d != table.len() {
        return Err(Error::InvalidArgument(format!(
            "vit.pos_embd: {} values, not a square table of {d}-wide rows",
            table.len()
        )));
    }
    let grid = target / p;
    let pos = resample_positions(&table, side, d, (grid, grid));
    let dims = [d as u64, (grid * grid) as u64];
    file.add_tensor_f32("vit.pos_embd.weight", &dims, &pos)?;
    file.retain_tensors(|n| n != "vit.pos_embd" && n != "vlm.output_norm.weight");
    Ok(())
}

/// Whether `arch`'s `file` names its language model's sizes as vla.cpp's GR00T and Evo-1
/// files do (ours say `hidden`).
fn lm_prefixed(file: &GgufFile, arch: &str) -> bool {
    file.get(&format!("{arch}.lm_hidden")).is_some()
}

fn u32_of(key: &str, v: u64) -> Result<u32> {
    u32::try_from(v)
        .map_err(|_| Error::InvalidArgument(format!("metadata {key:?} = {v} is out of range")))
}
