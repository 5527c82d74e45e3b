//! FoldQuant's exact arithmetic (vla.cpp's W8A8 / W4A8 / W4A4 sites; docs/FOLDQUANT.md
//! section 4): the activation prologue (optional fused RMSNorm, division by `ascale`, the
//! block Sylvester-Hadamard butterfly, per-token quantization), the integer GEMM with its
//! f32 epilogue, INT4 nibble packing, and the offline weight export of vla.cpp's
//! uncalibrated `foldquant_fake_export.py` (rotation + per-row scales).
//!
//! Every float step is one IEEE f32 operation rounded to nearest-even, in the reference's
//! order, so that codes and outputs match vla.cpp's CPU reference bit for bit. rustc never
//! contracts `a * b + c` into a fused multiply-add (it emits no `contract` flag), so plain
//! `p + v * v` is two roundings as in C++ built with `-ffp-contract=off`; nothing here may
//! use `mul_add`, FMA intrinsics or the `gemm` crate. Clamps are `max` then `min` (NaN goes
//! to `-qmax` as in C++), divisions are true divisions where the reference divides.

use super::qgemm::{int_dots, IntTiles};
pub use super::ternary::ActRule;
use super::ternary::{self, bitnet_row};
use crate::gguf::GgmlType;
use crate::{Error, Result, Tensor};
use rayon::prelude::*;

/// The settings of one FoldQuant linear site (the graph's `Op::FqLinear`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FqParams {
    /// 8, 4 (two codes a byte) or 2 (ternary, [`super::ternary`]'s packing).
    pub weight_bits: u32,
    pub act_bits: u32,
    pub act: ActRule,
    /// Rotation block (1: none).
    pub block: usize,
    pub clip: f32,
    /// Where `ascale` divides, when the site has one.
    pub fold: Option<FoldOrder>,
    /// `(eps, offset)` of a fused RMSNorm (gain `w + offset`).
    pub norm: Option<(f32, f32)>,
    pub addend: bool,
}

/// Where a site's `ascale` divides the activation: before or after the rotation
/// (`<arch>.quant.action_fold_order`; anything but `"before"` means after).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoldOrder {
    Before,
    After,
}

/// The rotation block of a site with `k` inputs: the nominal size halved until it divides
/// `k`; 1 (no rotation) below 2. `nominal` must be a power of two (callers check).
pub fn rotation_block_for(k: usize, nominal: usize) -> usize {
    let mut bs = nominal;
    while bs >= 2 && !k.is_multiple_of(bs) {
        bs /= 2;
    }
    if bs < 2 {
        1
    } else {
        bs
    }
}

/// `f32(1 / sqrt(bs))`, computed in f64 and rounded once.
fn inv_sqrt_block(bs: usize) -> f32 {
    (1.0 / (bs as f64).sqrt()) as f32
}

/// The natural-order Sylvester-Hadamard butterfly over every `bs`-long block of `v`, scaled
/// by `1/sqrt(bs)`: `H[i][j] = (-1)^popcount(i & j) / sqrt(bs)`. No-op for `bs <= 1`.
pub fn rotate(v: &mut [f32], bs: usize) {
    if bs <= 1 {
        return;
    }
    let c = inv_sqrt_block(bs);
    for block in v.chunks_mut(bs) {
        let mut h = 1;
        while h < bs {
            for i in (0..bs).step_by(2 * h) {
                for j in i..i + h {
                    let (u, w) = (block[j], block[j + h]);
                    block[j] = u + w;
                    block[j + h] = u - w;
                }
            }
            h *= 2;
        }
        for x in block.iter_mut() {
            *x *= c;
        }
    }
}

/// The fused RMSNorm of an LLM q/k/v or gate/up site: 32 partial sums of squares (element
/// `k` into partial `(k / 64) mod 32`), combined by the xor tree of a CUDA warp, then
/// `(x * rstd) * gamma`.
pub fn fused_rms_norm(x: &[f32], gamma: &[f32], eps: f32) -> Vec<f32> {
    let mut p = [0f32; 32];
    for (k, &v) in x.iter().enumerate() {
        let l = (k / 64) % 32;
        let sq = v * v;
        p[l] += sq;
    }
    for off in [16, 8, 4, 2, 1] {
        let prev = p;
        for (l, s) in p.iter_mut().enumerate() {
            *s = prev[l] + prev[l ^ off];
        }
    }
    let mean = p[0] / x.len() as f32;
    let rstd = 1.0 / (mean + eps).sqrt();
    x.iter().zip(gamma).map(|(&v, &g)| (v * rstd) * g).collect()
}

/// `qmax` of a width: 127 for 8 bits, 7 for 4.
pub fn qmax(bits: u32) -> i32 {
    if bits == 4 {
        7
    } else {
        127
    }
}

/// One token row quantized per token: `scale = max(clip * amax / qmax, 1e-12)`, codes
/// `round_half_even(y * (1 / scale))` clamped to `+-qmax`.
pub fn quantize_row(y: &[f32], bits: u32, clip: f32) -> (Vec<i8>, f32) {
    let q = qmax(bits);
    let amax = y.iter().fold(0f32, |m, v| m.max(v.abs()));
    let mut scale = (clip * amax) / q as f32;
    if scale < 1e-12 {
        scale = 1e-12;
    }
    let inv = 1.0 / scale;
    let qf = q as f32;
    let codes = y
        .iter()
        .map(|&v| (v * inv).round_ties_even().max(-qf).min(qf) as i8)
        .collect();
    (codes, scale)
}

