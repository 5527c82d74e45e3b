//! Re-encoding a model's tensors to another type: the one place that rewrites a GGUF's
//! weights (load-time `weight_dtype`, and `vla-quantize`). Metadata and every tensor not
//! selected are copied byte for byte.

use super::writer::Encoder;
use super::{GgmlType, GgufFile, GgufWriter, TensorInfo};
use crate::Result;

/// A writer holding `file`'s metadata (`general.alignment` too: the writer takes the data
/// alignment from it) and no tensors yet.
pub fn metadata_writer(file: &GgufFile) -> Result<GgufWriter<'_>> {
    let mut w = GgufWriter::new();
    for (k, v) in file.metadata() {
        w.add_metadata(k.clone(), v.clone())?;
    }
    Ok(w)
}

/// A writer holding `file`'s metadata and tensors, where each tensor for which `target`
/// returns a type is re-encoded to it (through f32, with ggml's reference rounding) as the
/// file is written, a few rows at a time (so writing holds no re-encoded tensor in memory),
/// and every other tensor is borrowed unchanged; each source tensor's pages of a mapped file
/// are released once written. `progress(i, tensor)` is called as each
/// tensor is written. Also returns the names of the re-encoded tensors.
pub fn retype<'a>(
    file: &'a GgufFile,
    target: impl Fn(&TensorInfo) -> Option<GgmlType>,
    progress: impl FnMut(usize, &TensorInfo) + 'a,
) -> Result<(GgufWriter<'a>, Vec<String>)> {
    let mut w = metadata_writer(file)?;
    let mut changed = Vec::new();
    let progress = std::rc::Rc::new(std::cell::RefCell::new(progress));
    for (i, t) in file.tensors().iter().enumerate() {
        let (progress, ty) = (progress.clone(), target(t).filter(|&ty| ty != t.ty));
        // a convolution kernel packed into blocks is stored as the matrix it multiplies
        let dims = match ty {
            Some(ty) if ty.is_quantized() => matrix_dims(t).unwrap_or_else(|| t.dims.clone()),
            _ => t.dims.clone(),
        };
        let rows = TensorInfo {
            dims: dims.clone(),
            ..t.clone()
        };
        let encode: Encoder<'a> = Box::new(move |out| {
            (progress.borrow_mut())(i, t);
            let src = file.tensor_bytes(t);
            let done = match ty {
                Some(ty) => reencode_rows(&rows, src, ty, out).map(|_| ()),
                None => out.write_all(src).map_err(Into::into),
            };
            // written: its pages of a mapped file may go (a second write reads them again)
            file.release(t);
            done
        });
        w.add_encoded_later(t.name.clone(), ty.unwrap_or(t.ty), &dims, encode)?;
        if ty.is_some() {
            changed.push(t.name.clone());
        }
    }
    Ok((w, changed))
}

/// `file` with each tensor for which `target` returns a type re-encoded to it, in place: the
/// re-encoded tensors are held in memory (one at a time encoded, its source pages then
/// released), every other tensor stays where it lies in the mapped file, so the peak is about
/// the re-encoded tensors, not the source and a copy of the whole file together.
pub fn retyped(
    mut file: GgufFile,
    target: impl Fn(&TensorInfo) -> Option<GgmlType>,
) -> Result<GgufFile> {
    let todo: Vec<(TensorInfo, GgmlType)> = file
        .tensors()
        .iter()
        .filter_map(|t| target(t).filter(|&ty| ty != t.ty).map(|ty| (t.clone(), ty)))
        .collect();
    for (t, ty) in todo {
        // allocated at its size: a growing buffer would keep up to twice that
        let size = ty.bytes_for(t.n_elements()).unwrap_or(0) as usize;
        let mut bytes = Vec::with_capacity(size);
        reencode_rows(&t, file.tensor_bytes(&t), ty, &mut bytes)?;
        file.release(&t);
        file.substitute(&t.name, ty, bytes)?;
    }
    Ok(file)
}

