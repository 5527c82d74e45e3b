//! lerobot ACT checkpoint -> `act` GGUF in vla.cpp's layout (schema: docs/GGUF.md).
//!
//! Reads `<ckpt>/config.json` (lerobot's `ACTConfig`: features, sizes, `pre_norm`, the
//! FFN's activation), `<ckpt>/model.safetensors` (the policy's state dict: torchvision's
//! ResNet with frozen BatchNorm under `model.backbone.`, the encoder, the decoder, the
//! projections; the VAE encoder, which only trains the latent, is left out) and the
//! processor files' MEAN_STD statistics. Each BatchNorm is folded into the convolution
//! before it, in f64: `scale = w / sqrt(var + 1e-5)`, kernel `W * scale`, bias `b - mean *
//! scale`. The attention's fused `in_proj` is split into q, k and v.

use super::{ckpt_err, count_layers, feature_dim, Json, JsonFile, Safetensors};
use crate::config;
use crate::gguf::{GgmlType, GgufWriter};
use crate::models::act::{ActConfig, STAGES};
use crate::Result;
use std::path::Path;

const M: &str = "model.";
/// torchvision's `FrozenBatchNorm2d` epsilon (its ResNet passes none).
const BN_EPS: f64 = 1e-5;

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Type of the transformer's matrices; kernels, tables and statistics stay f32.
    pub dtype: Option<GgmlType>,
}

pub struct Converted {
    pub config: ActConfig,
    pub writer: GgufWriter<'static>,
    pub notes: Vec<String>,
}

