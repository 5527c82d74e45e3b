//! `x @ w^T` for a float weight (f32, bf16 or f16) packed once into panels of 32 output
//! columns (AVX-512 on x86_64), the cpu backend's float matmul where the CPU has avx512f.
//! A 16-bit weight stays 16-bit in its panels (half the bytes to hold and to stream) and is
//! widened to f32 as it is loaded; the arithmetic is f32 throughout.
//!
//! A panel holds 32 weight rows transposed, K-major (`panel[p * 32 + j] = w[n0 + j, p]`),
//! so one step along K loads two contiguous vectors of weights and broadcasts one value of
//! each activation row: a block of 12 rows x 32 columns keeps 24 accumulators in registers
//! over the whole of K, 24 FMAs for 2 vector loads and 12 broadcasts, the outer-product
//! form that keeps both of a core's 512-bit FMA ports busy (Intel's server cores issue two
//! a cycle). The weight is packed when the executable is compiled, so no run repacks it
//! (the `gemm` crate repacks its operand on every call: a sixth of a SigLIP predict) and a
//! 50-row product costs its FMAs. K goes in chunks of 256; each task keeps a tile of
//! activation rows in L2 and streams its panels' chunks past it. `VLA_CPU_F32=dot` takes the
//! dot-form kernel (`fdot`) and `VLA_CPU_F32=gemm` the `gemm` crate instead. Sums differ
//! from a sequential loop only by reassociation (each chunk of K summed in order, one FMA at
//! a time per output, the chunks' sums added to the output in turn).

use rayon::prelude::*;

use super::kernels::{spaced_rows, SendPtr};
use crate::gguf::GgmlType;
use crate::{Error, Result, Tensor};

/// Output columns per panel (two 16-lane vectors).
const NR: usize = 32;
/// Activation rows per register block.
const MR: usize = 12;
/// Bytes of activation rows a task keeps in L2 (a tile of rows, one chunk of K).
const TILE_BYTES: usize = 512 << 10;
/// K in chunks of this many: a panel's chunk (32 KiB of f32) stays in L1 while every row
/// block of the tile passes it, and a tile keeps its rows in L2 however long K is (Gemma's
/// 16384 would leave 8 rows a tile, each reading the whole weight from memory).
const KC: usize = 256;

/// Whether this kernel runs here: the CPU has avx512f and `VLA_CPU_F32` names no other
/// kernel.
pub(crate) fn enabled() -> bool {
    simd::detected()
        && !matches!(
            std::env::var("VLA_CPU_F32").as_deref(),
            Ok("gemm") | Ok("dot")
        )
}

/// A float weight `[n, k]` in 32-column panels, zero past the last row, in its stored
/// element type.
pub struct Panels {
    n: usize,
    k: usize,
    data: Data,
}

/// The panels' values, in the weight's own type.
enum Data {
    F32(Vec<f32>),
    Bf16(Vec<simd::Bf16>),
    F16(Vec<simd::F16>),
}

impl Panels {
    /// `w [n, k]` (row-major, F32, BF16 or F16) packed, panels in parallel; `None` for
    /// another dtype or shape.
    pub(crate) fn new(w: &Tensor) -> Result<Option<Self>> {
        let [n, k] = w.shape()[..] else {
            return Ok(None);
        };
        let data = match w.dtype() {
            GgmlType::F32 => Data::F32(pack(w.as_f32()?, n, k)),
            GgmlType::BF16 => Data::Bf16(pack(&halves(w, n * k, simd::Bf16)?, n, k)),
            GgmlType::F16 => Data::F16(pack(&halves(w, n * k, simd::F16)?, n, k)),
            _ => return Ok(None),
        };
        Ok(Some(Panels { n, k, data }))
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        match &self.data {
            Data::F32(v) => std::mem::size_of_val(&v[..]) as u64,
            Data::Bf16(v) => std::mem::size_of_val(&v[..]) as u64,
            Data::F16(v) => std::mem::size_of_val(&v[..]) as u64,
        }
    }

    /// The weight's shape, `(n, k)`.
    pub(crate) fn shape(&self) -> (usize, usize) {
        (self.n, self.k)
    }

