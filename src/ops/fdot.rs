//! `x @ w^T` for an f32 weight `[N, K]` read where it lies, in dot-product form (AVX-512 on
//! x86_64): a block of 6 activation rows x 4 weight rows keeps 24 vector accumulators along
//! K, so each step of 16 values loads 6 + 4 vectors for 24 FMAs, and the lanes are summed
//! once at the end of the row. No panel is packed and no weight is copied, so a 50-row
//! product (an action expert's) costs its FMAs rather than the `gemm` crate's packing of
//! the whole weight on every call; the activation tile and the weight tile a task works on
//! are sized to stay in L2. `VLA_CPU_F32=gemm` (or a CPU without avx512f) takes the `gemm`
//! crate path in `matmul` instead. Sums differ from a sequential loop only by reassociation.

use rayon::prelude::*;

use super::kernels::{spaced_rows, SendPtr};

/// Activation rows and weight rows per register block.
const MR: usize = 6;
const NR: usize = 4;
/// Bytes of each operand's tile a task keeps in L2 (half of Zen 4's 1 MiB, shared by two).
const TILE_BYTES: usize = 256 << 10;
/// Up to this many rows the activations are one tile.
const SMALL_M: usize = 96;
/// Weights with more values than this (64 MiB of f32; Gemma 2B's 16384 x 2048 projections
/// hold 33.5 M) go to the `gemm` crate when more than `SMALL_M` rows multiply them: at 712 x
/// 16384 x 2048 it takes 307 ms where this kernel takes 347, whatever the tile sizes (`cargo
/// bench --bench ops -- F32/m712`); at 50 rows, or with SigLIP's and SmolLM2's weights (up to
/// 9.4 M values), this kernel is the faster.
pub(crate) const LARGE_WEIGHT: usize = 16 << 20;

/// Whether this kernel runs here: the CPU has avx512f and `VLA_CPU_F32` is not `gemm`.
pub(crate) fn enabled() -> bool {
    simd::detected() && std::env::var("VLA_CPU_F32").as_deref() != Ok("gemm")
}

