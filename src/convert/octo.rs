//! Octo checkpoint (as `OctoModel.save_pretrained` writes it) -> `octo` GGUF (schema:
//! docs/GGUF.md).
//!
//! Reads `config.json` (the model's `ModuleSpec`s: tokenizers, heads, readouts, transformer
//! sizes, `window_size`, the text processor), `dataset_statistics.json` (kept whole as
//! JSON: every dataset, `--embodiment` picks at load), the parameters from the latest (or
//! `--step`) `<step>/default/checkpoint` (orbax's aggregate msgpack, [`super::msgpack`]) and
//! the T5 tokenizer. The layout is vla.cpp's (its `convert_octo_to_gguf.py` by way of
//! octo-pytorch), so either runtime serves the file: Flax's `[in, out]` kernels stored `[out,
//! in]`, convolution kernels `[KH, KW, C, O]` as `[O, C, KH, KW]` as trained (SmallStem's
//! weight standardisation is the runtime's, at load), the attention's q, k and v fused (rows
//! q, then k, then v, heads outermost), position tables with all `max_horizon` rows.

use super::msgpack::{self, Array, Leaves};
use super::{ckpt_err, Json, JsonFile};
use crate::config;
use crate::gguf::{GgmlType, GgufWriter, Value, ValueType};
use crate::models::octo::config::{Stem, CAMERAS, STEM_STAGES};
use crate::models::octo::{Head, OctoConfig, ARCH};
use crate::{Error, Result};
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Type of the transformer's and T5's matrices; the rest stays f32.
    pub dtype: Option<GgmlType>,
    /// The T5 tokenizer (a `tokenizer.json` or its folder) where the checkpoint names a hub
    /// repository.
    pub tokenizer: Option<PathBuf>,
    pub no_tokenizer: bool,
    /// The checkpoint step (default: the latest).
    pub step: Option<u64>,
}

pub struct Converted {
    pub config: OctoConfig,
    pub writer: GgufWriter<'static>,
    pub notes: Vec<String>,
}

/// The latest step folder holding `default/checkpoint`, or `step`'s.
fn checkpoint_file(ckpt: &Path, step: Option<u64>) -> Result<PathBuf> {
    let mut steps: Vec<u64> = std::fs::read_dir(ckpt)
        .map_err(|e| ckpt_err(ckpt, format!("cannot list: {e}")))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|s: &u64| {
            ckpt.join(s.to_string())
                .join("default/checkpoint")
                .is_file()
        })
        .collect();
    steps.sort_unstable();
    let chosen = match step {
        Some(s) if steps.contains(&s) => s,
        Some(s) => {
            return Err(ckpt_err(
                ckpt,
                format!("no step {s} (steps with parameters: {steps:?})"),
            ))
        }
        None => *steps.last().ok_or_else(|| {
            ckpt_err(
                ckpt,
                "no <step>/default/checkpoint: not an Octo checkpoint as save_pretrained writes it \
                 (parameters saved by orbax per tensor, not aggregated, are not read)",
            )
        })?,
    };
    Ok(ckpt.join(chosen.to_string()).join("default/checkpoint"))
}

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

/// The parameters, with the path of every one read checked off.
struct Params {
    leaves: Leaves,
    path: PathBuf,
}

impl Params {
    fn get(&self, p: &str) -> Result<&Array> {
        self.leaves
            .get(p)
            .ok_or_else(|| ckpt_err(&self.path, format!("no parameter {p}")))
    }

    fn has(&self, p: &str) -> bool {
        self.leaves.contains_key(p)
    }

    /// A Dense kernel `[in, out]` as `[out, in]`; attention kernels `[D, H, hd]` (q, k, v)
    /// read as `[D, H * hd]` and `[H, hd, D]` (out) as `[H * hd, D]` first.
    fn dense(&self, p: &str) -> Result<(Vec<usize>, Vec<f32>)> {
        let a = self.get(&format!("{p}/kernel"))?;
        let (rows, cols) = match a.shape.as_slice() {
            [i, o] => (*i, *o),
            [d, h, hd] if p.ends_with("/out") => (d * h, *hd),
            [d, h, hd] => (*d, h * hd),
            s => return Err(ckpt_err(&self.path, format!("{p}/kernel: shape {s:?}"))),
        };
        Ok((vec![cols, rows], transpose(&a.values, rows, cols)))
    }