    /// `out[i * n + j] = Σ_p x[i * k + p] * w[j, p]` for `x [m, k]`, `out [m, n]`, plus
    /// `bias[j]` where given, plus `out`'s own value with `accumulate`; tiles of the output
    /// in parallel. Callers check [`enabled`].
    pub(crate) fn xwt(
        &self,
        x: &[f32],
        m: usize,
        bias: Option<&[f32]>,
        accumulate: bool,
        out: &mut [f32],
    ) {
        let (n, k) = (self.n, self.k);
        assert!(
            x.len() >= m * k && out.len() >= m * n,
            "Panels: operand too short"
        );
        assert!(bias.is_none_or(|b| b.len() == n), "Panels: bias is not [n]");
        if m == 0 || n == 0 {
            return;
        }
        if k == 0 {
            // no products: just the epilogue
            for row in out[..m * n].chunks_exact_mut(n) {
                if !accumulate {
                    row.fill(0.0);
                }
                if let Some(b) = bias {
                    row.iter_mut().zip(b).for_each(|(o, b)| *o += b);
                }
            }
            return;
        }
        let (x, ldx) = spaced_rows(x, m, k);
        let x = &x[..];
        let rows_per_tile =
            (TILE_BYTES / (4 * k.min(KC))).clamp(MR, m.next_multiple_of(MR)) / MR * MR;
        let panels = n.div_ceil(NR);
        let tasks = 4 * rayon::current_num_threads();
        let mt = m.div_ceil(rows_per_tile);
        let panels_per_task = panels.div_ceil(tasks.div_ceil(mt).max(1)).max(1);
        let nt = panels.div_ceil(panels_per_task);
        let dst = SendPtr(out.as_mut_ptr());
        let tiles = Tiles {
            x,
            ldx,
            m,
            n,
            k,
            rows_per_tile,
            panels_per_task,
            bias,
            accumulate,
            dst,
        };
        let tasks = 0..mt * nt;
        match &self.data {
            Data::F32(w) => tasks.into_par_iter().for_each(|t| tiles.run(w, t)),
            Data::Bf16(w) => tasks.into_par_iter().for_each(|t| tiles.run(w, t)),
            Data::F16(w) => tasks.into_par_iter().for_each(|t| tiles.run(w, t)),
        }
    }
}

/// The 16-bit values of `w` (its first `len`), each wrapped by `make`.
fn halves<T>(w: &Tensor, len: usize, make: fn(u16) -> T) -> Result<Vec<T>> {
    let bytes = w.raw_bytes();
    if bytes.len() < 2 * len {
        return Err(Error::shape("matmul", "weight shorter than its shape"));
    }
    Ok(bytes[..2 * len]
        .chunks_exact(2)
        .map(|b| make(u16::from_le_bytes([b[0], b[1]])))
        .collect())
}

/// `w [n, k]` in 32-column panels, K-major, zero past the last row; panels in parallel,
/// each written 64 steps of K at a time (8 KiB of f32), so a long panel (Gemma's 16384
/// steps: 2 MiB) is not pulled through the cache once for each of its 32 rows.
fn pack<T: Copy + Default + Send + Sync>(w: &[T], n: usize, k: usize) -> Vec<T> {
    assert!(w.len() >= n * k, "Panels: weight too short");
    let mut data = vec![T::default(); n.div_ceil(NR) * NR * k];
    if k > 0 {
        data.par_chunks_mut(NR * k)
            .enumerate()
            .for_each(|(t, panel)| {
                let rows = &w[t * NR * k..][..NR.min(n - t * NR) * k];
                for p0 in (0..k).step_by(64) {
                    let p1 = (p0 + 64).min(k);
                    for (j, row) in rows.chunks_exact(k).enumerate() {
                        for (p, &v) in (p0..p1).zip(&row[p0..p1]) {
                            panel[p * NR + j] = v;
                        }
                    }
                }
            });
    }
    data
}

/// One product's operands and the split of its output into tasks.
struct Tiles<'a> {
    x: &'a [f32],
    ldx: usize,
    m: usize,
    n: usize,
    k: usize,
    rows_per_tile: usize,
    panels_per_task: usize,
    bias: Option<&'a [f32]>,
    accumulate: bool,
    dst: SendPtr,
}