/// `out[i * n + j] += Σ_p x[i * k + p] * w[j * k + p]` for `x [m, k]`, `w [n, k]`,
/// `out [m, n]`, tiles of the output in parallel. Callers check [`enabled`].
pub(crate) fn xwt_add(x: &[f32], m: usize, k: usize, w: &[f32], n: usize, out: &mut [f32]) {
    assert!(x.len() >= m * k && w.len() >= n * k && out.len() >= m * n);
    if m == 0 || n == 0 || k == 0 {
        return;
    }
    let (x, ldx) = spaced_rows(x, m, k);
    let x = &x[..];
    // A few rows (an action expert's 50) stay one tile, so each weight row is read once.
    let rows_per_tile = if m <= SMALL_M {
        m
    } else {
        (TILE_BYTES / (4 * k)).max(MR) / MR * MR
    };
    let tasks = 4 * rayon::current_num_threads();
    let cols_per_tile = n
        .div_ceil(tasks)
        .next_multiple_of(NR)
        .min((TILE_BYTES / (4 * k)).max(NR) / NR * NR);
    let (mt, nt) = (m.div_ceil(rows_per_tile), n.div_ceil(cols_per_tile));
    let dst = SendPtr(out.as_mut_ptr());
    // Tasks go down the rows first: neighbouring tasks (and the two threads) share a tile of
    // weight rows while the activations, read once per weight tile, come from L3. Across
    // the columns first, a large weight (Gemma's 16384 x 2048 at 700 rows) streamed from
    // memory once per row tile.
    (0..mt * nt).into_par_iter().for_each(|t| {
        let (i0, j0) = ((t % mt) * rows_per_tile, (t / mt) * cols_per_tile);
        let (i1, j1) = ((i0 + rows_per_tile).min(m), (j0 + cols_per_tile).min(n));
        // SAFETY: the tile's rows of x and w lie inside the asserted lengths (ldx >= k); this
        // task alone writes out[i0..i1, j0..j1].
        unsafe { simd::tile(x, ldx, k, w, (i0, i1), (j0, j1), dst.get(), n) };
    });
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use super::{MR, NR};
    use std::arch::x86_64::*;

    pub(super) fn detected() -> bool {
        std::is_x86_feature_detected!("avx512f")
    }

    /// One output tile: `out[i, j] += x_i · w_j` for rows `i0..i1` and columns `j0..j1`.
    ///
    /// # Safety
    /// The CPU has avx512f; rows `i0..i1` of `x` (stride `ldx`) and `j0..j1` of `w` (stride
    /// `k`) hold `k` values each; the tile of `out` (stride `ldo`) is the caller's alone.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn tile(
        x: &[f32],
        ldx: usize,
        k: usize,
        w: &[f32],
        (i0, i1): (usize, usize),
        (j0, j1): (usize, usize),
        out: *mut f32,
        ldo: usize,
    ) {
        assert!(detected());
        // The block's activation rows stay in L1 while the tile's weight rows stream by.
        for i in (i0..i1).step_by(MR) {
            let rows = MR.min(i1 - i);
            let xp: [*const f32; MR] =
                std::array::from_fn(|r| x[(i + r.min(rows - 1)) * ldx..].as_ptr());
            for j in (j0..j1).step_by(NR) {
                let cols = NR.min(j1 - j);
                // Past the last column, repeat it (computed, not stored).
                let wp: [*const f32; NR] =
                    std::array::from_fn(|c| w[(j + c.min(cols - 1)) * k..].as_ptr());
                let o = out.add(i * ldo + j);
                // SAFETY: as the caller promised; only the block's first `rows` rows and
                // `cols` columns are stored (the repeated ones are computed and dropped).
                unsafe {
                    match rows {
                        6 => block::<6>(&xp, wp, k, o, ldo, cols),
                        5 => block::<5>(&xp, wp, k, o, ldo, cols),
                        4 => block::<4>(&xp, wp, k, o, ldo, cols),
                        3 => block::<3>(&xp, wp, k, o, ldo, cols),
                        2 => block::<2>(&xp, wp, k, o, ldo, cols),
                        _ => block::<1>(&xp, wp, k, o, ldo, cols),
                    }
                }
            }
        }
    }

    /// An `R` x 4 register block (R <= 6) over the whole of K.
    #[target_feature(enable = "avx512f")]
    unsafe fn block<const R: usize>(
        xp: &[*const f32; MR],
        wp: [*const f32; NR],
        k: usize,
        out: *mut f32,
        ldo: usize,
        cols: usize,
    ) {
        let mut acc = [[_mm512_setzero_ps(); NR]; R];
        let mut p = 0;
        while p + 16 <= k {
            let wv: [__m512; NR] = std::array::from_fn(|c| _mm512_loadu_ps(wp[c].add(p)));
            for r in 0..R {
                let xv = _mm512_loadu_ps(xp[r].add(p));
                for c in 0..NR {
                    acc[r][c] = _mm512_fmadd_ps(xv, wv[c], acc[r][c]);
                }
            }
            p += 16;
        }
        if p < k {
            let mask = crate::ops::kernels::lane_mask(k - p);
            let wv: [__m512; NR] =
                std::array::from_fn(|c| _mm512_maskz_loadu_ps(mask, wp[c].add(p)));
            for r in 0..R {
                let xv = _mm512_maskz_loadu_ps(mask, xp[r].add(p));
                for c in 0..NR {
                    acc[r][c] = _mm512_fmadd_ps(xv, wv[c], acc[r][c]);
                }
            }
        }
        for (r, a) in acc.iter().enumerate() {
            let s = sum4(a);
            let o = out.add(r * ldo);
            if cols == NR {
                _mm_storeu_ps(o, _mm_add_ps(_mm_loadu_ps(o), s));
            } else {
                let mut v = [0.0f32; NR];
                _mm_storeu_ps(v.as_mut_ptr(), s);
                for (c, v) in v.iter().enumerate().take(cols) {
                    *o.add(c) += v;
                }
            }
        }
    }

    /// The four accumulators' lane sums, as one 4-lane vector.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn sum4(a: &[__m512; NR]) -> __m128 {
        // Per 128-bit lane: [a0 a1 a0 a1] and [a2 a3 a2 a3] partial sums, then [a0 a1 a2 a3].
        let t0 = _mm512_add_ps(
            _mm512_unpacklo_ps(a[0], a[1]),
            _mm512_unpackhi_ps(a[0], a[1]),
        );
        let t1 = _mm512_add_ps(
            _mm512_unpacklo_ps(a[2], a[3]),
            _mm512_unpackhi_ps(a[2], a[3]),
        );
        let (d0, d1) = (_mm512_castps_pd(t0), _mm512_castps_pd(t1));
        let u = _mm512_add_ps(
            _mm512_castpd_ps(_mm512_unpacklo_pd(d0, d1)),
            _mm512_castpd_ps(_mm512_unpackhi_pd(d0, d1)),
        );
        let lo = _mm512_castps512_ps256(u);
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(u)));
        let y = _mm256_add_ps(lo, hi);
        _mm_add_ps(_mm256_castps256_ps128(y), _mm256_extractf128_ps::<1>(y))
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod simd {
    pub(super) fn detected() -> bool {
        false
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn tile(
        _: &[f32],
        _: usize,
        _: usize,
        _: &[f32],
        _: (usize, usize),
        _: (usize, usize),
        _: *mut f32,
        _: usize,
    ) {
        unreachable!("enabled() is false without avx512f")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::Rng;

    #[test]
    fn matches_f64_loops_over_odd_shapes() {
        if !enabled() {
            eprintln!("NOTE: no avx512f on this CPU: the f32 dot kernel was not exercised");
            return;
        }
        let mut r = Rng::new(9);
        for &(m, k, n) in &[
            (1, 1, 1),
            (1, 17, 3),
            (7, 15, 5),
            (6, 16, 4),
            (13, 33, 9),
            (50, 720, 97),
            (5, 256, 11),
            (7, 2048, 5),
            (130, 1024, 70),
            (300, 40, 260),
        ] {
            let x = r.vec(m * k);
            let w = r.vec(n * k);
            let c = r.vec(m * n);
            let mut got = c.clone();
            xwt_add(&x, m, k, &w, n, &mut got);
            for i in 0..m {
                for j in 0..n {
                    let want = c[i * n + j] as f64
                        + (0..k)
                            .map(|p| x[i * k + p] as f64 * w[j * k + p] as f64)
                            .sum::<f64>();
                    let g = got[i * n + j] as f64;
                    assert!(
                        (g - want).abs() <= 1e-5 * (1.0 + want.abs()) * (k as f64).sqrt(),
                        "{m}x{k}x{n} at ({i}, {j}): {g} vs {want}"
                    );
                }
            }
        }
    }
}
