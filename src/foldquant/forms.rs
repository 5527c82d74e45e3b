//! The forms a FoldQuant file is run in: dequant mode (f32 matrices, every backend) and
//! the integer form the cpu backend's [`crate::graph::Op::FqLinear`] reads.

use super::{FoldQuant, Module, Site};
use crate::gguf::{GgmlType, GgufFile};
use crate::ops::foldquant::{rotate, unpack_int4, FoldOrder};
use crate::{Error, Result};

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
/// ordinary graphs run. Edited in place: the sites' matrices are held in memory, every other
/// tensor stays where it lies in the mapped file.
pub fn dequantized(mut file: GgufFile, fq: &FoldQuant, sites: &[Site]) -> Result<GgufFile> {
    for s in sites {
        let v = dequantize_site(&file, s, fq.fold_order)?;
        let name = format!("{}.weight", s.name);
        file.replace_f32(&name, &[s.k as u64, s.n as u64], &v)?;
    }
    let scales: std::collections::HashSet<String> = sites
        .iter()
        .flat_map(|s| ["wscale", "ascale"].map(|x| format!("{}.{x}", s.name)))
        .collect();
    file.retain_tensors(|name| !scales.contains(name));
    Ok(file)
}

/// `file` in the form the integer path runs ([`crate::graph::Op::FqLinear`]): for every site
/// of `sites` (from [`FoldQuant::sites`]) the codes as stored (`[n, k]` I8, INT4 two a byte
/// `[n, k / 2]`, low nibble first), its `wscale` and `ascale` as stored, and
/// `<site>.fq` F32 `[weight_bits, act_bits, block, clip, fold, fuse_norm]` (fold 0: no
/// `ascale`, 1: before, 2: after; fuse_norm 1 for the language model's q/k/v and gate/up,
/// whose RMSNorm vla.cpp computes inside the site), which the graph builder reads when a
/// matmul meets an I8 matrix. Edited in place: the codes stay in the mapped file, only the
/// six parameters per site are added in memory.
pub fn integer_form(mut file: GgufFile, fq: &FoldQuant, sites: &[Site]) -> Result<GgufFile> {
    for s in sites {
        // as stored: `[n, k]` codes, or INT4 two a byte `[n, k / 2]` (the backends unpack)
        let row = if s.weight_bits == 4 { s.k / 2 } else { s.k };
        let dims = [row as u64, s.n as u64];
        file.retype_tensor(&format!("{}.weight", s.name), GgmlType::I8, &dims)?;
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
        file.add_tensor_f32(&format!("{}.fq", s.name), &[6], &params)?;
    }
    Ok(file)
}

/// The ternary matrices of `file` (BitVLA's: an I8 `<site>.weight` beside a `<site>.scale`,
/// its step), by `<site>`: not FoldQuant's sites, and in whatever packing the file holds.
pub fn ternary_sites(file: &GgufFile) -> Vec<String> {
    (file.tensors().iter())
        .filter(|t| t.ty == GgmlType::I8)
        .filter_map(|t| t.name.strip_suffix(".weight"))
        .filter(|site| file.tensor_info(&format!("{site}.scale")).is_ok())
        .map(str::to_owned)
        .collect()
}

/// `file` with each ternary matrix ([`ternary_sites`], in `crate::ops::ternary`'s packing,
/// `[N, K / 4]`) in the form the integer sites run ([`crate::graph::Op::FqLinear`]):
/// `<site>.wscale` `[N]` (the step, once per output) and `<site>.fq` (2-bit weights, 8-bit
/// activations, BitNet's rule); the codes stay where they lie in the file. A file in this
/// form already is returned as it is.
pub fn ternary_form(mut file: GgufFile) -> Result<GgufFile> {
    let bad = |why: String| Error::InvalidArgument(why);
    for site in ternary_sites(&file) {
        if file.tensor_info(&format!("{site}.wscale")).is_ok() {
            continue;
        }
        let dims = &file.tensor_info(&format!("{site}.weight"))?.dims;
        let &[_, n] = &dims[..] else {
            return Err(bad(format!(
                "{site}.weight: ternary codes of dims {dims:?}, not rows [K / 4, N]"
            )));
        };
        let step = file.dequantize(&format!("{site}.scale"))?;
        let [step] = step[..] else {
            return Err(bad(format!(
                "{site}.scale holds {} values, not 1 (one step per ternary matrix)",
                step.len()
            )));
        };
        if !(step.is_finite() && step > 0.0) {
            return Err(bad(format!(
                "{site}.scale is {step}: a ternary step is finite and positive"
            )));
        }
        file.add_tensor_f32(&format!("{site}.wscale"), &[n], &vec![step; n as usize])?;
        let fq = [2.0, 8.0, 1.0, 1.0, 0.0, 0.0, 1.0];
        file.add_tensor_f32(&format!("{site}.fq"), &[fq.len() as u64], &fq)?;
    }
    Ok(file)
}