impl Tiles<'_> {
    /// Task `t`: a tile of rows times a run of panels of `data`.
    fn run<T: simd::Elem>(&self, data: &[T], t: usize) {
        let (n, k) = (self.n, self.k);
        let mt = self.m.div_ceil(self.rows_per_tile);
        let (i0, t0) = (
            (t % mt) * self.rows_per_tile,
            (t / mt) * self.panels_per_task,
        );
        let i1 = (i0 + self.rows_per_tile).min(self.m);
        let t1 = (t0 + self.panels_per_task).min(n.div_ceil(NR));
        for k0 in (0..k).step_by(KC) {
            let kn = KC.min(k - k0);
            for panel in t0..t1 {
                let cols = NR.min(n - panel * NR);
                let chunk = |panel: usize| &data[panel * NR * k + k0 * NR..][..NR * kn];
                // the task's next panel (its same chunk), fetched while this one is multiplied
                let next = (panel + 1 < t1).then(|| chunk(panel + 1));
                // the bias once, and the sums of the chunks before added
                let epilogue = simd::Epilogue {
                    bias: self
                        .bias
                        .filter(|_| k0 == 0)
                        .map(|b| &b[panel * NR..][..cols]),
                    accumulate: self.accumulate || k0 > 0,
                };
                // SAFETY: rows i0..i1 of x (stride ldx >= k) hold k values each, so from k0
                // on kn; a chunk is NR * kn values; this task alone writes out[i0..i1, the
                // panel's columns].
                unsafe {
                    let o = self.dst.get().add(panel * NR);
                    let x = (&self.x[k0..], self.ldx);
                    simd::panel(x, kn, (chunk(panel), next), (i0, i1), o, n, cols, epilogue)
                };
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use super::{MR, NR};
    use std::arch::x86_64::*;

    pub(super) fn detected() -> bool {
        std::is_x86_feature_detected!("avx512f")
    }

    /// A panel element: 16 of them loaded as f32 lanes.
    pub(crate) trait Elem: Copy + Send + Sync {
        /// # Safety
        /// avx512f; `p` points at 16 readable values.
        unsafe fn load16(p: *const Self) -> __m512;
    }

    /// bf16 bits (the high half of an f32), read by [`Elem::load16`] through a pointer.
    #[derive(Clone, Copy, Default)]
    #[repr(transparent)]
    pub(crate) struct Bf16(#[allow(dead_code)] pub(crate) u16);

    /// IEEE half bits, read likewise.
    #[derive(Clone, Copy, Default)]
    #[repr(transparent)]
    pub(crate) struct F16(#[allow(dead_code)] pub(crate) u16);

    impl Elem for f32 {
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn load16(p: *const f32) -> __m512 {
            _mm512_loadu_ps(p)
        }
    }

    impl Elem for Bf16 {
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn load16(p: *const Bf16) -> __m512 {
            let h = _mm256_loadu_si256(p as *const __m256i);
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
        }
    }

    impl Elem for F16 {
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn load16(p: *const F16) -> __m512 {
            _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
        }
    }

    /// What a block adds to its sums before it stores them: the panel's bias (its length
    /// the panel's columns), the output's values.
    #[derive(Clone, Copy)]
    pub(super) struct Epilogue<'b> {
        pub bias: Option<&'b [f32]>,
        pub accumulate: bool,
    }

    /// `out[i, j] = x_i · w_j (+ bias_j) (+ out[i, j])` for rows `i0..i1` and the panel's
    /// columns (as many as its bias, else `cols`),
    /// blocks of rows as even as `MR` allows (50 rows: five of 10). The blocks also prefetch
    /// `next` (the panel to come) into L2, each its share of the panel's lines, one line a
    /// step of K: the first pass over a panel from memory would otherwise wait on it, and
    /// fetching it all during one block asks more of memory than a core gets.
    ///
    /// # Safety
    /// The CPU has avx512f; rows `i0..i1` of `x` (stride `ldx`) hold `k` values each, `w`
    /// and `next` are panels (`NR * k` values); those rows' first `cols` values of `out`
    /// (stride `ldo`) are the caller's alone; `cols` <= 32 and the bias, if any, holds
    /// `cols` values.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn panel<T: Elem>(
        (x, ldx): (&[f32], usize),
        k: usize,
        (w, next): (&[T], Option<&[T]>),
        (i0, i1): (usize, usize),
        out: *mut f32,
        ldo: usize,
        cols: usize,
        epilogue: Epilogue,
    ) {
        assert!(detected() && w.len() >= NR * k && cols <= NR);
        assert!(epilogue.bias.is_none_or(|b| b.len() == cols));
        assert!(next.is_none_or(|n| n.len() >= NR * k));
        let blocks = (i1 - i0).div_ceil(MR);
        let mut i = i0;
        for b in 0..blocks {
            let rows = (i1 - i).div_ceil(blocks - b);
            let xp = x[i * ldx..].as_ptr();
            let o = out.add(i * ldo);
            let mask = if cols == NR {
                u32::MAX
            } else {
                (1u32 << cols) - 1
            };
            // this block's share of the next panel's cache lines, one fetched a step
            let pf = match next {
                Some(n) => {
                    let lines = (NR * k * std::mem::size_of::<T>()).div_ceil(64);
                    let share = lines.div_ceil(blocks);
                    let first = (b * share).min(lines);
                    let bytes = n.as_ptr() as *const i8;
                    (bytes.add(64 * first), share.min(lines - first))
                }
                None => (std::ptr::null(), 0),
            };
            // SAFETY: as the caller promised, for rows i..i + rows.
            unsafe {
                match rows {
                    12 => block::<12, T>(xp, ldx, (w.as_ptr(), pf), k, (o, ldo), mask, epilogue),
                    11 => block::<11, T>(xp, ldx, (w.as_ptr(), pf), k, (o, ldo), mask, epilogue),
                    10 => block::<10, T>(xp, ldx, (w.as_ptr(), pf), k, (o, ldo), mask, epilogue),
                    9 => block::<9, T>(xp, ldx, (w.as_ptr(), pf), k, (o, ldo), mask, epilogue),
                    8 => block::<8, T>(xp, ldx, (w.as_ptr(), pf), k, (o, ldo), mask, epilogue),
                    7 => block::<7, T>(xp, ldx, (w.as_ptr(), pf), k, (o, ldo), mask, epilogue),
                    6 => block::<6, T>(xp, ldx, (w.as_ptr(), pf), k, (o, ldo), mask, epilogue),
                    5 => block::<5, T>(xp, ldx, (w.as_ptr(), pf), k, (o, ldo), mask, epilogue),
                    4 => block::<4, T>(xp, ldx, (w.as_ptr(), pf), k, (o, ldo), mask, epilogue),
                    3 => block::<3, T>(xp, ldx, (w.as_ptr(), pf), k, (o, ldo), mask, epilogue),
                    2 => block::<2, T>(xp, ldx, (w.as_ptr(), pf), k, (o, ldo), mask, epilogue),
                    _ => block::<1, T>(xp, ldx, (w.as_ptr(), pf), k, (o, ldo), mask, epilogue),
                }
            }
            i += rows;
        }
    }

    /// An `R` x 32 register block (R <= 12) over the whole of K, stored to `out` after the
    /// epilogue; `mask` says which of the 32 columns are stored; `pf`: cache lines to
    /// prefetch (a start and a count), one a step.
    #[target_feature(enable = "avx512f")]
    unsafe fn block<const R: usize, T: Elem>(
        x: *const f32,
        ldx: usize,
        (w, pf): (*const T, (*const i8, usize)),
        k: usize,
        (out, ldo): (*mut f32, usize),
        mask: u32,
        epilogue: Epilogue,
    ) {
        let mut acc = [[_mm512_setzero_ps(); 2]; R];
        let (pf, lines) = pf;
        if lines > k {
            // one block for a whole f32 panel: two lines a step (at most 2k in all)
            for p in 0..k {
                _mm_prefetch::<_MM_HINT_T1>(pf.add(64 * p));
                if p + k < lines {
                    _mm_prefetch::<_MM_HINT_T1>(pf.add(64 * (p + k)));
                }
                step::<R, T>(&mut acc, x, ldx, w, p);
            }
        } else {
            for p in 0..lines {
                _mm_prefetch::<_MM_HINT_T1>(pf.add(64 * p));
                step::<R, T>(&mut acc, x, ldx, w, p);
            }
            for p in lines..k {
                step::<R, T>(&mut acc, x, ldx, w, p);
            }
        }
        let (m0, m1) = (mask as u16, (mask >> 16) as u16);
        if let Some(b) = epilogue.bias {
            // masked loads read only the bias's own values
            let b = b.as_ptr();
            let (b0, b1) = (
                _mm512_maskz_loadu_ps(m0, b),
                _mm512_maskz_loadu_ps(m1, b.add(16)),
            );
            for a in acc.iter_mut() {
                a[0] = _mm512_add_ps(a[0], b0);
                a[1] = _mm512_add_ps(a[1], b1);
            }
        }
        for (r, a) in acc.iter().enumerate() {
            let o = out.add(r * ldo);
            let (mut v0, mut v1) = (a[0], a[1]);
            if epilogue.accumulate {
                v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, o), v0);
                v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, o.add(16)), v1);
            }
            _mm512_mask_storeu_ps(o, m0, v0);
            _mm512_mask_storeu_ps(o.add(16), m1, v1);
        }
    }

    /// One step of K: 2R FMAs.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn step<const R: usize, T: Elem>(
        acc: &mut [[__m512; 2]; R],
        x: *const f32,
        ldx: usize,
        w: *const T,
        p: usize,
    ) {
        let w0 = T::load16(w.add(p * NR));
        let w1 = T::load16(w.add(p * NR + 16));
        for (r, a) in acc.iter_mut().enumerate() {
            let xv = _mm512_set1_ps(*x.add(r * ldx + p));
            a[0] = _mm512_fmadd_ps(xv, w0, a[0]);
            a[1] = _mm512_fmadd_ps(xv, w1, a[1]);
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod simd {
    pub(super) fn detected() -> bool {
        false
    }

    #[derive(Clone, Copy)]
    pub(super) struct Epilogue<'b> {
        pub bias: Option<&'b [f32]>,
        pub accumulate: bool,
    }

    pub(crate) trait Elem: Copy + Send + Sync {}
    impl Elem for f32 {}
    #[derive(Clone, Copy, Default)]
    pub(crate) struct Bf16(#[allow(dead_code)] pub(crate) u16);
    impl Elem for Bf16 {}
    #[derive(Clone, Copy, Default)]
    pub(crate) struct F16(#[allow(dead_code)] pub(crate) u16);
    impl Elem for F16 {}

    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn panel<T: Elem>(
        _: (&[f32], usize),
        _: usize,
        _: (&[T], Option<&[T]>),
        _: (usize, usize),
        _: *mut f32,
        _: usize,
        _: usize,
        _: Epilogue,
    ) {
        unreachable!("enabled() is false without avx512f")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::quant;
    use crate::ops::testutil::Rng;

    #[test]
    fn matches_f64_loops_over_odd_shapes() {
        if !simd::detected() {
            eprintln!("NOTE: no avx512f on this CPU: the panel kernel was not exercised");
            return;
        }
        let mut r = Rng::new(11);
        // rows around the 12-row block and tile edges, columns around the 32-column panel,
        // K with and without a 4 KiB stride (padded copy)
        for &(m, k, n) in &[
            (1, 1, 1),
            (3, 0, 5),
            (1, 17, 3),
            (7, 15, 33),
            (12, 16, 32),
            (13, 33, 31),
            (25, 64, 65),
            (50, 720, 97),
            (5, 256, 11),
            (7, 2048, 5),
            (181, 1024, 70),
            (300, 40, 260),
            (700, 768, 40),
        ] {
            let x = r.vec(m * k);
            let w = r.vec(n * k);
            let c = r.vec(m * n);
            let bias = r.vec(n);
            // each stored type, against the values it stores
            for ty in [GgmlType::F32, GgmlType::BF16, GgmlType::F16] {
                let bytes = quant::quantize(ty, &w).unwrap();
                let wt = Tensor::from_bytes(vec![n, k], ty, bytes).unwrap();
                let mut w = vec![0.0f32; n * k];
                wt.dequantize_rows(0, &mut w).unwrap();
                let panels = Panels::new(&wt).unwrap().expect("a float type");
                check(&panels, (&x, &w, &c, &bias), (m, k, n), ty);
            }
        }
    }

    /// Accumulating into `c`, then a fresh output with `bias`, against f64 sums.
    fn check(
        panels: &Panels,
        (x, w, c, bias): (&[f32], &[f32], &[f32], &[f32]),
        (m, k, n): (usize, usize, usize),
        ty: GgmlType,
    ) {
        let mut got = c.to_vec();
        panels.xwt(x, m, None, true, &mut got);
        let mut with_bias = vec![f32::NAN; m * n];
        panels.xwt(x, m, Some(bias), false, &mut with_bias);
        for i in 0..m {
            for j in 0..n {
                let dot = (0..k)
                    .map(|p| x[i * k + p] as f64 * w[j * k + p] as f64)
                    .sum::<f64>();
                let tol = |want: f64| 1e-5 * (1.0 + want.abs()) * (k as f64).sqrt();
                let (b, want) = (with_bias[i * n + j] as f64, bias[j] as f64 + dot);
                assert!(
                    (b - want).abs() <= tol(want),
                    "{ty} {m}x{k}x{n} bias ({i}, {j})"
                );
                let want = c[i * n + j] as f64 + dot;
                let g = got[i * n + j] as f64;
                assert!(
                    (g - want).abs() <= tol(want),
                    "{ty} {m}x{k}x{n} at ({i}, {j}): {g} vs {want}"
                );
            }
        }
    }
}
