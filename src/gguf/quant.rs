//! ggml block formats: dequantize to f32 and quantize from f32.
//!
//! Layouts and rounding follow ggml's reference quantizers (`quantize_row_*_ref`): the block
//! scale is computed in f32, stored as f16, and the codes are produced with the f32 inverse
//! scale; Q8_0 rounds half away from zero, the 4/5-bit types truncate `x*id + offset + 0.5`.

use super::GgmlType;
use crate::{Error, Result};
use half::{bf16, f16};

pub(crate) const QK: usize = 32;

/// Dequantizes `dst.len()` elements of type `ty` from `src`.
pub fn dequantize(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<()> {
    let n = dst.len();
    check_len(ty, src.len(), n, "dequantize")?;
    match ty {
        GgmlType::F32 => match bytemuck::try_cast_slice::<u8, f32>(src) {
            Ok(s) if cfg!(target_endian = "little") => dst.copy_from_slice(s),
            _ => {
                for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
                    *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
                }
            }
        },
        // vectorised (F16C/AVX2 where the CPU has it)
        GgmlType::F16 => f16_to_f32(src, dst),
        GgmlType::BF16 => bf16_to_f32(src, dst),
        _ => {
            let block_fn: fn(&[u8], &mut [f32]) = match ty {
                GgmlType::Q8_0 => dequant_q8_0,
                GgmlType::Q4_0 => dequant_q4_0,
                GgmlType::Q4_1 => dequant_q4_1,
                GgmlType::Q5_0 => dequant_q5_0,
                GgmlType::Q5_1 => dequant_q5_1,
                _ => unreachable!("checked by check_len"),
            };
            for (block, out) in src
                .chunks_exact(ty.type_size())
                .zip(dst.chunks_exact_mut(QK))
            {
                block_fn(block, out);
            }
        }
    }
    Ok(())
}

/// Quantizes `src` to `ty` with ggml's reference rounding.
pub fn quantize(ty: GgmlType, src: &[f32]) -> Result<Vec<u8>> {
    let n_bytes = ty
        .bytes_for(src.len() as u64)
        .ok_or_else(|| not_whole_blocks(ty, src.len()))?;
    if !ty.is_supported() {
        return Err(not_supported(ty, "quantize"));
    }
    let mut out = Vec::with_capacity(n_bytes as usize);
    match ty {
        GgmlType::F32 => src.iter().for_each(|x| out.extend(x.to_le_bytes())),
        GgmlType::F16 => src
            .iter()
            .for_each(|x| out.extend(f16::from_f32(*x).to_le_bytes())),
        GgmlType::BF16 => src
            .iter()
            .for_each(|x| out.extend(bf16::from_f32(*x).to_le_bytes())),
        _ => {
            let block_fn: fn(&[f32; QK], &mut Vec<u8>) = match ty {
                GgmlType::Q8_0 => quant_q8_0,
                GgmlType::Q4_0 => quant_q4_0,
                GgmlType::Q4_1 => quant_q4_1,
                GgmlType::Q5_0 => quant_q5_0,
                GgmlType::Q5_1 => quant_q5_1,
                _ => unreachable!("is_supported covers the rest"),
            };
            for block in src.chunks_exact(QK) {
                block_fn(block.try_into().expect("chunks of QK"), &mut out);
            }
        }
    }
    debug_assert_eq!(out.len() as u64, n_bytes);
    Ok(out)
}

fn check_len(ty: GgmlType, src_len: usize, n: usize, op: &'static str) -> Result<()> {
    if !ty.is_supported() {
        return Err(not_supported(ty, op));
    }
    let need = ty
        .bytes_for(n as u64)
        .ok_or_else(|| not_whole_blocks(ty, n))?;
    if src_len as u64 != need {
        return Err(Error::InvalidArgument(format!(
            "{op}: {n} elements of {ty} take {need} bytes, got {src_len}"
        )));
    }
    Ok(())
}

fn not_supported(ty: GgmlType, op: &'static str) -> Error {
    Error::TypeNotSupported {
        op,
        ty: ty.to_string(),
    }
}

fn not_whole_blocks(ty: GgmlType, n: usize) -> Error {
    Error::InvalidArgument(format!(
        "{n} elements is not a whole number of {ty} blocks of {}",
        ty.block_size()
    ))
}

