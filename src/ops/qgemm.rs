//! Integer matmul for symmetric block-quantized weights (Q8_0, Q4_0, Q5_0) without
//! dequantizing them to f32.
//!
//! The activations are quantized like a Q8_0 row (per 32 elements: `d = amax / 127` rounded
//! to f16, codes `round(x / d)`; ggml quantizes a Q8_0 matmul's activations the same way),
//! each 32-block's dot product is exact in int32, and the result accumulates in f32 as
//! `acc = fma(dot, d_w * d_x, acc)` block by block in K order. Every kernel does exactly that
//! arithmetic, so they agree bit for bit: `reference` is the portable one (the oracle the
//! tests compare with) and the AVX512-VNNI one (`vpdpbusd`, 64 byte products per
//! instruction) runs where the CPU has it. Other CPUs, or `VLA_CPU_INT8=0`, take the
//! dequantize-and-f32-GEMM path in `matmul` instead (no activation quantization).

use rayon::prelude::*;

use super::kernels::SendPtr;
use crate::gguf::quant::{is_symmetric, q8_0_block, symmetric_codes, QK};
use crate::gguf::GgmlType;
use crate::{Error, Result, Tensor};

/// Output columns per packed tile (two 16-lane halves).
const NT: usize = 32;

/// Activations quantized per 32-block: codes stored as `code + 128` (unsigned, as
/// `vpdpbusd` takes them) and f32 scales.
pub(crate) struct QuantRows {
    k: usize,
    codes: Vec<u8>,
    scales: Vec<f32>,
}

impl QuantRows {
    /// Quantizes `x [m, k]` (`k` a multiple of 32), rows in parallel.
    pub(crate) fn new(x: &[f32], m: usize, k: usize) -> Self {
        let kb = k / QK;
        let mut codes = vec![0u8; m * k];
        let mut scales = vec![0.0f32; m * kb];
        codes
            .par_chunks_mut(k)
            .zip(scales.par_chunks_mut(kb))
            .zip(x.par_chunks(k))
            .for_each(|((c, s), xr)| {
                if simd::detected() {
                    // SAFETY: the CPU features were checked; the three rows hold k, k and
                    // k/32 elements.
                    unsafe { simd::quantize_row(xr, c, s) }
                } else {
                    quantize_row(xr, c, s)
                }
            });
        Self { k, codes, scales }
    }

    fn row(&self, i: usize) -> (&[u8], &[f32]) {
        let kb = self.k / QK;
        (
            &self.codes[i * self.k..(i + 1) * self.k],
            &self.scales[i * kb..(i + 1) * kb],
        )
    }
}

/// One row quantized per 32-block ([`q8_0_block`]), codes stored `code + 128`: the portable
/// form of `simd::quantize_row` (which gives the same bytes and scales).
fn quantize_row(xr: &[f32], codes: &mut [u8], scales: &mut [f32]) {
    let mut q = [0i8; QK];
    for ((xb, cb), s) in xr
        .chunks_exact(QK)
        .zip(codes.chunks_exact_mut(QK))
        .zip(scales.iter_mut())
    {
        *s = q8_0_block(xb, &mut q).to_f32();
        for (o, v) in cb.iter_mut().zip(q) {
            *o = (v as i16 + 128) as u8;
        }
    }
}

/// Whether the integer path runs for weights of `ty` on this CPU (`VLA_CPU_INT8=0` turns it
/// off everywhere).
pub(crate) fn enabled(ty: GgmlType) -> bool {
    is_symmetric(ty) && simd::detected() && std::env::var("VLA_CPU_INT8").as_deref() != Ok("0")
}

/// `w [n, k]`'s rows `n0..n0 + rows` as signed codes `[rows, k]` and scales `[rows, k/32]`
/// (the portable kernel's input in the tests).
#[cfg(test)]
fn weight_codes(
    w: &Tensor,
    n0: usize,
    rows: usize,
    codes: &mut Vec<i8>,
    scales: &mut Vec<f32>,
) -> Result<()> {
    let ty = w.dtype();
    let k = w.shape()[1];
    let kb = k / QK;
    let bs = ty.type_size();
    let start = n0 * kb * bs;
    let bytes = w
        .raw_bytes()
        .get(start..start + rows * kb * bs)
        .ok_or_else(|| Error::shape("matmul", "quantized weight is shorter than its shape"))?;
    codes.resize(rows * k, 0);
    scales.resize(rows * kb, 0.0);
    let mut q = [0i8; QK];
    for (blk, (block, c)) in bytes
        .chunks_exact(bs)
        .zip(codes.chunks_exact_mut(QK))
        .enumerate()
    {
        scales[blk] = symmetric_codes(ty, block, &mut q)
            .ok_or_else(|| Error::shape("matmul", format!("{ty} has no signed codes")))?;
        c.copy_from_slice(&q);
    }
    Ok(())
}

