//! Inner-loop kernels: dot products and axpy.
//!
//! Portable versions use 8 independent accumulators (they autovectorise in release builds);
//! on x86_64 an AVX2+FMA version is picked at run time, which keeps the reference fast even
//! in the (opt-level 1) test profile. Results differ from a sequential sum only by
//! floating-point reassociation.

/// `sum(a[i] * b[i])` over the common length (callers pass equal lengths).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx2_fma() {
            // SAFETY: the CPU supports AVX2 and FMA (checked above); lengths are equal.
            return unsafe { avx2::dot(a, b) };
        }
    }
    dot_portable(a, b)
}

/// Dots of one `x` row against four rows `w[0..4]` (all of `x`'s length).
#[inline]
pub(crate) fn dot4(x: &[f32], w: [&[f32]; 4]) -> [f32; 4] {
    let n = x.len();
    let w = w.map(|r| &r[..n]);
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx2_fma() {
            // SAFETY: as in `dot`; every row has been sliced to `n`.
            return unsafe { avx2::dot4(x, w) };
        }
    }
    w.map(|r| dot_portable(x, r))
}

/// `y[i] += a * x[i]`.
#[inline]
pub(crate) fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    let n = x.len().min(y.len());
    let (x, y) = (&x[..n], &mut y[..n]);
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx2_fma() {
            // SAFETY: as in `dot`.
            unsafe { avx2::axpy(a, x, y) };
            return;
        }
    }
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += a * xi;
    }
}

pub(crate) fn dot_portable(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let ca = a.chunks_exact(8);
    let cb = b.chunks_exact(8);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for j in 0..8 {
            acc[j] += x[j] * y[j];
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn has_avx2_fma() -> bool {
    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    // Unaligned 8-float load/store through a packed wrapper: a plain `vmovups`. (The std
    // `_mm256_loadu_ps` goes through `copy_nonoverlapping`, whose debug-build precondition
    // checks make it ~10x slower in the test profile.)
    #[repr(C, packed)]
    struct Unaligned(__m256);

    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        (*(p as *const Unaligned)).0
    }

    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256) {
        (*(p as *mut Unaligned)).0 = v;
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps::<1>(s, s));
        _mm_cvtss_f32(s)
    }

    /// Requires `a.len() == b.len()`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len();
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let (mut a0, mut a1, mut a2, mut a3) = (
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
        );
        let mut i = 0;
        while i + 32 <= n {
            a0 = _mm256_fmadd_ps(load(pa.add(i)), load(pb.add(i)), a0);
            a1 = _mm256_fmadd_ps(load(pa.add(i + 8)), load(pb.add(i + 8)), a1);
            a2 = _mm256_fmadd_ps(load(pa.add(i + 16)), load(pb.add(i + 16)), a2);
            a3 = _mm256_fmadd_ps(load(pa.add(i + 24)), load(pb.add(i + 24)), a3);
            i += 32;
        }
        while i + 8 <= n {
            a0 = _mm256_fmadd_ps(load(pa.add(i)), load(pb.add(i)), a0);
            i += 8;
        }
        let mut s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        while i < n {
            s += *pa.add(i) * *pb.add(i);
            i += 1;
        }
        s
    }

    /// Requires every `w[j].len() == x.len()`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot4(x: &[f32], w: [&[f32]; 4]) -> [f32; 4] {
        let n = x.len();
        let px = x.as_ptr();
        let pw = w.map(|r| r.as_ptr());
        let mut lo = [_mm256_setzero_ps(); 4];
        let mut hi = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 16 <= n {
            let x0 = load(px.add(i));
            let x1 = load(px.add(i + 8));
            for j in 0..4 {
                lo[j] = _mm256_fmadd_ps(x0, load(pw[j].add(i)), lo[j]);
                hi[j] = _mm256_fmadd_ps(x1, load(pw[j].add(i + 8)), hi[j]);
            }
            i += 16;
        }
        if i + 8 <= n {
            let x0 = load(px.add(i));
            for j in 0..4 {
                lo[j] = _mm256_fmadd_ps(x0, load(pw[j].add(i)), lo[j]);
            }
            i += 8;
        }
        let mut out = [0.0f32; 4];
        for j in 0..4 {
            let mut s = hsum(_mm256_add_ps(lo[j], hi[j]));
            for k in i..n {
                s += x[k] * w[j][k];
            }
            out[j] = s;
        }
        out
    }

    /// Requires `x.len() == y.len()`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
        let n = x.len();
        let av = _mm256_set1_ps(a);
        let (px, py) = (x.as_ptr(), y.as_mut_ptr());
        let mut i = 0;
        while i + 8 <= n {
            let r = _mm256_fmadd_ps(av, load(px.add(i)), load(py.add(i)));
            store(py.add(i), r);
            i += 8;
        }
        while i < n {
            y[i] += a * x[i];
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::Rng;

    fn naive(a: &[f32], b: &[f32]) -> f64 {
        a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum()
    }

    #[test]
    fn dot_matches_f64_sum_for_all_tail_lengths() {
        let mut r = Rng::new(1);
        for n in [0usize, 1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 100, 257] {
            let a = r.vec(n);
            let b = r.vec(n);
            let want = naive(&a, &b);
            assert!((dot(&a, &b) as f64 - want).abs() < 1e-4, "n={n}");
            assert!((dot_portable(&a, &b) as f64 - want).abs() < 1e-4, "n={n}");
            let w: Vec<Vec<f32>> = (0..4).map(|_| r.vec(n)).collect();
            let d = dot4(&a, [&w[0], &w[1], &w[2], &w[3]]);
            for j in 0..4 {
                assert!((d[j] as f64 - naive(&a, &w[j])).abs() < 1e-4, "n={n} j={j}");
            }
            let mut y = b.clone();
            axpy(0.5, &a, &mut y);
            for i in 0..n {
                assert!((y[i] - (b[i] + 0.5 * a[i])).abs() < 1e-6);
            }
        }
        assert_eq!(dot(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]), 32.0);
    }
}
