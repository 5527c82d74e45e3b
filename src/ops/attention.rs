//! Scaled dot-product attention with GQA and masks.

use rayon::prelude::*;

use super::attention_kernels::{self as tiles, KeysT};
use super::kernels::{exp_shifted, sgemm, Dst, Mat};
use super::{f32s, out};
use crate::{Error, Result, Tensor};

/// Which keys each query may attend to.
#[derive(Clone, Copy, Debug)]
pub enum Mask<'m> {
    /// Every query sees every key.
    None,
    /// Query `i` sees keys `j <= i + (Sk - Sq)` (queries are the last `Sq` positions of the
    /// `Sk` keys, as with a KV cache).
    Causal,
    /// Row-major allowed-matrix, `[Sq, Sk]` (shared by all heads) or `[Hq, Sq, Sk]`;
    /// `true` = may attend. Covers prefix-LM / block masks.
    Allowed(&'m [bool]),
    /// Additive float mask added to the scaled scores, `[Sq, Sk]` or `[Hq, Sq, Sk]`;
    /// `-inf` entries are masked out.
    Additive(&'m [f32]),
}

/// `softmax(q k^T * scale + mask) v` per head.
///
/// `q [Sq, Hq, D]`, `k [Sk, Hkv, D]`, `v [Sk, Hkv, Dv]` (heads inside positions, as the
/// projections lay them out) with `Hq` a multiple of `Hkv` (query head `h` uses kv head
/// `h / (Hq / Hkv)`); `scale` defaults to `1 / sqrt(D)`. Returns `[Sq, Hq, Dv]`. A query
/// that may attend to no key gets a zero output row.
pub fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Mask<'_>,
    scale: Option<f32>,
) -> Result<Tensor<'static>> {
    attention_on(q, k, v, mask, scale, tiles::enabled())
}

/// [`attention`] with the tiles' products chosen: the AVX-512 tile kernels (`tile_kernels`,
/// where they run) or the `gemm` crate's (the tests run both).
fn attention_on(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Mask<'_>,
    scale: Option<f32>,
    tile_kernels: bool,
) -> Result<Tensor<'static>> {
    const OP: &str = "attention";
    if q.rank() != 3 || k.rank() != 3 || v.rank() != 3 {
        return Err(Error::shape(
            OP,
            format!(
                "q, k, v must be rank 3, got {:?}, {:?}, {:?}",
                q.shape(),
                k.shape(),
                v.shape()
            ),
        ));
    }
    let (sq, hq, d) = (q.shape()[0], q.shape()[1], q.shape()[2]);
    let (sk, hkv, dk) = (k.shape()[0], k.shape()[1], k.shape()[2]);
    let (sv, hv, dv) = (v.shape()[0], v.shape()[1], v.shape()[2]);
    if dk != d || hv != hkv || sv != sk {
        return Err(Error::shape(
            OP,
            format!(
                "incompatible q {:?}, k {:?}, v {:?}",
                q.shape(),
                k.shape(),
                v.shape()
            ),
        ));
    }
    if hkv == 0 || hq % hkv != 0 {
        return Err(Error::shape(
            OP,
            format!("query heads {hq} are not a multiple of kv heads {hkv}"),
        ));
    }
    let per_head = |len: usize, what: &str| -> Result<bool> {
        if len == sq * sk {
            Ok(false)
        } else if len == hq * sq * sk {
            Ok(true)
        } else {
            Err(Error::shape(
                OP,
                format!(
                    "{what} mask has {len} entries; expected [{sq}, {sk}] or [{hq}, {sq}, {sk}]"
                ),
            ))
        }
    };
    let mask_per_head = match mask {
        Mask::Allowed(m) => per_head(m.len(), "allowed")?,
        Mask::Additive(m) => per_head(m.len(), "additive")?,
        _ => false,
    };
    let scale = scale.unwrap_or(1.0 / (d as f32).sqrt());
    let group = hq / hkv;
    let qd = f32s(q)?;
    let kd = f32s(k)?;
    let vd = f32s(v)?;
    let mut o = vec![0.0f32; sq * hq * dv];
    if dv == 0 || sq == 0 {
        return out(vec![sq, hq, dv], o);
    }
    let keys_t = tile_kernels.then(|| KeysT::new(&kd, hkv, sk, d));
    let ctx = Ctx {
        q: &qd,
        k: &kd,
        v: &vd,
        sq,
        sk,
        hq,
        hkv,
        d,
        dv,
        group,
        mask,
        mask_per_head,
        scale,
        keys_t: keys_t.as_ref(),
    };
    // One task per (head, block of BQ queries), its rows gathered and returned contiguous;
    // then each block's rows go to their places (`Hq * Dv` apart).
    let blocks = sq.div_ceil(BQ);
    let done: Vec<Vec<f32>> = (0..hq * blocks)
        .into_par_iter()
        .map_init(Scratch::default, |s, task| {
            let (h, i0) = (task / blocks, task % blocks * BQ);
            let mut rows = vec![0.0f32; BQ.min(sq - i0) * dv];
            ctx.block(h, i0, &mut rows, s);
            rows
        })
        .collect();
    for (task, rows) in done.iter().enumerate() {
        let (h, i0) = (task / blocks, task % blocks * BQ);
        for (r, row) in rows.chunks_exact(dv).enumerate() {
            o[((i0 + r) * hq + h) * dv..][..dv].copy_from_slice(row);
        }
    }
    out(vec![sq, hq, dv], o)
}