/// Decodes `dst.len()` little-endian f16 values from `src` (which must hold that many).
fn f16_to_f32(src: &[u8], dst: &mut [f32]) {
    let src = &src[..dst.len() * 2];
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("f16c") {
            // SAFETY: features checked; `src` holds `dst.len()` f16 values.
            unsafe { avx2::f16_to_f32(src, dst) };
            return;
        }
    }
    for (d, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *d = half::f16::from_le_bytes([c[0], c[1]]).to_f32();
    }
}

/// Decodes `dst.len()` little-endian bf16 values from `src` (the top half of an f32).
fn bf16_to_f32(src: &[u8], dst: &mut [f32]) {
    let src = &src[..dst.len() * 2];
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: feature checked; `src` holds `dst.len()` bf16 values.
            unsafe { avx2::bf16_to_f32(src, dst) };
            return;
        }
    }
    for (d, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *d = f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16);
    }
}

fn read_f16(b: &[u8]) -> f32 {
    f16::from_le_bytes([b[0], b[1]]).to_f32()
}

/// `d * code` for the symmetric types (see [`symmetric_codes`], the one reader of their
/// codes).
fn dequant_symmetric(ty: GgmlType, b: &[u8], y: &mut [f32]) {
    let mut codes = [0i8; QK];
    let d = symmetric_codes(ty, b, &mut codes).expect("a symmetric type");
    for (y, c) in y.iter_mut().zip(codes) {
        *y = c as f32 * d;
    }
}

fn dequant_q8_0(b: &[u8], y: &mut [f32]) {
    dequant_symmetric(GgmlType::Q8_0, b, y)
}

fn dequant_q4_0(b: &[u8], y: &mut [f32]) {
    dequant_symmetric(GgmlType::Q4_0, b, y)
}

fn dequant_q4_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (read_f16(b), read_f16(&b[2..]));
    for (j, q) in b[4..4 + QK / 2].iter().enumerate() {
        y[j] = (q & 0x0f) as f32 * d + m;
        y[j + QK / 2] = (q >> 4) as f32 * d + m;
    }
}

/// The 5th bits of the 32 codes, bit j for element j.
fn read_qh(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn dequant_q5_0(b: &[u8], y: &mut [f32]) {
    dequant_symmetric(GgmlType::Q5_0, b, y)
}

fn dequant_q5_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (read_f16(b), read_f16(&b[2..]));
    let qh = read_qh(&b[4..]);
    for (j, q) in b[8..8 + QK / 2].iter().enumerate() {
        let hi0 = ((qh >> j) & 1) << 4;
        let hi1 = ((qh >> (j + QK / 2)) & 1) << 4;
        y[j] = ((q & 0x0f) as u32 | hi0) as f32 * d + m;
        y[j + QK / 2] = ((q >> 4) as u32 | hi1) as f32 * d + m;
    }
}

fn inverse(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

/// The element of largest magnitude, keeping its sign (the first one on ties).
fn signed_absmax(x: &[f32; QK]) -> f32 {
    let mut best = 0.0f32;
    for &v in x {
        if v.abs() > best.abs() {
            best = v;
        }
    }
    best
}

fn min_max(x: &[f32; QK]) -> (f32, f32) {
    x.iter()
        .fold((f32::MAX, -f32::MAX), |(lo, hi), &v| (lo.min(v), hi.max(v)))
}

/// One Q8_0 block with ggml's reference rounding: the scale `d = amax / 127` stored as f16,
/// codes `round(x / d)` computed with the f32 inverse (half away from zero, like C's
/// `roundf`). Also the activation quantizer of the integer matmul (`ops::qgemm`).
pub(crate) fn q8_0_block(x: &[f32], codes: &mut [i8; QK]) -> f16 {
    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = inverse(d);
    for (c, v) in codes.iter_mut().zip(x) {
        *c = (v * id).round() as i8;
    }
    f16::from_f32(d)
}

/// Whether `ty` is a symmetric block type, one [`symmetric_codes`] reads.
pub(crate) fn is_symmetric(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q5_0)
}

