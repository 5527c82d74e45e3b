//! Isaac-GR00T N1.6 checkpoint (`Gr00tN1d6`: `config.json`, `model.safetensors`,
//! `processor_config.json`, `statistics.json`, `embodiment_id.json`) -> `gr00t_n1_6` GGUF.
//!
//! The Eagle folder (`config.json` with the SigLIP2 and Qwen3 sizes and `image_token_index`,
//! the tokenizer) is `<ckpt>/eagle` or `--backbone DIR` (the released checkpoint names
//! `nvidia/Eagle-Block2A-2B-v2`, whose folder ships with Isaac-GR00T's code). Derived at
//! conversion: SigLIP2's Linear patch embedding (patches flattened row, column, channel) as a
//! convolution kernel; its position table resized to the frame's patch grid (bilinear,
//! `align_corners=False`; antialias does not act when enlarging, and a smaller grid is
//! refused); `mlp1`'s LayerNorm and first Linear with their input channels reordered from
//! `pixel_unshuffle`'s `c * 4 + dy * 2 + dx` to our connector's `(2 dy + dx) * C + c`.

use super::gr00t::head_name_map;
use super::{ckpt_err, read_json, Json, Safetensors};
use crate::config;
use crate::gguf::{GgmlType, GgufWriter};
use crate::layers::GatedActivation;
use crate::models::common::ActionIo;
use crate::models::embodiment::Embodiments;
use crate::models::flow::FlowArch;
use crate::models::gr00t_n1_6::{tables, Gr00tN16Config};
use crate::models::gr00t_n1_7::stats::{group_bounds, relative_refs, zscore_stats, Relative};
use crate::models::gr00t_n1_7::FrameConfig;
use crate::models::prompt::PromptIds;
use crate::modules::decoder::{DecoderConfig, LmConfig};
use crate::modules::dit::BlockStack;
use crate::modules::gr00t_head::{HeadConfig, HeadLinears};
use crate::modules::vision::VisionConfig;
use crate::tokenizer::Tokenizer;
use crate::Result;
use std::path::{Path, PathBuf};

const VIT: &str = "backbone.model.vision_model.vision_model.";
const LM: &str = "backbone.model.language_model.model.";
const MLP1: &str = "backbone.model.mlp1.";

/// Gr00tN1d6Config's defaults (`gr00t/configs/model/gr00t_n1d6.py`) of the keys read here.
const N16_DEFAULTS: [(&str, usize); 11] = [
    ("select_layer", 16),
    ("shortest_image_edge", 256),
    ("action_horizon", 16),
    ("num_inference_timesteps", 4),
    ("max_state_dim", 29),
    ("max_action_dim", 29),
    ("attend_text_every_n_blocks", 2),
    ("input_embedding_dim", 1536),
    ("hidden_size", 1024),
    ("max_seq_len", 1024),
    ("max_num_embodiments", 32),
];

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Type of the 2-D matmul weights; everything else stays f32. Default F32.
    pub dtype: Option<GgmlType>,
    /// The Eagle folder (config and tokenizer); default `<ckpt>/eagle`.
    pub backbone: Option<PathBuf>,
    /// The embodiment whose statistics the file keeps; default the only one the
    /// statistics hold, else `new_embodiment`.
    pub embodiment: Option<String>,
}

pub struct Converted {
    pub config: Gr00tN16Config,
    pub writer: GgufWriter<'static>,
    pub notes: Vec<String>,
}

