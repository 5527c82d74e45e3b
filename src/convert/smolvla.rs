//! lerobot SmolVLA checkpoint -> `smolvla` GGUF (schema: docs/GGUF.md).
//!
//! Reads `<ckpt>/config.json` (lerobot's `SmolVLAConfig`), `<ckpt>/model.safetensors` (the
//! policy's state dict) and the normaliser statistics: lerobot >= 0.4 keeps them in the
//! processor files `policy_preprocessor.json` / `policy_postprocessor.json` and the
//! safetensors they name; older checkpoints keep them in `model.safetensors` as
//! `normalize_inputs.buffer_observation_state.*` / `unnormalize_outputs.buffer_action.*`.
//! Sizes come from the tensor shapes; head counts and epsilons, which shapes do not fix,
//! from the SmolVLM config (`--vlm-config`, the checkpoint's `vlm_model_name` when it is a
//! local folder, or the Hugging Face cache), else SmolVLM2's (head_dim 64, eps 1e-6 / 1e-5).

use super::{ckpt_err, read_json, Json, Safetensors};
use crate::config;
use crate::gguf::{GgmlType, GgufWriter};
use crate::models::flow::FlowArch;
use crate::models::smolvla::{SmolVlaConfig, ARCH};
use crate::modules::decoder::{DecoderConfig, ExpertConfig, LmConfig};
use crate::modules::vision::PatchPositions;
use crate::Result;
use std::path::{Path, PathBuf};

const VLM: &str = "model.vlm_with_expert.vlm.model.";
const EXPERT: &str = "model.vlm_with_expert.lm_expert.";
/// lerobot's SmolVLA rotates with its own `apply_rope(max_wavelength=10_000)`, whatever the
/// LM config's `rope_theta` says.
const ROPE_THETA: f32 = 10_000.0;
/// Checkpoint tensors nothing the action chunk depends on reads.
const IGNORED: &[&str] = &[
    "model.vlm_with_expert.vlm.lm_head.weight",
    "model.vlm_with_expert.vlm.model.text_model.norm.weight",
];
const IGNORED_PREFIXES: &[&str] = &[
    "normalize_inputs.",
    "normalize_targets.",
    "unnormalize_outputs.",
];

#[derive(Clone, Debug)]
pub struct Options {
    /// Type of the 2-D matmul weights; everything else stays f32.
    pub dtype: GgmlType,
    /// SmolVLM `config.json` to take head counts and epsilons from.
    pub vlm_config: Option<PathBuf>,
    /// The vision tower's position rows, which depend on the transformers version the
    /// checkpoint was trained with and which it does not record: `Shifted` from
    /// transformers 4.55 on (lerobot >= 0.4), `Grid` before. `None` is an error saying so.
    pub positions: Option<PatchPositions>,
    /// The language model's tokenizer (a `tokenizer.json` or a folder); default: the one
    /// lerobot's pre-processor loads, else the one beside the SmolVLM config.
    pub tokenizer: Option<PathBuf>,
    /// Write a GGUF that takes token ids only, without looking for a tokenizer.
    pub no_tokenizer: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            dtype: GgmlType::F32,
            vlm_config: None,
            positions: None,
            tokenizer: None,
            no_tokenizer: false,
        }
    }
}

pub struct Converted {
    pub config: SmolVlaConfig,
    /// Ready to `write_to_file`.
    pub writer: GgufWriter<'static>,
    /// Things the user should know (assumed defaults, where statistics came from).
    pub notes: Vec<String>,
}