/// The largest element (`-inf` for an empty or all `-inf` row; NaN is ignored), eight
/// lanes at a time so it vectorises.
fn row_max(row: &[f32]) -> f32 {
    let mut m = [f32::NEG_INFINITY; 8];
    let chunks = row.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &b) in m.iter_mut().zip(c) {
            *a = if b > *a { b } else { *a };
        }
    }
    tail.iter()
        .chain(&m)
        .fold(f32::NEG_INFINITY, |a, &b| if b > a { b } else { a })
}

/// Queries per task.
const BQ: usize = 64;
/// Keys per tile.
const BK: usize = 256;

/// One attention call's operands and settings.
struct Ctx<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    sq: usize,
    sk: usize,
    hq: usize,
    hkv: usize,
    d: usize,
    dv: usize,
    group: usize,
    mask: Mask<'a>,
    mask_per_head: bool,
    scale: f32,
    /// The keys transposed for the AVX-512 tile kernels, where they run.
    keys_t: Option<&'a KeysT>,
}

/// Per-thread buffers of [`Ctx::block`].
#[derive(Default)]
struct Scratch {
    /// The block's query rows, gathered contiguous.
    q: Vec<f32>,
    /// Scores, then probabilities, of one `[rows, BK]` tile.
    s: Vec<f32>,
    /// Running max and sum of each row.
    max: Vec<f32>,
    sum: Vec<f32>,
}

