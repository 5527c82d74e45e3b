//! `x @ w^T` for an f32 weight packed once into panels of 32 output columns (AVX-512 on
//! x86_64), the cpu backend's default f32 matmul where the CPU has avx512f.
//!
//! A panel holds 32 weight rows transposed, K-major (`panel[p * 32 + j] = w[n0 + j, p]`),
//! so one step along K loads two contiguous vectors of weights and broadcasts one value of
//! each activation row: a block of 12 rows x 32 columns keeps 24 accumulators in registers
//! over the whole of K, 24 FMAs for 2 vector loads and 12 broadcasts, the outer-product
//! form that keeps both of a core's 512-bit FMA ports busy (Intel's server cores issue two
//! a cycle). The weight is packed when the executable is compiled, so no run repacks it
//! (the `gemm` crate repacks its operand on every call: a sixth of a SigLIP predict) and a
//! 50-row product costs its FMAs. Each task keeps a tile of activation rows in L2 and
//! streams its panels past it. `VLA_CPU_F32=dot` takes the dot-form kernel (`fdot`) and
//! `VLA_CPU_F32=gemm` the `gemm` crate instead. Sums differ from a sequential loop only by
//! reassociation (K is summed in order, one FMA at a time, per output).

use rayon::prelude::*;

use super::kernels::SendPtr;

/// Output columns per panel (two 16-lane vectors).
const NR: usize = 32;
/// Activation rows per register block.
const MR: usize = 12;
/// Bytes of activation rows a task keeps in L2.
const TILE_BYTES: usize = 512 << 10;

/// Whether this kernel runs here: the CPU has avx512f and `VLA_CPU_F32` names no other
/// kernel.
pub(crate) fn enabled() -> bool {
    simd::detected()
        && !matches!(
            std::env::var("VLA_CPU_F32").as_deref(),
            Ok("gemm") | Ok("dot")
        )
}

/// An f32 weight `[n, k]` in 32-column panels, zero past the last row.
pub struct F32Panels {
    n: usize,
    k: usize,
    data: Vec<f32>,
}