    fn flat(&self, p: &str) -> Result<Vec<f32>> {
        Ok(self.get(p)?.values.clone())
    }
}

fn transpose(v: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0.0; v.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = v[r * cols + c];
        }
    }
    t
}

/// A Flax convolution kernel `[KH, KW, C, O]` as `[O, C, KH, KW]`.
fn conv(a: &Array) -> Result<(Vec<usize>, Vec<f32>)> {
    let [kh, kw, c, o] = a.shape[..] else {
        return Err(Error::InvalidArgument(format!("conv kernel {:?}", a.shape)));
    };
    let per = kh * kw * c;
    let mut out = vec![0.0; a.values.len()];
    // source index ((y * kw + x) * c + ci) * o + oc; ours oc * per + (ci * kh + y) * kw + x
    for (i, &v) in a.values.iter().enumerate() {
        let (rest, oc) = (i / o, i % o);
        let (yx, ci) = (rest / c, rest % c);
        let (y, x) = (yx / kw, yx % kw);
        out[oc * per + (ci * kh + y) * kw + x] = v;
    }
    Ok((vec![o, c, kh, kw], out))
}

/// Where SmallStem's parameters are under camera `cam`'s tokenizer (`<tokenizer>/<encoder
/// class>_0`).
fn stem_prefix(p: &Params, cam: &str) -> Result<String> {
    let base = format!("octo_transformer/observation_tokenizers_{cam}/");
    p.leaves
        .keys()
        .find_map(|k| {
            let rest = k.strip_prefix(&base)?;
            let (enc, tail) = rest.split_once('/')?;
            (tail == "StdConv_0/kernel").then(|| format!("{base}{enc}"))
        })
        .ok_or_else(|| ckpt_err(&p.path, format!("no SmallStem under {base}")))
}

/// One tensor to write: our name, its shape and values, and whether it is a matrix the
/// `--dtype` applies to.
struct Out {
    name: String,
    shape: Vec<usize>,
    values: Vec<f32>,
    matrix: bool,
}

struct Plan<'p> {
    p: &'p Params,
    out: Vec<Out>,
}

impl Plan<'_> {
    fn put(&mut self, name: impl Into<String>, shape: Vec<usize>, values: Vec<f32>, matrix: bool) {
        self.out.push(Out {
            name: name.into(),
            shape,
            values,
            matrix,
        });
    }

    /// A Dense layer `src` as `<ours>.weight` / `.bias`.
    fn dense(&mut self, ours: &str, src: &str, bias: bool, matrix: bool) -> Result<()> {
        let (shape, w) = self.p.dense(src)?;
        self.put(format!("{ours}.weight"), shape, w, matrix);
        if bias {
            let b = self.p.flat(&format!("{src}/bias"))?;
            self.put(format!("{ours}.bias"), vec![b.len()], b, false);
        }
        Ok(())
    }

    /// A LayerNorm / GroupNorm (`scale`, `bias`) as `<ours>.weight` / `.bias`.
    fn norm(&mut self, ours: &str, src: &str) -> Result<()> {
        for (a, b) in [("weight", "scale"), ("bias", "bias")] {
            let v = self.p.flat(&format!("{src}/{b}"))?;
            self.put(format!("{ours}.{a}"), vec![v.len()], v, false);
        }
        Ok(())
    }

    /// A position table `[1, ..]` without its batch dimension.
    fn table(&mut self, ours: &str, src: &str) -> Result<Vec<usize>> {
        let a = self.p.get(src)?;
        let shape = a.shape.get(1..).unwrap_or(&[]).to_vec();
        self.put(ours, shape.clone(), a.values.clone(), false);
        Ok(shape)
    }

    /// Flax attention `src` (`query`, `key`, `value`, `out`) as `<ours>.attn_qkv` (fused)
    /// and `<ours>.attn_o`.
    fn attention(&mut self, ours: &str, src: &str, matrix: bool) -> Result<()> {
        let (mut w, mut b, mut rows, mut cols) = (vec![], vec![], 0, 0);
        for part in ["query", "key", "value"] {
            let (shape, v) = self.p.dense(&format!("{src}/{part}"))?;
            (rows, cols) = (rows + shape[0], shape[1]);
            w.extend(v);
            b.extend(self.p.flat(&format!("{src}/{part}/bias"))?);
        }
        self.put(
            format!("{ours}.attn_qkv.weight"),
            vec![rows, cols],
            w,
            matrix,
        );
        self.put(format!("{ours}.attn_qkv.bias"), vec![rows], b, false);
        self.dense(
            &format!("{ours}.attn_o"),
            &format!("{src}/out"),
            true,
            matrix,
        )
    }
}