/// Our GGUF name -> the lerobot state-dict key, for every weight of `cfg` (not the statistics).
pub fn name_map(cfg: &SmolVlaConfig) -> Vec<(String, String)> {
    let vit = format!("{VLM}vision_model.");
    let mut m = super::siglip_name_map(&vit, cfg.vision.layers);
    m.extend(
        [
            (
                "mm.proj.weight",
                format!("{VLM}connector.modality_projection.proj.weight"),
            ),
            (
                "token_embd.weight",
                format!("{VLM}text_model.embed_tokens.weight"),
            ),
            ("aex.output_norm.weight", format!("{EXPERT}norm.weight")),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_owned(), b)),
    );
    for n in [
        "state_proj",
        "action_in_proj",
        "action_out_proj",
        "action_time_mlp_in",
        "action_time_mlp_out",
    ] {
        for p in ["weight", "bias"] {
            m.push((format!("{n}.{p}"), format!("model.{n}.{p}")));
        }
    }
    for i in 0..cfg.lm.n_layers {
        for (ours, theirs) in [
            (
                format!("vlm.blk.{i}"),
                format!("{VLM}text_model.layers.{i}"),
            ),
            (format!("aex.blk.{i}"), format!("{EXPERT}layers.{i}")),
        ] {
            for (a, b) in [
                ("attn_norm", "input_layernorm"),
                ("ffn_norm", "post_attention_layernorm"),
                ("attn_q", "self_attn.q_proj"),
                ("attn_k", "self_attn.k_proj"),
                ("attn_v", "self_attn.v_proj"),
                ("attn_o", "self_attn.o_proj"),
                ("ffn_gate", "mlp.gate_proj"),
                ("ffn_up", "mlp.up_proj"),
                ("ffn_down", "mlp.down_proj"),
            ] {
                m.push((format!("{ours}.{a}.weight"), format!("{theirs}.{b}.weight")));
            }
        }
    }
    m
}

