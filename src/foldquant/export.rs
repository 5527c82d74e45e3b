//! The uncalibrated FoldQuant export `vla-quantize --type fq-*` writes.

use super::{group, is_site_name, layer_of, site_kind, Module};
use crate::gguf::{metadata_writer, GgmlType, GgufFile, GgufWriter, TensorInfo};
use crate::ops::foldquant::{export_weight, pack_int4, rotation_block_for};
use crate::Result;

/// What `vla-quantize --type fq-*` writes: weight and activation widths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    W8A8,
    W4A8,
    W4A4,
}

impl Scheme {
    /// `fq-w8a8`, `fq-w4a8`, `fq-w4a4` (any case).
    pub fn parse(s: &str) -> Option<Scheme> {
        match s.to_ascii_lowercase().as_str() {
            "fq-w8a8" => Some(Scheme::W8A8),
            "fq-w4a8" => Some(Scheme::W4A8),
            "fq-w4a4" => Some(Scheme::W4A4),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Scheme::W8A8 => "fq-w8a8",
            Scheme::W4A8 => "fq-w4a8",
            Scheme::W4A4 => "fq-w4a4",
        }
    }

    fn bits(self) -> (u32, u32) {
        match self {
            Scheme::W8A8 => (8, 8),
            Scheme::W4A8 => (4, 8),
            Scheme::W4A4 => (4, 4),
        }
    }
}

/// The sites an export quantizes: the float `<site>.weight` matrices where vla.cpp quantizes
/// ([`is_site_name`]), `k` and `n` multiples of 64, and a layer's q/k/v (gate/up) only when
/// all of them qualify (vla.cpp's group rule).
fn export_sites(file: &GgufFile) -> Vec<(String, usize, usize)> {
    let float = |t: &TensorInfo| matches!(t.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
    let qualifies = |name: &str| -> Option<(usize, usize)> {
        let t = file.tensor_info(&format!("{name}.weight")).ok()?;
        let [k, n] = t.dims[..] else { return None };
        (float(t) && k % 64 == 0 && n % 64 == 0).then_some((k as usize, n as usize))
    };
    let mut out = Vec::new();
    for t in file.tensors() {
        let Some(name) = t.name.strip_suffix(".weight") else {
            continue;
        };
        let (Some(_), Some(kind), true) = (Module::of(name), site_kind(name), is_site_name(name))
        else {
            continue;
        };
        let members_ok = group(kind).iter().all(|m| {
            let member = format!("{}.{m}", layer_of(name));
            file.tensor_info(&format!("{member}.weight")).is_err() || qualifies(&member).is_some()
        });
        if let (Some((k, n)), true) = (qualifies(name), members_ok) {
            out.push((name.to_owned(), k, n));
        }
    }
    out
}

/// An uncalibrated FoldQuant file of `file` (vla.cpp's `foldquant_fake_export.py`):
/// each site rotated at block 64 and quantized per row ([`export_weight`]), no `ascale`,
/// norms unchanged; metadata `<arch>.quant.*` for `scheme`. `progress(i, n)` after each
/// site. Returns the writer and the sites' names.
pub fn export<'a>(
    file: &'a GgufFile,
    scheme: Scheme,
    mut progress: impl FnMut(usize, usize),
) -> Result<(GgufWriter<'a>, Vec<String>)> {
    let arch = file.architecture()?.to_owned();
    let sites = export_sites(file);
    let (wbits, abits) = scheme.bits();
    let mut w = metadata_writer(file)?;
    let key = |k: &str| format!("{arch}.quant.{k}");
    w.set_metadata(key("method"), "foldquant")?;
    w.set_metadata(key("applied_at"), "vla-quantize")?;
    w.set_metadata(
        key("provenance"),
        "vla-rs uncalibrated export (rotation + per-row scales)",
    )?;
    for m in ["llm", "action"] {
        w.set_metadata(key(&format!("scheme_{m}")), scheme.name())?;
        w.set_metadata(key(&format!("{m}_weight_bits")), wbits)?;
        w.set_metadata(key(&format!("{m}_act_bits")), abits)?;
        w.set_metadata(key(&format!("{m}_rot_block_size")), 64u32)?;
    }
    w.set_metadata(key("action_fold_order"), "before")?;
    w.set_metadata(key("act_clip_ratio"), 1.0f32)?;
    w.set_metadata(key("site_bits"), "")?;
    let mut done = 0;
    for t in file.tensors() {
        let site = t
            .name
            .strip_suffix(".weight")
            .and_then(|n| sites.iter().find(|s| s.0 == n));
        let Some((name, k, n)) = site else {
            w.add_tensor(t.name.clone(), t.ty, &t.dims, file.tensor_bytes(t))?;
            continue;
        };
        let values = file.dequantize(&t.name)?;
        let (codes, scales) = export_weight(&values, *k, rotation_block_for(*k, 64), wbits);
        let (bytes, packed) = match wbits {
            4 => (pack_int4(&codes), k / 2),
            _ => (codes.iter().map(|&c| c as u8).collect(), *k),
        };
        w.add_tensor(
            t.name.clone(),
            GgmlType::I8,
            &[packed as u64, *n as u64],
            bytes,
        )?;
        w.add_f32(
            format!("{name}.wscale"),
            GgmlType::F32,
            &[*n as u64],
            &scales,
        )?;
        done += 1;
        progress(done, sites.len());
    }
    Ok((w, sites.into_iter().map(|s| s.0).collect()))
}