/// How one site's activation row becomes codes.
#[derive(Clone, Copy, Debug)]
pub struct ActPrologue<'a> {
    /// The folded RMSNorm gains and eps, for fused-norm sites.
    pub norm: Option<(&'a [f32], f32)>,
    /// The SmoothQuant divisor and where it applies.
    pub ascale: Option<(&'a [f32], FoldOrder)>,
    /// Rotation block (1: none).
    pub block: usize,
    pub bits: u32,
    pub clip: f32,
    pub rule: ActRule,
}

/// One token row through the prologue: its codes and per-token scale.
pub fn act_row(x: &[f32], p: &ActPrologue) -> (Vec<i8>, f32) {
    let mut y = match p.norm {
        Some((gamma, eps)) => fused_rms_norm(x, gamma, eps),
        None => x.to_vec(),
    };
    let divide = |y: &mut [f32], a: &[f32]| y.iter_mut().zip(a).for_each(|(v, &s)| *v /= s);
    if let Some((a, FoldOrder::Before)) = p.ascale {
        divide(&mut y, a);
    }
    rotate(&mut y, p.block);
    if let Some((a, FoldOrder::After)) = p.ascale {
        divide(&mut y, a);
    }
    match p.rule {
        ActRule::FoldQuant => quantize_row(&y, p.bits, p.clip),
        ActRule::BitNet => bitnet_row(&y),
    }
}

/// The bytes a row of `k` codes is stored in at `bits` a code (8, 4 or 2).
pub fn row_bytes(k: usize, bits: u32) -> usize {
    match bits {
        4 => k / 2,
        2 => k / 4,
        _ => k,
    }
}

/// Stored codes (`bits` a code) as one i8 each.
pub fn unpack_codes(stored: &[u8], bits: u32) -> Result<Vec<i8>> {
    match bits {
        4 => Ok(unpack_int4(stored)),
        2 => ternary::unpack(stored),
        _ => Ok(bytemuck::cast_slice(stored).to_vec()),
    }
}

/// `Σ a·b` of two code rows, in i32 (exact in any order): the portable loop.
fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| i32::from(x) * i32::from(y))
        .sum()
}

/// Integer dot products on x86-64: AVX512-VNNI (`vpdpbusd` on `a + 128` as bytes, the
/// `128 Σ b` taken off) or AVX2 (`vpmaddwd` on i16-widened codes). Both exact: i8 products
/// and their sums stay far inside i32 for any K a site has.
#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;

    #[derive(Clone, Copy, PartialEq, Eq)]
    pub enum Level {
        Vnni,
        Avx2,
        None,
    }

    pub fn level() -> Level {
        static LEVEL: std::sync::OnceLock<Level> = std::sync::OnceLock::new();
        *LEVEL.get_or_init(|| {
            if std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512bw")
                && std::is_x86_feature_detected!("avx512vnni")
            {
                Level::Vnni
            } else if std::is_x86_feature_detected!("avx2") {
                Level::Avx2
            } else {
                Level::None
            }
        })
    }

    /// `Σ (a_u8[i] - 128) b[i]`, given `b_sum = Σ b[i]`.
    ///
    /// # Safety
    /// The CPU has avx512f, avx512bw and avx512vnni; `a_u8.len() == b.len()`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn dot_vnni(a_u8: &[u8], b: &[i8], b_sum: i32) -> i32 {
        let n = a_u8.len() / 64 * 64;
        let mut acc = _mm512_setzero_si512();
        let mut i = 0;
        while i < n {
            // SAFETY: i + 64 <= n <= len of both slices.
            let (va, vb) = unsafe {
                (
                    _mm512_loadu_si512(a_u8.as_ptr().add(i).cast()),
                    _mm512_loadu_si512(b.as_ptr().add(i).cast()),
                )
            };
            acc = _mm512_dpbusd_epi32(acc, va, vb);
            i += 64;
        }
        let tail: i32 = (a_u8[n..].iter().zip(&b[n..]))
            .map(|(&x, &y)| i32::from(x) * i32::from(y))
            .sum();
        _mm512_reduce_add_epi32(acc) + tail - 128 * b_sum
    }

    /// `acc[t][r] = Σ_{i < k64} a[t][i] b[r][i]` for 4 rows of biased codes (`q + 128`) and
    /// 4 weight rows, 16 accumulators in registers (one horizontal sum each at the end).
    ///
    /// # Safety
    /// The CPU has avx512f, avx512bw and avx512vnni; every slice holds at least `k64` bytes
    /// and `k64` is a multiple of 64.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn block_vnni(a: [&[u8]; 4], b: [&[i8]; 4], k64: usize) -> [[i32; 4]; 4] {
        let mut acc = [[_mm512_setzero_si512(); 4]; 4];
        let mut i = 0;
        while i < k64 {
            // SAFETY: i + 64 <= k64 <= the length of every slice.
            let va: [__m512i; 4] =
                std::array::from_fn(|t| unsafe { _mm512_loadu_si512(a[t].as_ptr().add(i).cast()) });
            let vb: [__m512i; 4] =
                std::array::from_fn(|r| unsafe { _mm512_loadu_si512(b[r].as_ptr().add(i).cast()) });
            for t in 0..4 {
                for r in 0..4 {
                    acc[t][r] = _mm512_dpbusd_epi32(acc[t][r], va[t], vb[r]);
                }
            }
            i += 64;
        }
        std::array::from_fn(|t| std::array::from_fn(|r| _mm512_reduce_add_epi32(acc[t][r])))
    }

    /// `Σ a[i] b[i]`.
    ///
    /// # Safety
    /// The CPU has avx2; `a.len() == b.len()`.
    #[target_feature(enable = "avx2")]
    pub unsafe fn dot_avx2(a: &[i8], b: &[i8]) -> i32 {
        let n = a.len() / 16 * 16;
        let mut acc = _mm256_setzero_si256();
        let mut i = 0;
        while i < n {
            // SAFETY: i + 16 <= n <= len of both slices.
            let (va, vb) = unsafe {
                (
                    _mm256_cvtepi8_epi16(_mm_loadu_si128(a.as_ptr().add(i).cast())),
                    _mm256_cvtepi8_epi16(_mm_loadu_si128(b.as_ptr().add(i).cast())),
                )
            };
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(va, vb));
            i += 16;
        }
        let mut lanes = [0i32; 8];
        // SAFETY: 8 i32 lanes into an 8-element array.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), acc) };
        let tail: i32 = (a[n..].iter().zip(&b[n..]))
            .map(|(&x, &y)| i32::from(x) * i32::from(y))
            .sum();
        lanes.iter().sum::<i32>() + tail
    }
}

