//! lerobot GR00T N1.5 checkpoint -> `gr00t_n1_5` GGUF (schema: docs/GGUF.md).
//!
//! Reads `<ckpt>/config.json` (lerobot's `GrootConfig`), `<ckpt>/model.safetensors` (every
//! weight under `_groot_model.`), the GR00T model config (`config.json` of the folder that
//! `base_model_path` names: the action head's and DiT's head counts, `select_layer`), the
//! Eagle-2.5 config and tokenizer (lerobot's processor cache
//! `$HF_LEROBOT_HOME/lerobot/eagle2hg-processor-groot-n1p5`, or `--eagle DIR`), and the
//! min/max statistics and embodiment map of the `groot_pack_inputs_v3` preprocessor step.
//!
//! The prompt around the instruction is Eagle-2.5's chat template rendered for the camera
//! count (a system turn, then one user turn: each camera as `<image k><img>`, its
//! `<IMG_CONTEXT>` tokens and `</img>`, then the instruction), tokenized and stored as the
//! ids before and after the instruction ([`PromptIds`]).

use super::{ckpt_err, read_json, Json, Safetensors};
use crate::config;
use crate::gguf::{GgmlType, GgufWriter};
use crate::layers::GatedActivation;
use crate::models::embodiment::Embodiments;
use crate::models::flow::FlowArch;
pub use crate::models::gr00t::{Gr00tConfig, HeadConfig};
pub use crate::models::prompt::PromptIds;
use crate::modules::decoder::{DecoderConfig, LmConfig};
use crate::modules::dit::BlockStack;
use crate::modules::vision::PatchPositions;
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};
use std::path::{Path, PathBuf};

mod names;
pub use names::{head_name_map, name_map};

const P: &str = "_groot_model.";
const EAGLE_CACHE: &str = "lerobot/eagle2hg-processor-groot-n1p5";
/// The pre-processor step that holds the statistics and the embodiment map.
const PACK_STEP: &str = "groot_pack_inputs_v3";

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Type of the 2-D matmul weights; everything else stays f32. Default F32.
    pub dtype: Option<GgmlType>,
    /// The Eagle-2.5 processor folder (`config.json`, the tokenizer's files); default
    /// `<ckpt>/eagle`, else lerobot's cache.
    pub eagle: Option<PathBuf>,
    /// The GR00T model folder (its `config.json`); default: `base_model_path` of the policy
    /// config, relative to the checkpoint or as given.
    pub base: Option<PathBuf>,
    /// The tokenizer (a `tokenizer.json` or a folder, see [`Tokenizer::from_hf_path`]);
    /// default: the Eagle folder's, else `<ckpt>/tokenizer`'s.
    pub tokenizer: Option<PathBuf>,
}

pub struct Converted {
    pub config: Gr00tConfig,
    pub writer: GgufWriter<'static>,
    pub notes: Vec<String>,
}