/// The signed codes and scale of one block of a symmetric type (`x = d * code`): Q8_0,
/// Q4_0 (`nibble - 8`) and Q5_0 (`5 bits - 16`); `None` for other types. `block` holds
/// `ty.type_size()` bytes.
pub(crate) fn symmetric_codes(ty: GgmlType, block: &[u8], codes: &mut [i8; QK]) -> Option<f32> {
    let d = read_f16(block);
    match ty {
        GgmlType::Q8_0 => {
            for (c, q) in codes.iter_mut().zip(&block[2..2 + QK]) {
                *c = *q as i8;
            }
        }
        GgmlType::Q4_0 => {
            for (j, q) in block[2..2 + QK / 2].iter().enumerate() {
                codes[j] = (q & 0x0f) as i8 - 8;
                codes[j + QK / 2] = (q >> 4) as i8 - 8;
            }
        }
        GgmlType::Q5_0 => {
            let qh = read_qh(&block[2..]);
            for (j, q) in block[6..6 + QK / 2].iter().enumerate() {
                let hi0 = (((qh >> j) & 1) << 4) as u8;
                let hi1 = (((qh >> (j + QK / 2)) & 1) << 4) as u8;
                codes[j] = ((q & 0x0f) | hi0) as i8 - 16;
                codes[j + QK / 2] = ((q >> 4) | hi1) as i8 - 16;
            }
        }
        _ => return None,
    }
    Some(d)
}

fn quant_q8_0(x: &[f32; QK], out: &mut Vec<u8>) {
    let mut codes = [0i8; QK];
    out.extend(q8_0_block(x, &mut codes).to_le_bytes());
    out.extend(codes.iter().map(|&c| c as u8));
}

fn quant_q4_0(x: &[f32; QK], out: &mut Vec<u8>) {
    let d = signed_absmax(x) / -8.0;
    let id = inverse(d);
    out.extend(f16::from_f32(d).to_le_bytes());
    let code = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
    out.extend((0..QK / 2).map(|j| code(x[j]) | (code(x[j + QK / 2]) << 4)));
}

fn quant_q4_1(x: &[f32; QK], out: &mut Vec<u8>) {
    let (min, max) = min_max(x);
    let d = (max - min) / 15.0;
    let id = inverse(d);
    out.extend(f16::from_f32(d).to_le_bytes());
    out.extend(f16::from_f32(min).to_le_bytes());
    let code = |v: f32| (((v - min) * id + 0.5) as i8).min(15) as u8;
    out.extend((0..QK / 2).map(|j| code(x[j]) | (code(x[j + QK / 2]) << 4)));
}

fn push_5bit_codes(codes: [u8; QK], out: &mut Vec<u8>) {
    let mut qh = 0u32;
    for (j, c) in codes.iter().enumerate() {
        qh |= ((*c as u32 >> 4) & 1) << j;
    }
    out.extend(qh.to_le_bytes());
    out.extend((0..QK / 2).map(|j| (codes[j] & 0x0f) | ((codes[j + QK / 2] & 0x0f) << 4)));
}

fn quant_q5_0(x: &[f32; QK], out: &mut Vec<u8>) {
    let d = signed_absmax(x) / -16.0;
    let id = inverse(d);
    out.extend(f16::from_f32(d).to_le_bytes());
    push_5bit_codes(x.map(|v| ((v * id + 16.5) as i8).min(31) as u8), out);
}