/// Values re-encoded at a time: a few MiB of f32, whatever the tensor's size.
const CHUNK_VALUES: usize = 1 << 20;

/// `t`'s bytes `src` re-encoded as `ty` into `out`, a few rows at a time; returns the bytes
/// written.
fn reencode_rows(
    t: &TensorInfo,
    src: &[u8],
    ty: GgmlType,
    out: &mut dyn std::io::Write,
) -> Result<usize> {
    let row = t.dims.first().copied().unwrap_or(1).max(1) as usize;
    let n = t.n_elements() as usize;
    let row_bytes = |ty: GgmlType| ty.bytes_for(row as u64).map(|b| b as usize);
    let (Some(src_row), Some(_)) = (row_bytes(t.ty), row_bytes(ty)) else {
        return Err(crate::Error::InvalidArgument(format!(
            "tensor {:?}: rows of {row} values do not fit {} and {ty}",
            t.name, t.ty
        )));
    };
    let rows_at_once = (CHUNK_VALUES / row).max(1);
    let mut values = vec![0.0f32; rows_at_once.min(n / row) * row];
    let mut wrote = 0;
    for chunk in src.chunks(rows_at_once * src_row) {
        let vals = &mut values[..chunk.len() / src_row * row];
        super::quant::dequantize(t.ty, chunk, vals)?;
        let bytes = super::quant::quantize(ty, vals)?;
        out.write_all(&bytes)?;
        wrote += bytes.len();
    }
    Ok(wrote)
}

/// Whether a tensor looks, by its name, like a float weight matrix that a matmul reads: a
/// float 2-D `*.weight` that is no embedding or position table or norm. vla.cpp's name rule,
/// kept for `vla-quantize` ([`is_quantizable`]); `--weight-dtype` takes its targets from the
/// built graphs instead (`graph::matmul_weights`).
pub fn is_matmul_weight(t: &TensorInfo) -> bool {
    let skip = ["norm", "embd", "pos", "ln1", "ln2", "post_ln"];
    t.dims.len() == 2
        && t.name.ends_with(".weight")
        && matches!(t.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
        && !skip.iter().any(|s| t.name.contains(s))
}

/// The `[C * KH * KW, O]` matrix (ggml order) of a convolution kernel `[KW, KH, C, O]`
/// that a matmul multiplies (im2col then a product: ACT's ResNet, `bb.*`; Octo's stems,
/// `octo.obs.*`); `None` for anything else.
pub fn matrix_dims(t: &TensorInfo) -> Option<Vec<u64>> {
    let conv = (t.name.starts_with("bb.") || t.name.starts_with("octo.obs."))
        && t.name.ends_with(".weight")
        && t.dims.len() == 4;
    conv.then(|| vec![t.dims[0] * t.dims[1] * t.dims[2], t.dims[3]])
}

/// What `vla-quantize` packs besides the language model's matrices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuantScope {
    /// The vision tower's matrices (`--vision`).
    pub vision: bool,
    /// The action expert's / head's block matrices (`--expert`; vla.cpp's rule keeps them):
    /// `aex.*`, `*expert*` and DiT layers, never their action, state or time projections
    /// nor adaLN maps.
    pub expert: bool,
}