/// Converts the lerobot SmolVLA checkpoint folder `ckpt`. `progress(done, total, name)` is
/// called once per tensor written.
pub fn convert(
    ckpt: &Path,
    opts: &Options,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Converted> {
    super::detect::expect(ckpt, super::Kind::Smolvla)?;
    super::float_dtype(Some(opts.dtype))?;
    let cfg_path = ckpt.join("config.json");
    let policy_json = read_json(&cfg_path)?;
    let policy = Json {
        path: &cfg_path,
        value: &policy_json,
    };
    let st = Safetensors::open_dir(ckpt)?;
    let mut notes = Vec::new();
    let vlm_path = find_vlm_config(opts, &policy, ckpt);
    let vlm_json = match &vlm_path {
        Some(p) => {
            notes.push(format!("SmolVLM config: {}", p.display()));
            Some(read_json(p)?)
        }
        None => {
            notes.push("no SmolVLM config found: assuming SmolVLM2's head_dim 64 and epsilons (pass --vlm-config)".into());
            None
        }
    };
    let vlm = vlm_path
        .as_deref()
        .zip(vlm_json.as_ref())
        .map(|(path, value)| Json { path, value });
    let mut config = read_config(&policy, &st, vlm.as_ref())?;
    config.vision.positions = opts.positions.ok_or_else(|| {
        ckpt_err(
            ckpt,
            "SmolVLA's vision positions depend on the transformers version the checkpoint was \
             trained with, which it does not record: pass --vit-positions shifted (trained \
             with transformers >= 4.55, e.g. lerobot >= 0.4) or --vit-positions grid (trained \
             before, e.g. checkpoints published before August 2025)",
        )
    })?;
    config::check(&config, ARCH)?;

    let map = name_map(&config);
    super::check_coverage(&st, &map, IGNORED, IGNORED_PREFIXES)?;
    let stats = read_stats(ckpt, &policy, &st, &config, &mut notes)?;

    let source = "lerobot SmolVLA checkpoint (vla-convert)";
    let mut w = super::arch_writer(&config, ckpt, super::Kind::Smolvla, source, &mut notes)?;
    let beside: Vec<PathBuf> = vlm_path
        .iter()
        .filter_map(|p| p.parent().map(Path::to_owned))
        .collect();
    let tokenizer = super::optional_tokenizer(
        ckpt,
        opts.tokenizer.as_deref(),
        &beside,
        opts.no_tokenizer,
        &mut notes,
    )?;
    if let Some((source, tok)) = &tokenizer {
        super::ship_tokenizer(&mut w, tok, source, config.lm.vocab_size, &mut notes)?;
    }
    let tensors = super::Tensors {
        map: &map,
        shapes: config.tensor_shapes()?,
        dtype: opts.dtype,
        stats,
    };
    super::write_tensors(&mut w, &st, tensors, |_, _| {}, progress)?;
    Ok(Converted {
        config,
        writer: w,
        notes,
    })
}

fn find_vlm_config(opts: &Options, policy: &Json, ckpt: &Path) -> Option<PathBuf> {
    if let Some(p) = &opts.vlm_config {
        return Some(if p.is_dir() {
            p.join("config.json")
        } else {
            p.clone()
        });
    }
    let name = policy.str("vlm_model_name").ok()?;
    // Relative names resolve against the checkpoint first (an absolute one joins to itself).
    super::named_folder(vec![ckpt.join(name)], name, super::has_config)
        .map(|d| d.join("config.json"))
}

fn read_config(policy: &Json, st: &Safetensors, vlm: Option<&Json>) -> Result<SmolVlaConfig> {
    let path = policy.path;
    let bad = |why: String| ckpt_err(path, why);
    if let Ok(t) = policy.str("type") {
        if t != ARCH {
            return Err(bad(format!("policy type {t:?}, expected \"smolvla\"")));
        }
    }
    for (key, ok) in [
        (
            "attention_mode",
            policy
                .str("attention_mode")
                .is_ok_and(|m| m == "cross_attn"),
        ),
        (
            "adapt_to_pi_aloha",
            !policy.bool_or("adapt_to_pi_aloha", false),
        ),
        (
            "use_delta_joint_actions_aloha",
            !policy.bool_or("use_delta_joint_actions_aloha", false),
        ),
        (
            "empty_cameras",
            policy.usize("empty_cameras").unwrap_or(0) == 0,
        ),
        (
            "add_image_special_tokens",
            !policy.bool_or("add_image_special_tokens", false),
        ),
    ] {
        if !ok {
            return Err(bad(format!(
                "{key} = {}: not supported",
                policy.get(key).map_or("?".into(), |v| v.to_string())
            )));
        }
    }
    let vc = vlm.and_then(|v| v.obj("vision_config").ok());
    let tc = vlm.and_then(|v| v.obj("text_config").ok());
    let vision = super::vision_tower(
        st,
        &format!("{VLM}vision_model."),
        |width| {
            vc.as_ref()
                .and_then(|c| c.usize("num_attention_heads").ok())
                .unwrap_or(width / 64)
        },
        vc.as_ref()
            .and_then(|c| c.f64("layer_norm_eps").ok())
            .unwrap_or(1e-6) as f32,
        PatchPositions::default(),
    )?;
    let vh = vision.hidden;
    let proj_in = st.config_shape(
        &format!("{VLM}connector.modality_projection.proj.weight"),
        2,
    )?[1];
    let scale_factor = ((proj_in / vh.max(1)) as f64).sqrt().round() as usize;
    let embed = st
        .config_shape(&format!("{VLM}text_model.embed_tokens.weight"), 2)?
        .to_vec();
    let (vocab_size, hidden) = (embed[0], embed[1]);
    let lm = format!("{VLM}text_model.layers.");
    let q_dim = st.config_shape(&format!("{lm}0.self_attn.q_proj.weight"), 2)?[0];
    let kv_dim = st.config_shape(&format!("{lm}0.self_attn.k_proj.weight"), 2)?[0];
    // Head sizes are not in the weights' shapes: they come from the SmolVLM config.
    let vlm_err = |why: String| ckpt_err(vlm.map_or(path, |v| v.path), why);
    let head_dim = match &tc {
        // No SmolVLM config: SmolVLM2's, as the caller notes.
        None => 64,
        Some(c) => c
            .usize("head_dim")
            .ok()
            .or_else(|| hidden.checked_div(c.usize("num_attention_heads").ok()?))
            .filter(|&d| d > 0)
            .ok_or_else(|| {
                vlm_err(format!(
                    "text_config: no head size (head_dim, or hidden {hidden} / num_attention_heads, must be positive)"
                ))
            })?,
    };
    let expert_norm = st.config_shape(&format!("{EXPERT}layers.0.input_layernorm.weight"), 1)?;
    let n_layers = super::count_layers(st, &lm, ".input_layernorm.weight");
    let n_expert = super::count_layers(st, &format!("{EXPERT}layers."), ".input_layernorm.weight");
    if n_expert != n_layers {
        return Err(ckpt_err(st.path(), format!("{n_expert} expert layers for {n_layers} decoder layers (num_expert_layers != num_vlm_layers is not supported)")));
    }
    let (io, time) = super::flow_io(policy, "num_steps")?;
    let cfg = SmolVlaConfig {
        vision,
        scale_factor,
        lm: LmConfig {
            hidden,
            n_layers,
            inter: st.config_shape(&format!("{lm}0.mlp.gate_proj.weight"), 2)?[0],
            vocab_size,
        },
        attn: DecoderConfig {
            q_heads: q_dim / head_dim.max(1),
            kv_heads: kv_dim / head_dim.max(1),
            head_dim,
            rope_theta: ROPE_THETA,
            norm_eps: tc
                .as_ref()
                .and_then(|c| c.f64("rms_norm_eps").ok())
                .unwrap_or(1e-5) as f32,
            ffn: crate::layers::GatedActivation::Silu,
            ..Default::default()
        },
        expert: ExpertConfig {
            hidden: expert_norm[0],
            inter: st.config_shape(&format!("{EXPERT}layers.0.mlp.gate_proj.weight"), 2)?[0],
        },
        self_attn_every_n_layers: usize::try_from(policy.i64("self_attn_every_n_layers")?)
            .unwrap_or(0),
        io,
        time,
    };
    if cfg.self_attn_every_n_layers == 0 {
        return Err(bad(
            "self_attn_every_n_layers <= 0 (every expert layer cross-attending) is not supported"
                .into(),
        ));
    }
    if q_dim % head_dim != 0
        || kv_dim % head_dim != 0
        || cfg.vision.heads == 0
        || vh % cfg.vision.heads != 0
    {
        return Err(vlm_err(format!("head sizes do not divide: q {q_dim}, kv {kv_dim}, head_dim {head_dim}, vision {vh} / {}", cfg.vision.heads)));
    }
    if let Some(r) = policy
        .get("resize_imgs_with_padding")
        .and_then(|r| r.as_array())
    {
        let want = serde_json::json!([cfg.vision.image_size, cfg.vision.image_size]);
        if r != want.as_array().expect("array") {
            return Err(bad(format!(
                "resize_imgs_with_padding {r:?} differs from the vision tower's {0}x{0}",
                cfg.vision.image_size
            )));
        }
    }
    if scale_factor * scale_factor * vh != proj_in {
        return Err(ckpt_err(
            st.path(),
            format!("connector input {proj_in} is not vision width {vh} x a square scale factor"),
        ));
    }
    Ok(cfg)
}

/// `state_mean/std` and `action_mean/std`, in that order.
fn read_stats(
    ckpt: &Path,
    policy: &Json,
    st: &Safetensors,
    cfg: &SmolVlaConfig,
    notes: &mut Vec<String>,
) -> Result<Vec<(&'static str, Vec<f32>)>> {
    let mapping = policy.obj("normalization_mapping")?;
    let mut out = Vec::new();
    for (feature, kind, dim, pre) in [
        ("observation.state", "STATE", cfg.io.state_dim, "state"),
        ("action", "ACTION", cfg.io.action_dim, "action"),
    ] {
        let (mean, std) = match mapping.str(kind)? {
            "MEAN_STD" => {
                let [mean, std] = super::find_stats(ckpt, Some(st), feature, ["mean", "std"], notes)?;
                (mean, std)
            }
            "IDENTITY" => (vec![0.0; dim], vec![1.0; dim]),
            other => return Err(ckpt_err(policy.path, format!("normalization_mapping {kind} = {other:?}: only MEAN_STD and IDENTITY are supported"))),
        };
        for (what, v) in [("mean", &mean), ("std", &std)] {
            if v.len() != dim {
                return Err(ckpt_err(
                    ckpt,
                    format!(
                        "{feature}.{what} has {} values, the feature has {dim}",
                        v.len()
                    ),
                ));
            }
        }
        let (m, s) = if pre == "state" {
            ("state_mean", "state_std")
        } else {
            ("action_mean", "action_std")
        };
        out.push((m, mean));
        out.push((s, std));
    }
    Ok(out)
}
