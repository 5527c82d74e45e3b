//! Quantized weights repacked at upload for the WGSL kernels (issue 18 item 2): ggml's
//! blocks of 18-34 bytes sit at offsets that are not word multiples (Q8_0, Q4_0, Q5_0), so
//! a kernel read a code word as two loads and shifts. A chunk of `n` blocks becomes two
//! aligned arrays: the codes, `code_words` words a block (Q8_0: the 32 int8 values; Q4_x:
//! the 16 bytes of nibbles; Q5_x: the high-bit word, then the nibbles), then one word a
//! block holding the f16 scale `d` (low half) and, for Q4_1 / Q5_1, the f16 minimum `m`
//! (high half; 0 otherwise). The bytes are ggml's, moved: every decoded value is the same
//! (the kernels stay bit-exact with ggml, docs/GGML.md). `shaders/weight_decode.wgsl`
//! reads this layout.

use crate::gguf::GgmlType;

/// Code words a block of `ty` takes repacked, or `None` for a type stored as it is.
pub(super) fn code_words(ty: GgmlType) -> Option<usize> {
    match ty {
        GgmlType::Q8_0 => Some(8),
        GgmlType::Q4_0 | GgmlType::Q4_1 => Some(4),
        GgmlType::Q5_0 | GgmlType::Q5_1 => Some(5),
        _ => None,
    }
}

/// Bytes `blocks` blocks of `ty` take repacked (`None`: not repacked).
pub(super) fn packed_bytes(ty: GgmlType, blocks: usize) -> Option<usize> {
    code_words(ty).map(|cw| 4 * (cw + 1) * blocks)
}

/// Repacks whole blocks of `ty` (`bytes`, ggml's layout) into codes then scales.
pub(super) fn repack(ty: GgmlType, bytes: &[u8]) -> Vec<u8> {
    let cw = code_words(ty).expect("a repacked type");
    let size = ty.type_size();
    let blocks = bytes.len() / size;
    let mut codes = Vec::with_capacity(4 * cw * blocks);
    let mut scales = Vec::with_capacity(4 * blocks);
    for b in bytes.chunks_exact(size) {
        // (d, m, the code bytes) as ggml lays them out
        let (d, m, q): ([u8; 2], [u8; 2], &[u8]) = match ty {
            GgmlType::Q4_1 | GgmlType::Q5_1 => ([b[0], b[1]], [b[2], b[3]], &b[4..]),
            _ => ([b[0], b[1]], [0, 0], &b[2..]),
        };
        debug_assert_eq!(q.len(), 4 * cw);
        codes.extend_from_slice(q);
        scales.extend_from_slice(&[d[0], d[1], m[0], m[1]]);
    }
    codes.extend_from_slice(&scales);
    codes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::quant;

    /// Every byte of every block lands once: codes in block order, then (d, m) words.
    #[test]
    fn blocks_split_into_codes_and_scales() {
        let x: Vec<f32> = (0..96).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        for ty in GgmlType::SUPPORTED.into_iter().filter(|t| t.is_quantized()) {
            let raw = quant::quantize(ty, &x).unwrap();
            let packed = repack(ty, &raw);
            let cw = code_words(ty).unwrap();
            assert_eq!(Some(packed.len()), packed_bytes(ty, 3), "{ty}");
            let size = ty.type_size();
            let with_min = matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1);
            for (k, b) in raw.chunks_exact(size).enumerate() {
                let head = if with_min { 4 } else { 2 };
                assert_eq!(
                    &packed[4 * cw * k..4 * cw * (k + 1)],
                    &b[head..],
                    "{ty} codes"
                );
                let s = &packed[4 * cw * 3 + 4 * k..][..4];
                assert_eq!(&s[..2], &b[..2], "{ty} d");
                let m: &[u8] = if with_min { &b[2..4] } else { &[0, 0] };
                assert_eq!(&s[2..], m, "{ty} m");
            }
        }
        assert_eq!(code_words(GgmlType::F16), None);
    }
}