/// Converts the Octo checkpoint folder `ckpt`.
pub fn convert(
    ckpt: &Path,
    opts: &Options,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Converted> {
    super::detect::expect(ckpt, super::Kind::Octo)?;
    let dtype = super::float_dtype(opts.dtype)?;
    let file = JsonFile::read(ckpt.join("config.json"))?;
    let stats_path = ckpt.join("dataset_statistics.json");
    let stats_text = std::fs::read_to_string(&stats_path)
        .map_err(|e| ckpt_err(&stats_path, format!("cannot read: {e}")))?;
    // checked as the runtime reads it
    let datasets = crate::models::octo::DatasetStats::parse(&stats_text)
        .map_err(|e| ckpt_err(&stats_path, e.to_string()))?;
    let source = checkpoint_file(ckpt, opts.step)?;
    let params = Params {
        leaves: msgpack::read(&source)?,
        path: source.clone(),
    };
    let mut notes = vec![format!("parameters: {}", source.display())];
    let (cfg, extra) = read_config(&file, &params, &mut notes)?;
    config::check(&cfg, ARCH)?;
    let mut plan = Plan {
        p: &params,
        out: vec![],
    };
    tensors(&mut plan, &cfg, &extra)?;

    let mut w = GgufWriter::new();
    cfg.write(&mut w)?;
    let name = ckpt
        .file_name()
        .map_or("octo".into(), |n| n.to_string_lossy().into_owned());
    w.add_metadata("general.name", name)?;
    w.add_metadata("general.source", "Octo checkpoint (vla-convert)")?;
    w.add_metadata(crate::models::octo::stats::KEY, stats_text.clone())?;
    if let Some(t) = &extra.bin_type {
        w.add_metadata(format!("{ARCH}.proprio.bin_type"), t.as_str())?;
    }
    notes.push(format!(
        "datasets with statistics: {}",
        datasets
            .0
            .iter()
            .map(|(n, s)| format!(
                "{} ({} action dims)",
                if n.is_empty() { "-" } else { n },
                s.action.mean.len()
            ))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    tokenizer(ckpt, opts, &file, &cfg, &mut w, &mut notes)?;
    let total = plan.out.len();
    for (done, t) in plan.out.into_iter().enumerate() {
        progress(done, total, &t.name);
        let ty = match t.matrix && t.shape.len() == 2 {
            true => dtype,
            false => GgmlType::F32,
        };
        let dims = super::ggml_dims(&t.shape);
        w.add_f32(&t.name, ty, &dims, &t.values)?;
    }
    progress(total, total, "");
    Ok(Converted {
        config: cfg,
        writer: w,
        notes,
    })
}

/// What the converter needs beyond the config: the camera tokenizers present, the proprio
/// tokenizer's bins.
#[derive(Default)]
struct Extra {
    bin_type: Option<String>,
    bins: Vec<f32>,
}

fn unsupported(path: &Path, what: String) -> Error {
    ckpt_err(path, format!("{what}: not served by vla-rs's octo"))
}

fn read_config(
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

/// Every tensor, in our names.
fn tensors(plan: &mut Plan, cfg: &OctoConfig, extra: &Extra) -> Result<()> {
    let ot = "octo_transformer";
    for (cam, s) in cfg.cameras() {
        let base = stem_prefix(plan.p, cam)?;
        let ours = format!("{ARCH}.obs.{cam}");
        for i in 0..STEM_STAGES {
            let (shape, w) = conv(plan.p.get(&format!("{base}/StdConv_{i}/kernel"))?)?;
            plan.put(format!("{ours}.stem.{i}.conv.weight"), shape, w, false);
            let b = plan.p.flat(&format!("{base}/StdConv_{i}/bias"))?;
            plan.put(
                format!("{ours}.stem.{i}.conv.bias"),
                vec![b.len()],
                b,
                false,
            );
            plan.norm(
                &format!("{ours}.stem.{i}.gn"),
                &format!("{base}/GroupNorm_{i}"),
            )?;
        }
        let (shape, w) = conv(plan.p.get(&format!("{base}/embedding/kernel"))?)?;
        plan.put(format!("{ours}.patch_embd.weight"), shape, w, false);
        let b = plan.p.flat(&format!("{base}/embedding/bias"))?;
        plan.put(format!("{ours}.patch_embd.bias"), vec![b.len()], b, false);
        plan.dense(
            &format!("{ours}.proj"),
            &format!("{ot}/obs_{cam}_projection"),
            true,
            false,
        )?;
        let pos = plan.table(
            &format!("{ours}.pos_embd"),
            &format!("{ot}/obs_{cam}_pos_embedding"),
        )?;
        let g = s.grid();
        if pos.get(1) != Some(&(g * g)) {
            return Err(ckpt_err(
                &plan.p.path,
                format!(
                    "obs_{cam}_pos_embedding {pos:?}: {} tokens expected from a {}x{} frame",
                    g * g,
                    s.side,
                    s.side
                ),
            ));
        }
    }
    if cfg.proprio_dim > 0 {
        plan.dense(
            &format!("{ARCH}.obs.proprio.proj"),
            &format!("{ot}/obs_proprio_projection"),
            true,
            false,
        )?;
        plan.table(
            &format!("{ARCH}.obs.proprio.pos_embd"),
            &format!("{ot}/obs_proprio_pos_embedding"),
        )?;
        let n = extra.bins.len();
        plan.put(
            format!("{ARCH}.obs.proprio.bin_thresholds"),
            vec![n],
            extra.bins.clone(),
            false,
        );
    }
    plan.dense(
        &format!("{ARCH}.task.language.proj"),
        &format!("{ot}/task_language_projection"),
        true,
        false,
    )?;
    plan.table(
        &format!("{ARCH}.task.language.pos_embd"),
        &format!("{ot}/task_language_pos_embedding"),
    )?;
    plan.table(
        &format!("{ARCH}.readout.action.pos_embd"),
        &format!("{ot}/readout_action_pos_embedding"),
    )?;
    t5_tensors(plan, cfg)?;
    let tr = format!("{ot}/BlockTransformer_0/Transformer_0");
    for i in 0..cfg.layers {
        let (ours, src) = (format!("{ARCH}.blk.{i}"), format!("{tr}/encoderblock_{i}"));
        plan.norm(&format!("{ours}.attn_norm"), &format!("{src}/LayerNorm_0"))?;
        plan.attention(
            &ours,
            &format!("{src}/MultiHeadDotProductAttention_0"),
            true,
        )?;
        plan.norm(&format!("{ours}.ffn_norm"), &format!("{src}/LayerNorm_1"))?;
        plan.dense(
            &format!("{ours}.ffn_up"),
            &format!("{src}/MlpBlock_0/Dense_0"),
            true,
            true,
        )?;
        plan.dense(
            &format!("{ours}.ffn_down"),
            &format!("{src}/MlpBlock_0/Dense_1"),
            true,
            true,
        )?;
    }
    plan.norm(
        &format!("{ARCH}.output_norm"),
        &format!("{tr}/encoder_norm"),
    )?;
    match cfg.head {
        Head::Diffusion => {
            let (ours, src) = (
                format!("{ARCH}.head.diffusion"),
                "heads_action/diffusion_model",
            );
            let a = plan
                .p
                .get(&format!("{src}/time_preprocess/kernel"))?
                .clone();
            plan.put(
                format!("{ours}.time_fourier.weight"),
                a.shape,
                a.values,
                false,
            );
            for k in 0..2 {
                plan.dense(
                    &format!("{ours}.cond.{k}"),
                    &format!("{src}/cond_encoder/Dense_{k}"),
                    true,
                    false,
                )?;
            }
            let rn = format!("{src}/reverse_network");
            plan.dense(
                &format!("{ours}.reverse.in"),
                &format!("{rn}/Dense_0"),
                true,
                false,
            )?;
            for b in 0..cfg.blocks {
                let (o, s) = (
                    format!("{ours}.reverse.blk.{b}"),
                    format!("{rn}/MLPResNetBlock_{b}"),
                );
                if cfg.head_ln {
                    plan.norm(&format!("{o}.ln"), &format!("{s}/LayerNorm_0"))?;
                }
                plan.dense(&format!("{o}.fc1"), &format!("{s}/Dense_0"), true, false)?;
                plan.dense(&format!("{o}.fc2"), &format!("{s}/Dense_1"), true, false)?;
            }
            plan.dense(
                &format!("{ours}.reverse.out"),
                &format!("{rn}/Dense_1"),
                true,
                false,
            )?;
        }
        Head::L1 => {
            let ours = format!("{ARCH}.head.l1");
            if cfg.use_map {
                let m = "heads_action/map_head";
                let probe = plan.p.get(&format!("{m}/probe"))?.clone();
                plan.put(
                    format!("{ours}.map.probe"),
                    vec![1, 1, cfg.d],
                    probe.values,
                    false,
                );
                plan.attention(
                    &format!("{ours}.map"),
                    &format!("{m}/MultiHeadDotProductAttention_0"),
                    false,
                )?;
                plan.norm(&format!("{ours}.map.norm"), &format!("{m}/LayerNorm_0"))?;
                plan.dense(
                    &format!("{ours}.map.ffn_up"),
                    &format!("{m}/MlpBlock_0/Dense_0"),
                    true,
                    false,
                )?;
                plan.dense(
                    &format!("{ours}.map.ffn_down"),
                    &format!("{m}/MlpBlock_0/Dense_1"),
                    true,
                    false,
                )?;
            }
            plan.dense(
                &format!("{ours}.mean_proj"),
                "heads_action/mean_proj",
                true,
                false,
            )?;
        }
    }
    Ok(())
}

/// T5's encoder, in llama.cpp's T5 names under `octo.t5`.
fn t5_tensors(plan: &mut Plan, cfg: &OctoConfig) -> Result<()> {
    let src = "octo_transformer/task_tokenizers_language/hf_model";
    let ours = format!("{ARCH}.t5");
    let emb = plan.p.get(&format!("{src}/shared/embedding"))?.clone();
    plan.put(
        format!("{ours}.tok_embd.weight"),
        emb.shape,
        emb.values,
        false,
    );
    for i in 0..cfg.t5_layers {
        let (o, l) = (
            format!("{ours}.blk.{i}"),
            format!("{src}/encoder/block/{i}/layer"),
        );
        let w = |plan: &mut Plan, name: &str, from: &str| -> Result<()> {
            plan.dense(&format!("{o}.{name}"), &format!("{l}/{from}"), false, true)
        };
        let v = plan.p.flat(&format!("{l}/0/layer_norm/weight"))?;
        plan.put(format!("{o}.attn_norm.weight"), vec![v.len()], v, false);
        for (name, from) in [
            ("attn_q", "q"),
            ("attn_k", "k"),
            ("attn_v", "v"),
            ("attn_o", "o"),
        ] {
            w(plan, name, &format!("0/SelfAttention/{from}"))?;
        }
        if i == 0 {
            let rel = plan
                .p
                .get(&format!(
                    "{l}/0/SelfAttention/relative_attention_bias/embedding"
                ))?
                .clone();
            plan.put(
                format!("{o}.attn_rel_b.weight"),
                rel.shape,
                rel.values,
                false,
            );
        }
        let v = plan.p.flat(&format!("{l}/1/layer_norm/weight"))?;
        plan.put(format!("{o}.ffn_norm.weight"), vec![v.len()], v, false);
        match cfg.t5_gated {
            true => {
                w(plan, "ffn_gate", "1/DenseReluDense/wi_0")?;
                w(plan, "ffn_up", "1/DenseReluDense/wi_1")?;
            }
            false => w(plan, "ffn_up", "1/DenseReluDense/wi")?,
        }
        w(plan, "ffn_down", "1/DenseReluDense/wo")?;
    }
    let v = plan
        .p
        .flat(&format!("{src}/encoder/final_layer_norm/weight"))?;
    plan.put(
        format!("{ours}.output_norm.weight"),
        vec![v.len()],
        v,
        false,
    );
    Ok(())
}

/// The T5 tokenizer: `--tokenizer`, else the text processor's `tokenizer_name` where it is
/// a folder (relative names from the checkpoint), else a `t5*` folder beside the config.
fn tokenizer(
    ckpt: &Path,
    opts: &Options,
    file: &JsonFile,
    cfg: &OctoConfig,
    w: &mut GgufWriter,
    notes: &mut Vec<String>,
) -> Result<()> {
    use crate::tokenizer::{hf_tokenizer_in, Tokenizer};
    if opts.no_tokenizer {
        notes.push("no tokenizer (--no-tokenizer): the GGUF takes token ids only, not text".into());
        return Ok(());
    }
    let named = file
        .value
        .pointer("/text_processor/kwargs/tokenizer_name")
        .and_then(|v| v.as_str());
    let found = opts.tokenizer.clone().or_else(|| {
        let by_name = named.map(|n| ckpt.join(n)).filter(|d| hf_tokenizer_in(d));
        by_name.or_else(|| {
            let dirs = std::fs::read_dir(ckpt).ok()?;
            dirs.filter_map(|e| Some(e.ok()?.path()))
                .filter(|d| {
                    d.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("t5"))
                })
                .find(|d| hf_tokenizer_in(d))
        })
    });
    let Some(dir) = found else {
        return Err(ckpt_err(
            ckpt,
            format!(
                "no T5 tokenizer: the checkpoint's text processor loads {:?}; pass --tokenizer \
                 DIR (a folder with its tokenizer.json, e.g. `huggingface-cli download t5-base \
                 tokenizer.json`) or --no-tokenizer",
                named.unwrap_or("?")
            ),
        ));
    };
    let tok = Tokenizer::from_hf_path(&dir)?;
    super::ship_tokenizer(w, &tok, &dir, cfg.t5_vocab, notes)?;
    // vla.cpp's runtime reads SentencePiece's own model and the ids it appends and pads with
    let folder = if dir.is_dir() {
        dir.clone()
    } else {
        dir.parent().unwrap_or(ckpt).to_owned()
    };
    let spm = folder.join("spiece.model");
    if let Ok(bytes) = std::fs::read(&spm) {
        let values = bytes.into_iter().map(Value::U8).collect();
        w.add_metadata(
            format!("{ARCH}.tokenizer.spm_model"),
            Value::Array(ValueType::U8, values),
        )?;
        notes.push(format!("{} shipped too (vla.cpp reads it)", spm.display()));
    }
    let special = tok.special();
    for (key, id) in [("eos_id", special.eos), ("pad_id", special.pad)] {
        if let Some(id) = id {
            w.add_metadata(format!("{ARCH}.tokenizer.{key}"), id)?;
        }
    }
    Ok(())
}
