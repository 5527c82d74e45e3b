//! Re-encoding a model's tensors to another type: the one place that rewrites a GGUF's
//! weights (load-time `weight_dtype`, and the quantizer). Metadata and every tensor not
//! selected are copied byte for byte.

use super::{GgmlType, GgufFile, GgufWriter, TensorInfo};
use crate::Result;

/// A new GGUF, in memory, where each tensor for which `target` returns a type is
/// re-encoded to it (through f32, with ggml's reference rounding) and every other tensor
/// is copied unchanged. Returns the bytes and how many tensors were re-encoded.
pub fn retype(file: &GgufFile, target: impl Fn(&TensorInfo) -> Option<GgmlType>) -> Result<(Vec<u8>, usize)> {
    let mut w = GgufWriter::new();
    for (k, v) in file.metadata() {
        // `general.alignment` is copied too: the writer takes the data alignment from it.
        w.add_metadata(k.clone(), v.clone())?;
    }
    let mut changed = 0;
    for t in file.tensors() {
        match target(t).filter(|&ty| ty != t.ty) {
            Some(ty) => {
                let values = file.dequantize(&t.name)?;
                w.add_f32(t.name.clone(), ty, &t.dims, &values)?;
                changed += 1;
            }
            None => w.add_tensor(t.name.clone(), t.ty, &t.dims, file.tensor_bytes(t))?,
        }
    }
    Ok((w.to_bytes()?, changed))
}

/// Whether a tensor is a weight matrix that a `weight_dtype` setting applies to: a float
/// 2-D `*.weight` that a matmul reads. Embedding tables, position tables and norm gains
/// stay as stored (they are gathered or applied elementwise, in f32).
pub fn is_matmul_weight(t: &TensorInfo) -> bool {
    let skip = ["norm", "embd", "pos", "ln1", "ln2", "post_ln"];
    t.dims.len() == 2
        && t.name.ends_with(".weight")
        && matches!(t.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
        && !skip.iter().any(|s| t.name.contains(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> GgufFile {
        let mut w = GgufWriter::new();
        w.add_metadata("general.architecture", "test").unwrap();
        let vals: Vec<f32> = (0..64).map(|i| i as f32 * 0.37 - 5.0).collect();
        w.add_f32("blk.0.attn_q.weight", GgmlType::F32, &[32, 2], &vals).unwrap();
        w.add_f32("blk.0.attn_norm.weight", GgmlType::F32, &[32, 2], &vals).unwrap();
        w.add_f32("state_mean", GgmlType::F32, &[64], &vals).unwrap();
        GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()
    }

    #[test]
    fn retypes_only_selected_tensors() {
        let src = sample();
        let (bytes, n) = retype(&src, |t| is_matmul_weight(t).then_some(GgmlType::BF16)).unwrap();
        assert_eq!(n, 1);
        let out = GgufFile::from_bytes(bytes).unwrap();
        assert_eq!(out.tensor_info("blk.0.attn_q.weight").unwrap().ty, GgmlType::BF16);
        for name in ["blk.0.attn_norm.weight", "state_mean"] {
            assert_eq!(out.tensor_info(name).unwrap().ty, GgmlType::F32);
            assert_eq!(out.dequantize(name).unwrap(), src.dequantize(name).unwrap());
        }
        assert_eq!(out.get_str("general.architecture").unwrap(), "test");
        // bf16 keeps 8 mantissa bits: within 2^-8 relative of the original.
        let (a, b) = (src.dequantize("blk.0.attn_q.weight").unwrap(), out.dequantize("blk.0.attn_q.weight").unwrap());
        assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() <= x.abs() / 256.0));
        assert_ne!(a, b, "bf16 must actually round some of these values");
    }
}