#[cfg(test)]
/// The portable kernel: `out[i, j] (row stride ldo) = sum_b fma(dot_b, d_w * d_x)` for
/// weight rows given as codes/scales.
pub(crate) fn reference(
    x: &QuantRows,
    m: usize,
    codes: &[i8],
    scales: &[f32],
    rows: usize,
    out: &mut [f32],
    ldo: usize,
) {
    let k = x.k;
    let kb = k / QK;
    for i in 0..m {
        let (xc, xd) = x.row(i);
        for j in 0..rows {
            let (wc, wd) = (&codes[j * k..(j + 1) * k], &scales[j * kb..(j + 1) * kb]);
            let mut acc = 0.0f32;
            for b in 0..kb {
                let dot: i32 = (b * QK..(b + 1) * QK)
                    .map(|e| (xc[e] as i32 - 128) * wc[e] as i32)
                    .sum();
                acc = (dot as f32).mul_add(wd[b] * xd[b], acc);
            }
            out[i * ldo + j] = acc;
        }
    }
}

/// `x [m, k] @ w^T (+ bias)` for a symmetric block-quantized `w [n, k]` on the fastest
/// kernel this CPU has; panels of 32-column tiles in parallel, each packed from the weight's
/// blocks into a per-thread scratch (or taken from `packed`, the same tiles made once:
/// [`BlockTiles`]). A bias `[n]` is added to each tile's columns as the tile is done, while
/// they are in cache.
pub(crate) fn xwt(
    x: &[f32],
    m: usize,
    k: usize,
    w: &Tensor,
    n: usize,
    packed: Option<&BlockTiles>,
    bias: Option<&[f32]>,
) -> Result<Vec<f32>> {
    let mut res = vec![0.0f32; m * n];
    if m == 0 || n == 0 || k == 0 {
        return Ok(res);
    }
    if !k.is_multiple_of(QK) {
        return Err(Error::shape(
            "matmul",
            format!("K = {k} is not a multiple of {QK}"),
        ));
    }
    if let Some(p) = packed {
        if p.tiles.len() != n.div_ceil(NT) || p.k != k {
            return Err(Error::shape(
                "matmul",
                format!(
                    "packed weight of {} tiles, K {} for N {n}, K {k}",
                    p.tiles.len(),
                    p.k
                ),
            ));
        }
    }
    if bias.is_some_and(|b| b.len() != n) {
        return Err(Error::shape("matmul", format!("bias is not [{n}]")));
    }
    let xq = QuantRows::new(x, m, k);
    let tiles = n.div_ceil(NT);
    let per_task = tiles.div_ceil(4 * rayon::current_num_threads()).clamp(1, 4);
    let dst = SendPtr(res.as_mut_ptr());
    (0..tiles.div_ceil(per_task))
        .into_par_iter()
        .try_for_each_init(simd::Packed::default, |scratch, p| -> Result<()> {
            for t in p * per_task..((p + 1) * per_task).min(tiles) {
                let n0 = t * NT;
                let rows = NT.min(n - n0);
                let tile = match packed {
                    Some(pw) => &pw.tiles[t],
                    None => {
                        scratch.pack(w, n0, rows)?;
                        &*scratch
                    }
                };
                // SAFETY: this task alone writes columns n0..n0+rows of the m x n
                // result, and the kernel writes only those (rows i < m, columns < rows,
                // row stride n).
                unsafe { simd::tile(&xq, m, tile, rows, dst.get().add(n0), n) };
                if let Some(b) = bias {
                    let b = &b[n0..n0 + rows];
                    for i in 0..m {
                        // SAFETY: as above, row i's columns n0..n0+rows are this task's.
                        let o = unsafe {
                            std::slice::from_raw_parts_mut(dst.get().add(i * n + n0), rows)
                        };
                        o.iter_mut().zip(b).for_each(|(o, b)| *o += b);
                    }
                }
            }
            Ok(())
        })?;
    Ok(res)
}

/// A symmetric block-quantized weight's 32-column tiles packed once (the cpu backend makes
/// them at compile for the matmuls' weights, so no run repacks them): codes one a byte plus
/// an f32 scale and an i32 correction per 32-block, ~1.25 bytes a weight.
pub struct BlockTiles {
    k: usize,
    tiles: Vec<simd::Packed>,
}