/// Converts the lerobot ACT checkpoint folder `ckpt`.
pub fn convert(
    ckpt: &Path,
    opts: &Options,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Converted> {
    super::detect::expect(ckpt, super::Kind::Act)?;
    let dtype = super::float_dtype(opts.dtype)?;
    let policy = JsonFile::read(ckpt.join("config.json"))?;
    let p = policy.json();
    let st = Safetensors::open_dir(ckpt)?;
    let cameras = super::cameras::names(ckpt, super::Kind::Act)?;
    let config = read_config(&p, &st, cameras)?;
    config::check(&config, crate::models::act::ARCH)?;
    let mut notes = vec![format!(
        "ResNet blocks {:?}, widths {:?}; cameras, in order: {}",
        config.blocks,
        config.widths,
        config.cameras.join(", ")
    )];
    if p.get("temporal_ensemble_coeff").is_some() {
        notes.push(
            "temporal_ensemble_coeff is the client's: the server returns the whole chunk".into(),
        );
    }
    let stats = read_stats(ckpt, &st, &config, &mut notes)?;
    let tensors = tensor_plan(&config);
    super::check_coverage(&st, &coverage(&tensors), &[], &IGNORED_PREFIXES)?;

    let mut w = GgufWriter::new();
    config.write(&mut w)?;
    let name = ckpt
        .file_name()
        .map_or("act".into(), |n| n.to_string_lossy().into_owned());
    w.add_metadata("general.name", name)?;
    w.add_metadata("general.source", "lerobot act checkpoint (vla-convert)")?;
    // as vla.cpp's converter keeps it (neither reads it)
    w.add_metadata("act.config_json", p.value.to_string())?;
    let shapes: std::collections::BTreeMap<String, Vec<usize>> =
        config.tensor_shapes()?.into_iter().collect();
    let total = tensors.len() + stats.len();
    for (done, (ours, how)) in tensors.iter().enumerate() {
        let vals = how.values(&st)?;
        let shape = &shapes[ours];
        if vals.len() != shape.iter().product::<usize>() {
            return Err(ckpt_err(
                st.path(),
                format!(
                    "{ours}: {} values, the config implies {shape:?}",
                    vals.len()
                ),
            ));
        }
        let ty = match super::takes_float_dtype(ours, shape) && !matches!(how, Source::Row(..)) {
            true => dtype,
            false => GgmlType::F32,
        };
        w.add_f32(ours.clone(), ty, &super::ggml_dims(shape), &vals)?;
        progress(done + 1, total, ours);
    }
    for (k, (name, vals)) in stats.into_iter().enumerate() {
        let shape = &shapes[&name];
        w.add_f32(name.clone(), GgmlType::F32, &super::ggml_dims(shape), &vals)?;
        progress(tensors.len() + k + 1, total, &name);
    }
    Ok(Converted {
        config,
        writer: w,
        notes,
    })
}

/// Checkpoint tensors inference never reads: the VAE encoder (training only), the latent
/// projection's weight (it multiplies the zero latent), older checkpoints' normaliser
/// buffers.
const IGNORED_PREFIXES: [&str; 6] = [
    "model.vae_encoder",
    "model.encoder_latent_input_proj.weight",
    "normalize_inputs.",
    "normalize_targets.",
    "unnormalize_outputs.",
    "model.backbone.fc.",
];

/// Where one of our tensors comes from.
#[derive(Clone, Debug)]
enum Source {
    /// A checkpoint tensor as it is.
    Copy(String),
    /// Rows `[part D, (part + 1) D)` of a fused `in_proj` (`D` rows a part).
    Row(String, usize),
    /// A convolution's kernel (`.0`) or bias (`.1 == true`) with the BatchNorm under the
    /// second name folded in.
    Folded(String, String, bool),
}

impl Source {
    fn values(&self, st: &Safetensors) -> Result<Vec<f32>> {
        match self {
            Source::Copy(n) => st.f32(n),
            Source::Row(n, part) => Ok(super::in_proj_part(&st.f32(n)?, *part)),
            Source::Folded(conv, bn, bias) => fold(st, conv, bn, *bias),
        }
    }

    fn reads(&self) -> Vec<String> {
        match self {
            Source::Copy(n) | Source::Row(n, _) => vec![n.clone()],
            Source::Folded(conv, bn, _) => {
                let mut v = vec![format!("{conv}.weight")];
                v.extend(BN_PARTS.map(|p| format!("{bn}.{p}")));
                v
            }
        }
    }
}

const BN_PARTS: [&str; 4] = ["weight", "bias", "running_mean", "running_var"];

/// The folded kernel or bias of convolution `conv` (`<conv>.weight` `[O, ...]`) and the
/// frozen BatchNorm `bn` after it.
fn fold(st: &Safetensors, conv: &str, bn: &str, bias: bool) -> Result<Vec<f32>> {
    let [g, b, mean, var] = BN_PARTS.map(|p| st.f32(&format!("{bn}.{p}")));
    let (g, b, mean, var) = (g?, b?, mean?, var?);
    let o = g.len();
    if [b.len(), mean.len(), var.len()].iter().any(|&n| n != o) {
        return Err(ckpt_err(
            st.path(),
            format!("{bn}: statistics of unequal lengths"),
        ));
    }
    let scale: Vec<f64> = (0..o)
        .map(|i| f64::from(g[i]) / (f64::from(var[i]) + BN_EPS).sqrt())
        .collect();
    if bias {
        return Ok((0..o)
            .map(|i| (f64::from(b[i]) - f64::from(mean[i]) * scale[i]) as f32)
            .collect());
    }
    let w = st.f32(&format!("{conv}.weight"))?;
    if o == 0 || w.len() % o != 0 {
        return Err(ckpt_err(
            st.path(),
            format!("{conv}.weight: not {o} output channels"),
        ));
    }
    let per = w.len() / o;
    Ok(w.iter()
        .enumerate()
        .map(|(i, &v)| (f64::from(v) * scale[i / per]) as f32)
        .collect())
}

/// Every tensor of the GGUF (statistics apart) and where it comes from.
fn tensor_plan(cfg: &ActConfig) -> Vec<(String, Source)> {
    let copy = |s: String| Source::Copy(format!("{M}{s}"));
    let mut v: Vec<(String, Source)> = Vec::new();
    let mut conv = |ours: String, conv: String, bn: String| {
        let (c, b) = (format!("{M}backbone.{conv}"), format!("{M}backbone.{bn}"));
        v.push((
            format!("{ours}.weight"),
            Source::Folded(c.clone(), b.clone(), false),
        ));
        v.push((format!("{ours}.bias"), Source::Folded(c, b, true)));
    };
    conv("bb.conv1".into(), "conv1".into(), "bn1".into());
    for s in 0..STAGES {
        for b in 0..cfg.blocks[s] {
            let (ours, theirs) = (
                format!("bb.layer{}.{b}", s + 1),
                format!("layer{}.{b}", s + 1),
            );
            for k in [1, 2] {
                conv(
                    format!("{ours}.conv{k}"),
                    format!("{theirs}.conv{k}"),
                    format!("{theirs}.bn{k}"),
                );
            }
            if cfg.has_downsample(s, b) {
                conv(
                    format!("{ours}.down"),
                    format!("{theirs}.downsample.0"),
                    format!("{theirs}.downsample.1"),
                );
            }
        }
    }
    let attn = |v: &mut Vec<(String, Source)>, ours: String, theirs: String| {
        for (k, part) in ["q", "k", "v"].iter().enumerate() {
            for w in ["weight", "bias"] {
                let src = Source::Row(format!("{M}{theirs}.in_proj_{w}"), k);
                v.push((format!("{ours}_{part}.{w}"), src));
            }
        }
        for w in ["weight", "bias"] {
            v.push((
                format!("{ours}_o.{w}"),
                copy(format!("{theirs}.out_proj.{w}")),
            ));
        }
    };
    let pair = |v: &mut Vec<(String, Source)>, ours: String, theirs: String| {
        for w in ["weight", "bias"] {
            v.push((format!("{ours}.{w}"), copy(format!("{theirs}.{w}"))));
        }
    };
    for i in 0..cfg.n_encoder_layers {
        let (o, t) = (format!("enc.blk.{i}"), format!("encoder.layers.{i}"));
        attn(&mut v, format!("{o}.attn"), format!("{t}.self_attn"));
        pair(&mut v, format!("{o}.fc1"), format!("{t}.linear1"));
        pair(&mut v, format!("{o}.fc2"), format!("{t}.linear2"));
        pair(&mut v, format!("{o}.ln1"), format!("{t}.norm1"));
        pair(&mut v, format!("{o}.ln2"), format!("{t}.norm2"));
    }
    if cfg.pre_norm {
        pair(&mut v, "enc.norm".into(), "encoder.norm".into());
    }
    for i in 0..cfg.n_decoder_layers {
        let (o, t) = (format!("dec.blk.{i}"), format!("decoder.layers.{i}"));
        attn(&mut v, format!("{o}.attn"), format!("{t}.self_attn"));
        attn(&mut v, format!("{o}.cross"), format!("{t}.multihead_attn"));
        pair(&mut v, format!("{o}.fc1"), format!("{t}.linear1"));
        pair(&mut v, format!("{o}.fc2"), format!("{t}.linear2"));
        for k in 1..=3 {
            pair(&mut v, format!("{o}.ln{k}"), format!("{t}.norm{k}"));
        }
    }
    pair(&mut v, "dec.norm".into(), "decoder.norm".into());
    v.push((
        "latent_tok".into(),
        copy("encoder_latent_input_proj.bias".into()),
    ));
    if cfg.state_dim > 0 {
        pair(
            &mut v,
            "state_proj".into(),
            "encoder_robot_state_input_proj".into(),
        );
    }
    v.push((
        "pos_1d".into(),
        copy("encoder_1d_feature_pos_embed.weight".into()),
    ));
    // the 1x1 convolution's kernel [D, C, 1, 1] is the matrix [D, C]
    pair(
        &mut v,
        "img_proj".into(),
        "encoder_img_feat_input_proj".into(),
    );
    v.push(("dec.pos".into(), copy("decoder_pos_embed.weight".into())));
    pair(&mut v, "action_head".into(), "action_head".into());
    v
}

/// The checkpoint tensors the plan reads, as [`super::check_coverage`] takes them.
fn coverage(plan: &[(String, Source)]) -> Vec<(String, String)> {
    plan.iter()
        .flat_map(|(ours, s)| s.reads().into_iter().map(move |t| (ours.clone(), t)))
        .collect()
}

/// The config from `config.json` and the weights' shapes; what vla-rs (and the reference
/// at inference) cannot take is refused by name.
fn read_config(p: &Json, st: &Safetensors, cameras: Vec<String>) -> Result<ActConfig> {
    let refuse = |why: String| Err(ckpt_err(p.path, why));
    let inputs = p.obj("input_features")?;
    if inputs.get("observation.environment_state").is_some() {
        return refuse("observation.environment_state inputs are not supported".into());
    }
    if cameras.is_empty() {
        return refuse("no camera (VISUAL) input: ACT without images is not supported".into());
    }
    let backbone = p.str("vision_backbone")?;
    if !backbone.starts_with("resnet") {
        return refuse(format!("vision_backbone {backbone:?}: expected a ResNet"));
    }
    if p.get("replace_final_stride_with_dilation")
        .and_then(|v| v.as_bool())
        == Some(true)
    {
        return refuse("replace_final_stride_with_dilation is not supported".into());
    }
    if let Some(n) = p
        .get("n_obs_steps")
        .and_then(|v| v.as_u64())
        .filter(|&n| n != 1)
    {
        return refuse(format!("n_obs_steps {n}: the reference takes 1"));
    }
    let modes = p.obj("normalization_mapping")?;
    for kind in ["VISUAL", "STATE", "ACTION"] {
        match modes.get(kind).and_then(|m| m.as_str()) {
            Some("MEAN_STD") | None => {}
            Some(m) => return refuse(format!("{kind} normalisation {m}: expected MEAN_STD")),
        }
    }
    let gelu = match p.str("feedforward_activation")? {
        "relu" => false,
        "gelu" => true,
        a => {
            return refuse(format!(
                "feedforward_activation {a:?}: expected relu or gelu"
            ))
        }
    };
    // the blocks per stage and the widths, from the weights
    let bb = format!("{M}backbone.");
    let mut blocks = [0; STAGES];
    let mut widths = [0; STAGES + 1];
    widths[0] = st.config_shape(&format!("{bb}conv1.weight"), 4)?[0];
    for s in 0..STAGES {
        let layer = format!("{bb}layer{}.", s + 1);
        blocks[s] = count_layers(st, &layer, ".conv1.weight");
        widths[s + 1] = st.config_shape(&format!("{layer}0.conv1.weight"), 4)?[0];
    }
    let image = |axis: usize| -> Result<usize> {
        let shape = inputs
            .obj(&cameras[0])?
            .get("shape")
            .and_then(|s| s.get(axis))
            .and_then(|v| v.as_u64());
        shape
            .map(|v| v as usize)
            .ok_or_else(|| ckpt_err(p.path, format!("{} has no [C, H, W] shape", cameras[0])))
    };
    let state_dim = match inputs.get("observation.state") {
        Some(_) => feature_dim(&inputs, "observation.state")?,
        None => 0,
    };
    let chunk_size = p.usize("chunk_size")?;
    Ok(ActConfig {
        dim_model: p.usize("dim_model")?,
        n_heads: p.usize("n_heads")?,
        dim_feedforward: p.usize("dim_feedforward")?,
        n_encoder_layers: p.usize("n_encoder_layers")?,
        n_decoder_layers: p.usize("n_decoder_layers")?,
        pre_norm: p.bool_or("pre_norm", false),
        gelu,
        chunk_size,
        n_action_steps: p
            .get("n_action_steps")
            .and_then(|v| v.as_u64())
            .map_or(chunk_size, |v| v as usize),
        state_dim,
        action_dim: feature_dim(&p.obj("output_features")?, "action")?,
        num_views: cameras.len(),
        image_height: image(1)?,
        image_width: image(2)?,
        blocks,
        widths,
        cameras,
    })
}

/// The statistics as vla.cpp names them: per camera its channels' mean and std (`[views,
/// 3]`), the state's and the action's.
fn read_stats(
    ckpt: &Path,
    st: &Safetensors,
    cfg: &ActConfig,
    notes: &mut Vec<String>,
) -> Result<Vec<(String, Vec<f32>)>> {
    let mut image = [Vec::new(), Vec::new()];
    for cam in &cfg.cameras {
        let pair = super::find_stats(ckpt, Some(st), cam, ["mean", "std"], notes)?;
        for (all, v) in image.iter_mut().zip(pair) {
            if v.len() != 3 {
                return Err(ckpt_err(
                    ckpt,
                    format!(
                        "{cam} statistics: {} values, expected 3 (per channel)",
                        v.len()
                    ),
                ));
            }
            all.extend(v);
        }
    }
    let [im, is] = image;
    let mut out = vec![("image_mean".to_owned(), im), ("image_std".to_owned(), is)];
    for (what, feature, dim) in [
        ("state", "observation.state", cfg.state_dim),
        ("action", "action", cfg.action_dim),
    ] {
        if dim == 0 {
            continue;
        }
        let [mean, std] = super::find_stats(ckpt, Some(st), feature, ["mean", "std"], notes)?;
        if mean.len() != dim || std.len() != dim {
            return Err(ckpt_err(
                ckpt,
                format!("{feature} statistics: expected {dim} values"),
            ));
        }
        out.push((format!("{what}_mean"), mean));
        out.push((format!("{what}_std"), std));
    }
    Ok(out)
}
