//! Octo's `config.json` (its `ModuleSpec`s) and parameter shapes to an [`OctoConfig`].

use super::tensors::{stem_prefix, Params};
use crate::convert::{ckpt_err, Json, JsonFile};
use crate::models::octo::config::{Stem, CAMERAS, STEM_STAGES};
use crate::models::octo::{Head, OctoConfig};
use crate::{Error, Result};
use std::path::Path;

/// A `ModuleSpec` (`{"module", "name", "args", "kwargs"}`): its class name and kwargs.
fn spec<'a>(v: &'a serde_json::Value, what: &str, path: &'a Path) -> Result<(&'a str, Json<'a>)> {
    let name = v["name"]
        .as_str()
        .ok_or_else(|| ckpt_err(path, format!("{what}: not a ModuleSpec")))?;
    let kwargs = Json {
        value: &v["kwargs"],
        path,
    };
    Ok((name, kwargs))
}

/// What the converter needs beyond the config: the camera tokenizers present, the proprio
/// tokenizer's bins.
#[derive(Default)]
pub(super) struct Extra {
    pub bin_type: Option<String>,
    pub bins: Vec<f32>,
}

fn unsupported(path: &Path, what: String) -> Error {
    ckpt_err(path, format!("{what}: not served by vla-rs's octo"))
}

pub(super) fn read_config(
    file: &JsonFile,
    p: &Params,
    notes: &mut Vec<String>,
) -> Result<(OctoConfig, Extra)> {
    let path = file.path.as_path();
    let top = file.json();
    let model = top.obj("model")?;
    let tk = model.obj("transformer_kwargs")?;
    let mut cfg = OctoConfig {
        d: model.usize("token_embedding_size")?,
        layers: tk.usize("num_layers")?,
        heads: tk.usize("num_attention_heads")?,
        ffn: tk.usize("mlp_dim")?,
        max_horizon: model.usize("max_horizon")?,
        window: top.usize("window_size").unwrap_or(1),
        repeat_task_tokens: model.bool_or("repeat_task_tokens", false),
        correct_attention: model.bool_or("use_correct_attention", false),
        ..OctoConfig::empty()
    };
    let readouts = model.obj("readouts")?;
    if readouts.value.as_object().map(|o| o.len()) != Some(1) {
        return Err(unsupported(
            path,
            "readouts other than one \"action\" readout".into(),
        ));
    }
    cfg.readouts = readouts.usize("action")?;
    let mut extra = Extra::default();
    let obs = model.obj("observation_tokenizers")?;
    for (name, v) in obs.value.as_object().into_iter().flatten() {
        let (class, kw) = spec(v, &format!("observation_tokenizers.{name}"), path)?;
        match (class, name.as_str()) {
            ("ImageTokenizer", cam) if CAMERAS.contains(&cam) => {
                if kw.bool_or("use_token_learner", false) {
                    return Err(unsupported(path, format!("{name}: use_token_learner")));
                }
                let c = CAMERAS.iter().position(|c| *c == cam).expect("a camera");
                cfg.stems[c] = Some(stem(p, cam, &top)?);
            }
            ("LowdimObsTokenizer", "proprio") => {
                if !kw.bool_or("discretize", false) {
                    return Err(unsupported(path, "proprio without discretize".into()));
                }
                let n = kw.get("n_bins").and_then(|v| v.as_u64()).unwrap_or(256) as usize;
                let ty = kw
                    .get("bin_type")
                    .and_then(|v| v.as_str())
                    .unwrap_or("uniform");
                let low = kw.get("low").and_then(|v| v.as_f64()).unwrap_or(0.0);
                let high = kw.get("high").and_then(|v| v.as_f64()).unwrap_or(1.0);
                extra.bins = thresholds(ty, n, low, high)
                    .ok_or_else(|| unsupported(path, format!("proprio bin_type {ty:?}")))?;
                extra.bin_type = Some(ty.to_owned());
                cfg.proprio_bins = n;
                let pos = p.get("octo_transformer/obs_proprio_pos_embedding")?;
                cfg.proprio_dim = pos.shape.get(2).copied().unwrap_or(0);
            }
            (class, _) => {
                return Err(unsupported(
                    path,
                    format!("observation tokenizer {name:?} ({class})"),
                ))
            }
        }
    }
    let tasks = model.obj("task_tokenizers")?;
    let names: Vec<&String> = tasks
        .value
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
        .collect();
    if names != ["language"] {
        return Err(unsupported(
            path,
            format!("task tokenizers {names:?} (one \"language\" is)"),
        ));
    }
    let lang = p.get("octo_transformer/task_language_pos_embedding")?;
    cfg.lang_tokens = lang.shape.get(1).copied().unwrap_or(0);
    read_t5(&mut cfg, p)?;
    let heads = model.obj("heads")?;
    let (class, kw) = spec(heads.obj("action")?.value, "heads.action", path)?;
    cfg.head = match class {
        "DiffusionActionHead" => Head::Diffusion,
        "L1ActionHead" | "MSEActionHead" => Head::L1,
        other => return Err(unsupported(path, format!("action head {other}"))),
    };
    let num = |k: &str, d: f64| kw.get(k).and_then(|v| v.as_f64()).unwrap_or(d);
    cfg.horizon = num("action_horizon", 1.0) as usize;
    cfg.action_dim = num("action_dim", 7.0) as usize;
    cfg.max_action = num("max_action", 5.0) as f32;
    cfg.use_map = kw.bool_or("use_map", false);
    if cfg.head == Head::Diffusion {
        if cfg.use_map {
            return Err(unsupported(path, "a diffusion head with use_map".into()));
        }
        cfg.time_dim = num("time_dim", 32.0) as usize;
        cfg.blocks = num("num_blocks", 3.0) as usize;
        cfg.hidden = num("hidden_dim", 256.0) as usize;
        cfg.steps = num("diffusion_steps", 20.0) as usize;
        cfg.head_ln = kw.bool_or("use_layer_norm", true);
    }
    notes.push(format!(
        "{}-wide transformer, {} blocks; window {}; cameras {}; {} head, horizon {} x {}; \
         attention rule: {}",
        cfg.d,
        cfg.layers,
        cfg.window,
        cfg.cameras()
            .map(|(c, s)| format!("{c} {0}x{0}", s.side))
            .collect::<Vec<_>>()
            .join(", "),
        cfg.head.name(),
        cfg.horizon,
        cfg.action_dim,
        if cfg.correct_attention {
            "use_correct_attention"
        } else {
            "the December 2023 models'"
        }
    ));
    Ok((cfg, extra))
}

