//! The two products of one attention tile in broadcast form (AVX-512), for `attention`'s
//! key tiles: `S = Q K^T` from the keys transposed once per call into `[D, Sk]` (so 64 keys
//! are four vector loads per query value) and `O += P V` from the value rows where they lie
//! (strided: `[Sk, Hkv, Dv]` keeps a head's rows `Hkv * Dv` apart).
//! A register block is 6 query rows x 64 keys (or x 64 output values): 24 accumulators,
//! four loads and six broadcasts per 24 FMAs, no horizontal sums. The `gemm` crate packs
//! both operands on every one of these small calls; `VLA_CPU_F32=gemm` (or a CPU without
//! avx512f) keeps its path. Sums differ from a sequential loop only by reassociation.

use rayon::prelude::*;

/// Whether the kernels here run: the CPU has avx512f and `VLA_CPU_F32` is not `gemm`.
pub(super) fn enabled() -> bool {
    super::fdot::enabled()
}

/// Key rows padded to a multiple of this in the transposed keys.
const KEYS: usize = 64;

/// The keys of every kv head transposed, `[Hkv, D, Sk']` with `Sk'` = `Sk` rounded up to 64
/// (the padding zero), made once per attention call and shared by all its query blocks.
pub(super) struct KeysT {
    data: Vec<f32>,
    /// `Sk'`, the row stride of each head's `[D, Sk']`.
    ld: usize,
}

impl KeysT {
    /// `k [sk, hkv, d]` transposed per head, heads in parallel.
    pub(super) fn new(k: &[f32], hkv: usize, sk: usize, d: usize) -> Self {
        let ld = sk.next_multiple_of(KEYS);
        let mut data = vec![0.0f32; hkv * d * ld];
        if d > 0 && ld > 0 {
            data.par_chunks_mut(d * ld).enumerate().for_each(|(h, t)| {
                for (c, row) in k.chunks_exact(d).skip(h).step_by(hkv).enumerate() {
                    for (p, &v) in row.iter().enumerate() {
                        t[p * ld + c] = v;
                    }
                }
            });
        }
        KeysT { data, ld }
    }

    /// Head `h`'s keys from key `j0` on and their row stride: what [`scores`] reads.
    pub(super) fn head(&self, h: usize, d: usize, j0: usize) -> (&[f32], usize) {
        (&self.data[h * d * self.ld + j0..], self.ld)
    }
}

/// `s[r * cols + c] = q_r · k_c` for `rows` query rows (`q`, stride `d`) and `cols` keys of
/// `kt` (`[D, ld]` from [`KeysT::head`]; the keys are read in blocks of 64, so `kt` holds
/// `(d - 1) * ld + cols.next_multiple_of(64)` values).
pub(super) fn scores(
    q: &[f32],
    rows: usize,
    d: usize,
    (kt, ld): (&[f32], usize),
    cols: usize,
    s: &mut [f32],
) {
    assert!(enabled() && q.len() >= rows * d && s.len() >= rows * cols);
    assert!(d == 0 || cols == 0 || kt.len() >= (d - 1) * ld + cols.next_multiple_of(KEYS));
    // SAFETY: features checked; lengths asserted.
    unsafe { simd::scores(q, rows, d, kt, ld, cols, s) }
}

