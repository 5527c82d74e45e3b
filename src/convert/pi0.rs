//! lerobot pi0 / pi0.5 checkpoint -> `pi0` / `pi05` GGUF (schema: docs/GGUF.md).
//!
//! Reads `<ckpt>/config.json` (lerobot's `PI0Config` / `PI05Config`), `<ckpt>/model.safetensors`
//! and the normaliser statistics of lerobot's processor files (mean/std for pi0, q01/q99 for
//! pi0.5 by default). Widths, depths and vocabulary come from tensor shapes; what shapes do
//! not fix (head counts, epsilons) from openpi's fixed Gemma and SigLIP So400m settings
//! (head_dim 256, 16 vision heads, RMS eps 1e-6, RoPE theta 10000), or from a `--sizes`
//! JSON for other sizes (keys below).
//!
//! Gemma's RMSNorm scales by `1 + w`; the GGUF stores `1 + w` (as llama.cpp's converter
//! does), so every norm runs as a plain gain.

use super::{ckpt_err, read_json, Json, Safetensors};
use crate::config;
use crate::gguf::{GgmlType, GgufWriter};
use crate::layers::GatedActivation;
use crate::models::flow::FlowArch;
pub use crate::models::pi0::{Pi0Config, Variant};
use crate::modules::decoder::{DecoderConfig, ExpertConfig, LmConfig};
use crate::modules::vision::PatchPositions;
use crate::Result;
use std::path::{Path, PathBuf};

const PALI: &str = "model.paligemma_with_expert.paligemma.model.";
const EXPERT: &str = "model.paligemma_with_expert.gemma_expert.model.";
/// Where the token embeddings are when saving dropped `embed_tokens` for the tied head.
const TIED_EMBED: &str = "model.paligemma_with_expert.paligemma.lm_head.weight";
/// Checkpoint tensors nothing the action chunk depends on reads: the two LM heads and the
/// decoder's final norm (the prefix's last hidden state is never used).
const IGNORED: &[&str] = &[
    "model.paligemma_with_expert.paligemma.lm_head.weight",
    "model.paligemma_with_expert.gemma_expert.lm_head.weight",
    "model.paligemma_with_expert.paligemma.model.language_model.norm.weight",
];

/// What tensor shapes do not fix, with openpi's values as defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct Sizes {
    pub head_dim: usize,
    pub vit_heads: usize,
    pub vit_ln_eps: f32,
    pub rms_eps: f32,
    pub rope_theta: f32,
}

impl Default for Sizes {
    fn default() -> Self {
        Sizes {
            head_dim: 256,
            vit_heads: 16,
            vit_ln_eps: 1e-6,
            rms_eps: 1e-6,
            rope_theta: 10_000.0,
        }
    }
}

impl Sizes {
    /// `{"vision": {"heads", "ln_eps"}, "vlm": {"head_dim", "rms_eps", "rope_theta"}}`; a
    /// missing key keeps the default.
    pub fn from_json(path: &Path) -> Result<Self> {
        let value = read_json(path)?;
        let root = Json {
            path,
            value: &value,
        };
        let mut s = Sizes::default();
        if let Ok(v) = root.obj("vision") {
            s.vit_heads = v.usize("heads").unwrap_or(s.vit_heads);
            s.vit_ln_eps = v.f64("ln_eps").map_or(s.vit_ln_eps, |x| x as f32);
        }
        if let Ok(v) = root.obj("vlm") {
            s.head_dim = v.usize("head_dim").unwrap_or(s.head_dim);
            s.rms_eps = v.f64("rms_eps").map_or(s.rms_eps, |x| x as f32);
            s.rope_theta = v.f64("rope_theta").map_or(s.rope_theta, |x| x as f32);
        }
        Ok(s)
    }
}

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Type of the 2-D matmul weights; everything else stays f32. Default F32.
    pub dtype: Option<GgmlType>,
    /// Head counts and epsilons for non-standard sizes; default: openpi's.
    pub sizes: Option<Sizes>,
    /// PaliGemma's tokenizer (a `tokenizer.json` or a folder); default: the one lerobot's
    /// pre-processor loads (google/paligemma-3b-pt-224 in the Hugging Face cache), else
    /// `<ckpt>/tokenizer`.
    pub tokenizer: Option<PathBuf>,
    /// Write a GGUF that takes token ids only, without looking for a tokenizer.
    pub no_tokenizer: bool,
}