impl BlockTiles {
    /// `w [n, k]` packed, or `None` where the integer path does not run for it
    /// ([`enabled`], K a multiple of 32).
    pub fn new(w: &Tensor) -> Result<Option<Self>> {
        let [n, k] = w.shape()[..] else {
            return Ok(None);
        };
        if !enabled(w.dtype()) || !k.is_multiple_of(QK) {
            return Ok(None);
        }
        let tiles = (0..n.div_ceil(NT))
            .into_par_iter()
            .map(|t| {
                let mut p = simd::Packed::default();
                p.pack(w, t * NT, NT.min(n - t * NT))?;
                Ok(p)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(BlockTiles { k, tiles }))
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.tiles.iter().map(simd::Packed::bytes).sum()
    }
}

/// Plain int8 weight codes `[n, k]` (FoldQuant's, one scale per row applied by the caller)
/// packed once into the VNNI kernel's 32-column tiles, for [`int_dots`].
pub struct IntTiles {
    k: usize,
    n: usize,
    tiles: Vec<simd::Packed>,
    /// Packed two bits a code ([`Self::ternary`]).
    ternary: bool,
}

impl IntTiles {
    /// `codes [n, k]` packed, or `None` where the CPU has no AVX512-VNNI (or `VLA_CPU_INT8=0`)
    /// or K is not a multiple of 32.
    pub fn new(codes: &[i8], n: usize, k: usize) -> Option<Self> {
        let on = simd::detected() && std::env::var("VLA_CPU_INT8").as_deref() != Ok("0");
        if !on || k == 0 || !k.is_multiple_of(QK) || codes.len() != n * k {
            return None;
        }
        let tiles = (0..n.div_ceil(NT))
            .into_par_iter()
            .map(|t| {
                let rows = NT.min(n - t * NT);
                let mut p = simd::Packed::default();
                p.pack_codes(&codes[t * NT * k..(t * NT + rows) * k], rows, k);
                p
            })
            .collect();
        Some(IntTiles {
            k,
            n,
            tiles,
            ternary: false,
        })
    }

    /// Ternary codes `[n, k]` as stored ([`super::ternary`]'s packing, `k / 4` bytes a row)
    /// packed into the VNNI kernel's tiles two bits a code, or `None` where that kernel does
    /// not run (as [`Self::new`]) or a code is damaged (the op then reports it).
    pub fn ternary(stored: &[u8], n: usize, k: usize) -> Option<Self> {
        let on = simd::detected() && std::env::var("VLA_CPU_INT8").as_deref() != Ok("0");
        if !on || k == 0 || !k.is_multiple_of(QK) || stored.len() != n * k / 4 {
            return None;
        }
        let tiles = (0..n.div_ceil(NT))
            .into_par_iter()
            .map(|t| {
                let rows = NT.min(n - t * NT);
                let codes =
                    super::ternary::unpack(&stored[t * NT * k / 4..(t * NT + rows) * k / 4])
                        .ok()?;
                let mut p = simd::Packed::default();
                p.pack_ternary(&codes, rows, k);
                Some(p)
            })
            .collect::<Option<Vec<_>>>()?;
        Some(IntTiles {
            k,
            n,
            tiles,
            ternary: true,
        })
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.tiles.iter().map(simd::Packed::bytes).sum()
    }

    /// `(n, k)` of the packed codes.
    pub fn shape(&self) -> (usize, usize) {
        (self.n, self.k)
    }
}

/// The exact int32 dots `[m, n]` of `m` token rows of codes stored `code + 128` (`biased`,
/// each `k` bytes) with the packed weight rows: `Σ_k x·w`, in parallel over column tiles.
pub fn int_dots(biased: &[&[u8]], w: &IntTiles) -> Result<Vec<i32>> {
    let (m, n) = (biased.len(), w.n);
    if let Some(r) = biased.iter().find(|r| r.len() != w.k) {
        return Err(Error::shape(
            "fq_linear",
            format!("a token row of {} codes for K = {}", r.len(), w.k),
        ));
    }
    let mut res = vec![0i32; m * n];
    if m == 0 || n == 0 {
        return Ok(res);
    }
    // each row's sum of biased codes: the ternary tiles' correction (unread otherwise)
    let sums: Vec<i32> = match w.ternary {
        true => (biased.iter())
            .map(|r| r.iter().map(|&b| i32::from(b)).sum())
            .collect(),
        false => vec![0; m],
    };
    let dst = SendPtr(res.as_mut_ptr() as *mut f32);
    w.tiles.par_iter().enumerate().for_each(|(t, tile)| {
        let rows = NT.min(n - t * NT);
        let out = (dst.get() as *mut i32).wrapping_add(t * NT);
        // SAFETY: this tile alone writes columns t*NT..t*NT+rows of the m x n result (row
        // stride n); every token row holds k bytes (checked above).
        unsafe { simd::int_tile(biased, &sums, tile, rows, out, n) };
    });
    Ok(res)
}

#[cfg(target_arch = "x86_64")]
mod simd {
    //! The AVX512-VNNI tile kernel. A 32-column tile is packed per 32-block `b` as two
    //! 16-column halves of 8 groups of 4 codes: byte `b*1024 + h*512 + g*64 + c*4 + e` is
    //! column `h*16 + c`, element `b*32 + g*4 + e`, so one `vpdpbusd` adds 4 products into
    //! each of 16 column lanes; `corr` is `128 * sum(codes)` per block and column (the
    //! activations carry a +128 offset).
    use super::{symmetric_codes, QuantRows, NT, QK};
    use crate::{Error, Result, Tensor};
    use std::arch::x86_64::*;