/// Converts the lerobot GR00T N1.5 checkpoint folder `ckpt`. `progress(done, total, name)`
/// is called once per tensor written.
pub fn convert(
    ckpt: &Path,
    opts: &Options,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Converted> {
    super::detect::expect(ckpt, super::Kind::Gr00tN15)?;
    let dtype = super::float_dtype(opts.dtype)?;
    let mut notes = Vec::new();
    let policy_path = ckpt.join("config.json");
    let policy_json = read_json(&policy_path)?;
    let policy = Json {
        path: &policy_path,
        value: &policy_json,
    };
    let base_path = base_config_path(ckpt, &policy, opts.base.as_deref())?;
    let base_json = read_json(&base_path)?;
    let base = Json {
        path: &base_path,
        value: &base_json,
    };
    let eagle = eagle_dir(ckpt, opts)?;
    let eagle_path = eagle.join("config.json");
    let eagle_json = read_json(&eagle_path)?;
    let eagle_cfg = Json {
        path: &eagle_path,
        value: &eagle_json,
    };
    let st = Safetensors::open_dir(ckpt)?;
    let pack = pack_step(ckpt, PACK_STEP)?;
    let tokenizer_path = opts
        .tokenizer
        .clone()
        .or_else(|| {
            [eagle.clone(), ckpt.join("tokenizer")]
                .into_iter()
                .find(|d| crate::tokenizer::hf_tokenizer_in(d))
        })
        .ok_or_else(|| {
            ckpt_err(
                &eagle,
                "the Eagle-2.5 folder holds no tokenizer (tokenizer.json, or vocab.json + \
                 merges.txt + tokenizer_config.json), nor does <ckpt>/tokenizer: pass \
                 --tokenizer FILE_OR_DIR",
            )
        })?;
    let tokenizer = Tokenizer::from_hf_path(&tokenizer_path)?;
    let config = read_config(&policy, &base, &eagle_cfg, &st, &pack, &tokenizer)?;
    config::check(&config, config.arch())?;
    notes.push(format!(
        "prompt: {} ids before the instruction, {} after",
        config.prompt.before.len(),
        config.prompt.after.len()
    ));
    let mut map = name_map(&config);
    // Qwen3 ties its input embeddings to the LM head; a saved policy keeps the head's name.
    let tied = format!("{P}backbone.eagle_model.language_model.lm_head.weight");
    let embed = &mut map
        .iter_mut()
        .find(|(ours, _)| ours == "token_embd.weight")
        .expect("in the map")
        .1;
    if !st.contains(embed) && st.contains(&tied) {
        *embed = tied.clone();
        notes.push("token embeddings from lm_head.weight (tied)".into());
    }
    let head = format!("{P}backbone.eagle_model.vision_model.vision_model.head.");
    super::check_coverage(&st, &map, &[tied.as_str()], &[head.as_str()])?;
    let stats = read_stats(ckpt, &pack, &config, &mut notes)?;

    let mut w = super::arch_writer(
        &config,
        ckpt,
        super::Kind::Gr00tN15,
        "lerobot groot checkpoint (vla-convert)",
        &mut notes,
    )?;
    super::ship_tokenizer(
        &mut w,
        &tokenizer,
        &tokenizer_path,
        config.lm.vocab_size,
        &mut notes,
    )?;
    let tensors = super::Tensors {
        map: &map,
        shapes: config.tensor_shapes()?,
        dtype,
        stats,
    };
    super::write_tensors(&mut w, &st, tensors, |_, _| {}, progress)?;
    Ok(Converted {
        config,
        writer: w,
        notes,
    })
}

/// The GR00T model config: `--base`, else `base_model_path` relative to the checkpoint, else
/// as given.
pub(crate) fn base_config_path(ckpt: &Path, policy: &Json, base: Option<&Path>) -> Result<PathBuf> {
    if let Some(b) = base {
        return Ok(b.join("config.json"));
    }
    let named = policy.str("base_model_path")?;
    super::named_folder(vec![ckpt.join(named)], named, super::has_config)
        .map(|d| d.join("config.json"))
        .ok_or_else(|| {
            ckpt_err(
                policy.path,
                super::missing_folder("base_model_path", named, "--base"),
            )
        })
}

/// `--eagle`, else `<ckpt>/eagle`, else lerobot's processor cache.
fn eagle_dir(ckpt: &Path, opts: &Options) -> Result<PathBuf> {
    if let Some(e) = &opts.eagle {
        return Ok(e.clone());
    }
    let home = std::env::var_os("HF_LEROBOT_HOME")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/huggingface/lerobot"))
        });
    let candidates = [Some(ckpt.join("eagle")), home.map(|h| h.join(EAGLE_CACHE))];
    candidates
        .into_iter()
        .flatten()
        .find(|d| d.join("config.json").is_file())
        .ok_or_else(|| {
            ckpt_err(
                ckpt,
                format!("no Eagle-2.5 config in <ckpt>/eagle or $HF_LEROBOT_HOME/{EAGLE_CACHE}: pass --eagle DIR"),
            )
        })
}

