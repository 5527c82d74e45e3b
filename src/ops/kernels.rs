//! Inner-loop kernels: dot product, `exp` over a row, and the one wrapper of the `gemm`
//! crate (packed, register-blocked matrix products) that matmul and attention share.
//!
//! Portable versions use 8 independent accumulators (they autovectorise in release builds);
//! on x86_64 an AVX2+FMA version (AVX-512 for `exp`) is picked at run time, which keeps the
//! reference fast even in the (opt-level 1) test profile. Results differ from a sequential
//! sum only by floating-point reassociation.

use rayon::prelude::*;
use std::borrow::Cow;

/// The AVX-512 lane mask of the first `min(n, 16)` lanes: a vector's worth of a row's
/// last `n` values (the masked tails of the AVX-512 kernels here and in `fdot` and
/// `attention_kernels`).
pub(crate) fn lane_mask(n: usize) -> u16 {
    if n >= 16 {
        u16::MAX
    } else {
        (1u16 << n) - 1
    }
}

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

/// `row[i] = exp(row[i] - shift)` in place, returning the sum; `-inf` (and anything below
/// about -87.3 after the shift) gives exactly 0. A Cephes-style polynomial (range reduction
/// by ln 2, degree-5 polynomial, relative error ~2e-7 across the range), 16 lanes at a time
/// with AVX-512 or 8 with AVX2+FMA on x86_64 (the same value per element).
pub(crate) fn exp_shifted(row: &mut [f32], shift: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports AVX-512F (checked above).
            return unsafe { avx512::exp_shifted(row, shift) };
        }
        if has_avx2_fma() {
            // SAFETY: the CPU supports AVX2 and FMA (checked above).
            return unsafe { avx2::exp_shifted(row, shift) };
        }
    }
    let mut sum = 0.0f32;
    for v in row.iter_mut() {
        *v = exp_poly(*v - shift);
        sum += *v;
    }
    sum
}

const EXP_HI: f32 = 88.376_26;
/// Below this `exp` underflows (to a subnormal); the kernels return 0 there.
const EXP_LO: f32 = -87.336_55;
const EXP_C: [f32; 6] = [
    1.987_569_2e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    0.166_666_65,
    0.5,
];
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;

/// The scalar form of the vector kernel's polynomial.
fn exp_poly(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    if x < EXP_LO {
        return 0.0;
    }
    let x = x.min(EXP_HI);
    let n = (x * std::f32::consts::LOG2_E + 0.5).floor();
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = EXP_C[0];
    for c in &EXP_C[1..] {
        p = p * r + c;
    }
    let y = p * r * r + r + 1.0;
    y * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// A row-major f32 matrix view with explicit strides, as the `gemm` crate takes them.
#[derive(Clone, Copy)]
pub(crate) struct Mat {
    pub ptr: *const f32,
    /// Stride between rows, in elements.
    pub rs: isize,
    /// Stride between columns, in elements.
    pub cs: isize,
}
// SAFETY: a read-only view; the data it points to outlives every call that uses it.
unsafe impl Send for Mat {}
unsafe impl Sync for Mat {}

/// `dst[m, n] = lhs[m, k] @ rhs[k, n]`, or `dst += lhs @ rhs` with `accumulate`, on the `gemm` crate's packed, register-blocked kernels.
///
/// # Safety
/// Every `lhs`/`rhs` element addressed by `(i, p)`/`(p, j)` for `i < m`, `p < k`, `j < n`
/// must be readable, `dst`'s `(i, j)` writable, and no other thread may touch those
/// `dst` elements during the call.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn sgemm(
    m: usize,
    n: usize,
    k: usize,
    dst: Dst,
    lhs: Mat,
    rhs: Mat,
    accumulate: bool,
    par: gemm::Parallelism,
) {
    gemm::gemm(
        m,
        n,
        k,
        dst.ptr,
        dst.cs,
        dst.rs,
        accumulate,
        lhs.ptr,
        lhs.cs,
        lhs.rs,
        rhs.ptr,
        rhs.cs,
        rhs.rs,
        if accumulate { 1.0 } else { 0.0 },
        1.0,
        false,
        false,
        false,
        par,
    );
}

/// The written matrix of [`sgemm`]: element `(i, j)` at `ptr + i * rs + j * cs`.
#[derive(Clone, Copy)]
pub(crate) struct Dst {
    pub ptr: *mut f32,
    pub rs: isize,
    pub cs: isize,
}

impl Dst {
    /// Row-major with row stride `rs`.
    pub(crate) fn rows(ptr: *mut f32, rs: usize) -> Self {
        Dst {
            ptr,
            rs: rs as isize,
            cs: 1,
        }
    }
}

/// `*mut f32` that may cross threads, for tasks that write disjoint parts of one buffer.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr(pub(crate) *mut f32);
// SAFETY: users write disjoint elements only (each use says which).
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

impl SendPtr {
    /// The pointer (a method, so closures capture the whole wrapper, not its field).
    pub(crate) fn get(self) -> *mut f32 {
        self.0
    }
}