/// One token's codes as the integer dot wants them: as they are, and as `q + 128` bytes
/// for VNNI.
struct TokenCodes {
    codes: Vec<i8>,
    /// Empty where the CPU has no VNNI (nothing reads it).
    biased: Vec<u8>,
    scale: f32,
}

impl TokenCodes {
    fn new(codes: Vec<i8>, scale: f32) -> Self {
        #[cfg(target_arch = "x86_64")]
        let vnni = simd::level() == simd::Level::Vnni;
        #[cfg(not(target_arch = "x86_64"))]
        let vnni = false;
        let biased = match vnni {
            true => codes.iter().map(|&c| (c as u8) ^ 0x80).collect(),
            false => Vec::new(),
        };
        TokenCodes {
            codes,
            biased,
            scale,
        }
    }
}

/// `Σ q·w` for a token and one weight row (`w_sum = Σ w`), with the fastest exact kernel
/// the CPU has.
fn dot_token(t: &TokenCodes, w: &[i8], w_sum: i32) -> i32 {
    #[cfg(target_arch = "x86_64")]
    match simd::level() {
        // SAFETY: the features were detected; the rows have the same length (K).
        simd::Level::Vnni => return unsafe { simd::dot_vnni(&t.biased, w, w_sum) },
        simd::Level::Avx2 => return unsafe { simd::dot_avx2(&t.codes, w) },
        simd::Level::None => {}
    }
    let _ = w_sum;
    dot_i8(&t.codes, w)
}

/// The epilogue of one output: `((f32)acc * scale) * wscale + bias` (the bias 0.0 when
/// absent, as the reference adds it), each step rounded.
fn epilogue(acc: i32, scale: f32, wscale: f32, bias: f32) -> f32 {
    let t = (acc as f32 * scale) * wscale;
    t + bias
}

/// One token's outputs: the epilogue of `Σ q·w` for every row of the weight codes
/// `w [N, K]` (one i8 per code: unpacked).
pub fn gemm_row(q: &[i8], scale: f32, w: &[i8], wscale: &[f32], bias: Option<&[f32]>) -> Vec<f32> {
    w.chunks(q.len())
        .zip(wscale)
        .enumerate()
        .map(|(n, (row, &ws))| epilogue(dot_i8(row, q), scale, ws, bias.map_or(0.0, |b| b[n])))
        .collect()
}

/// INT4 codes (each in [-8, 7]) packed two a byte, the even column in the low nibble.
pub fn pack_int4(codes: &[i8]) -> Vec<u8> {
    codes
        .chunks(2)
        .map(|p| (p[0] as u8 & 0x0F) | ((p.get(1).copied().unwrap_or(0) as u8 & 0x0F) << 4))
        .collect()
}

/// Two's-complement nibbles back to codes: `2 * bytes.len()` values.
pub fn unpack_int4(bytes: &[u8]) -> Vec<i8> {
    let mut out = vec![0i8; 2 * bytes.len()];
    // a plain indexed loop (the compiler vectorises it; a flat_map did not)
    for (o, &b) in out.chunks_exact_mut(2).zip(bytes) {
        o[0] = ((b << 4) as i8) >> 4;
        o[1] = (b as i8) >> 4;
    }
    out
}

