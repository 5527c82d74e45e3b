//! lerobot Evo-1 checkpoint -> `evo1` GGUF (schema: docs/GGUF.md).
//!
//! Reads `<ckpt>/config.json` (lerobot's `Evo1Config`: cameras, `max_views`, the head's
//! sizes, `vlm_model_name`), `<ckpt>/model.safetensors` (InternVL under
//! `model.embedder.model.`: `vision_tower`, `multi_modal_projector`, `language_model` already
//! cut to `vlm_num_layers`; the head under `model.action_head.`, its two sinusoid tables
//! included), the InternVL folder (`config.json`, `tokenizer.json`) and the processor files
//! (state and action min/max, stored padded to `max_*_dim`; the real dims are kept).

use super::JsonFile;
use super::{ckpt_err, count_layers, count_visual_features, feature_dim, Json, Safetensors};
use crate::config;
use crate::gguf::{GgmlType, GgufWriter};
use crate::layers::GatedActivation;
use crate::models::common::ActionIo;
use crate::models::evo1::{prompt_prefix, Evo1Config};
use crate::models::flow::FlowArch;
use crate::models::prompt::PromptIds;
use crate::modules::decoder::{DecoderConfig, LmConfig};
use crate::modules::evo1_head::Evo1HeadConfig;
use crate::modules::vision::{TowerStyle, VisionConfig};
use crate::tokenizer::Tokenizer;
use crate::Result;
use std::path::{Path, PathBuf};

const VLM: &str = "model.embedder.model.";
const HEAD: &str = "model.action_head.";
/// lerobot's `max_text_length` when the config has none: the whole prompt's bound in
/// tokens, at which the reference's tokenizer cuts it.
const MAX_TEXT_LENGTH: usize = 1024;

#[derive(Clone, Debug, Default)]
pub struct Options {
    pub dtype: Option<GgmlType>,
    /// The InternVL folder; default: `vlm_model_name` relative to the checkpoint or as given.
    pub backbone: Option<PathBuf>,
}

pub struct Converted {
    pub config: Evo1Config,
    pub writer: GgufWriter<'static>,
    pub notes: Vec<String>,
}