/// `x [m, k]` as rows the AVX-512 kernels read side by side, and their stride: rows whose
/// stride is a multiple of 4 KiB land in the same L1 sets (ten or twelve streams on an 8- or
/// 12-way cache), so such rows are read from a copy with a padded stride.
pub(crate) fn spaced_rows(x: &[f32], m: usize, k: usize) -> (Cow<'_, [f32]>, usize) {
    if !k.is_multiple_of(1024) {
        return (Cow::Borrowed(x), k);
    }
    let ldx = k + 16;
    let mut p = vec![0.0f32; m * ldx];
    p.par_chunks_mut(ldx)
        .zip(x.par_chunks(k))
        .for_each(|(d, s)| d[..k].copy_from_slice(s));
    (Cow::Owned(p), ldx)
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

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn exp_shifted(row: &mut [f32], shift: f32) -> f32 {
        use super::{EXP_C, EXP_HI, EXP_LO, LN2_HI, LN2_LO};
        let n = row.len();
        let p = row.as_mut_ptr();
        let sh = _mm256_set1_ps(shift);
        let (hi, lo) = (_mm256_set1_ps(EXP_HI), _mm256_set1_ps(EXP_LO));
        let log2e = _mm256_set1_ps(std::f32::consts::LOG2_E);
        let half = _mm256_set1_ps(0.5);
        let one = _mm256_set1_ps(1.0);
        let (c1, c2) = (_mm256_set1_ps(LN2_HI), _mm256_set1_ps(LN2_LO));
        let c = EXP_C.map(|v| _mm256_set1_ps(v));
        let mut acc = _mm256_setzero_ps();
        let mut i = 0;
        while i + 8 <= n {
            let x = _mm256_sub_ps(load(p.add(i)), sh);
            let keep = _mm256_cmp_ps::<_CMP_GE_OQ>(x, lo);
            let x = _mm256_min_ps(x, hi);
            let fx = _mm256_floor_ps(_mm256_fmadd_ps(x, log2e, half));
            let r = _mm256_sub_ps(
                _mm256_sub_ps(x, _mm256_mul_ps(fx, c1)),
                _mm256_mul_ps(fx, c2),
            );
            let mut y = c[0];
            for cj in &c[1..] {
                y = _mm256_fmadd_ps(y, r, *cj);
            }
            let y = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(y, r), r, r), one);
            let pow = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
                _mm256_cvtps_epi32(fx),
                _mm256_set1_epi32(127),
            )));
            let y = _mm256_and_ps(_mm256_mul_ps(y, pow), keep);
            store(p.add(i), y);
            acc = _mm256_add_ps(acc, y);
            i += 8;
        }
        let mut sum = hsum(acc);
        while i < n {
            let v = super::exp_poly(*p.add(i) - shift);
            *p.add(i) = v;
            sum += v;
            i += 1;
        }
        sum
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// The AVX2 kernel's polynomial on 16 lanes (a masked last vector, no scalar tail): the
    /// same value per element, partial sums over 16 lanes.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn exp_shifted(row: &mut [f32], shift: f32) -> f32 {
        use super::{EXP_C, EXP_HI, EXP_LO, LN2_HI, LN2_LO};
        let n = row.len();
        let p = row.as_mut_ptr();
        let sh = _mm512_set1_ps(shift);
        let (hi, lo) = (_mm512_set1_ps(EXP_HI), _mm512_set1_ps(EXP_LO));
        let log2e = _mm512_set1_ps(std::f32::consts::LOG2_E);
        let (half, one) = (_mm512_set1_ps(0.5), _mm512_set1_ps(1.0));
        let (c1, c2) = (_mm512_set1_ps(LN2_HI), _mm512_set1_ps(LN2_LO));
        let c = EXP_C.map(|v| _mm512_set1_ps(v));
        let mut acc = _mm512_setzero_ps();
        let mut i = 0;
        while i < n {
            let m = super::lane_mask(n - i);
            let x = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, p.add(i)), sh);
            let keep = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, lo) & m;
            let x = _mm512_min_ps(x, hi);
            let fx = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(
                _mm512_fmadd_ps(x, log2e, half),
            );
            let r = _mm512_sub_ps(
                _mm512_sub_ps(x, _mm512_mul_ps(fx, c1)),
                _mm512_mul_ps(fx, c2),
            );
            let mut y = c[0];
            for cj in &c[1..] {
                y = _mm512_fmadd_ps(y, r, *cj);
            }
            let y = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(y, r), r, r), one);
            let pow = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(
                _mm512_cvtps_epi32(fx),
                _mm512_set1_epi32(127),
            )));
            let y = _mm512_maskz_mul_ps(keep, y, pow);
            _mm512_mask_storeu_ps(p.add(i), m, y);
            acc = _mm512_add_ps(acc, y);
            i += 16;
        }
        _mm512_reduce_add_ps(acc)
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
        }
        assert_eq!(dot(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]), 32.0);
    }

    #[test]
    fn exp_shifted_matches_f64_exp_over_the_range() {
        let mut xs: Vec<f32> = (0..2000).map(|i| -100.0 + i as f32 * 0.0937).collect();
        xs.extend([0.0, -0.0, 1e-8, -1e-8, 88.0, -87.3, f32::NEG_INFINITY, 5.5]);
        let shift = 1.25f32;
        for n in [xs.len(), 7, 8, 9] {
            let mut row = xs[..n].to_vec();
            let sum = exp_shifted(&mut row, shift);
            let mut want_sum = 0.0f64;
            for (x, y) in xs[..n].iter().zip(&row) {
                let want = ((*x - shift) as f64).exp();
                if (*x - shift) < EXP_LO {
                    assert_eq!(*y, 0.0, "exp({x} - {shift})");
                    continue;
                }
                want_sum += want;
                assert!(
                    ((*y as f64) - want).abs() <= 3e-7 * want,
                    "exp({x} - {shift}): {y} vs {want}"
                );
                // the scalar tail form agrees with the vector lanes
                assert!(((exp_poly(*x - shift) as f64) - want).abs() <= 3e-7 * want);
            }
            assert!(
                ((sum as f64) - want_sum).abs() <= 1e-5 * want_sum,
                "sum {sum} vs {want_sum}"
            );
        }
    }
}
