//! lerobot VLA-JEPA checkpoint -> `vla_jepa` GGUF (schema: docs/GGUF.md).
//!
//! Reads `<ckpt>/config.json` (lerobot's `VLAJEPAConfig`: cameras, the prompt template and
//! its special tokens, the DiT preset, `qwen_model_name`, `jepa_encoder_name`,
//! `resize_images_to`), `<ckpt>/model.safetensors` (the Qwen3-VL backbone under
//! `model.qwen.model.`, the head under `model.action_model.`; the world model's
//! `model.video_encoder.` / `model.video_predictor.` are training-only and dropped), the
//! Qwen3-VL folder (`config.json`, `preprocessor_config.json`, `tokenizer.json`), the V-JEPA 2
//! config (its `tubelet_size` sets how many action tokens the prompt holds), and the
//! processor files (state mean/std, action min/max, which post-processing steps run).

use super::gr00t::head_name_map;
use super::gr00t_n1_7::camera_shape;
use super::JsonFile;
use super::{ckpt_err, qwen_vl, Json, Safetensors};
use crate::config;
use crate::gguf::{GgmlType, GgufWriter};
use crate::models::common::ActionIo;
use crate::models::flow::FlowArch;
use crate::models::prompt::PromptIds;
use crate::models::vla_jepa::{IoSteps, VlaJepaConfig};
use crate::modules::dit::BlockStack;
use crate::modules::gr00t_head::{HeadConfig, HeadLinears};
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};
use std::path::{Path, PathBuf};

const QWEN: &str = "model.qwen.model.";
const HEAD: &str = "model.action_model.";

#[derive(Clone, Debug, Default)]
pub struct Options {
    pub dtype: Option<GgmlType>,
    /// The Qwen3-VL folder; default: `qwen_model_name` relative to the checkpoint or as given.
    pub backbone: Option<PathBuf>,
    /// The V-JEPA 2 folder (its `config.json`); default: `jepa_encoder_name`.
    pub jepa: Option<PathBuf>,
}

pub struct Converted {
    pub config: VlaJepaConfig,
    pub writer: GgufWriter<'static>,
    pub notes: Vec<String>,
}

