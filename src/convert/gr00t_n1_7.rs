//! lerobot GR00T N1.7 checkpoint -> `gr00t_n1_7` GGUF (schema: docs/GGUF.md).
//!
//! Reads `<ckpt>/config.json` (lerobot's `GrootConfig`: cameras, state and action widths,
//! `base_model_path`), `<ckpt>/model.safetensors` (every weight under `_groot_model.`), the
//! GR00T N1.7 model config (`config.json` of the `base_model_path` folder: the head's sizes,
//! `select_layer`, the frame transform, `model_name`), the Qwen3-VL folder `model_name` names
//! (`config.json`, `preprocessor_config.json`, `tokenizer.json`; `--backbone DIR` for a hub
//! name), and the `groot_n1_7_pack_inputs_v1` preprocessor step (embodiment map, valid
//! horizon, per-group statistics of the active embodiment).
//!
//! The chat prompt is Qwen3-VL's template for one user turn without a system turn or a
//! generation prompt: `<|im_start|>user\n`, per camera `<|vision_start|>` + `<|image_pad|>` x
//! tokens + `<|vision_end|>`, the instruction, `<|im_end|>\n` ([`PromptIds`]). The frame size
//! the model runs at is what the processors make of the checkpoint's camera shape: the
//! eval transform ([`crate::preprocess::area::gr00t_frame`]), then Qwen's `smart_resize`.

use super::gr00t::{base_config_path, head_name_map, pack_step};
use super::{ckpt_err, qwen_vl, Json, JsonFile, Safetensors};
use crate::config;
use crate::gguf::{GgmlType, GgufWriter};
use crate::models::common::ActionIo;
use crate::models::embodiment::Embodiments;
use crate::models::flow::FlowArch;
use crate::models::gr00t_n1_7::stats::{group_bounds, Relative};
use crate::models::gr00t_n1_7::{FrameConfig, Gr00tN17Config};
use crate::models::prompt::PromptIds;
use crate::modules::dit::BlockStack;
use crate::modules::gr00t_head::{HeadConfig, HeadLinears};
use crate::preprocess::area::shortest_edge_size;
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};
use std::path::{Path, PathBuf};

const P: &str = "_groot_model.";
const PACK_STEP: &str = "groot_n1_7_pack_inputs_v1";

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Type of the 2-D matmul weights; everything else stays f32. Default F32.
    pub dtype: Option<GgmlType>,
    /// The GR00T N1.7 model folder (its `config.json`); default: `base_model_path`.
    pub base: Option<PathBuf>,
    /// The Qwen3-VL folder (config, preprocessor config, tokenizer); default: the base
    /// config's `model_name`, relative to the checkpoint or to the base folder.
    pub backbone: Option<PathBuf>,
}

pub struct Converted {
    pub config: Gr00tN17Config,
    pub writer: GgufWriter<'static>,
    pub notes: Vec<String>,
}

