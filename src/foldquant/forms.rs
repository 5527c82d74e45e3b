//! The forms a FoldQuant file is run in: dequant mode (f32 matrices, every backend) and
//! the integer form the cpu backend's [`crate::graph::Op::FqLinear`] reads.

use super::{FoldQuant, Module, Site};
use crate::gguf::{add_moved, metadata_writer, GgmlType, GgufFile};
use crate::ops::foldquant::{rotate, unpack_int4, FoldOrder};
use crate::Result;

/// The f32 `[n, k]` matrix a site stands for (dequant mode): per row `code * wscale`, then
/// back to the float frame: the rotation (its own inverse), and the division by `ascale`
/// on the side of the rotation the fold order says.
pub fn dequantize_site(file: &GgufFile, site: &Site, order: FoldOrder) -> Result<Vec<f32>> {
    let t = file.tensor_info(&format!("{}.weight", site.name))?;
    let bytes = file.tensor_bytes(t);
    let codes: Vec<i8> = match site.weight_bits {
        4 => unpack_int4(bytes),
        _ => bytes.iter().map(|&b| b as i8).collect(),
    };
    let wscale = file.dequantize(&format!("{}.wscale", site.name))?;
    let ascale = match site.ascale {
        true => Some(file.dequantize(&format!("{}.ascale", site.name))?),
        false => None,
    };
    let divide = |row: &mut [f32]| {
        if let Some(a) = &ascale {
            row.iter_mut().zip(a).for_each(|(v, s)| *v /= s);
        }
    };
    let mut out = Vec::with_capacity(site.n * site.k);
    for (row, &ws) in codes.chunks(site.k).zip(&wscale) {
        let mut r: Vec<f32> = row.iter().map(|&c| f32::from(c) * ws).collect();
        if order == FoldOrder::After {
            divide(&mut r);
        }
        rotate(&mut r, site.block);
        if order == FoldOrder::Before {
            divide(&mut r);
        }
        out.extend(r);
    }
    Ok(out)
}

/// `file` with every FoldQuant site (`sites`, from [`FoldQuant::sites`]) replaced by its f32
/// matrix ([`dequantize_site`]) and the `wscale` / `ascale` vectors dropped: a float file the
/// ordinary graphs run.
pub fn dequantized(file: &GgufFile, fq: &FoldQuant, sites: &[Site]) -> Result<GgufFile> {
    let mut w = metadata_writer(file)?;
    let site_of = |tensor: &str| {
        sites
            .iter()
            .find(|s| tensor.starts_with(&format!("{}.", s.name)))
    };
    for t in file.tensors() {
        match site_of(&t.name) {
            Some(s) if t.name == format!("{}.weight", s.name) => {
                let v = dequantize_site(file, s, fq.fold_order)?;
                w.add_f32(t.name.clone(), GgmlType::F32, &[s.k as u64, s.n as u64], &v)?;
            }
            Some(s) if t.name == format!("{}.wscale", s.name) => {}
            Some(s) if t.name == format!("{}.ascale", s.name) => {}
            _ => w.add_tensor(t.name.clone(), t.ty, &t.dims, file.tensor_bytes(t))?,
        }
    }
    GgufFile::from_bytes(w.to_bytes()?)
}

/// `file` in the form the integer path runs ([`crate::graph::Op::FqLinear`]): for every site
/// of `sites` (from [`FoldQuant::sites`]) the codes as stored (`[n, k]` I8, INT4 two a byte
/// `[n, k / 2]`, low nibble first), its `wscale` and `ascale` as stored, and
/// `<site>.fq` F32 `[weight_bits, act_bits, block, clip, fold, fuse_norm]` (fold 0: no
/// `ascale`, 1: before, 2: after; fuse_norm 1 for the language model's q/k/v and gate/up,
/// whose RMSNorm vla.cpp computes inside the site), which the graph builder reads when a
/// matmul meets an I8 matrix.
pub fn integer_form(file: &GgufFile, fq: &FoldQuant, sites: &[Site]) -> Result<GgufFile> {
    let mut w = metadata_writer(file)?;
    for t in file.tensors() {
        let site = t
            .name
            .strip_suffix(".weight")
            .and_then(|n| sites.iter().find(|s| s.name == n));
        let Some(s) = site else {
            add_moved(&mut w, file, t, t.name.clone(), t.ty, &t.dims)?;
            continue;
        };
        // as stored: `[n, k]` codes, or INT4 two a byte `[n, k / 2]` (the backends unpack)
        let row = if s.weight_bits == 4 { s.k / 2 } else { s.k };
        let dims = [row as u64, s.n as u64];
        add_moved(&mut w, file, t, t.name.clone(), GgmlType::I8, &dims)?;
        let fold = match (s.ascale, fq.fold_order) {
            (false, _) => 0.0,
            (true, FoldOrder::Before) => 1.0,
            (true, FoldOrder::After) => 2.0,
        };
        // clip applies to language-model sites with 4-bit activations only
        let clip = if s.module == Module::Llm && s.act_bits == 4 {
            fq.clip
        } else {
            1.0
        };
        // vla.cpp fuses the RMSNorm before a language model's q/k/v and gate/up
        let fused = matches!(super::site_kind(&s.name), Some("qkv" | "gateup"));
        let fuse = if s.module == Module::Llm && fused {
            1.0
        } else {
            0.0
        };
        let bits = (s.weight_bits as f32, s.act_bits as f32);
        let params = [bits.0, bits.1, s.block as f32, clip, fold, fuse];
        w.add_f32(format!("{}.fq", s.name), GgmlType::F32, &[6], &params)?;
    }
    GgufFile::from_bytes(w.to_bytes()?)
}