/// Converts the lerobot Evo-1 checkpoint folder `ckpt`.
pub fn convert(
    ckpt: &Path,
    opts: &Options,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Converted> {
    super::detect::expect(ckpt, super::Kind::Evo1)?;
    let dtype = super::float_dtype(opts.dtype)?;
    let policy = JsonFile::read(ckpt.join("config.json"))?;
    let p = policy.json();
    let backbone = super::config_folder(
        ckpt,
        opts.backbone.as_deref(),
        p.str("vlm_model_name")?,
        ("vlm_model_name", "--backbone"),
    )?;
    let internvl = JsonFile::read(backbone.join("config.json"))?;
    let tokenizer = Tokenizer::from_hf_path(&backbone)?;
    let st = Safetensors::open_dir(ckpt)?;
    let config = read_config(&p, &internvl.json(), &st, &tokenizer)?;
    config::check(&config, config.arch())?;
    let mut notes = vec![format!(
        "{} cameras of {} views, {} image tokens each, {} prompt ids before the instruction",
        config.io.n_images,
        config.max_views,
        config.n_img_tokens(),
        config.prompt.before.len()
    )];
    let map = name_map(&config);
    let in_proj: Vec<String> = (0..config.head.layers)
        .flat_map(|i| {
            ["weight", "bias"].map(|w| format!("{HEAD}transformer_blocks.{i}.attn.in_proj_{w}"))
        })
        .collect();
    let ignored: Vec<&str> = in_proj.iter().map(String::as_str).collect();
    super::check_coverage(&st, &map, &ignored, &[])?;
    let stats = read_stats(ckpt, &config, &mut notes)?;

    let mut w = super::arch_writer(
        &config,
        ckpt,
        super::Kind::Evo1,
        "lerobot evo1 checkpoint (vla-convert)",
        &mut notes,
    )?;
    super::ship_tokenizer(
        &mut w,
        &tokenizer,
        &backbone,
        config.lm.vocab_size,
        &mut notes,
    )?;
    let split = split_in_proj(&st, &config)?;
    let mut shapes = config.tensor_shapes()?;
    shapes.retain(|(n, _)| !split.iter().any(|(s, _, _)| s == n));
    let tensors = super::Tensors {
        map: &map,
        shapes,
        dtype,
        stats,
    };
    super::write_tensors(&mut w, &st, tensors, |_, _| {}, progress)?;
    for (name, shape, vals) in split {
        let ty = match super::takes_float_dtype(&name, &shape) {
            true => dtype,
            false => GgmlType::F32,
        };
        w.add_f32(name, ty, &super::ggml_dims(&shape), &vals)?;
    }
    Ok(Converted {
        config,
        writer: w,
        notes,
    })
}

fn read_config(p: &Json, vlm: &Json, st: &Safetensors, tok: &Tokenizer) -> Result<Evo1Config> {
    let (v, t) = (vlm.obj("vision_config")?, vlm.obj("text_config")?);
    let refuse = |what: &str| {
        Err(ckpt_err(
            vlm.path,
            format!("{what}: not an InternVL3 layout this converter knows"),
        ))
    };
    // transformers' InternVLVisionConfig defaults: no QK-norm, LayerNorm.
    let norm = v.get("norm_type").and_then(|n| n.as_str());
    if v.bool_or("use_qk_norm", false) || norm.is_some_and(|n| n != "layer_norm") {
        return refuse("vision_config use_qk_norm / norm_type");
    }
    if vlm.f64("downsample_ratio").unwrap_or(0.5) != 0.5 {
        return refuse("downsample_ratio");
    }
    if p.usize("num_categories").unwrap_or(1) > 1 {
        return Err(ckpt_err(
            p.path,
            "num_categories > 1 (per-embodiment head MLPs) is not supported",
        ));
    }
    if p.bool_or("binarize_gripper", false) {
        return Err(ckpt_err(
            p.path,
            "binarize_gripper = true is not supported (the GGUF returns continuous actions)",
        ));
    }
    let side = |key: &str| -> Result<usize> {
        match v.get(key) {
            Some(serde_json::Value::Array(a)) => {
                a.first().and_then(|x| x.as_u64()).map(|x| x as usize)
            }
            Some(x) => x.as_u64().map(|x| x as usize),
            None => None,
        }
        .ok_or_else(|| ckpt_err(vlm.path, format!("vision_config.{key} missing")))
    };
    let vit = VisionConfig {
        hidden: v.usize("hidden_size")?,
        layers: v.usize("num_hidden_layers")?,
        heads: v.usize("num_attention_heads")?,
        inter: v.usize("intermediate_size")?,
        image_size: side("image_size")?,
        patch_size: side("patch_size")?,
        ln_eps: v.f64("layer_norm_eps")? as f32,
        style: TowerStyle::InternVit,
        ..Default::default()
    };
    let hidden = t.usize("hidden_size")?;
    let q_heads = t.usize("num_attention_heads")?;
    let theta = t.rope_theta()?;
    let attn = DecoderConfig {
        q_heads,
        kv_heads: t.usize("num_key_value_heads")?,
        head_dim: t.usize("head_dim").unwrap_or(hidden / q_heads.max(1)),
        rope_theta: theta as f32,
        norm_eps: t.f64("rms_norm_eps")? as f32,
        ffn: GatedActivation::Silu,
        qk_norm: false,
        qkv_bias: true,
    };
    let embed = st.config_shape(&format!("{VLM}language_model.embed_tokens.weight"), 2)?;
    let lm = LmConfig {
        hidden,
        n_layers: count_layers(
            st,
            &format!("{VLM}language_model.layers."),
            ".self_attn.q_proj.weight",
        ),
        inter: t.usize("intermediate_size")?,
        vocab_size: embed[0],
    };
    let head = Evo1HeadConfig {
        embed: p.usize("embed_dim")?,
        heads: p.usize("num_heads")?,
        layers: p.usize("num_layers")?,
        hidden: p.usize("hidden_dim")?,
        state_hidden: p.usize("state_hidden_dim")?,
    };
    let features = p.obj("input_features")?;
    let mut io = ActionIo {
        n_images: count_visual_features(&features),
        tokenizer_max_length: 0, // below, from the prompt
        pad_token_id: 0,
        chunk_size: p.usize("chunk_size")?,
        num_steps: p.usize("num_inference_timesteps")?,
        max_state_dim: p.usize("max_state_dim")?,
        max_action_dim: p.usize("max_action_dim")?,
        state_dim: feature_dim(&features, "observation.state")?,
        action_dim: match p.usize("postprocess_action_dim") {
            Ok(d) => d,
            Err(_) => feature_dim(&p.obj("output_features")?, "action")?,
        },
    };
    let image_token = vlm.usize("image_token_id")?;
    let context = tok.token(image_token as u32).unwrap_or_default().to_owned();
    if context.is_empty() {
        return Err(ckpt_err(
            vlm.path,
            format!("the tokenizer has no token {image_token} (image_token_id)"),
        ));
    }
    let max_views = p.usize("max_views")?;
    let n = (vit.image_size / vit.patch_size.max(1) / 2).pow(2);
    let prompt = PromptIds::new(
        tok.encode(&prompt_prefix(max_views, n, &context))?,
        Vec::new(),
    );
    let max_text = match p.get("max_text_length") {
        Some(_) => p.usize("max_text_length")?,
        None => MAX_TEXT_LENGTH,
    };
    io.tokenizer_max_length = prompt.text_bound(max_text);
    if io.tokenizer_max_length == 0 {
        return Err(ckpt_err(
            p.path,
            format!(
                "max_text_length {max_text}: the prompt's {} image-block ids leave no room for an instruction",
                prompt.before.len()
            ),
        ));
    }
    Ok(Evo1Config {
        vision: vit,
        lm,
        attn,
        head,
        io,
        max_views,
        image_token,
        prompt,
        view_marks: [0; 2],
    })
}

/// Our name -> the checkpoint's, for every tensor but the head's fused `in_proj`.
fn name_map(cfg: &Evo1Config) -> Vec<(String, String)> {
    let (vit, mm, lm) = (
        format!("{VLM}vision_tower."),
        format!("{VLM}multi_modal_projector."),
        format!("{VLM}language_model."),
    );
    let mut m: Vec<(String, String)> = vec![
        (
            "vit.class_embd.weight".into(),
            format!("{vit}embeddings.cls_token"),
        ),
        (
            "vit.pos_embd.weight".into(),
            format!("{vit}embeddings.position_embeddings"),
        ),
        (
            "token_embd.weight".into(),
            format!("{lm}embed_tokens.weight"),
        ),
        ("vlm.output_norm.weight".into(), format!("{lm}norm.weight")),
        (
            "aex.time_pos.weight".into(),
            format!("{HEAD}time_pos_enc.pe"),
        ),
        (
            "aex.action_enc.pos.weight".into(),
            format!("{HEAD}action_encoder.pos_encoding.pe"),
        ),
    ];
    let mut affine = vec![
        (
            "vit.patch_embd".to_owned(),
            format!("{vit}embeddings.patch_embeddings.projection"),
        ),
        ("mm.ln".into(), format!("{mm}layer_norm")),
        ("mm.fc1".into(), format!("{mm}linear_1")),
        ("mm.fc2".into(), format!("{mm}linear_2")),
        ("aex.norm_out".into(), format!("{HEAD}norm_out")),
        ("aex.seq_pool".into(), format!("{HEAD}seq_pool_proj")),
    ];
    for (ours, theirs) in [
        ("state_enc.fc1", "state_encoder.fc1"),
        ("state_enc.fc2", "state_encoder.fc2"),
        ("action_enc.W1", "action_encoder.W1"),
        ("action_enc.W2", "action_encoder.W2"),
        ("action_enc.W3", "action_encoder.W3"),
        ("head.fc1", "mlp_head.fc1"),
        ("head.fc2", "mlp_head.fc2"),
    ] {
        affine.push((format!("aex.{ours}"), format!("{HEAD}{theirs}.linear")));
    }
    for i in 0..cfg.vision.layers {
        let (o, t) = (format!("vit.blk.{i}"), format!("{vit}encoder.layer.{i}"));
        for (a, b) in [
            ("ln1", "layernorm_before"),
            ("ln2", "layernorm_after"),
            ("attn_q", "attention.q_proj"),
            ("attn_k", "attention.k_proj"),
            ("attn_v", "attention.v_proj"),
            ("attn_o", "attention.projection_layer"),
            ("fc1", "mlp.fc1"),
            ("fc2", "mlp.fc2"),
        ] {
            affine.push((format!("{o}.{a}"), format!("{t}.{b}")));
        }
        m.push((format!("{o}.ls1.weight"), format!("{t}.lambda_1")));
        m.push((format!("{o}.ls2.weight"), format!("{t}.lambda_2")));
    }
    for i in 0..cfg.lm.n_layers {
        let (o, t) = (format!("vlm.blk.{i}"), format!("{lm}layers.{i}"));
        for (a, b) in [
            ("attn_q", "q_proj"),
            ("attn_k", "k_proj"),
            ("attn_v", "v_proj"),
        ] {
            affine.push((format!("{o}.{a}"), format!("{t}.self_attn.{b}")));
        }
        for (a, b) in [
            ("attn_o", "self_attn.o_proj"),
            ("ffn_gate", "mlp.gate_proj"),
            ("ffn_up", "mlp.up_proj"),
            ("ffn_down", "mlp.down_proj"),
            ("attn_norm", "input_layernorm"),
            ("ffn_norm", "post_attention_layernorm"),
        ] {
            m.push((format!("{o}.{a}.weight"), format!("{t}.{b}.weight")));
        }
    }
    for i in 0..cfg.head.layers {
        let (o, t) = (
            format!("aex.blk.{i}"),
            format!("{HEAD}transformer_blocks.{i}"),
        );
        for (a, b) in [
            ("norm1", "norm1"),
            ("norm2", "norm2"),
            ("attn_o", "attn.out_proj"),
            ("ff1", "ff.0"),
            ("ff2", "ff.2"),
        ] {
            affine.push((format!("{o}.{a}"), format!("{t}.{b}")));
        }
    }
    for (ours, theirs) in affine {
        for p in ["weight", "bias"] {
            m.push((format!("{ours}.{p}"), format!("{theirs}.{p}")));
        }
    }
    m
}

/// A tensor made by the converter: name, shape, values.
type Derived = (String, Vec<usize>, Vec<f32>);

/// Each head block's `nn.MultiheadAttention` in-projection `[3E, E]` (+ bias) split into
/// `attn_q`, `attn_k`, `attn_v`.
fn split_in_proj(st: &Safetensors, cfg: &Evo1Config) -> Result<Vec<Derived>> {
    let e = cfg.head.embed;
    let mut out = Vec::new();
    for i in 0..cfg.head.layers {
        let t = format!("{HEAD}transformer_blocks.{i}.attn.in_proj_");
        let (w, b) = (format!("{t}weight"), format!("{t}bias"));
        for (name, want) in [(&w, vec![3 * e, e]), (&b, vec![3 * e])] {
            if st.require_shape(name)? != want.as_slice() {
                return Err(ckpt_err(
                    st.path(),
                    format!("{name}: expected shape {want:?}"),
                ));
            }
        }
        let (w, b) = (st.f32(&w)?, st.f32(&b)?);
        for (k, which) in ["attn_q", "attn_k", "attn_v"].into_iter().enumerate() {
            let o = format!("aex.blk.{i}.{which}");
            out.push((
                format!("{o}.weight"),
                vec![e, e],
                super::in_proj_part(&w, k),
            ));
            out.push((format!("{o}.bias"), vec![e], super::in_proj_part(&b, k)));
        }
    }
    Ok(out)
}

/// State and action min/max from the processor files, cut to the real dims.
fn read_stats(
    ckpt: &Path,
    cfg: &Evo1Config,
    notes: &mut Vec<String>,
) -> Result<Vec<(String, Vec<f32>)>> {
    let io = &cfg.io;
    let [smin, smax] = super::find_stats(ckpt, None, "observation.state", ["min", "max"], notes)?;
    let [amin, amax] = super::find_stats(ckpt, None, "action", ["min", "max"], notes)?;
    let mut out = Vec::new();
    for (name, v, real) in [
        ("state_min", smin, io.state_dim),
        ("state_max", smax, io.state_dim),
        ("action_min", amin, io.action_dim),
        ("action_max", amax, io.action_dim),
    ] {
        if v.len() < real {
            return Err(ckpt_err(
                ckpt,
                format!("{name}: {} values, expected at least {real}", v.len()),
            ));
        }
        out.push((name.to_owned(), v[..real].to_vec()));
    }
    Ok(out)
}