/// Whether `vla-quantize` packs a tensor into block type `ty`: the language model's weight
/// matrices (the vision tower's and the expert's too as `scope` says), never embeddings,
/// output heads, norms, positions or the action/state/time projections, and only where a
/// row is a whole number of blocks. Without `scope.expert` the name list is vla.cpp's
/// quantizer's.
pub fn is_quantizable(t: &TensorInfo, ty: GgmlType, scope: QuantScope) -> bool {
    const SKIP: &[&str] = &[
        "token_embd",
        "output.weight",
        "patch_embd",
        "norm",
        "pos",
        "embed",
        "cls",
        "action",
        "state",
        "adaln",
        "ada_",
        "time",
    ];
    const EXPERT: &[&str] = &["expert", "aex.", "dit"];
    // ACT's ResNet kernels are the vision tower's matrices (`matrix_dims`)
    let kernel =
        matrix_dims(t).filter(|_| matches!(t.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16));
    // `vis.`: Prismatic's towers and projector (OpenVLA-OFT, VLA-Adapter)
    let is_vision = t.name.starts_with("vit.")
        || t.name.starts_with("vis.")
        || t.name.contains("vision")
        || kernel.is_some();
    let is_expert = EXPERT.iter().any(|s| t.name.contains(s));
    let row = kernel
        .as_ref()
        .map_or(t.dims.first().copied().unwrap_or(0), |m| m[0]);
    (is_matmul_weight(t) || kernel.is_some())
        && !SKIP.iter().any(|s| t.name.contains(s))
        && (scope.vision || !is_vision)
        && (scope.expert || !is_expert)
        && row.is_multiple_of(ty.block_size() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> GgufFile {
        let mut w = GgufWriter::new();
        w.add_metadata("general.architecture", "test").unwrap();
        let vals: Vec<f32> = (0..64).map(|i| i as f32 * 0.37 - 5.0).collect();
        w.add_f32("blk.0.attn_q.weight", GgmlType::F32, &[32, 2], &vals)
            .unwrap();
        w.add_f32("blk.0.attn_norm.weight", GgmlType::F32, &[32, 2], &vals)
            .unwrap();
        w.add_f32("state_mean", GgmlType::F32, &[64], &vals)
            .unwrap();
        GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()
    }

    /// Both re-encodings (row chunks smaller than a tensor; the streamed one from a mapped
    /// file, its pages released) give the same file, byte for byte, as encoding every tensor
    /// whole.
    #[test]
    fn streamed_retype_equals_the_whole_tensor_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("src.gguf");
        let mut w = GgufWriter::new();
        w.add_metadata("general.architecture", "test").unwrap();
        let big: Vec<f32> = (0..3 * CHUNK_VALUES / 2)
            .map(|i| (i as f32 * 0.001).sin())
            .collect();
        let rows = big.len() / 1024;
        w.add_f32(
            "blk.0.ffn_up.weight",
            GgmlType::F32,
            &[1024, rows as u64],
            &big,
        )
        .unwrap();
        w.add_f32(
            "blk.0.attn_norm.weight",
            GgmlType::F32,
            &[1024],
            &big[..1024],
        )
        .unwrap();
        w.write_to_file(&path).unwrap();
        let src = GgufFile::open(&path).unwrap();
        for ty in [GgmlType::BF16, GgmlType::F16, GgmlType::Q8_0] {
            let target = |t: &TensorInfo| is_matmul_weight(t).then_some(ty);
            // Every tensor encoded whole, by hand.
            let mut whole = metadata_writer(&src).unwrap();
            for t in src.tensors() {
                match target(t) {
                    Some(ty) => whole
                        .add_f32(
                            t.name.clone(),
                            ty,
                            &t.dims,
                            &src.dequantize(&t.name).unwrap(),
                        )
                        .unwrap(),
                    None => whole
                        .add_tensor(t.name.clone(), t.ty, &t.dims, src.tensor_bytes(t))
                        .unwrap(),
                }
            }
            let whole = GgufFile::from_bytes(whole.to_bytes().unwrap()).unwrap();
            let (eager, _) = retype(&src, target, |_, _| {}).unwrap();
            let eager = GgufFile::from_bytes(eager.to_bytes().unwrap()).unwrap();
            let in_place = retyped(GgufFile::open(&path).unwrap(), target).unwrap();
            for got in [in_place, eager] {
                assert_eq!(got.metadata(), whole.metadata(), "{ty}");
                assert_eq!(got.tensors().len(), whole.tensors().len(), "{ty}");
                for (g, t) in got.tensors().iter().zip(whole.tensors()) {
                    let what = format!("{ty} {}", t.name);
                    assert_eq!((&g.name, g.ty, &g.dims), (&t.name, t.ty, &t.dims), "{what}");
                    assert_eq!(got.tensor_bytes(g), whole.tensor_bytes(t), "{what}");
                }
            }
        }
    }

    #[test]
    fn retypes_only_selected_tensors() {
        let src = sample();
        let seen = std::cell::Cell::new(0);
        let (w, changed) = retype(
            &src,
            |t| is_matmul_weight(t).then_some(GgmlType::BF16),
            |_, _| seen.set(seen.get() + 1),
        )
        .unwrap();
        assert_eq!(changed, vec!["blk.0.attn_q.weight".to_string()]);
        assert_eq!(
            seen.get(),
            0,
            "nothing is encoded before the file is written"
        );
        let out = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
        assert_eq!(seen.get(), 3, "each tensor as it is written");
        assert_eq!(
            out.tensor_info("blk.0.attn_q.weight").unwrap().ty,
            GgmlType::BF16
        );
        for name in ["blk.0.attn_norm.weight", "state_mean"] {
            assert_eq!(out.tensor_info(name).unwrap().ty, GgmlType::F32);
            assert_eq!(out.dequantize(name).unwrap(), src.dequantize(name).unwrap());
        }
        assert_eq!(out.get_str("general.architecture").unwrap(), "test");
        // bf16 keeps 8 mantissa bits: within 2^-8 relative of the original.
        let (a, b) = (
            src.dequantize("blk.0.attn_q.weight").unwrap(),
            out.dequantize("blk.0.attn_q.weight").unwrap(),
        );
        assert!(a
            .iter()
            .zip(&b)
            .all(|(x, y)| (x - y).abs() <= x.abs() / 256.0));
        assert_ne!(a, b, "bf16 must actually round some of these values");
    }

    #[test]
    fn quantization_rule() {
        let t = |name: &str, d0: u64| TensorInfo {
            name: name.into(),
            ty: GgmlType::F32,
            dims: vec![d0, 8],
            offset: 0,
        };
        let q = |name: &str, d0: u64, vision: bool| {
            let scope = QuantScope {
                vision,
                expert: false,
            };
            is_quantizable(&t(name, d0), GgmlType::Q8_0, scope)
        };
        assert!(q("vlm.blk.0.attn_q.weight", 64, false));
        assert!(
            !q("vlm.blk.0.attn_q.weight", 48, false),
            "rows must be whole blocks"
        );
        for kept in [
            "token_embd.weight",
            "vlm.blk.0.attn_norm.weight",
            "aex.blk.0.ffn_up.weight",
            "action_in_proj.weight",
            "state_proj.weight",
            "action_time_mlp_in.weight",
        ] {
            assert!(!q(kept, 64, true), "{kept}");
        }
        assert!(!q("vit.blk.0.fc1.weight", 64, false));
        assert!(q("vit.blk.0.fc1.weight", 64, true));
        assert!(!q("vit.patch_embd.weight", 64, true));
        // --expert: the expert's block matrices, not its projections or adaLN maps.
        let all = QuantScope {
            vision: true,
            expert: true,
        };
        let qe = |name: &str| is_quantizable(&t(name, 64), GgmlType::Q8_0, all);
        for packed in [
            "aex.blk.0.ffn_up.weight",
            "aex.dit.3.attn_q.weight",
            "aex.seq_pool.weight",
        ] {
            assert!(qe(packed), "{packed}");
        }
        for kept in [
            "aex.action_enc.W1.weight",
            "aex.state_enc.fc1.weight",
            "aex.time_pos.weight",
            "aex.dit.0.adaln.weight",
            "aex.blk.0.attn_norm.weight",
        ] {
            assert!(!qe(kept), "{kept}");
        }
    }
}