impl F32Panels {
    /// `w [n, k]` (row-major) packed, panels in parallel.
    pub(crate) fn new(w: &[f32], n: usize, k: usize) -> Self {
        assert!(w.len() >= n * k, "F32Panels: weight too short");
        let mut data = vec![0.0f32; n.div_ceil(NR) * NR * k];
        if k > 0 {
            data.par_chunks_mut(NR * k)
                .enumerate()
                .for_each(|(t, panel)| {
                    let rows = NR.min(n - t * NR);
                    for (j, row) in w[t * NR * k..][..rows * k].chunks_exact(k).enumerate() {
                        for (p, &v) in row.iter().enumerate() {
                            panel[p * NR + j] = v;
                        }
                    }
                });
        }
        F32Panels { n, k, data }
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        4 * self.data.len() as u64
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
            "F32Panels: operand too short"
        );
        assert!(
            bias.is_none_or(|b| b.len() == n),
            "F32Panels: bias is not [n]"
        );
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
        // Rows whose stride is a multiple of 4 KiB land in the same L1 sets (twelve
        // streams): such activations are read from a copy with a padded stride.
        let padded;
        let (x, ldx) = if k.is_multiple_of(1024) {
            let ldx = k + 16;
            let mut p = vec![0.0f32; m * ldx];
            p.par_chunks_mut(ldx)
                .zip(x.par_chunks(k))
                .for_each(|(d, s)| d[..k].copy_from_slice(s));
            padded = p;
            (&padded[..], ldx)
        } else {
            (x, k)
        };
        let rows_per_tile = (TILE_BYTES / (4 * k)).clamp(MR, m.next_multiple_of(MR)) / MR * MR;
        let panels = n.div_ceil(NR);
        let tasks = 4 * rayon::current_num_threads();
        let mt = m.div_ceil(rows_per_tile);
        let panels_per_task = panels.div_ceil(tasks.div_ceil(mt).max(1)).max(1);
        let nt = panels.div_ceil(panels_per_task);
        let dst = SendPtr(out.as_mut_ptr());
        (0..mt * nt).into_par_iter().for_each(|t| {
            let (i0, t0) = ((t % mt) * rows_per_tile, (t / mt) * panels_per_task);
            let (i1, t1) = (
                (i0 + rows_per_tile).min(m),
                (t0 + panels_per_task).min(panels),
            );
            for panel in t0..t1 {
                let cols = NR.min(n - panel * NR);
                let w = &self.data[panel * NR * k..][..NR * k];
                // the task's next panel, fetched while this one is multiplied
                let next = (panel + 1 < t1).then(|| &self.data[(panel + 1) * NR * k..][..NR * k]);
                let epilogue = simd::Epilogue {
                    bias: bias.map(|b| &b[panel * NR..][..cols]),
                    accumulate,
                };
                // SAFETY: rows i0..i1 of x (stride ldx >= k) hold k values each, the panels
                // NR * k; this task alone writes out[i0..i1, panel's columns].
                unsafe {
                    let o = dst.get().add(panel * NR);
                    simd::panel(x, ldx, k, (w, next), (i0, i1), o, n, cols, epilogue)
                };
            }
        });
    }
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use super::{MR, NR};
    use std::arch::x86_64::*;

    pub(super) fn detected() -> bool {
        std::is_x86_feature_detected!("avx512f")
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
    /// blocks of rows as even as `MR` allows (50 rows: five of 10). The first block also
    /// prefetches `next` (the panel to come) into L2, a step of K at a time: the first
    /// pass over a panel from memory would otherwise wait on it.
    ///
    /// # Safety
    /// The CPU has avx512f; rows `i0..i1` of `x` (stride `ldx`) hold `k` values each, `w`
    /// and `next` are panels (`NR * k` values); those rows' first `cols` values of `out`
    /// (stride `ldo`) are the caller's alone; `cols` <= 32 and the bias, if any, holds
    /// `cols` values.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn panel(
        x: &[f32],
        ldx: usize,
        k: usize,
        (w, next): (&[f32], Option<&[f32]>),
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
            let pf = match next {
                Some(n) if b == 0 => n.as_ptr(),
                _ => std::ptr::null(),
            };
            // SAFETY: as the caller promised, for rows i..i + rows.
            unsafe {
                match rows {
                    12 => block::<12>(xp, ldx, (w.as_ptr(), pf), k, (o, ldo), mask, epilogue),
                    11 => block::<11>(xp, ldx, (w.as_ptr(), pf), k, (o, ldo), mask, epilogue),
                    10 => block::<10>(xp, ldx, (w.as_ptr(), pf), k, (o, ldo), mask, epilogue),
                    9 => block::<9>(xp, ldx, (w.as_ptr(), pf), k, (o, ldo), mask, epilogue),
                    8 => block::<8>(xp, ldx, (w.as_ptr(), pf), k, (o, ldo), mask, epilogue),
                    7 => block::<7>(xp, ldx, (w.as_ptr(), pf), k, (o, ldo), mask, epilogue),
                    6 => block::<6>(xp, ldx, (w.as_ptr(), pf), k, (o, ldo), mask, epilogue),
                    5 => block::<5>(xp, ldx, (w.as_ptr(), pf), k, (o, ldo), mask, epilogue),
                    4 => block::<4>(xp, ldx, (w.as_ptr(), pf), k, (o, ldo), mask, epilogue),
                    3 => block::<3>(xp, ldx, (w.as_ptr(), pf), k, (o, ldo), mask, epilogue),
                    2 => block::<2>(xp, ldx, (w.as_ptr(), pf), k, (o, ldo), mask, epilogue),
                    _ => block::<1>(xp, ldx, (w.as_ptr(), pf), k, (o, ldo), mask, epilogue),
                }
            }
            i += rows;
        }
    }

    /// An `R` x 32 register block (R <= 12) over the whole of K, stored to `out` after the
    /// epilogue; `mask` says which of the 32 columns are stored; `pf`, unless null, a panel
    /// to prefetch.
    #[target_feature(enable = "avx512f")]
    unsafe fn block<const R: usize>(
        x: *const f32,
        ldx: usize,
        (w, pf): (*const f32, *const f32),
        k: usize,
        (out, ldo): (*mut f32, usize),
        mask: u32,
        epilogue: Epilogue,
    ) {
        let mut acc = [[_mm512_setzero_ps(); 2]; R];
        if !pf.is_null() {
            for p in 0..k {
                _mm_prefetch::<_MM_HINT_T1>(pf.add(p * NR) as *const i8);
                _mm_prefetch::<_MM_HINT_T1>(pf.add(p * NR + 16) as *const i8);
                step::<R>(&mut acc, x, ldx, w, p);
            }
        } else {
            for p in 0..k {
                step::<R>(&mut acc, x, ldx, w, p);
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
    unsafe fn step<const R: usize>(
        acc: &mut [[__m512; 2]; R],
        x: *const f32,
        ldx: usize,
        w: *const f32,
        p: usize,
    ) {
        {
            let w0 = _mm512_loadu_ps(w.add(p * NR));
            let w1 = _mm512_loadu_ps(w.add(p * NR + 16));
            for (r, a) in acc.iter_mut().enumerate() {
                let xv = _mm512_set1_ps(*x.add(r * ldx + p));
                a[0] = _mm512_fmadd_ps(xv, w0, a[0]);
                a[1] = _mm512_fmadd_ps(xv, w1, a[1]);
            }
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

    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn panel(
        _: &[f32],
        _: usize,
        _: usize,
        _: (&[f32], Option<&[f32]>),
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
    use crate::ops::testutil::Rng;

    #[test]
    fn matches_f64_loops_over_odd_shapes() {
        if !simd::detected() {
            eprintln!("NOTE: no avx512f on this CPU: the f32 panel kernel was not exercised");
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
            let mut got = c.clone();
            // accumulating into c, then a fresh output with a bias
            let panels = F32Panels::new(&w, n, k);
            panels.xwt(&x, m, None, true, &mut got);
            let mut with_bias = vec![f32::NAN; m * n];
            panels.xwt(&x, m, Some(&bias), false, &mut with_bias);
            for i in 0..m {
                for j in 0..n {
                    let dot = (0..k)
                        .map(|p| x[i * k + p] as f64 * w[j * k + p] as f64)
                        .sum::<f64>();
                    let tol = |want: f64| 1e-5 * (1.0 + want.abs()) * (k as f64).sqrt();
                    let (b, want) = (with_bias[i * n + j] as f64, bias[j] as f64 + dot);
                    assert!((b - want).abs() <= tol(want), "{m}x{k}x{n} bias ({i}, {j})");
                    let want = c[i * n + j] as f64 + dot;
                    let g = got[i * n + j] as f64;
                    assert!(
                        (g - want).abs() <= tol(want),
                        "{m}x{k}x{n} at ({i}, {j}): {g} vs {want}"
                    );
                }
            }
        }
    }
}