/// One `[N, K]` weight's rows rotated by the block Hadamard (`W · H`; `H` is symmetric),
/// each value a dense f64 sum rounded to f32 once (`fold_weight` of the export script).
pub fn fold_weight(w: &[f32], k: usize, block: usize) -> Vec<f32> {
    if block <= 1 {
        return w.to_vec();
    }
    let c = 1.0 / (block as f64).sqrt();
    let mut out = vec![0f32; w.len()];
    // rows in parallel; each value's sum is the same sequence of f64 adds whatever the split
    out.par_chunks_mut(k.max(1))
        .zip(w.par_chunks(k.max(1)))
        .for_each(|(dst, row)| {
            for (j, d) in dst.iter_mut().enumerate() {
                let (b0, jj) = (j / block * block, j % block);
                let sum: f64 = (0..block)
                    .map(|i| match (i & jj).count_ones() % 2 {
                        0 => f64::from(row[b0 + i]),
                        _ => -f64::from(row[b0 + i]),
                    })
                    .sum();
                *d = (sum * c) as f32;
            }
        });
    out
}

/// The uncalibrated export of one `[N, K]` f32 weight (`foldquant_fake_export.py`):
/// [`fold_weight`], then per row `wscale = max(amax / qmax, 1e-12)` and codes
/// `clamp(round_half_even(w / wscale))` (a true division). Returns the codes (one i8 each)
/// and the scales.
pub fn export_weight(w: &[f32], k: usize, block: usize, bits: u32) -> (Vec<i8>, Vec<f32>) {
    let q = qmax(bits) as f32;
    let folded = fold_weight(w, k, block);
    let mut codes = Vec::with_capacity(w.len());
    let mut scales = Vec::with_capacity(w.len() / k.max(1));
    for row in folded.chunks(k) {
        let amax = row.iter().fold(0f32, |m, v| m.max(v.abs()));
        let ws = (amax / q).max(1e-12);
        scales.push(ws);
        codes.extend(
            row.iter()
                .map(|&v| (v / ws).round_ties_even().max(-q).min(q) as i8),
        );
    }
    (codes, scales)
}

/// `Σ q·w` of every token of `acts` with every weight row of `wb` (`[rows, k]` codes; `sums`
/// their row sums), token-major: 4 x 4 register blocks on VNNI, pairwise otherwise.
fn dots(acts: &[TokenCodes], wb: &[i8], k: usize, sums: &[i32]) -> Vec<i32> {
    let w: Vec<&[i8]> = wb.chunks(k).collect();
    let (nt, nr) = (acts.len(), w.len());
    let mut out = vec![0i32; nt * nr];
    let mut done = (0, 0); // tokens x rows covered by whole 4 x 4 blocks
    #[cfg(target_arch = "x86_64")]
    if simd::level() == simd::Level::Vnni {
        let k64 = k / 64 * 64;
        let (bt, br) = (nt / 4 * 4, nr / 4 * 4);
        let sums64: Vec<i32> = (w.iter())
            .map(|r| r[..k64].iter().map(|&x| i32::from(x)).sum())
            .collect();
        for t0 in (0..bt).step_by(4) {
            for r0 in (0..br).step_by(4) {
                let a = std::array::from_fn(|t| &acts[t0 + t].biased[..]);
                let b = std::array::from_fn(|r| w[r0 + r]);
                // SAFETY: VNNI detected; rows are k >= k64 bytes long, k64 a multiple of 64.
                let acc = unsafe { simd::block_vnni(a, b, k64) };
                for (t, row) in acc.iter().enumerate() {
                    for (r, &v) in row.iter().enumerate() {
                        let tail = dot_i8(&acts[t0 + t].codes[k64..], &w[r0 + r][k64..]);
                        out[(t0 + t) * nr + r0 + r] = v - 128 * sums64[r0 + r] + tail;
                    }
                }
            }
        }
        done = (bt, br);
    }
    for (t, act) in acts.iter().enumerate() {
        for (r, wr) in w.iter().enumerate() {
            if t < done.0 && r < done.1 {
                continue;
            }
            out[t * nr + r] = dot_token(act, wr, sums[r]);
        }
    }
    out
}

/// The codes of an FqLinear site packed once for the VNNI tile kernel ([`IntTiles`]; INT4
/// codes unpacked first, ternary ones kept two bits a code), or `None` where that kernel does not run (or the
/// codes are damaged: the op then reports it). The cpu backend makes them at compile.
pub fn int_tiles(codes: &Tensor, p: &FqParams) -> Option<IntTiles> {
    let [n, row] = codes.shape()[..] else {
        return None;
    };
    match p.weight_bits {
        8 => IntTiles::new(bytemuck::cast_slice(codes.raw_bytes()), n, row),
        // ternary tiles keep two bits a code
        2 => IntTiles::ternary(codes.raw_bytes(), n, 4 * row),
        bits => {
            let all = unpack_codes(codes.raw_bytes(), bits).ok()?;
            IntTiles::new(&all, n, all.len() / n.max(1))
        }
    }
}