/// Converts the lerobot GR00T N1.7 checkpoint folder `ckpt`. `progress(done, total, name)`
/// is called once per tensor written.
pub fn convert(
    ckpt: &Path,
    opts: &Options,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Converted> {
    super::detect::expect(ckpt, super::Kind::Gr00tN17)?;
    let dtype = super::float_dtype(opts.dtype)?;
    let policy = JsonFile::read(ckpt.join("config.json"))?;
    let base = JsonFile::read(base_config_path(
        ckpt,
        &policy.json(),
        opts.base.as_deref(),
    )?)?;
    let backbone = backbone_dir(ckpt, &base, opts)?;
    let qwen_cfg = JsonFile::read(backbone.join("config.json"))?;
    let image_proc = JsonFile::read(backbone.join("preprocessor_config.json"))?;
    let tokenizer = Tokenizer::from_hf_path(&backbone)?;
    let st = Safetensors::open_dir(ckpt)?;
    let (pack, _) = pack_step(ckpt, PACK_STEP)?;
    let pack = Json {
        path: &policy.path,
        value: &pack,
    };
    let mut notes = Vec::new();
    let config = read_config(
        &policy.json(),
        &base.json(),
        &qwen_cfg.json(),
        &image_proc.json(),
        &pack,
        &st,
        &tokenizer,
    )?;
    config::check(&config, config.arch())?;
    notes.push(format!(
        "frames: {} x {} ({} tokens per camera), prompt: {} ids before the instruction, {} after",
        config.vision.image_h,
        config.vision.image_w,
        config.n_img_tokens(),
        config.prompt.before.len(),
        config.prompt.after.len()
    ));
    let bb = format!("{P}backbone.model.");
    let (vision, n_layers) = (&config.vision, config.lm.n_layers);
    let (mut map, unused, derived) = qwen_vl::name_map(&st, vision, n_layers, &bb, &mut notes);
    let ah = format!("{P}action_head.");
    let layers = (config.vlsa.layers, config.dit.layers);
    map.extend(head_name_map(&ah, layers, HeadLinears::PerEmbodiment));
    map.retain(|(ours, _)| ours != "aex.future_tokens.weight");
    let unused: Vec<&str> = unused.iter().map(String::as_str).collect();
    let derived: Vec<&str> = derived.iter().map(String::as_str).collect();
    super::check_coverage(&st, &map, &unused, &derived)?;
    let stats = read_stats(&pack, &config, &mut notes)?;

    let mut w = super::arch_writer(
        &config,
        ckpt,
        super::Kind::Gr00tN17,
        "lerobot groot (N1.7) checkpoint (vla-convert)",
        &mut notes,
    )?;
    super::ship_tokenizer(
        &mut w,
        &tokenizer,
        &backbone,
        config.lm.vocab_size,
        &mut notes,
    )?;
    let shapes = config.tensor_shapes()?;
    let backbone = (&config.vision, bb.as_str());
    let tensors = super::Tensors {
        map: &map,
        shapes,
        dtype,
        stats,
    };
    qwen_vl::write(&mut w, &st, tensors, backbone, progress)?;
    Ok(Converted {
        config,
        writer: w,
        notes,
    })
}

/// `--backbone`, else the base config's `model_name` as a folder relative to the
/// checkpoint, to the base folder, or as given.
fn backbone_dir(ckpt: &Path, base: &JsonFile, opts: &Options) -> Result<PathBuf> {
    if let Some(b) = &opts.backbone {
        return Ok(b.clone());
    }
    let named = base.json().str("model_name")?;
    let base_dir = base.path.parent().unwrap_or(Path::new("."));
    let local = vec![ckpt.join(named), base_dir.join(named)];
    super::named_folder(local, named, super::has_config).ok_or_else(|| {
        ckpt_err(
            &base.path,
            super::missing_folder("model_name (the Qwen3-VL folder)", named, "--backbone"),
        )
    })
}

/// The cameras' common `[C, H, W]` shape from the policy's input features.
pub(crate) fn camera_shape(features: &Json) -> Result<(usize, usize)> {
    let shapes: Vec<(usize, usize)> = features
        .value
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, f)| f.get("type").and_then(|t| t.as_str()) == Some("VISUAL"))
        .filter_map(|(_, f)| {
            let s = f.get("shape")?.as_array()?;
            let d = |i: usize| s.get(i)?.as_u64().map(|v| v as usize);
            Some((d(1)?, d(2)?))
        })
        .collect();
    match shapes.as_slice() {
        [first, rest @ ..] if rest.iter().all(|s| s == first) && first.0 > 0 && first.1 > 0 => {
            Ok(*first)
        }
        [] => Err(ckpt_err(features.path, "no camera (VISUAL) input feature")),
        _ => Err(ckpt_err(
            features.path,
            format!("cameras of different shapes {shapes:?}: one frame size is supported"),
        )),
    }
}