/// The pack step `step` of `policy_preprocessor.json` (`groot_pack_inputs_v3` for N1.5):
/// (its config, its state file).
pub(crate) fn pack_step(ckpt: &Path, step: &str) -> Result<(serde_json::Value, PathBuf)> {
    let path = ckpt.join("policy_preprocessor.json");
    if let Some(s) = super::processor_steps(&path, step)?.into_iter().next() {
        let file = s
            .get("state_file")
            .and_then(|f| f.as_str())
            .ok_or_else(|| {
                ckpt_err(&path, format!("step {step} has no state_file (statistics)"))
            })?;
        return Ok((s["config"].clone(), ckpt.join(file)));
    }
    Err(ckpt_err(&path, format!("no {step} step")))
}

fn read_config(
    policy: &Json,
    base: &Json,
    eagle: &Json,
    st: &Safetensors,
    pack: &(serde_json::Value, PathBuf),
    tokenizer: &Tokenizer,
) -> Result<Gr00tConfig> {
    let head_cfg = base.obj("action_head_cfg")?;
    let backbone = base.obj("backbone_cfg")?;
    if backbone.get("project_to_dim").is_some_and(|v| !v.is_null()) {
        return Err(ckpt_err(
            base.path,
            "backbone_cfg.project_to_dim is set: not supported",
        ));
    }
    if !head_cfg.bool_or("use_vlln", true) || !head_cfg.bool_or("add_pos_embed", true) {
        return Err(ckpt_err(
            base.path,
            "use_vlln / add_pos_embed off: not supported",
        ));
    }
    let dit_cfg = head_cfg.obj("diffusion_model_cfg")?;
    let vlsa_cfg = head_cfg.obj("vl_self_attention_cfg")?;
    for c in [&dit_cfg, &vlsa_cfg] {
        if c.get("positional_embeddings").is_some_and(|v| !v.is_null()) {
            return Err(ckpt_err(
                base.path,
                "sinusoidal positional_embeddings in a transformer: not supported",
            ));
        }
    }
    let stack = |name, c: &Json| -> Result<BlockStack> {
        Ok(BlockStack {
            name,
            layers: c.usize("num_layers")?,
            heads: c.usize("num_attention_heads")?,
            head_dim: c.usize("attention_head_dim")?,
        })
    };
    let vision_cfg = eagle.obj("vision_config")?;
    let text = eagle.obj("text_config")?;
    if eagle.bool_or("use_pixel_shuffle", false) || eagle.usize("mlp_connector_layers")? != 1 {
        return Err(ckpt_err(
            eagle.path,
            "pixel shuffle or a multi-layer mlp1: not supported (GR00T N1.5 uses one Linear)",
        ));
    }
    let vit = format!("{P}backbone.eagle_model.vision_model.vision_model.");
    let vision = super::vision_tower(
        st,
        &vit,
        |_| vision_cfg.usize("num_attention_heads").unwrap_or(0),
        vision_cfg.f64("layer_norm_eps")? as f32,
        PatchPositions::Grid,
    )?;
    let lm = format!("{P}backbone.eagle_model.language_model.model.");
    let n_layers = super::count_layers(st, &format!("{lm}layers."), ".self_attn.q_proj.weight");
    let select = backbone.usize("select_layer")?;
    if n_layers != select {
        return Err(ckpt_err(
            st.path(),
            format!("{n_layers} LM layers, select_layer {select}"),
        ));
    }
    let features = policy.obj("input_features")?;
    let (pack_cfg, _) = pack;
    let pack_json = Json {
        path: policy.path,
        value: pack_cfg,
    };
    let mut io = crate::models::common::ActionIo {
        n_images: super::count_visual_features(&features),
        tokenizer_max_length: 0, // below, from the prompt
        pad_token_id: 0,
        chunk_size: head_cfg.usize("action_horizon")?,
        num_steps: head_cfg.usize("num_inference_timesteps")?,
        max_state_dim: head_cfg.usize("max_state_dim")?,
        max_action_dim: head_cfg.usize("action_dim")?,
        state_dim: super::feature_dim(&features, "observation.state")?,
        action_dim: super::feature_dim(&policy.obj("output_features")?, "action")?,
    };
    let image_token = eagle.usize("image_token_index")?;
    let prompt = eagle_prompt(tokenizer, io.n_images, vision.n_patches(), image_token)?;
    io.tokenizer_max_length = super::unbounded_text(&prompt);
    Ok(Gr00tConfig {
        lm: LmConfig {
            hidden: text.usize("hidden_size")?,
            n_layers,
            inter: text.usize("intermediate_size")?,
            vocab_size: text.usize("vocab_size")?,
        },
        attn: DecoderConfig {
            q_heads: text.usize("num_attention_heads")?,
            kv_heads: text.usize("num_key_value_heads")?,
            head_dim: text.usize("head_dim")?,
            rope_theta: text.f64("rope_theta")? as f32,
            norm_eps: text.f64("rms_norm_eps")? as f32,
            ffn: GatedActivation::Silu,
            qk_norm: true,
            ..Default::default()
        },
        vlsa: stack("vlsa", &vlsa_cfg)?,
        dit: stack("dit", &dit_cfg)?,
        head: HeadConfig {
            embed: head_cfg.usize("input_embedding_dim")?,
            hidden: head_cfg.usize("hidden_size")?,
            future_tokens: head_cfg.usize("num_target_vision_tokens")?,
            max_seq_len: head_cfg.usize("max_seq_len")?,
            embodiments: head_cfg.usize("max_num_embodiments")?,
            buckets: head_cfg.usize("num_timestep_buckets")?,
            image_token,
        },
        vision,
        io,
        prompt,
        embodiments: Embodiments {
            tags: pack_json
                .get("embodiment_mapping")
                .map(|m| m.to_string())
                .ok_or_else(|| ckpt_err(policy.path, "no embodiment_mapping in the pack step"))?,
            default: policy.str("embodiment_tag")?.to_owned(),
        },
    })
}

