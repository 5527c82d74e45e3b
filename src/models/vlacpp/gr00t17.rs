//! GR00T N1.7 files (`convert_gr00t_n1_7_to_gguf.py` with `gguf_blocks.py`'s
//! `write_qwen3vl_vit`, `write_qwen3_lm` and the GR00T head writers, from an Isaac-GR00T
//! snapshot): our tensor names but for the tower's two tables, the language model's and the
//! head's sizes under other keys, no prompt template (its clients send the whole
//! chat-templated sequence, image slots included) and Isaac-GR00T's `statistics.json`,
//! `processor_config.json` and `embodiment_id.json` as strings, which vla.cpp's server never
//! reads (it returns normalised actions; its clients normalise) and we read to stay in world
//! units.
//!
//! Keys besides [`super::lm_keys`]: `spatial_merge_size`, `shortest_image_edge`,
//! `crop_fraction`, `attend_text_every_n_blocks`, `action_horizon`, `action_dim`,
//! `num_inference_timesteps` (ours `vit_merge`, `frame_edge`, `frame_crop`,
//! `dit_text_every`, `chunk_size`, `max_action_dim`, `num_steps`); `image_target_size` (the
//! square frame vla.cpp takes: ours `image_height` = `image_width`); `deepstack_idx_{0,1,2}`
//! (ours the `vit_deepstack_layers` array). What vla.cpp's loader fixes is fixed here too:
//! M-RoPE sections [24, 20, 20] (so head_dim 128), the epsilons, a temporal patch of 2.
//! From the statistics of the run's embodiment: the normaliser's bounds (q01 / q99 with
//! `use_percentiles`), the real state and action widths, the valid horizon (the action
//! modality's `delta_indices`) and the cameras (its video `modality_keys`). The embodiment
//! defaults to vla.cpp's (`libero_sim` where the map has it, else id 2).
//!
//! Tensors: `vit.patch_embd.weight` `[hidden, 3 * 2 * p * p]` (the Conv3d flattened) becomes
//! our still-frame kernel (the two temporal slices summed); `vit.pos_embd` (the learned
//! table as trained) is resampled to the frame's patch grid (`vit.pos_embd.weight`);
//! `aex.pos_embd` gains `.weight`; `vlm.output_norm.weight` (never applied by either) goes.

use crate::gguf::GgufFile;
use crate::models::gr00t_n1_7::ARCH;
use crate::policy::RuntimeOptions;
use crate::Result;

use super::isaac;

fn key(k: &str) -> String {
    format!("{ARCH}.{k}")
}

/// vla.cpp's key -> ours, both u32 (besides the language model's, [`super::lm_keys`]).
const RENAMED: [(&str, &str); 6] = [
    ("spatial_merge_size", "vit_merge"),
    ("shortest_image_edge", "frame_edge"),
    ("attend_text_every_n_blocks", "dit_text_every"),
    ("action_horizon", "chunk_size"),
    ("action_dim", "max_action_dim"),
    ("num_inference_timesteps", "num_steps"),
];

/// Integer keys whose value ours fixes (N1.7's own values).
const FIXED_U32: [(&str, u64); 5] = [
    ("temporal_patch_size", 2),
    ("dit_interleave", 1),
    ("use_relative_action", 0),
    ("apply_sincos_state_encoding", 0),
    ("clip_outliers", 1),
];

/// Epsilons and the tower's RoPE base ours fixes.
const FIXED_F32: [(&str, f32); 7] = [
    ("vit_ln_eps", 1e-6),
    ("connector_ln_eps", 1e-6),
    ("vit_rope_theta", 10000.0),
    ("ln_eps", 1e-5),
    ("norm_out_eps", 1e-6),
    ("vlln_eps", 1e-5),
    ("vlsa_ln_eps", 1e-5),
];

/// vla.cpp's default embodiment: this tag where the map has it, else id 2.
const VLACPP_TAG: &str = "libero_sim";
const VLACPP_ID: &str = "2";

pub(super) fn gr00t_n1_7(file: &mut GgufFile, opts: &RuntimeOptions) -> Result<()> {
    super::lm_keys(file, ARCH, &RENAMED)?;
    check_fixed(file)?;
    let target = super::qwen_vl_keys(file, ARCH)?;
    isaac::head_keys(file, ARCH)?;
    isaac::embodiments(file, ARCH, (VLACPP_TAG, VLACPP_ID))?;
    isaac::statistics(file, ARCH, opts, (true, isaac::Processor::Lerobot))?;
    super::qwen_tower(file, ARCH, target as usize)?;
    file.rename_tensor("aex.pos_embd", "aex.pos_embd.weight")
}

/// The sizes and epsilons ours fixes or derives, as the file states them.
fn check_fixed(file: &GgufFile) -> Result<()> {
    let u = |k: &str| file.get_u64(&key(k)).ok();
    let p = u("patch_size");
    let grid = u("image_target_size")
        .zip(p.zip(u("spatial_merge_size")))
        .filter(|(_, (p, m))| p * m > 0)
        .map(|(s, (p, m))| (s / (p * m)).pow(2));
    let derived = [
        ("backbone_embedding_dim", u("lm_hidden")),
        (
            "dit_hidden",
            u("dit_heads").zip(u("dit_head_dim")).map(|(h, d)| h * d),
        ),
        ("vlsa_ff_inner", u("lm_hidden").map(|h| 4 * h)),
        ("vit_patch_flat", p.map(|p| 3 * 2 * p * p)),
        ("n_img_tokens_per_view", grid),
    ];
    super::check_keys(file, (ARCH, "GR00T N1.7"), &FIXED_U32, &FIXED_F32, &derived)
}