impl Ctx<'_> {
    /// Output rows `i0..i0 + rows` of head `h` (`o` holds them, `[rows, dv]`): key tiles
    /// through the AVX-512 tile kernels or the `gemm` crate (`S = Q K^T`, `O += P V`) with an
    /// online softmax (running
    /// max and sum per row, O rescaled when the max grows), so no `[Sq, Sk]` matrix exists.
    fn block(&self, h: usize, i0: usize, o: &mut [f32], t: &mut Scratch) {
        let (d, dv, sk) = (self.d, self.dv, self.sk);
        let rows = o.len() / dv;
        let kvh = h / self.group;
        let mut q = std::mem::take(&mut t.q);
        q.clear();
        for i in i0..i0 + rows {
            q.extend_from_slice(&self.q[(i * self.hq + h) * d..][..d]);
        }
        // this kv head's key and value rows, `ldk` / `ldv` apart
        let (ldk, ldv) = (self.hkv * d, self.hkv * dv);
        let kh = &self.k[kvh * d..];
        let vh = &self.v[kvh * dv..];
        // Causal: query i sees keys j <= i + (Sk - Sq); the block's last row sees the most.
        let offset = sk as i64 - self.sq as i64;
        let visible = |i: usize| -> usize {
            match self.mask {
                Mask::Causal => (i as i64 + offset + 1).clamp(0, sk as i64) as usize,
                _ => sk,
            }
        };
        let end = visible(i0 + rows - 1);
        t.max.clear();
        t.max.resize(rows, f32::NEG_INFINITY);
        t.sum.clear();
        t.sum.resize(rows, 0.0);
        o.fill(0.0);
        let mut j0 = 0;
        while j0 < end {
            let cols = BK.min(end - j0);
            t.s.resize(rows * cols, 0.0);
            if let Some(kt) = self.keys_t {
                tiles::scores(&q, rows, d, kt.head(kvh, d, j0), cols, &mut t.s);
            } else {
                // SAFETY: q is rows x d, the key tile cols x d (read transposed), s rows x cols.
                unsafe {
                    sgemm(
                        rows,
                        cols,
                        d,
                        Dst::rows(t.s.as_mut_ptr(), cols),
                        Mat {
                            ptr: q.as_ptr(),
                            rs: d as isize,
                            cs: 1,
                        },
                        Mat {
                            ptr: kh[j0 * ldk..].as_ptr(),
                            rs: 1,
                            cs: ldk as isize,
                        },
                        false,
                        gemm::Parallelism::None,
                    )
                };
            }
            for r in 0..rows {
                let i = i0 + r;
                let srow = &mut t.s[r * cols..(r + 1) * cols];
                let lim = visible(i).saturating_sub(j0).min(cols);
                let mrow = if self.mask_per_head {
                    (h * self.sq + i) * sk
                } else {
                    i * sk
                } + j0;
                let (seen, hidden) = srow.split_at_mut(lim);
                hidden.fill(f32::NEG_INFINITY);
                // One loop per mask kind, so the common ones vectorise.
                match self.mask {
                    Mask::Allowed(m) => {
                        for (x, &ok) in seen.iter_mut().zip(&m[mrow..]) {
                            *x = if ok {
                                *x * self.scale
                            } else {
                                f32::NEG_INFINITY
                            };
                        }
                    }
                    Mask::Additive(m) => {
                        for (x, &b) in seen.iter_mut().zip(&m[mrow..]) {
                            *x = *x * self.scale + b;
                        }
                    }
                    Mask::None | Mask::Causal => seen.iter_mut().for_each(|x| *x *= self.scale),
                }
                let tile_max = row_max(srow);
                let new_max = t.max[r].max(tile_max);
                if new_max == f32::NEG_INFINITY {
                    srow.fill(0.0); // nothing visible yet in this row
                    continue;
                }
                if new_max > t.max[r] && t.sum[r] > 0.0 {
                    let c = (t.max[r] - new_max).exp();
                    t.sum[r] *= c;
                    o[r * dv..(r + 1) * dv].iter_mut().for_each(|x| *x *= c);
                }
                t.max[r] = new_max;
                t.sum[r] += exp_shifted(srow, new_max);
            }
            if self.keys_t.is_some() {
                tiles::add_pv(&t.s, rows, cols, (&vh[j0 * ldv..], ldv), dv, o);
            } else {
                // SAFETY: p is rows x cols, the value tile cols x dv, o rows x dv.
                unsafe {
                    sgemm(
                        rows,
                        dv,
                        cols,
                        Dst::rows(o.as_mut_ptr(), dv),
                        Mat {
                            ptr: t.s.as_ptr(),
                            rs: cols as isize,
                            cs: 1,
                        },
                        Mat {
                            ptr: vh[j0 * ldv..].as_ptr(),
                            rs: ldv as isize,
                            cs: 1,
                        },
                        true,
                        gemm::Parallelism::None,
                    )
                };
            }
            j0 += cols;
        }
        t.q = q;
        for r in 0..rows {
            // A row that saw no key keeps its zeros.
            if t.sum[r] > 0.0 {
                let inv = 1.0 / t.sum[r];
                o[r * dv..(r + 1) * dv].iter_mut().for_each(|x| *x *= inv);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::{assert_close, Rng};

    /// The op's `[S, H, D]` tensor from head-major data `v` of `shape` `[H, S, D]` (the
    /// tests write and check heads as contiguous blocks).
    fn t(shape: &[usize], v: Vec<f32>) -> Tensor<'static> {
        let (h, s, d) = (shape[0], shape[1], shape[2]);
        let mut x = vec![0.0f32; v.len()];
        for (k, &e) in v.iter().enumerate() {
            let (hh, i, c) = (k / (s * d), k / d % s, k % d);
            x[(i * h + hh) * d + c] = e;
        }
        Tensor::from_f32(vec![s, h, d], x).unwrap()
    }

    /// The op's `[S, H, D]` output as head-major data.
    fn hm(o: &Tensor) -> Vec<f32> {
        let (s, h, d) = (o.shape()[0], o.shape()[1], o.shape()[2]);
        let x = o.as_f32().unwrap();
        let mut v = vec![0.0f32; x.len()];
        for (k, e) in v.iter_mut().enumerate() {
            let (hh, i, c) = (k / (s * d), k / d % s, k % d);
            *e = x[(i * h + hh) * d + c];
        }
        v
    }

    #[allow(clippy::too_many_arguments)]
    /// Independent oracle for one head: explicit scores, softmax in f64, weighted sum.
    fn naive_head(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        sq: usize,
        sk: usize,
        d: usize,
        dv: usize,
        scale: f32,
        allowed: &dyn Fn(usize, usize) -> bool,
    ) -> Vec<f32> {
        let mut o = vec![0.0f32; sq * dv];
        for i in 0..sq {
            let s: Vec<Option<f64>> = (0..sk)
                .map(|j| {
                    allowed(i, j).then(|| {
                        (0..d)
                            .map(|p| q[i * d + p] as f64 * k[j * d + p] as f64)
                            .sum::<f64>()
                            * scale as f64
                    })
                })
                .collect();
            let m = s.iter().flatten().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
            if m == f64::NEG_INFINITY {
                continue;
            }
            let z: f64 = s.iter().flatten().map(|x| (x - m).exp()).sum();
            for j in 0..sk {
                if let Some(x) = s[j] {
                    let p = (x - m).exp() / z;
                    for c in 0..dv {
                        o[i * dv + c] += (p * v[j * dv + c] as f64) as f32;
                    }
                }
            }
        }
        o
    }

    #[test]
    fn one_key_returns_v() {
        let mut r = Rng::new(1);
        let q = t(&[2, 3, 4], r.vec(24));
        let k = t(&[2, 1, 4], r.vec(8));
        let vv = r.vec(10);
        let v = t(&[2, 1, 5], vv.clone());
        let o = attention(&q, &k, &v, Mask::None, None).unwrap();
        assert_eq!(o.shape(), &[3, 2, 5]);
        let ov = hm(&o);
        for h in 0..2 {
            for i in 0..3 {
                assert_close(&ov[(h * 3 + i) * 5..][..5], &vv[h * 5..][..5], 1e-6);
            }
        }
    }

    #[test]
    fn matches_oracle_causal_first_row_is_v0() {
        let mut r = Rng::new(2);
        let (h, s, d, dv) = (2, 7, 13, 5);
        let (qv, kv, vv) = (r.vec(h * s * d), r.vec(h * s * d), r.vec(h * s * dv));
        let (q, k, v) = (
            t(&[h, s, d], qv.clone()),
            t(&[h, s, d], kv.clone()),
            t(&[h, s, dv], vv.clone()),
        );
        let scale = 1.0 / (d as f32).sqrt();
        for (mask, f) in [
            (
                Mask::None,
                &(|_: usize, _: usize| true) as &dyn Fn(usize, usize) -> bool,
            ),
            (Mask::Causal, &|i: usize, j: usize| j <= i),
        ] {
            let o = attention(&q, &k, &v, mask, None).unwrap();
            let ov = hm(&o);
            for hh in 0..h {
                let want = naive_head(
                    &qv[hh * s * d..],
                    &kv[hh * s * d..],
                    &vv[hh * s * dv..],
                    s,
                    s,
                    d,
                    dv,
                    scale,
                    f,
                );
                assert_close(&ov[hh * s * dv..][..s * dv], &want, 1e-5);
            }
        }
        let o = attention(&q, &k, &v, Mask::Causal, None).unwrap();
        assert_close(&hm(&o)[..dv], &vv[..dv], 1e-6);
    }

    #[test]
    fn causal_offset_for_kv_cache() {
        // Sq = 2 new queries over Sk = 5 keys: query 0 sees keys 0..=3, query 1 sees 0..=4.
        let mut r = Rng::new(3);
        let (sq, sk, d) = (2, 5, 4);
        let (qv, kv, vv) = (r.vec(sq * d), r.vec(sk * d), r.vec(sk * d));
        let o = attention(
            &t(&[1, sq, d], qv.clone()),
            &t(&[1, sk, d], kv.clone()),
            &t(&[1, sk, d], vv.clone()),
            Mask::Causal,
            Some(0.3),
        )
        .unwrap();
        let want = naive_head(&qv, &kv, &vv, sq, sk, d, d, 0.3, &|i, j| j <= i + 3);
        assert_close(&hm(&o), &want, 1e-5);
    }

    #[test]
    fn gqa_equals_repeated_kv_heads() {
        let mut r = Rng::new(4);
        let (hq, hkv, s, d) = (6, 2, 5, 8);
        let q = t(&[hq, s, d], r.vec(hq * s * d));
        let kv = r.vec(hkv * s * d);
        let vv = r.vec(hkv * s * d);
        let o = attention(
            &q,
            &t(&[hkv, s, d], kv.clone()),
            &t(&[hkv, s, d], vv.clone()),
            Mask::Causal,
            None,
        )
        .unwrap();
        // Repeat each kv head 3 times: [k0,k0,k0,k1,k1,k1].
        let rep = |x: &[f32]| -> Vec<f32> {
            (0..hq)
                .flat_map(|h| x[(h / 3) * s * d..][..s * d].to_vec())
                .collect()
        };
        let o2 = attention(
            &q,
            &t(&[hq, s, d], rep(&kv)),
            &t(&[hq, s, d], rep(&vv)),
            Mask::Causal,
            None,
        )
        .unwrap();
        assert_close(&hm(&o), &hm(&o2), 1e-6);
        assert!(attention(
            &q,
            &t(&[4, s, d], vec![0.0; 4 * s * d]),
            &t(&[4, s, d], vec![0.0; 4 * s * d]),
            Mask::None,
            None
        )
        .is_err());
    }

    /// Shapes across the tiles (queries beyond one 64-row block, keys beyond one 256-key
    /// tile, ragged ends), GQA, causal with a cache offset, per-head allowed masks with rows
    /// that see nothing and rows whose first visible key is in a later tile.
    #[test]
    fn tiled_blocks_match_oracle_with_every_mask() {
        let mut r = Rng::new(6);
        let (hq, hkv, sq, sk, d, dv) = (4, 2, 70, 300, 12, 7);
        let (qv, kv, vv) = (
            r.vec(hq * sq * d),
            r.vec(hkv * sk * d),
            r.vec(hkv * sk * dv),
        );
        let (q, k, v) = (
            t(&[hq, sq, d], qv.clone()),
            t(&[hkv, sk, d], kv.clone()),
            t(&[hkv, sk, dv], vv.clone()),
        );
        let allowed: Vec<bool> = (0..hq * sq * sk)
            .map(|x| {
                let (h, i, j) = (x / (sq * sk), x / sk % sq, x % sk);
                i % 11 != 3 && (j * 7 + i + h) % 5 != 0 && (i % 3 != 0 || j >= 260)
            })
            .collect();
        let causal = |i: usize, j: usize| j < i + (sk - sq) + 1;
        type Visible<'a> = &'a dyn Fn(usize, usize, usize) -> bool;
        let cases: [(Mask, Visible); 3] = [
            (Mask::None, &|_, _, _| true),
            (Mask::Causal, &|_, i, j| causal(i, j)),
            (Mask::Allowed(&allowed), &|h, i, j| {
                allowed[(h * sq + i) * sk + j]
            }),
        ];
        // Both kernels for the tiles' products, where the AVX-512 ones run.
        let kernels = [tiles::enabled(), false];
        for ((mask, f), tile_kernels) in cases
            .iter()
            .flat_map(|c| kernels.iter().map(move |&t| (c, t)))
        {
            let o = attention_on(&q, &k, &v, *mask, Some(0.4), tile_kernels).unwrap();
            let ov = hm(&o);
            for h in 0..hq {
                let kvh = h / 2;
                let want = naive_head(
                    &qv[h * sq * d..],
                    &kv[kvh * sk * d..],
                    &vv[kvh * sk * dv..],
                    sq,
                    sk,
                    d,
                    dv,
                    0.4,
                    &|i, j| f(h, i, j),
                );
                assert_close(&ov[h * sq * dv..][..sq * dv], &want, 1e-5);
            }
        }
    }

    #[test]
    fn allowed_and_additive_masks_and_fully_masked_rows() {
        let mut r = Rng::new(5);
        let (sq, sk, d) = (3, 4, 4);
        let (qv, kv, vv) = (r.vec(sq * d), r.vec(sk * d), r.vec(sk * d));
        let (q, k, v) = (
            t(&[1, sq, d], qv.clone()),
            t(&[1, sk, d], kv.clone()),
            t(&[1, sk, d], vv.clone()),
        );
        // Prefix-LM style: keys 0..2 visible to all; row 2 sees nothing.
        let allowed = [
            true, true, false, false, true, true, true, false, false, false, false, false,
        ];
        let o = attention(&q, &k, &v, Mask::Allowed(&allowed), None).unwrap();
        let want = naive_head(&qv, &kv, &vv, sq, sk, d, d, 0.5, &|i, j| {
            allowed[i * sk + j]
        });
        assert_close(&hm(&o), &want, 1e-5);
        assert_eq!(&hm(&o)[2 * d..], &[0.0; 4]);

        let add: Vec<f32> = allowed
            .iter()
            .map(|&a| if a { 0.0 } else { f32::NEG_INFINITY })
            .collect();
        let o2 = attention(&q, &k, &v, Mask::Additive(&add), None).unwrap();
        assert_close(&hm(&o2), &want, 1e-6);
        assert!(hm(&o2).iter().all(|x| !x.is_nan()));

        // A finite additive bias shifts the weights: +ln 2 on key 0 doubles its odds.
        let mut bias = vec![0.0f32; sq * sk];
        bias[0] = 2f32.ln();
        let o3 = attention(
            &t(&[1, 1, d], vec![0.0; d]),
            &k,
            &v,
            Mask::Additive(&bias[..sk]),
            None,
        )
        .unwrap();
        let mut want3 = vec![0.0f32; d];
        for j in 0..sk {
            let p = if j == 0 { 2.0 / 5.0 } else { 1.0 / 5.0 };
            for c in 0..d {
                want3[c] += p * vv[j * d + c];
            }
        }
        assert_close(&hm(&o3), &want3, 1e-6);
        assert!(attention(&q, &k, &v, Mask::Allowed(&allowed[..5]), None).is_err());
    }
}