/// A camera's SmallStem from its kernels' shapes; the frame side from the data config's
/// `resize_size`, else from the token count (each stage halves it; the patch divides it).
fn stem(p: &Params, cam: &str, top: &Json) -> Result<Stem> {
    let base = stem_prefix(p, cam)?;
    let mut widths = [0; STEM_STAGES];
    let mut in_channels = 0;
    for (i, w) in widths.iter_mut().enumerate() {
        let k = &p.get(&format!("{base}/StdConv_{i}/kernel"))?.shape;
        *w = k.get(3).copied().unwrap_or(0);
        if i == 0 {
            in_channels = k.get(2).copied().unwrap_or(0);
        }
    }
    let patch = &p.get(&format!("{base}/embedding/kernel"))?.shape;
    let (k, features) = (patch[0], patch.get(3).copied().unwrap_or(0));
    let tokens = p
        .get(&format!("octo_transformer/obs_{cam}_pos_embedding"))?
        .shape[2];
    let grid = (tokens as f64).sqrt().round() as usize;
    let side = top
        .value
        .pointer(&format!(
            "/dataset_kwargs/frame_transform_kwargs/resize_size/{cam}/0"
        ))
        .and_then(|v| v.as_u64())
        .map_or(grid * k * (1 << STEM_STAGES), |s| s as usize);
    Ok(Stem {
        side,
        in_channels,
        widths,
        patch: k,
        features,
    })
}

/// The T5 encoder's sizes from its parameters.
fn read_t5(cfg: &mut OctoConfig, p: &Params) -> Result<()> {
    let t5 = "octo_transformer/task_tokenizers_language/hf_model";
    let emb = &p.get(&format!("{t5}/shared/embedding"))?.shape;
    (cfg.t5_vocab, cfg.t5_d) = (emb[0], emb[1]);
    let blk = |i: usize| format!("{t5}/encoder/block/{i}/layer");
    cfg.t5_layers = (0..)
        .take_while(|&i| p.has(&format!("{}/0/SelfAttention/q/kernel", blk(i))))
        .count();
    let rel = &p
        .get(&format!(
            "{}/0/SelfAttention/relative_attention_bias/embedding",
            blk(0)
        ))?
        .shape;
    (cfg.t5_buckets, cfg.t5_heads) = (rel[0], rel[1]);
    let q = &p
        .get(&format!("{}/0/SelfAttention/q/kernel", blk(0)))?
        .shape;
    cfg.t5_kv = q[1] / cfg.t5_heads.max(1);
    cfg.t5_gated = p.has(&format!("{}/1/DenseReluDense/wi_0/kernel", blk(0)));
    let wi = if cfg.t5_gated { "wi_0" } else { "wi" };
    cfg.t5_ffn = p
        .get(&format!("{}/1/DenseReluDense/{wi}/kernel", blk(0)))?
        .shape[1];
    Ok(())
}

/// `BinTokenizer`'s edges for uniform bins, `linspace(low, high, n + 1)` rounded to f32
/// as the reference holds them. (Normal bins, standard normal quantiles, are refused: their
/// f32 edges would need JAX's own `ndtri`.)
fn thresholds(ty: &str, n: usize, low: f64, high: f64) -> Option<Vec<f32>> {
    (ty == "uniform").then(|| {
        (0..=n)
            .map(|i| (low + (high - low) * i as f64 / n as f64) as f32)
            .collect()
    })
}
