//! GR00T N1.6 files (`convert_gr00t_n1_6_to_gguf.py` with `gguf_blocks.py`'s
//! `write_siglip_tower`, `write_qwen3_lm` and the GR00T head writers, from an Isaac-GR00T
//! snapshot): our tensor names but for the tower's and the connector's tables as Isaac-GR00T
//! trained them, the language model's and the head's sizes under other keys, no prompt
//! template (its clients send the whole chat-templated sequence, image slots included) and
//! Isaac-GR00T's processor files as strings ([`super::isaac`]).
//!
//! Keys besides [`super::lm_keys`]: `shortest_image_edge`, `crop_fraction`,
//! `attend_text_every_n_blocks`, `action_horizon`, `action_dim`, `num_inference_timesteps`
//! (ours `frame_edge`, `frame_crop`, `dit_text_every`, `chunk_size`, `max_action_dim`,
//! `num_steps`); the tower's (`vit_*`, `image_size`: the frame vla.cpp takes, 224 unless its
//! converter was given `--vision-size`, Isaac-GR00T's is 252), `vit_pixel_shuffle`,
//! `connector_ln_eps` and the head's are ours. What vla.cpp's loader derives is checked:
//! `vit_num_patches`, `n_img_tokens`, `mlp_connector_inner`, `backbone_embedding_dim`,
//! `dit_hidden`; what it fixes is fixed here too (relative actions follow the processor
//! config's `use_relative_action`, as Isaac-GR00T's processor does). The embodiment defaults to vla.cpp's
//! (`gr1` where the map has it, else id 20; its `VLA_GR00T_EMBODIMENT` is our
//! `--embodiment`).
//!
//! Tensors: `vit.patch_embd.weight` (SigLIP2's Linear over patches flattened row, column,
//! channel) becomes our kernel; `vit.pos_embd` (already at the frame's grid) gains
//! `.weight`; `mm.ln.*` and `mm.fc1.weight` get our unshuffle's channel order
//! ([`crate::models::gr00t_n1_6::tables`]); `aex.pos_embd` gains `.weight`;
//! `vlm.output_norm.weight` stays (N1.6 applies it).

use crate::gguf::GgufFile;
use crate::models::gr00t_n1_6::{tables, ARCH};
use crate::policy::RuntimeOptions;
use crate::{Error, Result};

use super::isaac;

fn key(k: &str) -> String {
    format!("{ARCH}.{k}")
}

/// vla.cpp's key -> ours, both u32 (besides the language model's, [`super::lm_keys`]).
const RENAMED: [(&str, &str); 5] = [
    ("shortest_image_edge", "frame_edge"),
    ("attend_text_every_n_blocks", "dit_text_every"),
    ("action_horizon", "chunk_size"),
    ("action_dim", "max_action_dim"),
    ("num_inference_timesteps", "num_steps"),
];

/// Integer keys whose value ours fixes (N1.6's own values).
const FIXED_U32: [(&str, u64); 4] = [
    ("mlp_connector_layers", 2),
    ("dit_interleave", 1),
    ("apply_sincos_state_encoding", 0),
    ("clip_outliers", 1),
];

/// The head's epsilons ours fixes.
const FIXED_F32: [(&str, f32); 3] = [("ln_eps", 1e-5), ("norm_out_eps", 1e-6), ("vlln_eps", 1e-5)];

/// vla.cpp's default embodiment: this tag where the map has it, else id 20.
const VLACPP_TAG: &str = "gr1";
const VLACPP_ID: &str = "20";

pub(super) fn gr00t_n1_6(file: &mut GgufFile, opts: &RuntimeOptions) -> Result<()> {
    super::lm_keys(file, ARCH, &RENAMED)?;
    check_fixed(file)?;
    isaac::head_keys(file, ARCH)?;
    isaac::embodiments(file, ARCH, (VLACPP_TAG, VLACPP_ID))?;
    // Isaac-GR00T's N1.6 processor: min/max unless told otherwise, its z-scored groups
    isaac::statistics(file, ARCH, opts, (false, isaac::Processor::Isaac))?;
    tower(file)?;
    file.rename_tensor("aex.pos_embd", "aex.pos_embd.weight")
}

/// The sizes and epsilons ours fixes or derives, as the file states them.
fn check_fixed(file: &GgufFile) -> Result<()> {
    let u = |k: &str| file.get_u64(&key(k)).ok();
    let s = u("vit_pixel_shuffle");
    let grid = u("image_size")
        .zip(u("patch_size"))
        .filter(|&(_, p)| p > 0)
        .map(|(i, p)| i / p);
    let derived = [
        ("vit_num_patches", grid.map(|g| g * g)),
        (
            "n_img_tokens",
            grid.zip(s)
                .filter(|&(_, s)| s > 0)
                .map(|(g, s)| (g / s).pow(2)),
        ),
        (
            "mlp_connector_inner",
            u("vit_hidden").zip(s).map(|(d, s)| d * s * s),
        ),
        ("backbone_embedding_dim", u("lm_hidden")),
        (
            "dit_hidden",
            u("dit_heads").zip(u("dit_head_dim")).map(|(h, d)| h * d),
        ),
    ];
    super::check_keys(file, (ARCH, "GR00T N1.6"), &FIXED_U32, &FIXED_F32, &derived)
}

/// The tower's patch kernel, its position table's name and the connector's channel order.
fn tower(file: &mut GgufFile) -> Result<()> {
    let u = |k: &str| file.get_u64(&key(k)).map(|v| v as usize);
    let (d, p, s) = (u("vit_hidden")?, u("patch_size")?, u("vit_pixel_shuffle")?);
    let grid = u("image_size")? / p.max(1);
    let bad = |name: &str, want: String| {
        Error::InvalidArgument(format!("vla.cpp's {ARCH} file: {name}: expected {want}"))
    };
    let linear = file.dequantize("vit.patch_embd.weight")?;
    let kernel = tables::patch_kernel(&linear, d, p)
        .ok_or_else(|| bad("vit.patch_embd.weight", format!("[{d}, {p} * {p} * 3]")))?;
    let dims = [p as u64, p as u64, 3, d as u64];
    file.replace_f32("vit.patch_embd.weight", &dims, &kernel)?;
    let rows = file.tensor_info("vit.pos_embd")?.n_elements() / d.max(1) as u64;
    if rows != (grid * grid) as u64 {
        return Err(bad(
            "vit.pos_embd",
            format!("{} rows, the {grid} x {grid} patch grid's", grid * grid),
        ));
    }
    file.rename_tensor("vit.pos_embd", "vit.pos_embd.weight")?;
    let wide = d * s * s;
    for name in ["mm.ln.weight", "mm.ln.bias", "mm.fc1.weight"] {
        let v = file.dequantize(name)?;
        let ours = tables::connector_channels(&v, d, s)
            .ok_or_else(|| bad(name, format!("rows of {wide}")))?;
        let mut dims = vec![wide as u64];
        if v.len() > wide {
            dims.push((v.len() / wide) as u64);
        }
        file.replace_f32(name, &dims, &ours)?;
    }
    Ok(())
}