/// Converts the Isaac-GR00T N1.6 checkpoint folder `ckpt`.
pub fn convert(
    ckpt: &Path,
    opts: &Options,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Converted> {
    super::detect::expect(ckpt, super::Kind::Gr00tN16)?;
    let dtype = super::float_dtype(opts.dtype)?;
    let mut notes = Vec::new();
    let read = |name: &str| -> Result<(PathBuf, serde_json::Value)> {
        let p = ckpt.join(name);
        Ok((p.clone(), read_json(&p)?))
    };
    let (cfg_path, cfg_json) = read("config.json")?;
    let cfg = Json {
        path: &cfg_path,
        value: &cfg_json,
    };
    if cfg.str("model_type")? != "Gr00tN1d6" {
        return Err(ckpt_err(&cfg_path, "model_type is not Gr00tN1d6"));
    }
    let eagle = opts.backbone.clone().unwrap_or_else(|| ckpt.join("eagle"));
    let (eagle_path, eagle_json) = (
        eagle.join("config.json"),
        read_json(&eagle.join("config.json"))?,
    );
    let eagle_cfg = Json {
        path: &eagle_path,
        value: &eagle_json,
    };
    let tokenizer = Tokenizer::from_hf_path(&eagle)?;
    let (proc_path, proc_json) = read("processor_config.json")?;
    let (_, stats_json) = read("statistics.json")?;
    let (_, ids_json) = read("embodiment_id.json")?;
    let st = Safetensors::open_dir(ckpt)?;

    let tag = match &opts.embodiment {
        Some(t) => t.clone(),
        None => match stats_json.as_object().map(|o| o.keys().collect::<Vec<_>>()) {
            Some(keys) if keys.len() == 1 => keys[0].clone(),
            _ => "new_embodiment".into(),
        },
    };
    let kwargs = proc_json
        .get("processor_kwargs")
        .unwrap_or(&serde_json::Value::Null);
    let modality = kwargs
        .get("modality_configs")
        .and_then(|m| m.get(&tag))
        .ok_or_else(|| {
            ckpt_err(
                &proc_path,
                format!("no modality config for embodiment {tag:?}"),
            )
        })?;
    let raw = stats_json
        .get(&tag)
        .ok_or_else(|| ckpt_err(ckpt, format!("statistics.json: no embodiment {tag:?}")))?;
    let percentiles = kwargs
        .get("use_percentiles")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    let clip = kwargs
        .get("clip_outliers")
        .and_then(|v| v.as_bool())
        .unwrap_or(true);
    if !clip {
        return Err(ckpt_err(&proc_path, "clip_outliers off: not supported"));
    }
    // Isaac-GR00T's processor applies relative actions with its own flag (the model's
    // config.json carries the same)
    let relative = match kwargs.get("use_relative_action").and_then(|v| v.as_bool()) {
        Some(true) => Relative::Apply,
        Some(false) => Relative::Absolute,
        None if cfg.bool_or("use_relative_action", false) => Relative::Apply,
        None => Relative::Absolute,
    };
    let err = |e: String| ckpt_err(&proc_path, format!("{tag}: {e}"));
    let mut stats = group_bounds(raw, modality, percentiles, None, relative).map_err(err)?;
    let mut extra = zscore_stats(raw, modality, relative).map_err(err)?;
    extra.extend(relative_refs(raw, modality, relative).map_err(err)?);
    let count = |m: &str, k: &str| {
        modality
            .get(m)
            .and_then(|v| v.get(k))
            .and_then(|v| v.as_array())
            .map_or(0, Vec::len)
    };
    let config = read_config(
        &cfg,
        &eagle_cfg,
        &st,
        &tokenizer,
        IoFacts {
            n_images: count("video", "modality_keys"),
            valid_horizon: count("action", "delta_indices"),
            dims: (stats[0].1.len(), stats[2].1.len()),
            embodiments: Embodiments {
                tags: ids_json.to_string(),
                default: tag.clone(),
            },
        },
    )?;
    config::check(&config, config.arch())?;
    let (lo, hi) = if percentiles {
        ("q01", "q99")
    } else {
        ("min", "max")
    };
    notes.push(format!(
        "embodiment {tag}: statistics {lo}/{hi} per group, clipped; frames {s}x{s}, {n} tokens a camera",
        s = config.vision.image_size,
        n = config.n_img_tokens(),
    ));

    let mut map = super::siglip_name_map(VIT, config.vision.layers);
    let derived_names = [
        "vit.patch_embd.weight",
        "vit.patch_embd.bias",
        "vit.pos_embd.weight",
    ];
    map.retain(|(ours, _)| !derived_names.contains(&ours.as_str()));
    map.push(("mm.fc1.bias".into(), format!("{MLP1}1.bias")));
    for p in ["weight", "bias"] {
        map.push((format!("mm.fc2.{p}"), format!("{MLP1}3.{p}")));
        map.push((format!("aex.vlln.{p}"), format!("action_head.vlln.{p}")));
    }
    map.extend(super::qwen::lm_name_map(LM, config.lm.n_layers));
    map.extend(head_name_map(
        "action_head.",
        (0, config.dit.layers),
        HeadLinears::PerEmbodiment,
    ));
    map.retain(|(ours, _)| ours != "aex.future_tokens.weight");
    let tied = "backbone.model.language_model.lm_head.weight";
    if let Some(e) = map.iter_mut().find(|(o, _)| o == "token_embd.weight") {
        if !st.contains(&e.1) && st.contains(tied) {
            e.1 = tied.into();
        }
    }
    let derived = derived_tensors(&st, &config)?;
    // SigLIP2's pooling head is built but never used; the rest is derived below
    let derived_src = [
        format!("{VIT}head."),
        format!("{VIT}embeddings.patch_embedding."),
        format!("{VIT}embeddings.position_embedding."),
        format!("{MLP1}0."),
        format!("{MLP1}1.weight"),
    ];
    let unused = [tied];
    let derived_src: Vec<&str> = derived_src.iter().map(String::as_str).collect();
    super::check_coverage(&st, &map, &unused, &derived_src)?;

    let mut w = GgufWriter::new();
    config.write(&mut w)?;
    let name = ckpt
        .file_name()
        .map_or("gr00t_n1_6".into(), |n| n.to_string_lossy().into_owned());
    w.add_metadata("general.name", name)?;
    w.add_metadata(
        "general.source",
        "Isaac-GR00T N1.6 checkpoint (vla-convert)",
    )?;
    super::ship_tokenizer(&mut w, &tokenizer, &eagle, config.lm.vocab_size, &mut notes)?;
    let cameras: Vec<String> = modality
        .get("video")
        .and_then(|v| v.get("modality_keys"))
        .and_then(|k| k.as_array())
        .into_iter()
        .flatten()
        .filter_map(|k| k.as_str().map(str::to_owned))
        .collect();
    notes.push(format!("cameras, in order: {}", cameras.join(", ")));
    w.add_metadata(
        crate::models::common::CAMERA_NAMES_KEY,
        crate::gguf::Value::from_strs(&cameras),
    )?;
    let mut shapes = config.tensor_shapes()?;
    shapes.retain(|(n, _)| !derived.iter().any(|(d, _, _)| d == n));
    // the processor's z-scored and relative groups, which the runtime reads beside the bounds
    stats.extend(extra);
    let tensors = super::Tensors {
        map: &map,
        shapes,
        dtype,
        stats,
    };
    super::write_tensors(&mut w, &st, tensors, |_, _| {}, progress)?;
    for (name, shape, vals) in derived {
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

/// What the processor's files say of the run's embodiment.
struct IoFacts {
    n_images: usize,
    valid_horizon: usize,
    /// The real state and action widths (the statistics' groups).
    dims: (usize, usize),
    embodiments: Embodiments,
}

fn read_config(
    cfg: &Json,
    eagle: &Json,
    st: &Safetensors,
    tok: &Tokenizer,
    facts: IoFacts,
) -> Result<Gr00tN16Config> {
    for (key, want) in [
        ("use_vlln", true),
        ("use_alternate_vl_dit", true),
        ("add_pos_embed", true),
        ("apply_sincos_state_encoding", false),
    ] {
        if cfg.bool_or(key, want) != want {
            return Err(ckpt_err(
                cfg.path,
                format!("{key} = {}: not supported", !want),
            ));
        }
    }
    let (v, t) = (eagle.obj("vision_config")?, eagle.obj("text_config")?);
    // Isaac-GR00T saves the keys that differ from Gr00tN1d6Config's defaults: those fill in
    let num = |key: &str| -> Result<usize> {
        match (cfg.get(key), N16_DEFAULTS.iter().find(|(k, _)| *k == key)) {
            (None, Some(&(_, d))) => Ok(d),
            _ => cfg.usize(key),
        }
    };
    let select = num("select_layer")?;
    let stored = super::count_layers(st, &format!("{LM}layers."), ".self_attn.q_proj.weight");
    if stored != select {
        return Err(ckpt_err(
            st.path(),
            format!("{stored} LM layers, select_layer {select}"),
        ));
    }
    let ratio = eagle.f64("downsample_ratio")?;
    if ratio <= 0.0 || (1.0 / ratio).fract() != 0.0 {
        return Err(ckpt_err(
            eagle.path,
            format!("downsample_ratio {ratio}: not 1/n"),
        ));
    }
    // The frame: letterboxed square, shortest edge, crop, shortest edge: edge x edge, then
    // Eagle's smart_resize (factor 28, pixels within [4, 4096] x 28^2).
    let edge = num("shortest_image_edge")?;
    let crop = match cfg.get("crop_fraction") {
        None => 0.95,
        Some(_) => cfg.f64("crop_fraction")?,
    };
    let (image, _) = super::qwen_vl::smart_resize(edge, edge, 28, 4 * 784, 4096 * 784);
    let dit = cfg.obj("diffusion_model_cfg")?;
    let dit_num = |key: &str, d: usize| match dit.get(key) {
        None => Ok(d),
        Some(_) => dit.usize(key),
    };
    let (state_dim, action_dim) = facts.dims;
    let image_token = eagle.usize("image_token_index")?;
    let n_tokens = (image / v.usize("patch_size")?).pow(2) / ((1.0 / ratio) as usize).pow(2);
    let prompt = eagle_prompt(tok, facts.n_images, n_tokens)?;
    let io = ActionIo {
        n_images: facts.n_images,
        tokenizer_max_length: super::unbounded_text(&prompt),
        pad_token_id: 0,
        chunk_size: num("action_horizon")?,
        num_steps: num("num_inference_timesteps")?,
        max_state_dim: num("max_state_dim")?,
        max_action_dim: num("max_action_dim")?,
        state_dim,
        action_dim,
    };
    Ok(Gr00tN16Config {
        vision: VisionConfig {
            hidden: v.usize("hidden_size")?,
            layers: v.usize("num_hidden_layers")?,
            heads: v.usize("num_attention_heads")?,
            inter: v.usize("intermediate_size")?,
            image_size: image,
            patch_size: v.usize("patch_size")?,
            ln_eps: v.f64("layer_norm_eps")? as f32,
            ..Default::default()
        },
        pixel_shuffle: (1.0 / ratio) as usize,
        connector_eps: 1e-5, // nn.LayerNorm's default (Eagle's mlp1)
        frame: FrameConfig { edge, crop },
        lm: LmConfig {
            hidden: t.usize("hidden_size")?,
            n_layers: select,
            inter: t.usize("intermediate_size")?,
            vocab_size: vocab_rows(st)?,
        },
        attn: DecoderConfig {
            q_heads: t.usize("num_attention_heads")?,
            kv_heads: t.usize("num_key_value_heads")?,
            head_dim: t.usize("head_dim")?,
            rope_theta: t
                .obj("rope_parameters")
                .and_then(|r| r.f64("rope_theta"))
                .or_else(|_| t.f64("rope_theta"))? as f32,
            norm_eps: t.f64("rms_norm_eps")? as f32,
            ffn: GatedActivation::Silu,
            qk_norm: true,
            ..Default::default()
        },
        dit: BlockStack {
            name: "dit",
            layers: dit_num("num_layers", 32)?,
            heads: dit_num("num_attention_heads", 32)?,
            head_dim: dit_num("attention_head_dim", 48)?,
        },
        text_every: num("attend_text_every_n_blocks")?,
        head: HeadConfig {
            embed: num("input_embedding_dim")?,
            hidden: num("hidden_size")?,
            future_tokens: 0,
            max_seq_len: num("max_seq_len")?,
            embodiments: num("max_num_embodiments")?,
            buckets: match cfg.get("num_timestep_buckets") {
                None => 1000,
                Some(_) => cfg.usize("num_timestep_buckets")?,
            },
            image_token,
        },
        io,
        valid_horizon: facts.valid_horizon,
        prompt,
        embodiments: facts.embodiments,
    })
}

/// Rows of the token embedding table (`embed_tokens`, or the tied `lm_head`).
fn vocab_rows(st: &Safetensors) -> Result<usize> {
    let embed = format!("{LM}embed_tokens.weight");
    let name = match st.contains(&embed) {
        true => embed,
        false => "backbone.model.language_model.lm_head.weight".into(),
    };
    Ok(st.config_shape(&name, 2)?[0])
}

/// Eagle's chat template for one user turn (the instruction, then each camera's image) with
/// its default system turn, no generation prompt, split at the instruction: after it,
/// `<image k><img>` + `<IMG_CONTEXT>` x `n_img` + `</img>` per camera, then `<|im_end|>\n`.
pub fn eagle_prompt(tok: &Tokenizer, cameras: usize, n_img: usize) -> Result<PromptIds> {
    let before = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n";
    let mut after = String::new();
    for k in 1..=cameras {
        after.push_str(&format!(
            "<image {k}><img>{}</img>",
            "<IMG_CONTEXT>".repeat(n_img)
        ));
    }
    after.push_str("<|im_end|>\n");
    Ok(PromptIds::new(tok.encode(before)?, tok.encode(&after)?))
}

/// The tensors made rather than copied: the patch kernel, the position table at the frame's
/// grid, `mlp1`'s LayerNorm and first Linear with reordered input channels.
fn derived_tensors(st: &Safetensors, cfg: &Gr00tN16Config) -> Result<Vec<super::qwen::Converted>> {
    let (d, p) = (cfg.vision.hidden, cfg.vision.patch_size);
    let lin = st.f32(&format!("{VIT}embeddings.patch_embedding.weight"))?;
    let kernel = tables::patch_kernel(&lin, d, p).ok_or_else(|| {
        ckpt_err(
            st.path(),
            format!(
                "patch_embedding: {} values, expected [{d}, {}]",
                lin.len(),
                p * p * 3
            ),
        )
    })?;
    let table = st.f32(&format!("{VIT}embeddings.position_embedding.weight"))?;
    let n = table.len() / d.max(1);
    let side = (n as f64).sqrt().round() as usize;
    let grid = cfg.vision.image_size / p.max(1);
    if side * side != n || grid < side {
        return Err(ckpt_err(st.path(), format!("position table of {n} rows for a {grid} x {grid} patch grid: only square tables enlarged are supported")));
    }
    let pos = bilinear_enlarge(&table, side, d, grid);
    let bias = st.f32(&format!("{VIT}embeddings.patch_embedding.bias"))?;
    let s = cfg.pixel_shuffle;
    let wide = d * s * s;
    let reorder = |name: &str| -> Result<Vec<f32>> {
        tables::connector_channels(&st.f32(&format!("{MLP1}{name}"))?, d, s)
            .ok_or_else(|| ckpt_err(st.path(), format!("mlp1.{name}: rows of {wide} expected")))
    };
    let (ln_w, ln_b, fc1) = (
        reorder("0.weight")?,
        reorder("0.bias")?,
        reorder("1.weight")?,
    );
    let h = cfg.lm.hidden;
    Ok(vec![
        ("vit.patch_embd.weight".into(), vec![d, 3, p, p], kernel),
        ("vit.patch_embd.bias".into(), vec![d], bias),
        ("vit.pos_embd.weight".into(), vec![grid * grid, d], pos),
        ("mm.ln.weight".into(), vec![wide], ln_w),
        ("mm.ln.bias".into(), vec![wide], ln_b),
        ("mm.fc1.weight".into(), vec![h, wide], fc1),
    ])
}

/// `F.interpolate(mode="bilinear", align_corners=False)` of the `[side, side, d]` table to
/// `[grid, grid, d]` (grid >= side), row-major.
fn bilinear_enlarge(table: &[f32], side: usize, d: usize, grid: usize) -> Vec<f32> {
    let axis = |i: usize| {
        let x = ((i as f32 + 0.5) * side as f32 / grid as f32 - 0.5).max(0.0);
        let lo = (x as usize).min(side - 1);
        let hi = (lo + 1).min(side - 1);
        (lo, hi, x - lo as f32)
    };
    let mut out = Vec::with_capacity(grid * grid * d);
    for r in 0..grid {
        let (r0, r1, fr) = axis(r);
        for c in 0..grid {
            let (c0, c1, fc) = axis(c);
            for e in 0..d {
                let at = |y: usize, x: usize| table[(y * side + x) * d + e];
                let top = at(r0, c0) * (1.0 - fc) + at(r0, c1) * fc;
                let bottom = at(r1, c0) * (1.0 - fc) + at(r1, c1) * fc;
                out.push(top * (1.0 - fr) + bottom * fr);
            }
        }
    }
    out
}
