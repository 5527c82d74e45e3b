//! An Octo file: what its graphs declare (the tensors and their stored shapes), a
//! random-weight one, the stems' kernels standardised at load, and vla.cpp's tokenizer.

use super::{config, graphs, rules, stats, Head, OctoConfig, OctoPolicy, ARCH};
use crate::gguf::{GgmlType, GgufFile, GgufWriter, Value};
use crate::graph::GraphBuilder;
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};

/// vla.cpp's tokenizer, for a file without `tokenizer.ggml.*`: SentencePiece's own model
/// (`octo.tokenizer.spm_model`, the bytes of T5's `spiece.model`) read as transformers'
/// conversion of it, with the ids vla.cpp appends (`octo.tokenizer.eos_id`) and pads with
/// (`octo.tokenizer.pad_id`) where given; `None` without the model.
pub(super) fn vlacpp_tokenizer(file: &GgufFile, vocab_size: usize) -> Result<Option<Tokenizer>> {
    const KEY: &str = "octo.tokenizer.spm_model";
    if file.get(KEY).is_none() {
        return Ok(None);
    }
    let bytes = file.get_array(KEY)?.iter().map(|v| match v {
        Value::U8(b) => Ok(*b),
        Value::I8(b) => Ok(*b as u8),
        _ => Err(Error::Tokenizer(format!("{KEY}: {v} is not a byte"))),
    });
    let tok = Tokenizer::from_spm_model(&bytes.collect::<Result<Vec<u8>>>()?)?;
    let mut special = tok.special();
    for (key, slot) in [
        ("octo.tokenizer.eos_id", &mut special.eos),
        ("octo.tokenizer.pad_id", &mut special.pad),
    ] {
        if file.get(key).is_some() {
            let id = file.get_u64(key)?;
            *slot = Some(
                u32::try_from(id)
                    .map_err(|_| Error::Tokenizer(format!("{key} {id} is out of range")))?,
            );
        }
    }
    let tok = tok.with_special(special)?;
    crate::models::common::check_tokenizer_vocab(&tok, vocab_size)?;
    Ok(Some(tok))
}

/// The file with every stem convolution's kernel weight-standardised (SmallStem's
/// `StdConv` standardises at use; the file keeps the trained kernel, as vla.cpp's does).
pub fn standardize_stems(mut file: GgufFile, cfg: &OctoConfig) -> Result<GgufFile> {
    for (cam, stem) in cfg.cameras() {
        for i in 0..config::STEM_STAGES {
            let name = format!("{ARCH}.obs.{cam}.stem.{i}.conv.weight");
            let dims = file.tensor_info(&name)?.dims.clone();
            let w = file.dequantize(&name)?;
            let o = stem.widths[i].max(1);
            file.replace_f32(&name, &dims, &rules::standardize(&w, w.len() / o))?;
        }
    }
    Ok(file)
}

/// A random-weight Octo file of `cfg`'s sizes (matrices of type `ty`, the rest f32) with
/// one dataset's statistics (`random`).
pub fn random_writer(cfg: &OctoConfig, seed: u64, ty: GgmlType) -> Result<GgufWriter<'static>> {
    let mut w = GgufWriter::new();
    cfg.write(&mut w)?;
    w.add_metadata("general.name", "octo random-weight model")?;
    let thresholds = "octo.obs.proprio.bin_thresholds";
    let shapes: Vec<_> = tensor_shapes(cfg)?
        .into_iter()
        .filter(|(n, _)| n != thresholds)
        .collect();
    let matrix = |name: &str| name.starts_with("octo.blk.") || name.starts_with("octo.t5.blk.");
    crate::models::common::add_random_tensors(&mut w, &shapes, seed, ty, matrix)?;
    if cfg.proprio_dim > 0 {
        // uniform bins over [-2, 2], as Octo's proprio tokenizers are configured
        let n = cfg.proprio_bins;
        let edges: Vec<f32> = (0..=n).map(|i| -2.0 + 4.0 * i as f32 / n as f32).collect();
        w.add_f32(thresholds, GgmlType::F32, &[n as u64 + 1], &edges)?;
        w.add_metadata(format!("{ARCH}.proprio.bin_type"), "uniform")?;
    }
    stats::write_random(&mut w, cfg)?;
    Ok(w)
}

/// Every weight the graph reads, with its stored shape (convolution kernels 4-D, `[O, C,
/// KH, KW]`).
pub fn tensor_shapes(cfg: &OctoConfig) -> Result<Vec<(String, Vec<usize>)>> {
    let steps = rules::ddpm_steps(cfg.steps, cfg.schedule_s);
    let tff = vec![0.0; steps.len() * cfg.time_dim];
    let frames = OctoPolicy::frame_keys(cfg, true);
    let g = graphs::predict(GraphBuilder::over(None), cfg, &frames, &tff, &steps, None)?;
    let mut shapes = crate::graph::declared_weights(&[g])?;
    for (name, shape) in &mut shapes {
        if let Some(k) = kernel_side(cfg, name) {
            let (o, cols) = (shape[0], shape[1]);
            *shape = vec![o, cols / (k * k), k, k];
        }
    }
    if cfg.head == Head::Diffusion {
        shapes.push((
            "octo.head.diffusion.time_fourier.weight".into(),
            vec![cfg.time_dim / 2, 1],
        ));
    }
    if cfg.proprio_dim > 0 {
        shapes.push((
            "octo.obs.proprio.bin_thresholds".into(),
            vec![cfg.proprio_bins + 1],
        ));
    }
    Ok(shapes)
}

/// The side of the square kernel `name` holds, for the stems' convolutions.
pub fn kernel_side(cfg: &OctoConfig, name: &str) -> Option<usize> {
    let rest = name.strip_prefix("octo.obs.")?.strip_suffix(".weight")?;
    let (cam, part) = rest.split_once('.')?;
    let c = config::CAMERAS.iter().position(|c| *c == cam)?;
    let stem = cfg.stems[c].as_ref()?;
    match part {
        "patch_embd" => Some(stem.patch),
        p if p.starts_with("stem.") && p.ends_with(".conv") => Some(3),
        _ => None,
    }
}
