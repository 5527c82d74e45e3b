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

mod config;
mod tensors;

use super::msgpack;
use super::{ckpt_err, JsonFile};
use crate::config as keys;
use crate::gguf::{GgmlType, GgufWriter, Value, ValueType};
use crate::models::octo::{OctoConfig, ARCH};
use crate::Result;
use config::read_config;
use std::path::{Path, PathBuf};
use tensors::{tensors, Params, Plan};

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
    keys::check(&cfg, ARCH)?;
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