    #[derive(Default)]
    pub(crate) struct Packed {
        codes: Vec<i8>,
        scales: Vec<f32>,
        corr: Vec<i32>,
        kb: usize,
        /// Ternary codes two bits a code ([`Packed::pack_ternary`]).
        ternary: bool,
    }

    impl Packed {
        pub(crate) fn bytes(&self) -> u64 {
            (self.codes.len() + 4 * self.scales.len() + 4 * self.corr.len()) as u64
        }

        /// Packs rows `n0..n0 + rows` (at most [`NT`]) of the symmetric block-quantized
        /// `w [n, k]` straight from its blocks.
        pub(crate) fn pack(&mut self, w: &Tensor, n0: usize, rows: usize) -> Result<()> {
            let (ty, k) = (w.dtype(), w.shape()[1]);
            let (kb, bs) = (k / QK, ty.type_size());
            let bytes = w
                .raw_bytes()
                .get(n0 * kb * bs..(n0 + rows) * kb * bs)
                .ok_or_else(|| {
                    Error::shape("matmul", "quantized weight is shorter than its shape")
                })?;
            self.kb = kb;
            self.codes.resize(kb * NT * QK, 0);
            self.scales.resize(kb * NT, 0.0);
            self.corr.resize(kb * NT, 0);
            if rows < NT {
                // the columns past `rows` are read (and their results dropped): keep them 0
                self.codes.fill(0);
                self.scales.fill(0.0);
                self.corr.fill(0);
            }
            let mut q = [0i8; QK];
            for (blk, block) in bytes.chunks_exact(bs).enumerate() {
                let (j, b) = (blk / kb, blk % kb);
                let d = symmetric_codes(ty, block, &mut q)
                    .ok_or_else(|| Error::shape("matmul", format!("{ty} has no signed codes")))?;
                self.place(j, b, &q);
                self.scales[b * NT + j] = d;
                self.corr[b * NT + j] = 128 * q.iter().map(|&v| i32::from(v)).sum::<i32>();
            }
            Ok(())
        }
    }

    impl Packed {
        /// Column `j`'s 32 codes of block `b` into the layout above: each group of 4
        /// codes lands as one 4-byte lane.
        fn place(&mut self, j: usize, b: usize, q: &[i8]) {
            let base = b * 1024 + (j / 16) * 512 + (j % 16) * 4;
            for (g, four) in q.chunks_exact(4).enumerate() {
                self.codes[base + g * 64..base + g * 64 + 4]
                    .copy_from_slice(bytemuck::cast_slice(four));
            }
        }

        /// Packs `codes [rows, k]` (rows <= [`NT`]) with no scales: `corr` holds each
        /// column's `128 * sum` over the whole row, at `corr[j]`.
        pub(crate) fn pack_codes(&mut self, codes: &[i8], rows: usize, k: usize) {
            let kb = k / QK;
            self.kb = kb;
            self.codes.clear();
            self.codes.resize(kb * NT * QK, 0);
            self.scales.clear();
            self.corr.clear();
            self.corr.resize(NT, 0);
            for (j, row) in codes.chunks_exact(k).take(rows).enumerate() {
                for (b, q) in row.chunks_exact(QK).enumerate() {
                    self.place(j, b, q);
                }
                self.corr[j] = 128 * row.iter().map(|&v| i32::from(v)).sum::<i32>();
            }
        }