/// [`crate::graph::Op::FqLinear`] on the cpu (`gain`: the fused RMSNorm's, with `p.norm`):
/// each row of `x [.., K]` through
/// [`act_row`] and [`gemm_row`] against `codes [N, K]` (I8; INT4 `[N, K / 2]`, two a byte,
/// unpacked a block of rows at a time), then the addend (`[N]`: the
/// bias of the epilogue; the output's shape: a residual added after it). Rows in parallel.
/// With `tiles` (the same codes packed by [`int_tiles`]) the integer sums come from the VNNI
/// tile kernel instead: the same sums, so the same bits.
#[allow(clippy::too_many_arguments)]
pub fn linear(
    x: &Tensor,
    codes: &Tensor,
    wscale: &Tensor,
    ascale: Option<&Tensor>,
    gain: Option<&Tensor>,
    addend: Option<&Tensor>,
    p: &FqParams,
    tiles: Option<&IntTiles>,
) -> Result<Tensor<'static>> {
    let (xs, cs) = (x.shape(), codes.shape());
    let bad = |why: String| Error::shape("fq_linear", why);
    let (Some(&k), [n, ck]) = (xs.last(), cs) else {
        return Err(bad(format!(
            "x {xs:?}, codes {cs:?}: need x [.., K], codes [N, K]"
        )));
    };
    let n = *n;
    // INT4 codes are stored two a byte (low nibble first), ternary ones four
    let row_bytes = row_bytes(k, p.weight_bits);
    if *ck != row_bytes || codes.dtype() != GgmlType::I8 || wscale.numel() != n {
        return Err(bad(format!(
            "x {xs:?}, codes {cs:?} {}, wscale {:?}",
            codes.dtype(),
            wscale.shape()
        )));
    }
    let x = x.f32_cow()?;
    let w: &[i8] = bytemuck::cast_slice(codes.raw_bytes());
    let ws = wscale.f32_cow()?;
    let a = ascale.map(|t| t.f32_cow()).transpose()?;
    let c = addend.map(|t| t.f32_cow()).transpose()?;
    let rows = x.len() / k.max(1);
    let (bias, residual) = match &c {
        Some(c) if c.len() == n => (Some(&c[..]), None),
        Some(c) if c.len() == rows * n => (None, Some(&c[..])),
        Some(c) => {
            return Err(bad(format!(
                "addend of {} values for {rows} x {n}",
                c.len()
            )))
        }
        None => (None, None),
    };
    if a.as_ref().is_some_and(|a| a.len() != k) {
        return Err(bad(format!(
            "ascale of {} values for K = {k}",
            a.map_or(0, |a| a.len())
        )));
    }
    // the fused norm's gain, `w + offset` in f32 (vla.cpp adds Gemma's 1 at load)
    let gamma: Option<Vec<f32>> = match (gain, p.norm) {
        (Some(g), Some((_, offset))) => Some(g.f32_cow()?.iter().map(|&w| w + offset).collect()),
        _ => None,
    };
    if gamma.as_ref().is_some_and(|g| g.len() != k) {
        let got = gamma.map_or(0, |g| g.len());
        return Err(bad(format!("norm gain of {got} values for K = {k}")));
    }
    let prologue = ActPrologue {
        norm: gamma.as_deref().zip(p.norm.map(|n| n.0)),
        ascale: a.as_deref().zip(p.fold),
        block: p.block,
        bits: p.act_bits,
        clip: p.clip,
        rule: p.act,
    };
    // every row's codes first, then the weights streamed once for all rows (a block of
    // weight rows at a time against every row's codes)
    let acts: Vec<TokenCodes> = x
        .par_chunks(k.max(1))
        .map(|row| {
            let (codes, scale) = act_row(row, &prologue);
            TokenCodes::new(codes, scale)
        })
        .collect();
    let tiled = tiles.filter(|t| t.shape() == (n, k) && acts.iter().all(|a| a.biased.len() == k));
    let mut out = match tiled {
        Some(t) => tiled_outputs(&acts, t, &ws, bias)?,
        None => blocked_outputs(&acts, w, row_bytes, k, n, p, &ws, bias)?,
    };
    if let Some(res) = residual {
        out.iter_mut().zip(res).for_each(|(o, r)| *o += r);
    }
    let mut shape = xs.to_vec();
    *shape.last_mut().expect("checked non-empty") = n;
    Tensor::from_f32(shape, out)
}

/// Every token's outputs `[rows, n]` from the VNNI tile kernel's int32 sums and the epilogue.
fn tiled_outputs(
    acts: &[TokenCodes],
    t: &IntTiles,
    ws: &[f32],
    bias: Option<&[f32]>,
) -> Result<Vec<f32>> {
    let n = t.shape().0;
    let biased: Vec<&[u8]> = acts.iter().map(|a| &a.biased[..]).collect();
    let acc = int_dots(&biased, t)?;
    let mut out = vec![0f32; acts.len() * n];
    out.par_chunks_mut(n.max(1))
        .zip(acts.par_iter())
        .enumerate()
        .for_each(|(r, (o, act))| {
            for (j, y) in o.iter_mut().enumerate() {
                let b = bias.map_or(0.0, |b| b[j]);
                *y = epilogue(acc[r * n + j], act.scale, ws[j], b);
            }
        });
    Ok(out)
}