fn quant_q5_1(x: &[f32; QK], out: &mut Vec<u8>) {
    let (min, max) = min_max(x);
    let d = (max - min) / 31.0;
    let id = inverse(d);
    out.extend(f16::from_f32(d).to_le_bytes());
    out.extend(f16::from_f32(min).to_le_bytes());
    push_5bit_codes(x.map(|v| ((v - min) * id + 0.5) as u8), out);
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    // Unaligned load/store through packed wrappers, as in `ops::kernels`: a plain move. (The
    // std `loadu`/`storeu` intrinsics go through `copy_nonoverlapping`, whose debug-build
    // precondition checks make them ~10x slower in the test profile.)
    #[repr(C, packed)]
    struct Unaligned(__m256);

    #[repr(C, packed)]
    struct Unaligned128(__m128i);

    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256) {
        (*(p as *mut Unaligned)).0 = v;
    }

    /// Requires `dst.len() * 2 <= src.len()` bytes of little-endian bf16.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn bf16_to_f32(src: &[u8], dst: &mut [f32]) {
        let n = dst.len();
        let (ps, pd) = (src.as_ptr(), dst.as_mut_ptr());
        let mut i = 0;
        while i + 8 <= n {
            let h = (*(ps.add(2 * i) as *const Unaligned128)).0;
            let w = _mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h));
            store(pd.add(i), _mm256_castsi256_ps(w));
            i += 8;
        }
        while i < n {
            let b = u16::from_le_bytes([*ps.add(2 * i), *ps.add(2 * i + 1)]) as u32;
            *pd.add(i) = f32::from_bits(b << 16);
            i += 1;
        }
    }

    /// Requires `dst.len() * 2 <= src.len()` bytes of little-endian f16.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn f16_to_f32(src: &[u8], dst: &mut [f32]) {
        let n = dst.len();
        let (ps, pd) = (src.as_ptr(), dst.as_mut_ptr());
        let mut i = 0;
        while i + 8 <= n {
            let h = (*(ps.add(2 * i) as *const Unaligned128)).0;
            store(pd.add(i), _mm256_cvtph_ps(h));
            i += 8;
        }
        while i < n {
            *pd.add(i) = half::f16::from_le_bytes([*ps.add(2 * i), *ps.add(2 * i + 1)]).to_f32();
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect()
    }

    /// The integer matmul's view of a block (codes and scale) is the dequantizer's.
    #[test]
    fn symmetric_codes_times_scale_is_dequantize() {
        let x: Vec<f32> = (0..QK)
            .map(|i| ((i * 7919) % 61) as f32 / 30.0 - 1.0)
            .collect();
        for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0] {
            let bytes = quantize(ty, &x).unwrap();
            let mut deq = vec![0.0f32; QK];
            dequantize(ty, &bytes, &mut deq).unwrap();
            let mut codes = [0i8; QK];
            let d = symmetric_codes(ty, &bytes, &mut codes).unwrap();
            let back: Vec<f32> = codes.iter().map(|&c| c as f32 * d).collect();
            assert_eq!(back, deq, "{ty}");
        }
        let q41 = quantize(GgmlType::Q4_1, &x).unwrap();
        assert!(symmetric_codes(GgmlType::Q4_1, &q41, &mut [0; QK]).is_none());
        // is_symmetric names exactly the types symmetric_codes reads.
        for ty in [
            GgmlType::Q8_0,
            GgmlType::Q4_0,
            GgmlType::Q5_0,
            GgmlType::Q4_1,
            GgmlType::Q5_1,
        ] {
            let bytes = quantize(ty, &x).unwrap();
            let read = symmetric_codes(ty, &bytes, &mut [0; QK]).is_some();
            assert_eq!(is_symmetric(ty), read, "{ty}");
        }
    }

    #[test]
    fn q8_0_block_layout_by_hand() {
        let mut x = [0.0f32; QK];
        x[0] = 127.0;
        x[1] = -62.5; // exactly half: rounds away from zero to -63 (ties-to-even gives -62)
        x[2] = 0.4;
        let bytes = quantize(GgmlType::Q8_0, &x).unwrap();
        assert_eq!(bytes.len(), 34);
        assert_eq!(f16::from_le_bytes([bytes[0], bytes[1]]).to_f32(), 1.0);
        assert_eq!(bytes[2] as i8, 127);
        assert_eq!(bytes[3] as i8, -63);
        assert_eq!(bytes[4] as i8, 0);
    }

    #[test]
    fn q4_0_block_layout_by_hand() {
        let mut x = [0.0f32; QK];
        x[0] = -8.0; // largest magnitude, negative: d = -8 / -8 = 1
        x[16] = 7.0;
        x[1] = 3.0;
        let bytes = quantize(GgmlType::Q4_0, &x).unwrap();
        assert_eq!(read_f16(&bytes), 1.0);
        // element 0 -> low nibble of byte 0, element 16 -> high nibble of byte 0
        assert_eq!(bytes[2], 15 << 4); // low nibble: code 0
        assert_eq!(bytes[3], 11 | (8 << 4));
        let mut y = [0.0f32; QK];
        dequantize(GgmlType::Q4_0, &bytes, &mut y).unwrap();
        assert_eq!((y[0], y[1], y[16], y[17]), (-8.0, 3.0, 7.0, 0.0));
    }

    #[test]
    fn q5_high_bits_go_to_qh() {
        let mut x = [0.0f32; QK];
        x[0] = -16.0; // d = 1, code 0
        x[5] = 15.0; // code 31: high bit set at bit 5
        x[20] = 1.0; // code 17: high bit set at bit 20
        let bytes = quantize(GgmlType::Q5_0, &x).unwrap();
        let qh = read_qh(&bytes[2..]);
        assert_eq!(qh & (1 << 0), 0);
        assert_ne!(qh & (1 << 5), 0);
        assert_ne!(qh & (1 << 20), 0);
        let mut y = [0.0f32; QK];
        dequantize(GgmlType::Q5_0, &bytes, &mut y).unwrap();
        assert_eq!((y[0], y[5], y[20], y[1]), (-16.0, 15.0, 1.0, 0.0));
    }

    #[test]
    fn round_trip_error_is_within_half_a_step() {
        let x = ramp(QK * 5);
        for ty in GgmlType::SUPPORTED {
            let bytes = quantize(ty, &x).unwrap();
            assert_eq!(bytes.len() as u64, ty.bytes_for(x.len() as u64).unwrap());
            let mut y = vec![0.0; x.len()];
            dequantize(ty, &bytes, &mut y).unwrap();
            for (bx, by) in x.chunks(QK).zip(y.chunks(QK)) {
                let (lo, hi) = bx
                    .iter()
                    .fold((f32::MAX, f32::MIN), |(a, b), v| (a.min(*v), b.max(*v)));
                let amax = lo.abs().max(hi.abs());
                let step = match ty {
                    GgmlType::F32 => 0.0,
                    GgmlType::F16 => amax / 1024.0,
                    GgmlType::BF16 => amax / 128.0,
                    GgmlType::Q8_0 => amax / 127.0,
                    GgmlType::Q4_0 => amax / 8.0,
                    GgmlType::Q5_0 => amax / 16.0,
                    GgmlType::Q4_1 => (hi - lo) / 15.0,
                    GgmlType::Q5_1 => (hi - lo) / 31.0,
                    _ => unreachable!(),
                };
                // Q4_0/Q5_0 span [-8d, 7d] (or [-16d, 15d]): the side opposite the largest
                // magnitude clips by up to one step; elsewhere rounding costs half a step.
                let clip = matches!(ty, GgmlType::Q4_0 | GgmlType::Q5_0);
                let bound = if clip { step } else { step * 0.5 };
                for (a, b) in bx.iter().zip(by) {
                    // plus slack for the f16-rounded scale
                    assert!(
                        (a - b).abs() <= bound + amax * 2e-3 + 1e-6,
                        "{ty}: {a} vs {b}"
                    );
                }
            }
        }
    }

    #[test]
    fn wrong_lengths_are_errors() {
        assert!(quantize(GgmlType::Q8_0, &[0.0; 31]).is_err());
        let mut y = [0.0; 32];
        assert!(dequantize(GgmlType::Q8_0, &[0u8; 33], &mut y).is_err());
        assert!(dequantize(GgmlType::Q2_K, &[0u8; 84], &mut [0.0; 256]).is_err());
        let err = quantize(GgmlType::Q6_K, &[0.0; 256]).unwrap_err();
        assert_eq!(err.to_string(), "quantize: type Q6_K is not supported");
    }

    #[test]
    fn half_conversions_match_the_half_crate() {
        let vals: Vec<f32> = (0..37)
            .map(|i| (i as f32 - 18.0) * 0.37)
            .chain([65504.0, -0.0, 6e-8, f32::INFINITY])
            .collect();
        let hb: Vec<u8> = vals
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect();
        let bb: Vec<u8> = vals
            .iter()
            .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
            .collect();
        let mut d = vec![0.0f32; vals.len()];
        // Odd start offset too (misaligned).
        let mut shifted = vec![0u8];
        shifted.extend_from_slice(&hb);
        for src in [&hb[..], &shifted[1..]] {
            f16_to_f32(src, &mut d);
            for (got, v) in d.iter().zip(&vals) {
                assert_eq!(got.to_bits(), half::f16::from_f32(*v).to_f32().to_bits());
            }
        }
        bf16_to_f32(&bb, &mut d);
        for (got, v) in d.iter().zip(&vals) {
            assert_eq!(got.to_bits(), half::bf16::from_f32(*v).to_f32().to_bits());
        }
    }
}