        /// Packs ternary `codes [rows, k]` (each -1, 0 or 1; rows <= [`NT`]) two bits a
        /// code: per 32-block `b` and half `h`, two 64-byte vectors `P` (0, 1) whose byte
        /// `c*4 + e` holds in bits `2j..2j+1` the code + 1 of column `h*16 + c`, element
        /// `b*32 + (4P + j)*4 + e`: `P` shifted right by `2j` and masked to 2 bits is group
        /// `4P + j`'s `vpdpbusd` operand (the codes + 1, unsigned). `corr` as
        /// [`Self::pack_codes`]; the kernel also takes off each row's sum of biased codes.
        pub(crate) fn pack_ternary(&mut self, codes: &[i8], rows: usize, k: usize) {
            let kb = k / QK;
            self.kb = kb;
            self.ternary = true;
            self.codes.clear();
            self.codes.resize(kb * 256, 0);
            self.scales.clear();
            self.corr.clear();
            self.corr.resize(NT, 0);
            for (j, row) in codes.chunks_exact(k).take(rows).enumerate() {
                let (h, c) = (j / 16, j % 16);
                for (b, q) in row.chunks_exact(QK).enumerate() {
                    for (i, &v) in q.iter().enumerate() {
                        let (g, e) = (i / 4, i % 4);
                        let at = b * 256 + h * 128 + (g / 4) * 64 + c * 4 + e;
                        self.codes[at] |= (((v + 1) as u8) << (2 * (g % 4))) as i8;
                    }
                }
                self.corr[j] = 128 * row.iter().map(|&v| i32::from(v)).sum::<i32>();
            }
        }
    }

    /// `out[i * ldo + j] = Σ x_i·w_j` (exact int32) for every token row `i` and column
    /// `j < rows` of one tile packed by [`Packed::pack_codes`] or [`Packed::pack_ternary`]
    /// (`sums`: each row's sum of biased codes, which the ternary tiles take off).
    ///
    /// # Safety
    /// Those elements must be writable and written by no one else during the call; every
    /// row of `x` holds `p.kb * 32` bytes.
    pub(crate) unsafe fn int_tile(
        x: &[&[u8]],
        sums: &[i32],
        p: &Packed,
        rows: usize,
        out: *mut i32,
        ldo: usize,
    ) {
        assert!(
            detected(),
            "the VNNI kernel needs avx512f, avx512bw and avx512vnni"
        );
        assert!(rows <= NT && x.iter().all(|r| r.len() == p.kb * QK) && sums.len() == x.len());
        let mut i = 0;
        // SAFETY: features checked; rows and lengths asserted; `out` as the caller promised.
        unsafe {
            while i + 6 <= x.len() {
                let (xs, ss, o) = (&x[i..i + 6], &sums[i..i + 6], out.add(i * ldo));
                match p.ternary {
                    true => int_rows::<6, true>(xs, ss, p, rows, o, ldo),
                    false => int_rows::<6, false>(xs, ss, p, rows, o, ldo),
                }
                i += 6;
            }
            while i < x.len() {
                let (xs, ss, o) = (&x[i..i + 1], &sums[i..i + 1], out.add(i * ldo));
                match p.ternary {
                    true => int_rows::<1, true>(xs, ss, p, rows, o, ldo),
                    false => int_rows::<1, false>(xs, ss, p, rows, o, ldo),
                }
                i += 1;
            }
        }
    }