/// Every token's outputs `[rows, n]`, the stored codes `w` (`row_bytes` a row) streamed in
/// blocks of 16 weight rows against all tokens' codes.
#[allow(clippy::too_many_arguments)]
fn blocked_outputs(
    acts: &[TokenCodes],
    w: &[i8],
    row_bytes: usize,
    k: usize,
    n: usize,
    p: &FqParams,
    ws: &[f32],
    bias: Option<&[f32]>,
) -> Result<Vec<f32>> {
    let rows = acts.len();
    const ROWS_PER_JOB: usize = 16;
    let blocks: Vec<Vec<f32>> = w
        .par_chunks(row_bytes.max(1) * ROWS_PER_JOB)
        .enumerate()
        .map(|(b, stored)| {
            let n0 = b * ROWS_PER_JOB;
            let unpacked;
            let wb = match p.weight_bits {
                8 => stored,
                bits => {
                    unpacked = unpack_codes(bytemuck::cast_slice(stored), bits)?;
                    &unpacked[..]
                }
            };
            let sums: Vec<i32> = wb
                .chunks(k)
                .map(|r| r.iter().map(|&v| i32::from(v)).sum())
                .collect();
            let acc = dots(acts, wb, k, &sums);
            let nr = sums.len();
            let mut part = Vec::with_capacity(acc.len());
            for (t, act) in acts.iter().enumerate() {
                for j in 0..nr {
                    let b = bias.map_or(0.0, |b| b[n0 + j]);
                    part.push(epilogue(acc[t * nr + j], act.scale, ws[n0 + j], b));
                }
            }
            Ok(part)
        })
        .collect::<Result<_>>()?;
    let mut out = vec![0f32; rows * n];
    for (b, part) in blocks.iter().enumerate() {
        let (n0, width) = (b * ROWS_PER_JOB, part.len() / rows.max(1));
        for (r, vals) in part.chunks(width.max(1)).enumerate() {
            out[r * n + n0..r * n + n0 + width].copy_from_slice(vals);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain W8A8 site prologue at rotation 64.
    const W8A8_ROT64: ActPrologue<'static> = ActPrologue {
        norm: None,
        ascale: None,
        block: 64,
        bits: 8,
        clip: 1.0,
        rule: ActRule::FoldQuant,
    };

    /// vla.cpp's test input: a 32-bit LCG, each value `((s >> 8) & 0xFFFF) / 65535 * 2 - 1`
    /// in f32.
    struct Lcg(u32);
    impl Lcg {
        fn next(&mut self) -> f32 {
            self.0 = self.0.wrapping_mul(1664525).wrapping_add(1013904223);
            ((self.0 >> 8) & 0xFFFF) as f32 / 65535.0 * 2.0 - 1.0
        }
    }

    fn fnv1a(bytes: impl Iterator<Item = u8>) -> u64 {
        bytes.fold(0xcbf29ce484222325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
        })
    }

    /// The SIMD integer dots (each the CPU has) give the portable loop's sums, over odd
    /// lengths and the extreme codes.
    #[test]
    fn integer_dots_match_the_portable_loop() {
        let mut r = Lcg(11);
        for len in [0, 1, 15, 16, 17, 63, 64, 65, 130, 2560] {
            let mut code = |i: usize| match i % 7 {
                0 => 127,
                1 => -127,
                _ => (r.next() * 127.0).round() as i8,
            };
            let a: Vec<i8> = (0..len).map(&mut code).collect();
            let b: Vec<i8> = (0..len).map(&mut code).collect();
            let want = dot_i8(&a, &b);
            let t = TokenCodes::new(a.clone(), 1.0);
            let b_sum: i32 = b.iter().map(|&v| i32::from(v)).sum();
            assert_eq!(dot_token(&t, &b, b_sum), want, "len {len}");
            #[cfg(target_arch = "x86_64")]
            {
                use std::arch::is_x86_feature_detected as has;
                if has!("avx2") {
                    // SAFETY: detected just above.
                    assert_eq!(unsafe { simd::dot_avx2(&a, &b) }, want, "avx2 len {len}");
                }
                if has!("avx512f") && has!("avx512bw") && has!("avx512vnni") {
                    // SAFETY: detected just above.
                    let got = unsafe { simd::dot_vnni(&t.biased, &b, b_sum) };
                    assert_eq!(got, want, "vnni len {len}");
                }
            }
        }
    }

    /// The blocked dots (4 x 4 on VNNI) give the pairwise loop's sums for token and row
    /// counts around the block size and K with and without a tail past 64.
    #[test]
    fn blocked_dots_match_pairs() {
        let mut r = Lcg(5);
        for k in [64, 96, 130, 256] {
            for (nt, nr) in [(1, 1), (4, 4), (5, 7), (9, 16), (3, 4)] {
                let mut code = || (r.next() * 127.0).round() as i8;
                let acts: Vec<TokenCodes> = (0..nt)
                    .map(|_| TokenCodes::new((0..k).map(|_| code()).collect(), 1.0))
                    .collect();
                let wb: Vec<i8> = (0..nr * k).map(|_| code()).collect();
                let sums: Vec<i32> = wb
                    .chunks(k)
                    .map(|w| w.iter().map(|&v| i32::from(v)).sum())
                    .collect();
                let got = dots(&acts, &wb, k, &sums);
                for (t, a) in acts.iter().enumerate() {
                    for (j, w) in wb.chunks(k).enumerate() {
                        assert_eq!(got[t * nr + j], dot_i8(&a.codes, w), "k {k} t {t} row {j}");
                    }
                }
            }
        }
    }

    /// vla.cpp's golden checksum (`test_foldquant_cpu_op.cpp` `FQ_GOLDEN_FNV`): the W8A8
    /// codes of 5 tokens of K = 128 at rotation 64.
    #[test]
    fn activation_codes_match_vla_cpp_golden_checksum() {
        let mut r = Lcg(0x5eed1234);
        let (k, t) = (128, 5);
        let x: Vec<f32> = (0..k * t).map(|_| 4.0 * r.next()).collect();
        let p = W8A8_ROT64;
        let codes: Vec<i8> = x.chunks(k).flat_map(|row| act_row(row, &p).0).collect();
        assert_eq!(codes.len(), 640);
        assert_eq!(fnv1a(codes.iter().map(|&c| c as u8)), 0xb97c1c173d2d0278);
    }

    /// `test_foldquant_ref.py`'s epilogue case.
    #[test]
    fn epilogue_small_case() {
        let out = gemm_row(&[5, 6], 2.0, &[1, 2, 3, 4], &[0.5, 0.25], Some(&[1.0, 0.0]));
        assert_eq!(out, vec![18.0, 19.5]);
    }

    #[test]
    fn int4_nibbles() {
        assert_eq!(pack_int4(&[-7, 7]), vec![0x79]);
        let codes = [-7, 7, 0, -1, 3, -7, 1, 2];
        assert_eq!(unpack_int4(&pack_int4(&codes)), codes.to_vec());
    }

    #[test]
    fn rotation_blocks() {
        for (k, want) in [(2048, 64), (480, 32), (100, 4), (7, 1)] {
            assert_eq!(rotation_block_for(k, 64), want, "{k}");
        }
    }

    /// The butterfly is the orthonormal Hadamard: twice is the identity, and a weight
    /// exported at the same block gives the float product back (within quantization).
    #[test]
    fn rotation_is_orthonormal_and_export_preserves_products() {
        let mut r = Lcg(7);
        let v: Vec<f32> = (0..128).map(|_| r.next()).collect();
        let mut twice = v.clone();
        rotate(&mut twice, 64);
        rotate(&mut twice, 64);
        for (a, b) in twice.iter().zip(&v) {
            assert!((a - b).abs() < 1e-6);
        }
        let (k, n) = (128, 8);
        let w: Vec<f32> = (0..n * k).map(|_| r.next()).collect();
        let want: Vec<f32> = w
            .chunks(k)
            .map(|row| row.iter().zip(&v).map(|(a, b)| a * b).sum())
            .collect();
        // unquantized: (W H)(H v) = W v
        let mut rv = v.clone();
        rotate(&mut rv, 64);
        let folded = fold_weight(&w, k, 64);
        for (row, &y) in folded.chunks(k).zip(&want) {
            let got: f32 = row.iter().zip(&rv).map(|(a, b)| a * b).sum();
            assert!((got - y).abs() < 1e-4, "{got} vs {y}");
        }
        // quantized W8A8: within a few percent (relative L2)
        let (codes, ws) = export_weight(&w, k, 64, 8);
        let p = W8A8_ROT64;
        let (q, s) = act_row(&v, &p);
        let got = gemm_row(&q, s, &codes, &ws, None);
        let l2 = |v: &mut dyn Iterator<Item = f32>| v.map(|x| x * x).sum::<f32>().sqrt();
        let err = l2(&mut got.iter().zip(&want).map(|(a, b)| a - b));
        let rel = err / l2(&mut want.iter().copied());
        assert!(rel < 0.05, "relative L2 {rel}: {got:?} vs {want:?}");
    }

    /// A site's activations `[rows, k]` (in +-4), weight scales and bias (`[n]`), drawn
    /// from `r`.
    fn site_inputs(
        r: &mut Lcg,
        rows: usize,
        k: usize,
        n: usize,
    ) -> (Tensor<'static>, Tensor<'static>, Tensor<'static>) {
        let x: Vec<f32> = (0..rows * k).map(|_| 4.0 * r.next()).collect();
        let ws: Vec<f32> = (0..n).map(|_| 0.01 + 0.02 * r.next().abs()).collect();
        let bias: Vec<f32> = (0..n).map(|_| r.next()).collect();
        (
            Tensor::from_f32(vec![rows, k], x).unwrap(),
            Tensor::from_f32(vec![n], ws).unwrap(),
            Tensor::from_f32(vec![n], bias).unwrap(),
        )
    }

    /// INT4 codes stored two a byte give what the same codes one a byte give (rows in
    /// blocks of 16, a partial last block, a bias).
    #[test]
    fn packed_int4_codes_match_unpacked() {
        let mut r = Lcg(7);
        let (rows, k, n) = (5, 128, 37);
        let (x, ws, bias) = site_inputs(&mut r, rows, k, n);
        let codes: Vec<i8> = (0..n * k).map(|_| (r.next() * 7.0).round() as i8).collect();
        let bytes: Vec<u8> = codes.iter().map(|&c| c as u8).collect();
        let wide = Tensor::from_bytes(vec![n, k], GgmlType::I8, bytes).unwrap();
        let packed = Tensor::from_bytes(vec![n, k / 2], GgmlType::I8, pack_int4(&codes)).unwrap();
        let p = |weight_bits| FqParams {
            weight_bits,
            act_bits: 4,
            act: ActRule::FoldQuant,
            block: 64,
            clip: 0.9,
            fold: None,
            norm: None,
            addend: true,
        };
        let a = linear(&x, &wide, &ws, None, None, Some(&bias), &p(8), None).unwrap();
        let b = linear(&x, &packed, &ws, None, None, Some(&bias), &p(4), None).unwrap();
        assert_eq!(a.as_f32().unwrap(), b.as_f32().unwrap());
        // the stored width must match the bits
        assert!(linear(&x, &wide, &ws, None, None, Some(&bias), &p(4), None).is_err());
    }

    /// Ternary codes (BitNet sites): the packed weights give what the same codes one a byte
    /// give, through the blocked and the tile path, and equal an independent loop: BitNet's
    /// activation codes, exact integer sums, `(sum * act_scale) * step`.
    #[test]
    fn ternary_sites_match_an_independent_loop() {
        let mut r = Lcg(5);
        let (rows, k, n) = (7, 96, 41);
        let (x, ws, bias) = site_inputs(&mut r, rows, k, n);
        let codes: Vec<i8> = (0..n * k).map(|_| (r.next() * 1.4).round() as i8).collect();
        let packed = ternary::pack(&codes, k).unwrap();
        let packed = Tensor::from_bytes(vec![n, k / 4], GgmlType::I8, packed).unwrap();
        let wide = Tensor::from_bytes(
            vec![n, k],
            GgmlType::I8,
            bytemuck::cast_slice::<i8, u8>(&codes).to_vec(),
        )
        .unwrap();
        let p = |weight_bits| FqParams {
            weight_bits,
            act_bits: 8,
            act: ActRule::BitNet,
            block: 1,
            clip: 1.0,
            fold: None,
            norm: None,
            addend: true,
        };
        let run = |codes: &Tensor, p: &FqParams, tiles: Option<&IntTiles>| {
            let y = linear(&x, codes, &ws, None, None, Some(&bias), p, tiles).unwrap();
            y.as_f32().unwrap().to_vec()
        };
        let codes = &codes;
        let want: Vec<f32> = (x.as_f32().unwrap().chunks(k))
            .flat_map(|row| {
                let amax = row.iter().fold(1e-5f32, |m, v| m.max(v.abs()));
                let s = 127.0 / amax;
                let q: Vec<i32> = row
                    .iter()
                    .map(|&v| (v * s).round_ties_even().clamp(-128.0, 127.0) as i32)
                    .collect();
                let (ws, bias) = (ws.as_f32().unwrap(), bias.as_f32().unwrap());
                (0..n)
                    .map(move |j| {
                        let acc: i32 = (0..k).map(|i| q[i] * i32::from(codes[j * k + i])).sum();
                        (acc as f32 * (amax / 127.0)) * ws[j] + bias[j]
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(run(&packed, &p(2), None), want);
        assert_eq!(run(&wide, &p(8), None), want);
        if let Some(t) = int_tiles(&packed, &p(2)) {
            assert_eq!(run(&packed, &p(2), Some(&t)), want);
        }
        // a stored code 3 is an error, never a number
        let mut bad = packed.raw_bytes().to_vec();
        bad[9] |= 0xC0;
        let bad = Tensor::from_bytes(vec![n, k / 4], GgmlType::I8, bad).unwrap();
        assert!(linear(&x, &bad, &ws, None, None, Some(&bias), &p(2), None).is_err());
    }

    /// The VNNI tile path (codes packed once) gives the blocked path's bits: W8 and packed
    /// W4 codes, a partial last tile, a bias; rows past a multiple of the kernel's 6.
    #[test]
    fn tiled_codes_match_the_blocked_path() {
        let mut r = Lcg(11);
        let (rows, k, n) = (13, 128, 70);
        let (x, ws, bias) = site_inputs(&mut r, rows, k, n);
        for (wbits, q) in [(8, 127.0), (4, 7.0)] {
            let codes: Vec<i8> = (0..n * k).map(|_| (r.next() * q).round() as i8).collect();
            let codes = match wbits {
                4 => Tensor::from_bytes(vec![n, k / 2], GgmlType::I8, pack_int4(&codes)),
                _ => Tensor::from_bytes(vec![n, k], GgmlType::I8, bytemuck::cast_vec(codes)),
            }
            .unwrap();
            let p = FqParams {
                weight_bits: wbits,
                act_bits: 8,
                act: ActRule::FoldQuant,
                block: 64,
                clip: 1.0,
                fold: None,
                norm: None,
                addend: true,
            };
            let Some(tiles) = int_tiles(&codes, &p) else {
                eprintln!("NOTE: no AVX512-VNNI on this CPU: the tile path was not exercised");
                return;
            };
            let a = linear(&x, &codes, &ws, None, None, Some(&bias), &p, None).unwrap();
            let b = linear(&x, &codes, &ws, None, None, Some(&bias), &p, Some(&tiles));
            assert_eq!(
                a.as_f32().unwrap(),
                b.unwrap().as_f32().unwrap(),
                "w{wbits}"
            );
        }
    }
}