/// `o[r * dv + e] += Σ_c p[r * cols + c] * v[c * ldv + e]` for `rows` rows of `p` and the
/// `cols` value rows of `v` (`ldv` apart).
pub(super) fn add_pv(
    p: &[f32],
    rows: usize,
    cols: usize,
    (v, ldv): (&[f32], usize),
    dv: usize,
    o: &mut [f32],
) {
    assert!(enabled() && p.len() >= rows * cols && ldv >= dv);
    assert!(cols == 0 || v.len() >= (cols - 1) * ldv + dv);
    assert!(o.len() >= rows * dv);
    // SAFETY: features checked; lengths asserted.
    unsafe { simd::add_pv(p, rows, cols, v, ldv, dv, o) }
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use crate::ops::kernels::lane_mask;
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn scores(
        q: &[f32],
        rows: usize,
        d: usize,
        kt: &[f32],
        ld: usize,
        cols: usize,
        s: &mut [f32],
    ) {
        for i in (0..rows).step_by(6) {
            let (qp, sp) = (q.as_ptr().add(i * d), s.as_mut_ptr().add(i * cols));
            for j in (0..cols).step_by(64) {
                let kp = kt.as_ptr().add(j);
                let c_n = 64.min(cols - j);
                match 6.min(rows - i) {
                    6 => scores_block::<6>(qp, d, kp, ld, sp.add(j), cols, c_n),
                    5 => scores_block::<5>(qp, d, kp, ld, sp.add(j), cols, c_n),
                    4 => scores_block::<4>(qp, d, kp, ld, sp.add(j), cols, c_n),
                    3 => scores_block::<3>(qp, d, kp, ld, sp.add(j), cols, c_n),
                    2 => scores_block::<2>(qp, d, kp, ld, sp.add(j), cols, c_n),
                    _ => scores_block::<1>(qp, d, kp, ld, sp.add(j), cols, c_n),
                }
            }
        }
    }

    /// `R` query rows x 64 keys; `c_n` of the keys are stored.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn scores_block<const R: usize>(
        qp: *const f32,
        d: usize,
        kp: *const f32,
        ld: usize,
        sp: *mut f32,
        lds: usize,
        c_n: usize,
    ) {
        let mut acc = [[_mm512_setzero_ps(); 4]; R];
        for p in 0..d {
            // Keys past the last are zero padding, so the four loads stay in the rows.
            let kv: [__m512; 4] = std::array::from_fn(|u| _mm512_loadu_ps(kp.add(p * ld + 16 * u)));
            for (r, a) in acc.iter_mut().enumerate() {
                let b = _mm512_set1_ps(*qp.add(r * d + p));
                for u in 0..4 {
                    a[u] = _mm512_fmadd_ps(b, kv[u], a[u]);
                }
            }
        }
        for (r, a) in acc.iter().enumerate() {
            for (u, v) in a.iter().enumerate() {
                if 16 * u < c_n {
                    _mm512_mask_storeu_ps(sp.add(r * lds + 16 * u), lane_mask(c_n - 16 * u), *v);
                }
            }
        }
    }

    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn add_pv(
        p: &[f32],
        rows: usize,
        cols: usize,
        v: &[f32],
        ldv: usize,
        dv: usize,
        o: &mut [f32],
    ) {
        for i in (0..rows).step_by(6) {
            let pp = p.as_ptr().add(i * cols);
            for e in (0..dv).step_by(64) {
                let e_n = 64.min(dv - e);
                let m: [__mmask16; 4] = std::array::from_fn(|u| {
                    if 16 * u < e_n {
                        lane_mask(e_n - 16 * u)
                    } else {
                        0
                    }
                });
                let (vp, op) = (v.as_ptr().add(e), o.as_mut_ptr().add(i * dv + e));
                match 6.min(rows - i) {
                    6 => pv_block::<6>(pp, cols, (vp, ldv), dv, op, m),
                    5 => pv_block::<5>(pp, cols, (vp, ldv), dv, op, m),
                    4 => pv_block::<4>(pp, cols, (vp, ldv), dv, op, m),
                    3 => pv_block::<3>(pp, cols, (vp, ldv), dv, op, m),
                    2 => pv_block::<2>(pp, cols, (vp, ldv), dv, op, m),
                    _ => pv_block::<1>(pp, cols, (vp, ldv), dv, op, m),
                }
            }
        }
    }

    /// `R` rows x 64 output values (the lanes in `m`) over all `cols` value rows (`ldv`
    /// apart).
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn pv_block<const R: usize>(
        pp: *const f32,
        cols: usize,
        (vp, ldv): (*const f32, usize),
        dv: usize,
        op: *mut f32,
        m: [__mmask16; 4],
    ) {
        let mut acc: [[__m512; 4]; R] = std::array::from_fn(|r| {
            std::array::from_fn(|u| _mm512_maskz_loadu_ps(m[u], op.add(r * dv + 16 * u)))
        });
        for c in 0..cols {
            let vv: [__m512; 4] =
                std::array::from_fn(|u| _mm512_maskz_loadu_ps(m[u], vp.add(c * ldv + 16 * u)));
            for (r, a) in acc.iter_mut().enumerate() {
                let b = _mm512_set1_ps(*pp.add(r * cols + c));
                for u in 0..4 {
                    a[u] = _mm512_fmadd_ps(b, vv[u], a[u]);
                }
            }
        }
        for (r, a) in acc.iter().enumerate() {
            for u in 0..4 {
                _mm512_mask_storeu_ps(op.add(r * dv + 16 * u), m[u], a[u]);
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod simd {
    pub(super) unsafe fn scores(
        _: &[f32],
        _: usize,
        _: usize,
        _: &[f32],
        _: usize,
        _: usize,
        _: &mut [f32],
    ) {
        unreachable!("enabled() is false without avx512f")
    }

    pub(super) unsafe fn add_pv(
        _: &[f32],
        _: usize,
        _: usize,
        _: &[f32],
        _: usize,
        _: usize,
        _: &mut [f32],
    ) {
        unreachable!("enabled() is false without avx512f")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::Rng;

    #[test]
    fn both_products_match_f64_loops_over_odd_shapes() {
        if !enabled() {
            eprintln!(
                "NOTE: no avx512f on this CPU: the attention tile kernels were not exercised"
            );
            return;
        }
        let mut r = Rng::new(12);
        for &(rows, cols, d, dv) in &[
            (1, 1, 1, 1),
            (7, 65, 64, 64),
            (6, 64, 72, 72),
            (13, 200, 256, 256),
            (64, 256, 64, 64),
            (5, 17, 3, 130),
        ] {
            // two kv heads, `[cols, 2, d]` and `[cols, 2, dv]`: head 1 is read strided
            let q = r.vec(rows * d);
            let k = r.vec(cols * 2 * d);
            let v = r.vec(cols * 2 * dv);
            let kt = KeysT::new(&k, 2, cols, d);
            let mut s = vec![0.0f32; rows * cols];
            scores(&q, rows, d, kt.head(1, d, 0), cols, &mut s);
            let o0 = r.vec(rows * dv);
            let mut o = o0.clone();
            add_pv(&s, rows, cols, (&v[dv..], 2 * dv), dv, &mut o);
            let (k, v) = (&k[d..], &v[dv..]);
            for i in 0..rows {
                for c in 0..cols {
                    let want: f64 = (0..d)
                        .map(|p| q[i * d + p] as f64 * k[c * 2 * d + p] as f64)
                        .sum();
                    let got = s[i * cols + c] as f64;
                    assert!(
                        (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "S {rows}x{cols}x{d}"
                    );
                }
                for e in 0..dv {
                    let want = o0[i * dv + e] as f64
                        + (0..cols)
                            .map(|c| s[i * cols + c] as f64 * v[c * 2 * dv + e] as f64)
                            .sum::<f64>();
                    let got = o[i * dv + e] as f64;
                    assert!(
                        (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                        "O {rows}x{cols}x{dv}"
                    );
                }
            }
        }
    }
}
