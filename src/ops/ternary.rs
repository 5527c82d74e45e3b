//! Ternary weights (BitNet b1.58's BitLinear): codes in {-1, 0, 1} with one per-tensor
//! step, packed two bits a code, and BitNet's per-token int8 activations. The products run
//! as [`super::foldquant`] sites (`weight_bits` 2, [`ActRule::BitNet`]): integer sums,
//! then `(sum * act_scale) * step`.
//!
//! The packed layout (vla-rs's own; portable): a weight row of K codes (K a multiple of 16)
//! is K / 16 little-endian u32 words; byte `i` of word `w` holds in bits `2j..2j + 1` the
//! code of column `16 w + 4 j + i`, stored as `code + 1` (0, 1 or 2; 3 is refused). One
//! shift and one mask give four codes in the byte lanes a packed int8 dot product
//! (`dot4I8Packed`, `vpdpbusd`) pairs with four consecutive activation codes.

use crate::{Error, Result};

/// Codes a packed word holds.
pub const CODES_PER_WORD: usize = 16;

/// How a site's activation row becomes int8 codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActRule {
    /// FoldQuant's: `scale = max(clip * amax / qmax, 1e-12)`, codes `round(y * (1 / scale))`
    /// in `[-qmax, qmax]`.
    FoldQuant,
    /// BitNet's `ActQuant`: `s = 127 / max(amax, 1e-5)`, codes `round(y * s)` in
    /// `[-128, 127]`; the products are scaled back by `max(amax, 1e-5) / 127`.
    BitNet,
}

/// One token row under [`ActRule::BitNet`]: its codes and the scale its integer sums are
/// multiplied by. Every step one f32 operation, ties to even (as `torch.round`).
pub fn bitnet_row(y: &[f32]) -> (Vec<i8>, f32) {
    let amax = y.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-5);
    let s = 127.0 / amax;
    let codes = y
        .iter()
        .map(|&v| (v * s).round_ties_even().clamp(-128.0, 127.0) as i8)
        .collect();
    (codes, amax / 127.0)
}

/// The absmean ternary quantization of one weight tensor (BitNet b1.58's `WeightQuant`, as
/// BitVLA's forward and vla.cpp's converter apply it): `step = max(mean |w|, 1e-5)` (the
/// mean in f64, rounded once), codes `round(w * (1 / step))` clamped to [-1, 1]. Returns
/// the codes and `step`, the value one code stands for.
pub fn absmean(w: &[f32]) -> (Vec<i8>, f32) {
    let mean = w.iter().map(|v| f64::from(v.abs())).sum::<f64>() / w.len().max(1) as f64;
    let step = (mean as f32).max(1e-5);
    let s = 1.0 / step;
    let codes = w
        .iter()
        .map(|&v| (v * s).round_ties_even().clamp(-1.0, 1.0) as i8)
        .collect();
    (codes, step)
}

/// `codes [n, k]` (each in {-1, 0, 1}) packed in the layout of the module doc: `n * k / 4`
/// bytes. K must be a multiple of 16.
pub fn pack(codes: &[i8], k: usize) -> Result<Vec<u8>> {
    if k == 0 || !k.is_multiple_of(CODES_PER_WORD) || !codes.len().is_multiple_of(k) {
        return Err(Error::InvalidArgument(format!(
            "ternary packing needs rows of a multiple of {CODES_PER_WORD} codes: {} codes, K = {k}",
            codes.len()
        )));
    }
    let mut out = vec![0u8; codes.len() / 4];
    for (word, src) in out
        .chunks_exact_mut(4)
        .zip(codes.chunks_exact(CODES_PER_WORD))
    {
        for (c, &v) in src.iter().enumerate() {
            if !(-1..=1).contains(&v) {
                return Err(Error::InvalidArgument(format!(
                    "ternary code {v} outside [-1, 1]"
                )));
            }
            let (j, i) = (c / 4, c % 4);
            word[i] |= ((v + 1) as u8) << (2 * j);
        }
    }
    Ok(out)
}

/// Packed bytes back to codes (`4 * bytes.len()` of them); a stored 3 is an error.
pub fn unpack(bytes: &[u8]) -> Result<Vec<i8>> {
    if !bytes.len().is_multiple_of(4) {
        return Err(Error::InvalidArgument(format!(
            "ternary codes of {} bytes: not whole words",
            bytes.len()
        )));
    }
    let mut out = vec![0i8; 4 * bytes.len()];
    for (dst, word) in out
        .chunks_exact_mut(CODES_PER_WORD)
        .zip(bytes.chunks_exact(4))
    {
        for (i, &b) in word.iter().enumerate() {
            for j in 0..4 {
                let c = (b >> (2 * j)) & 3;
                if c == 3 {
                    return Err(Error::InvalidArgument(
                        "ternary weight holds the unused code 3".into(),
                    ));
                }
                dst[4 * j + i] = c as i8 - 1;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_round_trips_and_matches_the_layout() {
        let codes: Vec<i8> = (0..64).map(|i| ((i * 7 + i / 5) % 3) as i8 - 1).collect();
        let packed = pack(&codes, 32).unwrap();
        assert_eq!(packed.len(), 16);
        assert_eq!(unpack(&packed).unwrap(), codes);
        // column 16 w + 4 j + i sits in byte 4 w + i, bits 2 j
        for (c, &v) in codes.iter().enumerate() {
            let (w, j, i) = (c / 16, (c % 16) / 4, c % 4);
            assert_eq!(
                (packed[4 * w + i] >> (2 * j)) & 3,
                (v + 1) as u8,
                "column {c}"
            );
        }
        assert!(pack(&codes, 24).is_err());
        assert!(pack(&[2; 16], 16).is_err());
        assert!(unpack(&[0xff, 0, 0, 0]).is_err());
        assert!(unpack(&[0, 0, 0]).is_err());
    }

    #[test]
    fn bitnet_codes_follow_the_reference_rule() {
        // amax 127: s = 1, ties go to even
        let (codes, scale) = bitnet_row(&[127.0, 2.5, 3.5, -0.5, -1.5, -127.0, 0.49]);
        assert_eq!(codes, [127, 2, 4, 0, -2, -127, 0]);
        assert_eq!(scale, 1.0);
        let (codes, scale) = bitnet_row(&[2.0, -1.0, 0.01]);
        assert_eq!((codes, scale), (vec![127, -64, 1], 2.0 / 127.0));
        // an all-zero row: amax clamped to 1e-5, codes 0
        let (codes, scale) = bitnet_row(&[0.0; 4]);
        assert_eq!((codes, scale), (vec![0; 4], 1e-5 / 127.0));
    }

    #[test]
    fn absmean_is_per_tensor() {
        let w = [0.5f32, -1.5, 0.2, 0.0, 3.0, -0.3];
        let (codes, step) = absmean(&w);
        assert_eq!(step, 0.9166667);
        assert_eq!(codes, [1, -1, 0, 0, 1, 0]);
        assert_eq!(absmean(&[0.0; 3]), (vec![0; 3], 1e-5));
    }
}