fn read_config(
    policy: &Json,
    base: &Json,
    qwen_cfg: &Json,
    image_proc: &Json,
    pack: &Json,
    st: &Safetensors,
    tokenizer: &Tokenizer,
) -> Result<Gr00tN17Config> {
    for (key, want) in [
        ("use_alternate_vl_dit", true),
        ("use_vlln", true),
        ("add_pos_embed", true),
        ("use_albumentations_transforms", true),
        ("apply_sincos_state_encoding", false),
        ("use_relative_action", false),
        ("reproject_vision", false),
    ] {
        if base.bool_or(key, want) != want {
            return Err(ckpt_err(
                base.path,
                format!("{key} = {}: not supported", !want),
            ));
        }
    }
    if base.usize("state_history_length").unwrap_or(1) != 1 {
        return Err(ckpt_err(
            base.path,
            "state_history_length > 1: not supported",
        ));
    }
    let dit_cfg = base.obj("diffusion_model_cfg")?;
    let vlsa_cfg = base.obj("vl_self_attention_cfg")?;
    let stack = |name, c: &Json| -> Result<BlockStack> {
        if c.get("positional_embeddings").is_some() {
            return Err(ckpt_err(
                c.path,
                "sinusoidal positional_embeddings: not supported",
            ));
        }
        Ok(BlockStack {
            name,
            layers: c.usize("num_layers")?,
            heads: c.usize("num_attention_heads")?,
            head_dim: c.usize("attention_head_dim")?,
        })
    };
    // The frame the processors make of the camera.
    let features = policy.obj("input_features")?;
    let (cam_h, cam_w) = camera_shape(&features)?;
    let edge = base.usize("shortest_image_edge")?;
    let crop = base.f64("crop_fraction")?;
    if !(crop > 0.0 && crop <= 1.0) {
        return Err(ckpt_err(
            base.path,
            format!("crop_fraction {crop}: expected (0, 1]"),
        ));
    }
    let (h1, w1) = shortest_edge_size(cam_h, cam_w, edge);
    let cropped = (
        ((h1 as f64 * crop) as usize).max(1),
        ((w1 as f64 * crop) as usize).max(1),
    );
    let (fh, fw) = shortest_edge_size(cropped.0, cropped.1, edge);
    let lm_prefix = format!("{P}backbone.model.model.language_model.layers.");
    let n_layers = super::count_layers(st, &lm_prefix, ".self_attn.q_proj.weight");
    let select = base.usize("select_layer")?;
    if n_layers != select {
        return Err(ckpt_err(
            st.path(),
            format!("{n_layers} LM layers, select_layer {select}"),
        ));
    }
    let qwen_vl::Backbone {
        vision,
        lm,
        attn,
        mrope,
        image_token,
    } = qwen_vl::backbone(qwen_cfg, image_proc, (fh, fw), n_layers)?;
    let pixels = qwen_vl::pixel_map(image_proc)?;
    if pixels != crate::preprocess::PixelMap::MinusOneToOne {
        return Err(ckpt_err(
            image_proc.path,
            format!("image normalisation {pixels:?}: GR00T N1.7 is served with image_mean = image_std = 0.5 only"),
        ));
    }
    let mut io = ActionIo {
        n_images: super::count_visual_features(&features),
        tokenizer_max_length: 0, // below, from the prompt
        pad_token_id: 0,
        chunk_size: base.usize("action_horizon")?,
        num_steps: base.usize("num_inference_timesteps")?,
        max_state_dim: base.usize("max_state_dim")?,
        max_action_dim: base.usize("max_action_dim")?,
        state_dim: super::feature_dim(&features, "observation.state")?,
        action_dim: super::feature_dim(&policy.obj("output_features")?, "action")?,
    };
    let prompt = qwen_prompt(tokenizer, io.n_images, vision.n_tokens(), image_token)?;
    io.tokenizer_max_length = super::unbounded_text(&prompt);
    Ok(Gr00tN17Config {
        frame: FrameConfig { edge, crop },
        lm,
        attn,
        mrope,
        vlsa: stack("vlsa", &vlsa_cfg)?,
        dit: stack("dit", &dit_cfg)?,
        text_every: base.usize("attend_text_every_n_blocks")?,
        head: HeadConfig {
            embed: base.usize("input_embedding_dim")?,
            hidden: base.usize("hidden_size")?,
            future_tokens: 0,
            max_seq_len: base.usize("max_seq_len")?,
            embodiments: base.usize("max_num_embodiments")?,
            buckets: base.usize("num_timestep_buckets")?,
            image_token,
        },
        vision,
        io,
        valid_horizon: pack.usize("valid_action_horizon")?,
        prompt,
        embodiments: Embodiments {
            tags: pack
                .get("embodiment_mapping")
                .map(|m| m.to_string())
                .ok_or_else(|| ckpt_err(pack.path, "no embodiment_mapping in the pack step"))?,
            default: pack.str("embodiment_tag")?.to_owned(),
        },
    })
}

/// Qwen3-VL's chat template for one user turn of `cameras` images and the instruction, no
/// system turn, no generation prompt, split at the instruction.
pub fn qwen_prompt(
    tok: &Tokenizer,
    cameras: usize,
    n_img: usize,
    image_token: usize,
) -> Result<PromptIds> {
    let pad = tok.token(image_token as u32).unwrap_or_default().to_owned();
    if pad.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "the tokenizer has no token {image_token} (image_token_id)"
        )));
    }
    let mut before = String::from("<|im_start|>user\n");
    for _ in 0..cameras {
        before.push_str(&format!(
            "<|vision_start|>{}<|vision_end|>",
            pad.repeat(n_img)
        ));
    }
    Ok(PromptIds::new(
        tok.encode(&before)?,
        tok.encode("<|im_end|>\n")?,
    ))
}

/// The active embodiment's per-group statistics (`raw_stats`, groups in the modality
/// config's order, [`group_bounds`]): q01/q99 with `use_percentiles`, else min/max, stored
/// as the normaliser's min/max.
fn read_stats(
    pack: &Json,
    cfg: &Gr00tN17Config,
    notes: &mut Vec<String>,
) -> Result<Vec<(String, Vec<f32>)>> {
    if !pack.bool_or("normalize_min_max", true) || !pack.bool_or("clip_outliers", true) {
        return Err(ckpt_err(
            pack.path,
            "normalize_min_max or clip_outliers off: not supported",
        ));
    }
    let percentiles = pack.bool_or("use_percentiles", false);
    let (raw, modality) = (pack.obj("raw_stats")?, pack.obj("modality_config")?);
    let dims = (cfg.io.state_dim, cfg.io.action_dim);
    let out = group_bounds(
        raw.value,
        modality.value,
        percentiles,
        Some(dims),
        Relative::Refuse,
    )
    .map_err(|e| ckpt_err(pack.path, format!("{PACK_STEP}: {e}")))?;
    let (lo, hi) = if percentiles {
        ("q01", "q99")
    } else {
        ("min", "max")
    };
    notes.push(format!(
        "statistics ({lo}/{hi} per group, clipped) from the {PACK_STEP} step"
    ));
    Ok(out)
}