/// Converts the lerobot VLA-JEPA checkpoint folder `ckpt`.
pub fn convert(
    ckpt: &Path,
    opts: &Options,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Converted> {
    super::detect::expect(ckpt, super::Kind::VlaJepa)?;
    let dtype = super::float_dtype(opts.dtype)?;
    let policy = JsonFile::read(ckpt.join("config.json"))?;
    let p = policy.json();
    let backbone = super::config_folder(
        ckpt,
        opts.backbone.as_deref(),
        p.str("qwen_model_name")?,
        ("qwen_model_name", "--backbone"),
    )?;
    // lerobot counts the prompt's action steps with the V-JEPA 2 encoder's tubelet when the
    // world model is on, else with the config's.
    let tubelet = match p.bool_or("enable_world_model", true) {
        true => {
            let named = p.str("jepa_encoder_name")?;
            let given = opts.jepa.as_deref();
            let jepa = super::config_folder(ckpt, given, named, ("jepa_encoder_name", "--jepa"))?;
            JsonFile::read(jepa.join("config.json"))?
                .json()
                .usize("tubelet_size")?
        }
        false => p.usize("jepa_tubelet_size")?,
    };
    let qwen_cfg = JsonFile::read(backbone.join("config.json"))?;
    let image_proc = JsonFile::read(backbone.join("preprocessor_config.json"))?;
    let tokenizer = Tokenizer::from_hf_path(&backbone)?;
    let st = Safetensors::open_dir(ckpt)?;
    let mut notes = Vec::new();
    let config = read_config(
        ckpt,
        &p,
        &qwen_cfg.json(),
        &image_proc.json(),
        tubelet,
        &st,
        &tokenizer,
    )?;
    config::check(&config, config.arch())?;
    notes.push(format!(
        "frames: {} x {} ({} tokens per camera), prompt: {} ids before the text, {} after",
        config.vision.image_h,
        config.vision.image_w,
        config.n_img_tokens(),
        config.prompt.before.len(),
        config.prompt.after.len()
    ));
    let (vision, n_layers) = (&config.vision, config.lm.n_layers);
    let (mut map, unused, mut skipped) = qwen_vl::name_map(&st, vision, n_layers, QWEN, &mut notes);
    map.extend(head_name_map(
        HEAD,
        (0, config.dit.layers),
        HeadLinears::Plain,
    ));
    skipped.extend([
        "model.video_encoder.".into(),
        "model.video_predictor.".into(),
    ]);
    let unused: Vec<&str> = unused.iter().map(String::as_str).collect();
    let skipped: Vec<&str> = skipped.iter().map(String::as_str).collect();
    super::check_coverage(&st, &map, &unused, &skipped)?;
    let stats = read_stats(ckpt, &config, &mut notes)?;

    let mut w = super::arch_writer(
        &config,
        ckpt,
        super::Kind::VlaJepa,
        "lerobot vla_jepa checkpoint (vla-convert)",
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
    let backbone = (&config.vision, QWEN);
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

/// The id of added token `text`: the tokenizer's own if it has it, else the next free id
/// counting from `*next` (lerobot adds the action and embodied tokens in order at load).
fn added_token(tok: &Tokenizer, text: &str, next: &mut u32) -> Result<u32> {
    let ids = tok.encode(text)?;
    if let [id] = ids.as_slice() {
        if tok.token(*id) == Some(text) {
            return Ok(*id);
        }
    }
    *next += 1;
    Ok(*next - 1)
}

/// The prompt: before the text segment, Qwen3-VL's user turn with every camera; the text
/// segment is the template up to its `{actions}`; after it, the action tokens, the text
/// between, the embodied tokens, the template's tail and the generation prompt.
fn prompt(
    tok: &Tokenizer,
    p: &Json,
    (cameras, n_img, image_token): (usize, usize, usize),
    action_steps: usize,
) -> Result<(PromptIds, String, String, usize)> {
    let template = p.str("prompt_template")?;
    let parts: Vec<&str> = template
        .split("{instruction}")
        .flat_map(|s| s.split("{actions}"))
        .flat_map(|s| s.split("{e_actions}"))
        .collect();
    let order = ["{instruction}", "{actions}", "{e_actions}"].map(|k| template.find(k));
    let [Some(i), Some(a), Some(e)] = order else {
        return Err(ckpt_err(
            p.path,
            "prompt_template lacks {instruction}, {actions} or {e_actions}",
        ));
    };
    if !(i < a && a < e) || parts.len() != 4 {
        return Err(ckpt_err(p.path, "prompt_template: expected {instruction}, {actions}, {e_actions} once each, in that order"));
    }
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
    let chunk = p.usize("chunk_size")?;
    let per_step = p.usize("num_action_tokens_per_timestep")?;
    let n_embodied = p.usize("num_embodied_action_tokens_per_instruction")?;
    let mut next = tok.len() as u32;
    let special = p.str("special_action_token")?;
    let action_ids = (0..chunk * 4)
        .map(|k| added_token(tok, &special.replace("{}", &k.to_string()), &mut next))
        .collect::<Result<Vec<_>>>()?;
    let embodied = added_token(tok, p.str("embodied_action_token")?, &mut next)?;
    if action_steps > action_ids.len() {
        return Err(ckpt_err(
            p.path,
            "more action steps in the prompt than action tokens",
        ));
    }
    let mut after = Vec::new();
    for &id in &action_ids[..action_steps] {
        after.extend(std::iter::repeat_n(id, per_step));
    }
    after.extend(tok.encode(parts[2])?);
    after.extend(std::iter::repeat_n(embodied, n_embodied));
    after.extend(tok.encode(&format!("{}<|im_end|>\n<|im_start|>assistant\n", parts[3]))?);
    let ids = PromptIds::new(tok.encode(&before)?, after);
    Ok((
        ids,
        parts[0].to_owned(),
        parts[1].to_owned(),
        embodied as usize,
    ))
}

fn read_config(
    ckpt: &Path,
    p: &Json,
    qwen_cfg: &Json,
    image_proc: &Json,
    tubelet: usize,
    st: &Safetensors,
    tokenizer: &Tokenizer,
) -> Result<VlaJepaConfig> {
    // The frame the model sees: the area step's size (or the camera's), then smart_resize.
    let features = p.obj("input_features")?;
    let area = match p.get("resize_images_to").and_then(|r| r.as_array()) {
        Some(r) if r.len() == 2 => {
            let d = |i: usize| r[i].as_u64().map_or(0, |x| x as usize);
            (d(0), d(1))
        }
        _ => (0, 0),
    };
    let frame = match area {
        (0, 0) => camera_shape(&features)?,
        a => a,
    };
    let prefix = format!("{QWEN}model.language_model.layers.");
    let n_layers = super::count_layers(st, &prefix, ".self_attn.q_proj.weight");
    let qwen_vl::Backbone {
        vision,
        mut lm,
        attn,
        mrope,
        image_token,
    } = qwen_vl::backbone(qwen_cfg, image_proc, frame, n_layers)?;
    lm.vocab_size = qwen_vl::table_rows(st, QWEN)?;
    // lerobot's DIT_PRESETS (action_head.py); explicit sizes override the preset's
    let (heads, head_dim) = match p.str("action_model_type")? {
        "DiT-B" => (12, 64),
        "DiT-L" => (32, 48),
        "DiT-test" => (2, 8),
        other => {
            return Err(ckpt_err(
                p.path,
                format!(
                    "action_model_type {other:?}: lerobot's presets are DiT-B, DiT-L and DiT-test"
                ),
            ))
        }
    };
    let dit = BlockStack {
        name: "dit",
        layers: p.usize("action_num_layers")?,
        heads: p.usize("action_num_heads").unwrap_or(heads),
        head_dim: p.usize("action_attention_head_dim").unwrap_or(head_dim),
    };
    let n_images = super::count_visual_features(&features);
    let n_embodied = p.usize("num_embodied_action_tokens_per_instruction")?;
    let action_steps = (p.usize("num_video_frames")? / tubelet.max(1)).saturating_sub(1);
    let n_img = vision.n_tokens();
    let (prompt, text_before, text_after, embodied_token) =
        prompt(tokenizer, p, (n_images, n_img, image_token), action_steps)?;
    let (state_dim, action_dim) = (p.usize("state_dim")?, p.usize("action_dim")?);
    let steps_in = |name: &str| -> Result<bool> {
        let path = ckpt.join("policy_postprocessor.json");
        Ok(path.is_file() && !super::processor_steps(&path, name)?.is_empty())
    };
    let position_rows = st.config_shape(&format!("{HEAD}position_embedding.weight"), 2)?[0];
    Ok(VlaJepaConfig {
        lm,
        attn,
        mrope,
        head: HeadConfig {
            embed: dit.width(),
            hidden: p.usize("action_hidden_size")?,
            future_tokens: n_embodied,
            max_seq_len: position_rows,
            embodiments: 1,
            buckets: p.usize("action_num_timestep_buckets")?,
            image_token,
        },
        dit,
        vision,
        io: ActionIo {
            n_images,
            tokenizer_max_length: super::unbounded_text(&prompt),
            pad_token_id: 0,
            chunk_size: p.usize("chunk_size")?,
            num_steps: p.usize("num_inference_timesteps")?,
            max_state_dim: state_dim,
            max_action_dim: action_dim,
            state_dim,
            action_dim,
        },
        steps: IoSteps {
            area,
            clip_actions: steps_in("vla_jepa_clip_actions")?,
            pre_snap: steps_in("vla_jepa_pre_snap_gripper")?,
            binarize: steps_in("vla_jepa_binarize_gripper")?,
            gripper_dim: p.usize("gripper_dim").unwrap_or(6),
            gripper_threshold: p.f64("gripper_threshold").unwrap_or(0.5) as f32,
            pixels: qwen_vl::pixel_map(image_proc)?,
        },
        embodied_token,
        prompt,
        text_before,
        text_after,
    })
}

/// State mean/std and action min/max from the processor files.
fn read_stats(
    ckpt: &Path,
    cfg: &VlaJepaConfig,
    notes: &mut Vec<String>,
) -> Result<Vec<(String, Vec<f32>)>> {
    let [mean, std] = super::find_stats(ckpt, None, "observation.state", ["mean", "std"], notes)?;
    let [min, max] = super::find_stats(ckpt, None, "action", ["min", "max"], notes)?;
    let out = vec![
        ("state_mean".to_owned(), mean),
        ("state_std".into(), std),
        ("action_min".into(), min),
        ("action_max".into(), max),
    ];
    for (name, v) in &out {
        let want = match name.starts_with("state") {
            true => cfg.io.state_dim,
            false => cfg.io.action_dim,
        };
        if v.len() != want {
            return Err(ckpt_err(
                ckpt,
                format!("{name}: {} values, expected {want}", v.len()),
            ));
        }
    }
    Ok(out)
}