/// Eagle-2.5's chat template rendered for `cameras` views and split at the instruction:
/// `<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n`, then per
/// camera `<image k><img>` + `<IMG_CONTEXT>` x `n_img` + `</img>`; after the instruction
/// `<|im_end|>\n<|im_start|>assistant\n`. Both halves end or start at a special token, so
/// tokenizing them apart gives the ids of the whole.
pub fn eagle_prompt(
    tok: &Tokenizer,
    cameras: usize,
    n_img: usize,
    image_token: usize,
) -> Result<PromptIds> {
    let context = tok.token(image_token as u32).unwrap_or_default().to_owned();
    if context.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "the tokenizer has no token {image_token} (image_token_index)"
        )));
    }
    let mut before = String::from(
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n",
    );
    for k in 1..=cameras {
        before.push_str(&format!("<image {k}><img>{}</img>", context.repeat(n_img)));
    }
    Ok(PromptIds::new(
        tok.encode(&before)?,
        tok.encode("<|im_end|>\n<|im_start|>assistant\n")?,
    ))
}

/// The min/max statistics of the pack step's state file, named as the GGUF stores them.
fn read_stats(
    ckpt: &Path,
    pack: &(serde_json::Value, PathBuf),
    cfg: &Gr00tConfig,
    notes: &mut Vec<String>,
) -> Result<Vec<(String, Vec<f32>)>> {
    let (pack_cfg, file) = pack;
    if pack_cfg.get("normalize_min_max").and_then(|v| v.as_bool()) == Some(false) {
        return Err(ckpt_err(ckpt, "normalize_min_max is off: not supported"));
    }
    let stats = Safetensors::open(file)?;
    let mut out = Vec::new();
    for (feature, dim, ours) in [
        ("observation.state", cfg.io.state_dim, "state"),
        ("action", cfg.io.action_dim, "action"),
    ] {
        for k in ["min", "max"] {
            let v = stats.f32(&format!("{feature}.{k}"))?;
            if v.len() != dim {
                return Err(ckpt_err(
                    file,
                    format!(
                        "{feature}.{k} has {} values, the feature has {dim}",
                        v.len()
                    ),
                ));
            }
            out.push((format!("{ours}_{k}"), v));
        }
    }
    notes.push(format!("statistics (min/max) from {}", file.display()));
    Ok(out)
}