pub struct Converted {
    pub config: Pi0Config,
    pub writer: GgufWriter<'static>,
    pub notes: Vec<String>,
}

/// Our GGUF name -> the lerobot state-dict key, for every weight of `cfg` (not the statistics).
pub fn name_map(cfg: &Pi0Config) -> Vec<(String, String)> {
    let vit = format!("{PALI}vision_tower.vision_model.");
    let mut m = super::siglip_name_map(&vit, cfg.vision.layers);
    m.extend([
        (
            "mm.proj.weight".into(),
            format!("{PALI}multi_modal_projector.linear.weight"),
        ),
        (
            "mm.proj.bias".into(),
            format!("{PALI}multi_modal_projector.linear.bias"),
        ),
        (
            "token_embd.weight".into(),
            format!("{PALI}language_model.embed_tokens.weight"),
        ),
    ]);
    let heads: &[&str] = match cfg.variant {
        Variant::Pi0 => &[
            "state_proj",
            "action_in_proj",
            "action_out_proj",
            "action_time_mlp_in",
            "action_time_mlp_out",
        ],
        Variant::Pi05 => &[
            "action_in_proj",
            "action_out_proj",
            "time_mlp_in",
            "time_mlp_out",
        ],
    };
    for n in heads {
        for p in ["weight", "bias"] {
            m.push((format!("{n}.{p}"), format!("model.{n}.{p}")));
        }
    }
    match cfg.variant {
        Variant::Pi0 => m.push((
            "aex.output_norm.weight".into(),
            format!("{EXPERT}norm.weight"),
        )),
        Variant::Pi05 => {
            for p in ["weight", "bias"] {
                m.push((
                    format!("aex.ada_output_norm.{p}"),
                    format!("{EXPERT}norm.dense.{p}"),
                ));
            }
        }
    }
    for i in 0..cfg.lm.n_layers {
        for (ours, theirs, ada) in [
            (
                format!("vlm.blk.{i}"),
                format!("{PALI}language_model.layers.{i}"),
                false,
            ),
            (
                format!("aex.blk.{i}"),
                format!("{EXPERT}layers.{i}"),
                cfg.variant == Variant::Pi05,
            ),
        ] {
            for (a, b) in [
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
            for (a, b) in [
                ("attn", "input_layernorm"),
                ("ffn", "post_attention_layernorm"),
            ] {
                if ada {
                    for p in ["weight", "bias"] {
                        m.push((
                            format!("{ours}.ada_{a}_norm.{p}"),
                            format!("{theirs}.{b}.dense.{p}"),
                        ));
                    }
                } else {
                    m.push((
                        format!("{ours}.{a}_norm.weight"),
                        format!("{theirs}.{b}.weight"),
                    ));
                }
            }
        }
    }
    m
}

/// Gemma norm gains (`1 + w` at run time), which the GGUF stores with the 1 added.
fn is_gemma_gain(ours: &str) -> bool {
    (ours.starts_with("vlm.") || ours.starts_with("aex."))
        && ours.ends_with("_norm.weight")
        && !ours.contains("ada_")
}

/// Converts the lerobot pi0 / pi0.5 checkpoint folder `ckpt`. `progress(done, total, name)`
/// is called once per tensor written.
pub fn convert(
    ckpt: &Path,
    opts: &Options,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Converted> {
    if !matches!(super::detect(ckpt)?, super::Kind::Pi0 | super::Kind::Pi05) {
        super::detect::expect(ckpt, super::Kind::Pi0)?;
    }
    let dtype = super::float_dtype(opts.dtype)?;
    let cfg_path = ckpt.join("config.json");
    let policy_json = read_json(&cfg_path)?;
    let policy = Json {
        path: &cfg_path,
        value: &policy_json,
    };
    let st = Safetensors::open_dir(ckpt)?;
    let mut notes = Vec::new();
    let sizes = match &opts.sizes {
        Some(s) => s.clone(),
        None => {
            notes.push(
                "head counts and epsilons: openpi's (head_dim 256, 16 vision heads, eps 1e-6)"
                    .into(),
            );
            Sizes::default()
        }
    };
    let config = read_config(&policy, &st, &sizes)?;
    config::check(&config, config.arch())?;
    let mut map = name_map(&config);
    // PaliGemma ties its input embeddings to its LM head, and saving keeps only one name.
    let embed = &mut map
        .iter_mut()
        .find(|(ours, _)| ours == "token_embd.weight")
        .expect("in the map")
        .1;
    if !st.contains(embed) && st.contains(TIED_EMBED) {
        *embed = TIED_EMBED.to_owned();
        notes.push(format!("token embeddings from {TIED_EMBED} (tied)"));
    }
    super::check_coverage(&st, &map, IGNORED, &[])?;
    let stats = read_stats(ckpt, &policy, &config, &mut notes)?;

    let source = format!("lerobot {} checkpoint (vla-convert)", config.arch());
    let mut w = super::arch_writer(&config, ckpt, super::Kind::Pi0, &source, &mut notes)?;
    let tokenizer = super::optional_tokenizer(
        ckpt,
        opts.tokenizer.as_deref(),
        &[ckpt.join("tokenizer")],
        opts.no_tokenizer,
        &mut notes,
    )?;
    if let Some((source, tok)) = &tokenizer {
        super::ship_tokenizer(&mut w, tok, source, config.lm.vocab_size, &mut notes)?;
    }
    let add_gemma_one = |ours: &str, vals: &mut [f32]| {
        if is_gemma_gain(ours) {
            vals.iter_mut().for_each(|v| *v += 1.0);
        }
    };
    let tensors = super::Tensors {
        map: &map,
        shapes: config.tensor_shapes()?,
        dtype,
        stats,
    };
    super::write_tensors(&mut w, &st, tensors, add_gemma_one, progress)?;
    Ok(Converted {
        config,
        writer: w,
        notes,
    })
}

fn read_config(policy: &Json, st: &Safetensors, sizes: &Sizes) -> Result<Pi0Config> {
    let path = policy.path;
    let bad = |why: String| ckpt_err(path, why);
    let kind = policy.str("type")?;
    let variant = Variant::from_arch(kind).ok_or_else(|| {
        bad(format!(
            "policy type {kind:?}, expected \"pi0\" or \"pi05\""
        ))
    })?;
    if policy.usize("empty_cameras").unwrap_or(0) != 0 {
        return Err(bad("empty_cameras > 0: not supported".into()));
    }
    if let Some(r) = policy.get("image_resolution").and_then(|r| r.as_array()) {
        if r.len() != 2 || r[0] != r[1] {
            return Err(bad(format!(
                "image_resolution {r:?}: expected a square size"
            )));
        }
    }
    let vit = format!("{PALI}vision_tower.vision_model.");
    let vision = super::vision_tower(
        st,
        &vit,
        |_| sizes.vit_heads,
        sizes.vit_ln_eps,
        PatchPositions::Grid,
    )?;
    if let Some(r) = policy.get("image_resolution").and_then(|r| r.as_array()) {
        if r[0].as_u64() != Some(vision.image_size as u64) {
            return Err(bad(format!(
                "image_resolution {r:?} differs from the vision tower's {0}x{0}",
                vision.image_size
            )));
        }
    }
    let embed_key = format!("{PALI}language_model.embed_tokens.weight");
    let embed_key = if st.contains(&embed_key) {
        embed_key.as_str()
    } else {
        TIED_EMBED
    };
    let embed = st.config_shape(embed_key, 2)?.to_vec();
    let (vocab_size, hidden) = (embed[0], embed[1]);
    let lm = format!("{PALI}language_model.layers.");
    let ex = format!("{EXPERT}layers.");
    let q_dim = st.config_shape(&format!("{lm}0.self_attn.q_proj.weight"), 2)?[0];
    let kv_dim = st.config_shape(&format!("{lm}0.self_attn.k_proj.weight"), 2)?[0];
    let hd = sizes.head_dim.max(1);
    for (who, q, kv) in [
        (
            "expert",
            st.config_shape(&format!("{ex}0.self_attn.q_proj.weight"), 2)?[0],
            st.config_shape(&format!("{ex}0.self_attn.k_proj.weight"), 2)?[0],
        ),
        ("decoder", q_dim, kv_dim),
    ] {
        if q != q_dim || kv != kv_dim || q % hd != 0 || kv % hd != 0 {
            return Err(ckpt_err(st.path(), format!("{who} q/k widths {q}/{kv}: expected {q_dim}/{kv_dim}, multiples of head_dim {hd}")));
        }
    }
    let n_layers = super::count_layers(st, &lm, ".self_attn.q_proj.weight");
    let n_expert = super::count_layers(st, &ex, ".self_attn.q_proj.weight");
    if n_expert != n_layers {
        return Err(ckpt_err(
            st.path(),
            format!("{n_expert} expert layers for {n_layers} decoder layers"),
        ));
    }
    let expert_hidden = st.config_shape(&format!("{ex}0.self_attn.o_proj.weight"), 2)?[0];
    let (io, time) = super::flow_io(policy, "num_inference_steps")?;
    Ok(Pi0Config {
        variant,
        vision,
        lm: LmConfig {
            hidden,
            n_layers,
            inter: st.config_shape(&format!("{lm}0.mlp.gate_proj.weight"), 2)?[0],
            vocab_size,
        },
        attn: DecoderConfig {
            q_heads: q_dim / hd,
            kv_heads: kv_dim / hd,
            head_dim: hd,
            rope_theta: sizes.rope_theta,
            norm_eps: sizes.rms_eps,
            ffn: GatedActivation::GeluTanh,
            ..Default::default()
        },
        expert: ExpertConfig {
            hidden: expert_hidden,
            inter: st.config_shape(&format!("{ex}0.mlp.gate_proj.weight"), 2)?[0],
        },
        io,
        time,
    })
}

/// The state and action statistics the normalisation mapping asks for, named as the GGUF
/// stores them (`state_mean`, `action_q01`, ...).
fn read_stats(
    ckpt: &Path,
    policy: &Json,
    cfg: &Pi0Config,
    notes: &mut Vec<String>,
) -> Result<Vec<(String, Vec<f32>)>> {
    let mapping = policy.obj("normalization_mapping")?;
    let mut out = Vec::new();
    for (feature, kind, dim, ours) in [
        ("observation.state", "STATE", cfg.io.state_dim, "state"),
        ("action", "ACTION", cfg.io.action_dim, "action"),
    ] {
        let (keys, values) = match mapping.str(kind)? {
            "MEAN_STD" => (["mean", "std"], super::find_stats(ckpt, None, feature, ["mean", "std"], notes)?),
            "QUANTILES" => (["q01", "q99"], super::find_stats(ckpt, None, feature, ["q01", "q99"], notes)?),
            "IDENTITY" => (["mean", "std"], [vec![0.0; dim], vec![1.0; dim]]),
            other => {
                return Err(ckpt_err(policy.path, format!("normalization_mapping {kind} = {other:?}: only MEAN_STD, QUANTILES and IDENTITY are supported")))
            }
        };
        for (k, v) in keys.iter().zip(values) {
            if v.len() != dim {
                return Err(ckpt_err(
                    ckpt,
                    format!(
                        "{feature}.{k} has {} values, the feature has {dim}",
                        v.len()
                    ),
                ));
            }
            out.push((format!("{ours}_{k}"), v));
        }
    }
    Ok(out)
}