    /// `Σ x·w` of `R` token rows with the tile's columns `< rows`: per 32-block and group of
    /// 4 codes, one `vpdpbusd` a 16-column half and row, then less `corr`. With `TERNARY`
    /// each group's operand is decoded from its 2-bit vector (a shift and a mask: the codes +
    /// 1) and the row's sum of biased codes comes off too: `Σ (x + 128)(w + 1) - 128 Σ w -
    /// Σ (x + 128) = Σ x w`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn int_rows<const R: usize, const TERNARY: bool>(
        x: &[&[u8]],
        sums: &[i32],
        p: &Packed,
        rows: usize,
        out: *mut i32,
        ldo: usize,
    ) {
        let mut acc = [[_mm512_setzero_si512(); 2]; R];
        let (pc, mask) = (p.codes.as_ptr(), _mm512_set1_epi8(3));
        for b in 0..p.kb {
            // a ternary block's four 2-bit vectors: two a half
            let v: [__m512i; 4] =
                match TERNARY {
                    true => std::array::from_fn(|i| {
                        _mm512_loadu_si512(pc.add(b * 256 + i * 64) as *const _)
                    }),
                    false => [_mm512_setzero_si512(); 4],
                };
            for g in 0..8 {
                let (w0, w1) = match TERNARY {
                    true => {
                        let shift = _mm_cvtsi32_si128(2 * (g as i32 % 4));
                        let op = |h: usize| {
                            _mm512_and_si512(_mm512_srl_epi16(v[2 * h + g / 4], shift), mask)
                        };
                        (op(0), op(1))
                    }
                    false => (
                        _mm512_loadu_si512(pc.add(b * 1024 + g * 64) as *const _),
                        _mm512_loadu_si512(pc.add(b * 1024 + 512 + g * 64) as *const _),
                    ),
                };
                for r in 0..R {
                    let xc = &x[r][b * QK + g * 4..b * QK + g * 4 + 4];
                    let xb = _mm512_set1_epi32(i32::from_le_bytes([xc[0], xc[1], xc[2], xc[3]]));
                    acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], xb, w0);
                    acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], xb, w1);
                }
            }
        }
        let corr = [
            _mm512_loadu_si512(p.corr.as_ptr() as *const _),
            _mm512_loadu_si512(p.corr.as_ptr().add(16) as *const _),
        ];
        let mut buf = [0i32; NT];
        for (r, a) in acc.iter().enumerate() {
            let s = _mm512_set1_epi32(if TERNARY { sums[r] } else { 0 });
            for (h, c) in corr.iter().enumerate() {
                let y = _mm512_sub_epi32(_mm512_sub_epi32(a[h], *c), s);
                _mm512_storeu_si512(buf.as_mut_ptr().add(16 * h) as *mut _, y);
            }
            std::ptr::copy_nonoverlapping(buf.as_ptr(), out.add(r * ldo), rows);
        }
    }

    /// [`super::quantize_row`] 16 lanes at a time, bit for bit: the same `amax / 127`, the
    /// same f32 inverse, rounding half away from zero (truncate, then add one where the
    /// dropped fraction is >= 0.5), NaN to 0 and magnitudes saturated at 127 as `as i8` does.
    ///
    /// # Safety
    /// The CPU must have avx512f and avx512bw; `codes` holds `xr.len()` and `scales`
    /// `xr.len() / 32` elements.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(crate) unsafe fn quantize_row(xr: &[f32], codes: &mut [u8], scales: &mut [f32]) {
        let (half, one, top) = (
            _mm512_set1_ps(0.5),
            _mm512_set1_ps(1.0),
            _mm512_set1_ps(127.0),
        );
        for ((xb, cb), s) in xr
            .chunks_exact(QK)
            .zip(codes.chunks_exact_mut(QK))
            .zip(scales.iter_mut())
        {
            let v = [
                _mm512_loadu_ps(xb.as_ptr()),
                _mm512_loadu_ps(xb.as_ptr().add(16)),
            ];
            // f32::max skips NaN; so does max_ps when the NaN is its first operand.
            let mut m = _mm512_setzero_ps();
            for h in v {
                m = _mm512_max_ps(_mm512_abs_ps(h), m);
            }
            let d = _mm512_reduce_max_ps(m) / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            *s = half::f16::from_f32(d).to_f32();
            let idv = _mm512_set1_ps(id);
            for (h, x) in v.into_iter().enumerate() {
                let y = _mm512_mul_ps(x, idv);
                let a = _mm512_abs_ps(y);
                let t = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(a);
                let up = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(_mm512_sub_ps(a, t), half);
                let r = _mm512_min_ps(_mm512_mask_add_ps(t, up, t, one), top);
                let ord = _mm512_cmp_ps_mask::<_CMP_ORD_Q>(y, y);
                let neg = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(y, _mm512_setzero_ps());
                let q = _mm512_maskz_cvttps_epi32(ord, r);
                let q = _mm512_mask_sub_epi32(q, neg, _mm512_setzero_si512(), q);
                let q = _mm512_add_epi32(q, _mm512_set1_epi32(128));
                _mm_storeu_si128(
                    cb.as_mut_ptr().add(h * 16) as *mut __m128i,
                    _mm512_cvtepi32_epi8(q),
                );
            }
        }
    }

    pub(crate) fn detected() -> bool {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vnni")
    }

    /// Writes `out[i * ldo + j]` for every row `i < m` and column `j < rows` of one tile.
    ///
    /// # Safety
    /// Those elements must be writable and written by no one else during the call.
    pub(crate) unsafe fn tile(
        x: &QuantRows,
        m: usize,
        p: &Packed,
        rows: usize,
        out: *mut f32,
        ldo: usize,
    ) {
        assert!(
            detected(),
            "the VNNI kernel needs avx512f, avx512bw and avx512vnni"
        );
        assert!(rows <= NT && p.kb * QK == x.k && x.codes.len() >= m * x.k);
        let mut i = 0;
        // SAFETY: the CPU features were checked; every row index is < m and the packed
        // arrays hold kb blocks (asserted above); `out` as the caller promised.
        unsafe {
            while i + 4 <= m {
                rows_kernel::<4>(x, i, p, rows, out, ldo);
                i += 4;
            }
            while i < m {
                rows_kernel::<1>(x, i, p, rows, out, ldo);
                i += 1;
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn rows_kernel<const R: usize>(
        x: &QuantRows,
        i0: usize,
        p: &Packed,
        rows: usize,
        out: *mut f32,
        ldo: usize,
    ) {
        let xr: [(&[u8], &[f32]); R] = std::array::from_fn(|r| x.row(i0 + r));
        let mut acc = [[_mm512_setzero_ps(); 2]; R];
        let (pc, ps, pk) = (p.codes.as_ptr(), p.scales.as_ptr(), p.corr.as_ptr());
        for b in 0..p.kb {
            // The sums start at -corr, which takes the activations' +128 offset out.
            let start: [__m512i; 2] = std::array::from_fn(|h| {
                let corr = _mm512_loadu_si512(pk.add(b * NT + h * 16) as *const _);
                _mm512_sub_epi32(_mm512_setzero_si512(), corr)
            });
            let mut dot = [start; R];
            for g in 0..8 {
                let w0 = _mm512_loadu_si512(pc.add(b * 1024 + g * 64) as *const _);
                let w1 = _mm512_loadu_si512(pc.add(b * 1024 + 512 + g * 64) as *const _);
                for r in 0..R {
                    // four codes of row r: inside its k bytes (b < kb, g < 8)
                    let xc = xr[r].0.as_ptr().add(b * QK + g * 4) as *const i32;
                    let xb = _mm512_set1_epi32(xc.read_unaligned());
                    dot[r][0] = _mm512_dpbusd_epi32(dot[r][0], xb, w0);
                    dot[r][1] = _mm512_dpbusd_epi32(dot[r][1], xb, w1);
                }
            }
            for h in 0..2 {
                let ws = _mm512_loadu_ps(ps.add(b * NT + h * 16));
                for r in 0..R {
                    let v = _mm512_cvtepi32_ps(dot[r][h]);
                    let s = _mm512_mul_ps(ws, _mm512_set1_ps(xr[r].1[b]));
                    acc[r][h] = _mm512_fmadd_ps(v, s, acc[r][h]);
                }
            }
        }
        let mut buf = [0.0f32; NT];
        for (r, a) in acc.iter().enumerate() {
            _mm512_storeu_ps(buf.as_mut_ptr(), a[0]);
            _mm512_storeu_ps(buf.as_mut_ptr().add(16), a[1]);
            std::ptr::copy_nonoverlapping(buf.as_ptr(), out.add((i0 + r) * ldo), rows);
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod simd {
    use super::QuantRows;

    #[derive(Default)]
    pub(crate) struct Packed;

    impl Packed {
        pub(crate) fn pack(&mut self, _: &crate::Tensor, _: usize, _: usize) -> crate::Result<()> {
            Ok(())
        }

        pub(crate) fn bytes(&self) -> u64 {
            0
        }

        pub(crate) fn pack_codes(&mut self, _: &[i8], _: usize, _: usize) {}

        pub(crate) fn pack_ternary(&mut self, _: &[i8], _: usize, _: usize) {}
    }

    pub(crate) unsafe fn int_tile(
        _: &[&[u8]],
        _: &[i32],
        _: &Packed,
        _: usize,
        _: *mut i32,
        _: usize,
    ) {
        unreachable!("IntTiles::new is None without VNNI")
    }

    pub(crate) unsafe fn quantize_row(_: &[f32], _: &mut [u8], _: &mut [f32]) {
        unreachable!("detected() is false without VNNI")
    }

    pub(crate) fn detected() -> bool {
        false
    }

    pub(crate) unsafe fn tile(
        _: &QuantRows,
        _: usize,
        _: &Packed,
        _: usize,
        _: *mut f32,
        _: usize,
    ) {
        unreachable!("enabled() is false without VNNI")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::quant;
    use crate::ops::testutil::Rng;
    use half::f16;

    /// Independent oracle: activations quantized here (f32 scale amax/127 rounded to f16,
    /// codes by the f32 inverse, half away from zero), weights from `quant::dequantize`,
    /// sums in f64.
    fn naive(x: &[f32], wdeq: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut xq = vec![0.0f64; m * k];
        for (blk, o) in x.chunks(QK).zip(xq.chunks_mut(QK)) {
            let amax = blk.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            let d = amax / 127.0;
            let id = if d == 0.0 { 0.0 } else { 1.0 / d };
            let dh = f16::from_f32(d).to_f32() as f64;
            for (v, o) in blk.iter().zip(o) {
                *o = (v * id).round() as f64 * dh;
            }
        }
        let mut out = vec![0.0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k).map(|p| xq[i * k + p] * wdeq[j * k + p] as f64).sum();
            }
        }
        out
    }

    #[test]
    fn symmetric_types_match_the_naive_oracle_and_the_portable_kernel_bit_for_bit() {
        let mut r = Rng::new(41);
        for &(m, k, n) in &[
            (1, 32, 1),
            (5, 64, 33),
            (9, 96, 70),
            (4, 32, 32),
            (13, 160, 97),
        ] {
            let x = r.vec(m * k);
            let w = r.vec(n * k);
            for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0] {
                let bytes = quant::quantize(ty, &w).unwrap();
                let mut wdeq = vec![0.0f32; n * k];
                quant::dequantize(ty, &bytes, &mut wdeq).unwrap();
                let wt = Tensor::from_bytes(vec![n, k], ty, bytes).unwrap();
                let want = naive(&x, &wdeq, m, k, n);
                // The portable kernel against the oracle.
                let (mut codes, mut scales) = (Vec::new(), Vec::new());
                weight_codes(&wt, 0, n, &mut codes, &mut scales).unwrap();
                let xq = QuantRows::new(&x, m, k);
                let mut port = vec![0.0f32; m * n];
                reference(&xq, m, &codes, &scales, n, &mut port, n);
                for (a, b) in port.iter().zip(&want) {
                    assert!(
                        (*a as f64 - b).abs() <= 1e-5 * (1.0 + b.abs()),
                        "{ty} {m}x{k}x{n}: {a} vs {b}"
                    );
                }
                // The SIMD kernel, where this CPU has it, bit for bit.
                if simd::detected() {
                    let fast = xwt(&x, m, k, &wt, n, None, None).unwrap();
                    let packed = BlockTiles::new(&wt).unwrap().expect("VNNI runs");
                    let pre = xwt(&x, m, k, &wt, n, Some(&packed), None).unwrap();
                    assert_eq!(pre, port, "{ty} {m}x{k}x{n} prepacked");
                    assert_eq!(fast, port, "{ty} {m}x{k}x{n}");
                    // a bias: the same sums, each plus its column's bias
                    let bias: Vec<f32> = (0..n).map(|j| j as f32 * 0.37 - 1.0).collect();
                    let biased = xwt(&x, m, k, &wt, n, Some(&packed), Some(&bias)).unwrap();
                    let want: Vec<f32> = (0..m * n).map(|i| port[i] + bias[i % n]).collect();
                    assert_eq!(biased, want, "{ty} {m}x{k}x{n} with a bias");
                } else {
                    eprintln!(
                        "NOTE: no AVX512-VNNI on this CPU: the VNNI kernel was not exercised"
                    );
                }
            }
        }
    }

    #[test]
    fn simd_activation_quantizer_gives_the_portable_bytes() {
        if !simd::detected() {
            eprintln!("NOTE: no AVX512-VNNI on this CPU: the SIMD quantizer was not exercised");
            return;
        }
        let mut r = Rng::new(5);
        let mut x = r.vec(64 * QK);
        // Blocks with exact ties (amax 127 gives d = 1), zeros, NaN, infinities, subnormals
        // and a tiny amax whose inverse overflows.
        let ties: Vec<f32> = (0..QK).map(|i| i as f32 - 15.5).chain([127.0]).collect();
        x[..QK].copy_from_slice(&ties[1..]);
        x[QK..2 * QK].fill(0.0);
        x[2 * QK + 3] = f32::NAN;
        x[3 * QK + 1] = f32::INFINITY;
        x[4 * QK + 7] = f32::NEG_INFINITY;
        for (i, v) in x[5 * QK..6 * QK].iter_mut().enumerate() {
            *v = f32::from_bits(i as u32 * 3);
        }
        x[6 * QK..7 * QK].fill(1e-40);
        x[7 * QK..8 * QK].iter_mut().for_each(|v| *v *= 3e38);
        let (mut c0, mut s0) = (vec![0u8; x.len()], vec![0.0f32; x.len() / QK]);
        let (mut c1, mut s1) = (c0.clone(), s0.clone());
        quantize_row(&x, &mut c0, &mut s0);
        // SAFETY: detected above; lengths as required.
        unsafe { simd::quantize_row(&x, &mut c1, &mut s1) };
        assert_eq!(c0, c1);
        let bits = |s: &[f32]| s.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&s0), bits(&s1));
        // The ties block really has ties: -14.5 -> -15, 15.5 -> 16 (away from zero).
        assert_eq!((c0[0], c0[30]), (128 - 15, 128 + 16));
    }

    #[test]
    fn bad_k_is_an_error() {
        let w = Tensor::from_bytes(
            vec![1, 32],
            GgmlType::Q8_0,
            quant::quantize(GgmlType::Q8_0, &[0.5; 32]).unwrap(),
        )
        .unwrap();
        assert!(xwt(&[0.0; 33], 1, 33, &w, 1, None, None).is_err());
    }
}
