//! Matrix products: `matmul`/`linear` (activations times a `[N, K]` weight of any supported
//! dtype) and batched `bmm`.

use rayon::prelude::*;
use std::borrow::Cow;

use super::fdot;
use super::kernels::{sgemm, Dst, Mat, SendPtr};
use super::panels::{self, Panels};
use super::qgemm::{self, BlockTiles};
use super::{f32s, out};
use crate::{Error, Result, Tensor};

/// Where the `[N, K]` weight rows come from.
#[derive(Clone, Copy)]
enum Weight<'w, 't> {
    F32(&'w [f32]),
    /// A non-f32 tensor, dequantized one panel of rows at a time.
    Packed(&'w Tensor<'t>),
}

/// Up to this many rows, a matmul is split over N only (panels in parallel, each one
/// single-threaded call): the crate's own split is poor when M is this small.
const SMALL_M: usize = 96;

/// Weight rows per panel (small-M and non-f32 weights): enough panels for every thread to get
/// several, each small enough that its f32 copy stays in L2 (at most 128 x K floats).
fn panel_rows(n: usize) -> usize {
    let tasks = 4 * rayon::current_num_threads();
    n.div_ceil(tasks).next_multiple_of(16).clamp(16, 128)
}

/// `out[m, n] = dot(x[m, :], w[n, :])` for `x [M, K]`, `w [N, K]`. An f32 weight is read in
/// place by the dot-form kernel (`fdot`) where the CPU has AVX-512 (unless it holds more than
/// `fdot::LARGE_WEIGHT` values and M > `SMALL_M`); everything else runs on the `gemm` crate's
/// packed, register-blocked kernels: an f32 weight with M > `SMALL_M` is one multithreaded
/// call (the crate splits M and N and packs the weight itself); otherwise the weight is cut
/// into panels of rows (read in place, or copied / dequantized into a per-thread f32
/// scratch), each multiplied single-threaded into its columns, panels in parallel (so a
/// non-f32 weight is never converted whole).
/// `x @ w^T`, or `c + x @ w^T` when `c` (the output's first values, already in place) is
/// given: the GEMM accumulates into it. `dot_kernel` lets an f32 weight take `fdot` (callers
/// pass [`fdot::enabled`]; the tests run both paths).
fn gemm_xwt(
    x: &[f32],
    m: usize,
    k: usize,
    w: Weight<'_, '_>,
    n: usize,
    c: Option<Vec<f32>>,
    dot_kernel: bool,
) -> Result<Vec<f32>> {
    let accumulate = c.is_some();
    let mut res = c.unwrap_or_else(|| vec![0.0f32; m * n]);
    if m == 0 || n == 0 || k == 0 {
        return Ok(res);
    }
    assert!(x.len() >= m * k, "gemm_xwt: x too short");
    let lhs = Mat {
        ptr: x.as_ptr(),
        rs: k as isize,
        cs: 1,
    };
    match w {
        Weight::F32(wf) if dot_kernel && (m <= SMALL_M || n * k <= fdot::LARGE_WEIGHT) => {
            assert!(wf.len() >= n * k, "gemm_xwt: weight too short");
            fdot::xwt_add(x, m, k, wf, n, &mut res);
        }
        Weight::F32(wf) if m > SMALL_M => {
            assert!(wf.len() >= n * k, "gemm_xwt: weight too short");
            // SAFETY: x holds m*k and wf n*k elements (checked); res is m*n and ours.
            unsafe {
                sgemm(
                    m,
                    n,
                    k,
                    Dst::rows(res.as_mut_ptr(), n),
                    lhs,
                    // rhs(p, j) = w[j, p]: the weight read transposed through strides.
                    Mat {
                        ptr: wf.as_ptr(),
                        rs: 1,
                        cs: k as isize,
                    },
                    accumulate,
                    gemm::Parallelism::Rayon(0),
                )
            };
        }
        _ => {
            // Panels of weight rows. A non-f32 panel is dequantized, and an f32 one whose
            // row stride is a 1 KiB multiple copied, into a per-thread scratch with a padded
            // stride: the crate reads the weight at that stride, and a 4 KiB multiple
            // (K = 1024, 2048) thrashes the L1 sets (2.5x slower at M = 50, K = 2048).
            let nb = panel_rows(n);
            let ks = k + 16;
            let dst = SendPtr(res.as_mut_ptr());
            (0..n.div_ceil(nb)).into_par_iter().try_for_each_init(
                Vec::<f32>::new,
                |scratch, p| -> Result<()> {
                    let (n0, rows) = (p * nb, nb.min(n - p * nb));
                    let rhs = match w {
                        // An f32 weight whose stride is no 1 KiB multiple is read in place.
                        Weight::F32(wf) if !k.is_multiple_of(256) => Mat {
                            ptr: wf[n0 * k..].as_ptr(),
                            rs: 1,
                            cs: k as isize,
                        },
                        _ => {
                            scratch.resize(rows * ks, 0.0);
                            for (j, row) in scratch.chunks_exact_mut(ks).enumerate() {
                                match w {
                                    Weight::F32(wf) => {
                                        row[..k].copy_from_slice(&wf[(n0 + j) * k..][..k])
                                    }
                                    Weight::Packed(wt) => {
                                        wt.dequantize_rows(n0 + j, &mut row[..k])?
                                    }
                                }
                            }
                            Mat {
                                ptr: scratch.as_ptr(),
                                rs: 1,
                                cs: ks as isize,
                            }
                        }
                    };
                    // SAFETY: x holds m*k elements, the weight rows rows*k (or the scratch
                    // rows*ks); this task alone writes columns n0..n0+rows of the result.
                    unsafe {
                        sgemm(
                            m,
                            rows,
                            k,
                            Dst::rows(dst.get().add(n0), n),
                            lhs,
                            rhs,
                            accumulate,
                            gemm::Parallelism::None,
                        )
                    };
                    Ok(())
                },
            )?;
        }
    }
    Ok(res)
}

/// A matmul weight in the layout its kernel reads, made once (the cpu backend makes it at
/// compile) so no run repacks it.
pub enum PackedWeight {
    /// A float weight (f32, bf16, f16) in 32-column panels (where the CPU has avx512f:
    /// `panels`).
    Panels(Panels),
    /// A block-quantized weight's integer tiles (Q8_0, Q4_0, Q5_0 where the CPU has
    /// AVX512-VNNI: `qgemm`).
    Blocks(BlockTiles),
}

impl PackedWeight {
    /// `w [n, k]` packed for its kernel, or `None` where no packed kernel runs for it here.
    pub fn new(w: &Tensor) -> Result<Option<Self>> {
        if panels::enabled() {
            if let Some(p) = Panels::new(w)? {
                return Ok(Some(Self::Panels(p)));
            }
        }
        Ok(BlockTiles::new(w)?.map(Self::Blocks))
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        match self {
            Self::Panels(p) => p.bytes(),
            Self::Blocks(t) => t.bytes(),
        }
    }
}

/// `x @ w^T`: `x [.., M, K]` (any leading dims, or just `[K]`) times a 2-D weight `w [N, K]`
/// (out, in) of dtype F32, F16, BF16 or a block-quantized type (Q8_0, Q4_0, Q4_1, Q5_0,
/// Q5_1, ...), giving `[.., M, N]`. Q8_0/Q4_0/Q5_0 weights run on the integer kernel where
/// the CPU has one (`qgemm`: activations quantized per 32-block like ggml's); other non-f32
/// weights are dequantized a panel of rows at a time (see `gemm_xwt`).
pub fn matmul(x: &Tensor, w: &Tensor) -> Result<Tensor<'static>> {
    matmul_add(x, w, None)
}

/// `x @ w^T + c` with `c` `[N]` (broadcast over rows) or of the output's shape, added in
/// the same pass (the float GEMM accumulates into `c`).
pub fn matmul_add(x: &Tensor, w: &Tensor, c: Option<&Tensor>) -> Result<Tensor<'static>> {
    matmul_add_packed(x, w, None, c)
}

/// [`matmul_add`] with `w` in its kernel's layout made beforehand ([`PackedWeight::new`] of
/// `w`).
pub fn matmul_add_packed(
    x: &Tensor,
    w: &Tensor,
    packed: Option<&PackedWeight>,
    c: Option<&Tensor>,
) -> Result<Tensor<'static>> {
    let xs = x.shape();
    let Some(&k) = xs.last() else {
        return Err(Error::shape("matmul", "x must have rank >= 1"));
    };
    if w.rank() != 2 {
        return Err(Error::shape(
            "matmul",
            format!("weight must be 2-D [N, K], got {:?}", w.shape()),
        ));
    }
    let (n, wk) = (w.shape()[0], w.shape()[1]);
    if wk != k {
        return Err(Error::shape(
            "matmul",
            format!("x {xs:?} and weight {:?} disagree on K", w.shape()),
        ));
    }
    let m: usize = xs[..xs.len() - 1].iter().product();
    let xd = f32s(x)?;
    // the addend: a bias row, or the output's first values
    let (row, full) = match c {
        None => (None, None),
        Some(c) if c.shape() == [n] => (Some(f32s(c)?), None),
        Some(c) if c.numel() == m * n && c.shape().last() == Some(&n) => (None, Some(f32s(c)?)),
        Some(c) => {
            return Err(Error::shape(
                "matmul",
                format!(
                    "addend {:?} is neither [{n}] nor the output's shape",
                    c.shape()
                ),
            ))
        }
    };
    let res = if let Some(PackedWeight::Panels(p)) = packed {
        if p.shape() != (n, k) {
            return Err(Error::shape("matmul", "packed weight is not the weight's"));
        }
        // the bias goes in as the sums are stored, not as a copy per row first
        let accumulate = full.is_some();
        let mut res = full.map_or_else(|| vec![0.0f32; m * n], Cow::into_owned);
        p.xwt(&xd, m, row.as_deref(), accumulate, &mut res);
        res
    } else if w.is_f32() {
        let addend = addend(row, full, m);
        gemm_xwt(
            &xd,
            m,
            k,
            Weight::F32(w.as_f32()?),
            n,
            addend,
            fdot::enabled(),
        )?
    } else if qgemm::enabled(w.dtype()) {
        let tiles = match packed {
            Some(PackedWeight::Blocks(t)) => Some(t),
            _ => None,
        };
        let mut y = qgemm::xwt(&xd, m, k, w, n, tiles, row.as_deref())?;
        if let Some(c) = full {
            y.par_iter_mut()
                .zip(c.par_iter())
                .for_each(|(y, c)| *y += c);
        }
        y
    } else {
        let addend = addend(row, full, m);
        gemm_xwt(&xd, m, k, Weight::Packed(w), n, addend, false)?
    };
    let mut shape = xs.to_vec();
    *shape.last_mut().expect("rank >= 1") = n;
    out(shape, res)
}

/// The output's first values: a bias `row` repeated for each of the `m` rows, or `full`.
fn addend(row: Option<Cow<[f32]>>, full: Option<Cow<[f32]>>, m: usize) -> Option<Vec<f32>> {
    match (row, full) {
        (Some(row), _) => Some(row.repeat(m)),
        (None, full) => full.map(Cow::into_owned),
    }
}

/// `x @ w^T + bias`, with `bias` of shape `[N]` (any dtype).
pub fn linear(x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor<'static>> {
    let mut y = matmul(x, w)?;
    if let Some(b) = bias {
        let n = w.shape()[0];
        if b.numel() != n || b.rank() != 1 {
            return Err(Error::shape(
                "linear",
                format!("bias {:?} does not match N = {n}", b.shape()),
            ));
        }
        let bd = f32s(b)?;
        if n > 0 {
            y.as_f32_mut()?.par_chunks_mut(n).for_each(|row| {
                for (r, bv) in row.iter_mut().zip(bd.iter()) {
                    *r += bv;
                }
            });
        }
    }
    Ok(y)
}

/// Batched matrix product of f32-convertible tensors.
///
/// `a [B, M, K]`; with `trans_b` `b` is `[B, N, K]` and the result is `a @ b^T` (e.g.
/// `q @ k^T`), without it `b` is `[B, K, N]` and the result is `a @ b` (e.g. `p @ v`).
/// Either batch may be 1 and is then broadcast. Result: `[max(Ba, Bb), M, N]`.
pub fn bmm(a: &Tensor, b: &Tensor, trans_b: bool) -> Result<Tensor<'static>> {
    if a.rank() != 3 || b.rank() != 3 {
        return Err(Error::shape(
            "bmm",
            format!(
                "expected rank-3 operands, got {:?} and {:?}",
                a.shape(),
                b.shape()
            ),
        ));
    }
    let (ba, m, k) = (a.shape()[0], a.shape()[1], a.shape()[2]);
    let (bb, n, kb) = if trans_b {
        (b.shape()[0], b.shape()[1], b.shape()[2])
    } else {
        (b.shape()[0], b.shape()[2], b.shape()[1])
    };
    if kb != k {
        return Err(Error::shape(
            "bmm",
            format!(
                "inner dims disagree: {:?} and {:?} (trans_b={trans_b})",
                a.shape(),
                b.shape()
            ),
        ));
    }
    if ba != bb && ba != 1 && bb != 1 {
        return Err(Error::shape(
            "bmm",
            format!("batch sizes {ba} and {bb} do not broadcast"),
        ));
    }
    let batch = if ba == 1 { bb } else { ba };
    let ad = f32s(a)?;
    let bd = f32s(b)?;
    let mut res = vec![0.0f32; batch * m * n];
    if m == 0 || n == 0 || k == 0 {
        return out(vec![batch, m, n], res);
    }
    // rhs(p, j): b[j, p] when transposed ([N, K] rows), else b[p, j] ([K, N] rows).
    let (rhs_rs, rhs_cs) = if trans_b {
        (1, k as isize)
    } else {
        (n as isize, 1)
    };
    // Many small products (attention-sized) go one per task; few large ones let the
    // crate split each across the threads.
    let many = batch >= rayon::current_num_threads();
    let one = |i: usize, dst: &mut [f32]| {
        let ai = if ba == 1 { 0 } else { i };
        let bi = if bb == 1 { 0 } else { i };
        let lhs = Mat {
            ptr: ad[ai * m * k..].as_ptr(),
            rs: k as isize,
            cs: 1,
        };
        let rhs = Mat {
            ptr: bd[bi * n * k..].as_ptr(),
            rs: rhs_rs,
            cs: rhs_cs,
        };
        let par = if many {
            gemm::Parallelism::None
        } else {
            gemm::Parallelism::Rayon(0)
        };
        // SAFETY: each operand slice holds m*k / n*k elements past its start (shapes
        // checked above); dst is this batch's own m*n block.
        unsafe {
            sgemm(
                m,
                n,
                k,
                Dst::rows(dst.as_mut_ptr(), n),
                lhs,
                rhs,
                false,
                par,
            )
        };
    };
    if many {
        res.par_chunks_mut(m * n)
            .enumerate()
            .for_each(|(i, dst)| one(i, dst));
    } else {
        res.chunks_mut(m * n)
            .enumerate()
            .for_each(|(i, dst)| one(i, dst));
    }
    out(vec![batch, m, n], res)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{quant, GgmlType};
    use crate::ops::testutil::{assert_close, Rng};
    use half::{bf16, f16};

    /// Independent oracle: the textbook triple loop in f64.
    fn naive_xwt(x: &[f32], w: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let mut o = vec![0.0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0f64;
                for p in 0..k {
                    s += x[i * k + p] as f64 * w[j * k + p] as f64;
                }
                o[i * n + j] = s as f32;
            }
        }
        o
    }

    /// The float path whatever the CPU: packed weights dequantized panel by panel.
    fn float_path(x: &[f32], m: usize, w: &Tensor) -> Tensor<'static> {
        let (n, k) = (w.shape()[0], w.shape()[1]);
        let src = if w.is_f32() {
            Weight::F32(w.as_f32().unwrap())
        } else {
            Weight::Packed(w)
        };
        Tensor::from_f32(
            vec![m, n],
            gemm_xwt(x, m, k, src, n, None, fdot::enabled()).unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn hand_computed_2x2() {
        // x = [[1,2],[3,4]], w = [[5,6],[7,8]] -> x @ w^T = [[17,23],[39,53]]
        let x = Tensor::from_f32(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
        let w = Tensor::from_f32(vec![2, 2], vec![5.0, 6.0, 7.0, 8.0]).unwrap();
        let y = matmul(&x, &w).unwrap();
        assert_eq!(y.shape(), &[2, 2]);
        assert_eq!(y.as_f32().unwrap(), &[17.0, 23.0, 39.0, 53.0]);
    }

    #[test]
    fn f32_matches_naive_for_odd_shapes() {
        let mut r = Rng::new(7);
        for &(m, k, n) in &[
            (1, 1, 1),
            (1, 17, 13),
            (7, 13, 17),
            (3, 33, 5),
            (65, 40, 19),
            (130, 9, 33),
            (2, 0, 3),
            (50, 256, 40),
            (100, 512, 7),
        ] {
            let x = r.vec(m * k);
            let w = r.vec(n * k);
            let xt = Tensor::from_f32(vec![m, k], x.clone()).unwrap();
            let wt = Tensor::from_f32(vec![n, k], w.clone()).unwrap();
            let y = matmul(&xt, &wt).unwrap();
            assert_eq!(y.shape(), &[m, n]);
            let want = naive_xwt(&x, &w, m, k, n);
            assert_close(y.as_f32().unwrap(), &want, 1e-5);
            // The gemm crate's path too, where the dot-form kernel took the call above, and
            // the panels the cpu backend packs (where the CPU has avx512f), with a bias.
            let crate_path = gemm_xwt(&x, m, k, Weight::F32(&w), n, None, false).unwrap();
            assert_close(&crate_path, &want, 1e-5);
            if let Some(p) = PackedWeight::new(&wt).unwrap() {
                let bias = r.vec(n);
                let bt = Tensor::from_f32(vec![n], bias.clone()).unwrap();
                let y = matmul_add_packed(&xt, &wt, Some(&p), Some(&bt)).unwrap();
                let with_bias: Vec<f32> = (0..m * n).map(|i| want[i] + bias[i % n]).collect();
                assert_close(y.as_f32().unwrap(), &with_bias, 1e-5);
            }
        }
    }

    #[test]
    fn leading_batch_dims_and_rank1() {
        let mut r = Rng::new(3);
        let (k, n) = (11, 6);
        let x = r.vec(2 * 3 * k);
        let w = r.vec(n * k);
        let xt = Tensor::from_f32(vec![2, 3, k], x.clone()).unwrap();
        let wt = Tensor::from_f32(vec![n, k], w.clone()).unwrap();
        let y = matmul(&xt, &wt).unwrap();
        assert_eq!(y.shape(), &[2, 3, n]);
        assert_close(y.as_f32().unwrap(), &naive_xwt(&x, &w, 6, k, n), 1e-5);
        let x1 = Tensor::from_f32(vec![k], x[..k].to_vec()).unwrap();
        let y1 = matmul(&x1, &wt).unwrap();
        assert_eq!(y1.shape(), &[n]);
        assert_close(y1.as_f32().unwrap(), &naive_xwt(&x[..k], &w, 1, k, n), 1e-5);
    }

    #[test]
    fn shape_errors() {
        let x = Tensor::from_f32(vec![2, 3], vec![0.0; 6]).unwrap();
        let w = Tensor::from_f32(vec![4, 2], vec![0.0; 8]).unwrap();
        assert!(matches!(matmul(&x, &w), Err(Error::Shape { .. })));
        let w3 = Tensor::from_f32(vec![1, 4, 3], vec![0.0; 12]).unwrap();
        assert!(matches!(matmul(&x, &w3), Err(Error::Shape { .. })));
        let s = Tensor::scalar(1.0);
        assert!(matmul(&s, &w).is_err());
    }

    #[test]
    fn linear_adds_bias() {
        let x = Tensor::from_f32(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
        let w = Tensor::from_f32(vec![3, 2], vec![1.0, 0.0, 0.0, 1.0, 1.0, 1.0]).unwrap();
        let b = Tensor::from_f32(vec![3], vec![10.0, 20.0, 30.0]).unwrap();
        let y = linear(&x, &w, Some(&b)).unwrap();
        assert_eq!(y.as_f32().unwrap(), &[11.0, 22.0, 33.0, 13.0, 24.0, 37.0]);
        let bad = Tensor::from_f32(vec![2], vec![0.0; 2]).unwrap();
        assert!(linear(&x, &w, Some(&bad)).is_err());
    }

    /// F16 / BF16 weights built with `half`: compare with the oracle on the rounded weights.
    #[test]
    fn f16_and_bf16_weights() {
        let mut r = Rng::new(11);
        let (m, k, n) = (70, 37, 21); // M > MB: several row tiles
        let x = r.vec(m * k);
        let w = r.vec(n * k);
        let xt = Tensor::from_f32(vec![m, k], x.clone()).unwrap();

        let wh: Vec<f32> = w.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
        let bytes: Vec<u8> = w
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_le_bytes())
            .collect();
        let wt = Tensor::from_bytes(vec![n, k], GgmlType::F16, bytes).unwrap();
        let y = matmul(&xt, &wt).unwrap();
        assert_close(y.as_f32().unwrap(), &naive_xwt(&x, &wh, m, k, n), 1e-5);
        // and from the panels the cpu backend packs, where it does
        let packed = |wt: &Tensor| {
            let p = PackedWeight::new(wt).unwrap()?;
            Some(matmul_add_packed(&xt, wt, Some(&p), None).unwrap())
        };
        if let Some(y) = packed(&wt) {
            assert_close(y.as_f32().unwrap(), &naive_xwt(&x, &wh, m, k, n), 1e-5);
        }

        let wb: Vec<f32> = w.iter().map(|&v| bf16::from_f32(v).to_f32()).collect();
        let bytes: Vec<u8> = w
            .iter()
            .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
            .collect();
        let wt = Tensor::from_bytes(vec![n, k], GgmlType::BF16, bytes).unwrap();
        let y = matmul(&xt, &wt).unwrap();
        assert_close(y.as_f32().unwrap(), &naive_xwt(&x, &wb, m, k, n), 1e-5);
        if let Some(y) = packed(&wt) {
            assert_close(y.as_f32().unwrap(), &naive_xwt(&x, &wb, m, k, n), 1e-5);
        }
        // Sanity: bf16 rounding is visible, so the oracle really used the rounded weights.
        assert!(wb.iter().zip(&w).any(|(a, b)| a != b));
    }

    /// A hand-rolled Q8_0 encoder (ggml layout: f16 scale d = amax/127, then 32 i8 values
    /// round(x/d)), independent of `gguf::quant`.
    fn q8_0_encode(x: &[f32]) -> (Vec<u8>, Vec<f32>) {
        let mut bytes = Vec::new();
        let mut deq = Vec::new();
        for blk in x.chunks(32) {
            let amax = blk.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let dh = f16::from_f32(d);
            bytes.extend_from_slice(&dh.to_le_bytes());
            for &v in blk {
                let q = (v * id).round() as i8;
                bytes.push(q as u8);
                deq.push(q as f32 * dh.to_f32());
            }
        }
        (bytes, deq)
    }

    /// Needs the real `gguf::quant::dequantize` (panics on the todo!() stub).
    #[test]
    fn q8_0_weight_matches_hand_encoder() {
        let mut r = Rng::new(5);
        let (m, k, n) = (3, 64, 35);
        let x = r.vec(m * k);
        let w = r.vec(n * k);
        let (bytes, wdeq) = q8_0_encode(&w);
        let wt = Tensor::from_bytes(vec![n, k], GgmlType::Q8_0, bytes).unwrap();
        let y = float_path(&x, m, &wt);
        assert_close(y.as_f32().unwrap(), &naive_xwt(&x, &wdeq, m, k, n), 1e-4);
    }

    /// Needs the real `gguf::quant` (panics on the todo!() stubs): for every quantized type,
    /// matmul against the packed weight equals the oracle on the dequantized weight.
    #[test]
    fn quantized_weights_match_dequantized_oracle() {
        let mut r = Rng::new(9);
        let (m, k, n) = (4, 96, 37);
        let x = r.vec(m * k);
        let w = r.vec(n * k);
        let xt = Tensor::from_f32(vec![m, k], x.clone()).unwrap();
        for ty in [
            GgmlType::Q8_0,
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q5_0,
            GgmlType::Q5_1,
        ] {
            let bytes = quant::quantize(ty, &w).unwrap();
            let mut wdeq = vec![0.0f32; n * k];
            quant::dequantize(ty, &bytes, &mut wdeq).unwrap();
            let wt = Tensor::from_bytes(vec![n, k], ty, bytes).unwrap();
            let y = float_path(&x, m, &wt);
            // matmul itself takes the integer path for symmetric types where it runs.
            let via = matmul(&xt, &wt).unwrap();
            if qgemm::enabled(ty) {
                assert_eq!(
                    via.as_f32().unwrap(),
                    qgemm::xwt(&x, m, k, &wt, n, None, None).unwrap()
                );
            } else {
                assert_eq!(via.as_f32().unwrap(), y.as_f32().unwrap());
            }
            assert_close(y.as_f32().unwrap(), &naive_xwt(&x, &wdeq, m, k, n), 1e-4);
            // The quantization error is small but present: the weight was really packed.
            let exact = naive_xwt(&x, &w, m, k, n);
            let err = y
                .as_f32()
                .unwrap()
                .iter()
                .zip(&exact)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            // (4-bit steps are 1/8 of the block range; 96-term dots of values in [-1, 1].)
            assert!(err > 0.0 && err < 2.0, "{ty}: {err}");
        }
    }

    /// Shapes that cross the fast kernel's edges: several panels (N > 128, and a
    /// ragged last one), M beyond the crate's register and cache blocks, K not a multiple
    /// of the SIMD width (f32/f16/bf16) and several K blocks, small-M f32 read in place and
    /// copied (K = 512, a padded stride); every dtype against the f64 oracle on the weight
    /// as stored.
    #[test]
    fn every_dtype_matches_naive_at_panel_and_block_edges() {
        let mut r = Rng::new(21);
        for &(m, k, n) in &[
            (1, 64, 300),
            (37, 96, 129),
            (150, 32, 17),
            (9, 544, 40),
            (3, 512, 37),
        ] {
            let x = r.vec(m * k);
            let w = r.vec(n * k);
            for ty in [
                GgmlType::F32,
                GgmlType::F16,
                GgmlType::BF16,
                GgmlType::Q8_0,
                GgmlType::Q4_0,
                GgmlType::Q5_1,
            ] {
                let bytes = quant::quantize(ty, &w).unwrap();
                let mut stored = vec![0.0f32; n * k];
                quant::dequantize(ty, &bytes, &mut stored).unwrap();
                let wt = Tensor::from_bytes(vec![n, k], ty, bytes).unwrap();
                let y = float_path(&x, m, &wt);
                let tol = 1e-5 * (k as f32).sqrt();
                assert_close(y.as_f32().unwrap(), &naive_xwt(&x, &stored, m, k, n), tol);
            }
        }
        // Odd K for the unblocked dtypes.
        let (m, k, n) = (19, 77, 141);
        let x = r.vec(m * k);
        let w = r.vec(n * k);
        let xt = Tensor::from_f32(vec![m, k], x.clone()).unwrap();
        let wh: Vec<f32> = w.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
        let bytes: Vec<u8> = w
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_le_bytes())
            .collect();
        let wt = Tensor::from_bytes(vec![n, k], GgmlType::F16, bytes).unwrap();
        assert_close(
            matmul(&xt, &wt).unwrap().as_f32().unwrap(),
            &naive_xwt(&x, &wh, m, k, n),
            1e-4,
        );
    }

    /// Many small products (one per task) and a few large ones (split by the crate).
    #[test]
    fn bmm_many_small_and_few_large() {
        let mut r = Rng::new(17);
        for &(b, m, k, n) in &[(24, 3, 5, 7), (1, 70, 33, 90), (2, 41, 64, 9)] {
            let a = r.vec(b * m * k);
            let bt = r.vec(b * n * k);
            let at = Tensor::from_f32(vec![b, m, k], a.clone()).unwrap();
            let btt = Tensor::from_f32(vec![b, n, k], bt.clone()).unwrap();
            let y = bmm(&at, &btt, true).unwrap();
            let mut want = Vec::new();
            for i in 0..b {
                want.extend(naive_xwt(
                    &a[i * m * k..][..m * k],
                    &bt[i * n * k..][..n * k],
                    m,
                    k,
                    n,
                ));
            }
            assert_close(y.as_f32().unwrap(), &want, 1e-4);
        }
    }

    #[test]
    fn bmm_both_layouts_and_broadcast() {
        let mut r = Rng::new(13);
        let (b, m, k, n) = (3, 5, 7, 4);
        let a = r.vec(b * m * k);
        let bt = r.vec(b * n * k); // [B, N, K]
        let at = Tensor::from_f32(vec![b, m, k], a.clone()).unwrap();
        let btt = Tensor::from_f32(vec![b, n, k], bt.clone()).unwrap();
        let y = bmm(&at, &btt, true).unwrap();
        assert_eq!(y.shape(), &[b, m, n]);
        let mut want = Vec::new();
        for i in 0..b {
            want.extend(naive_xwt(
                &a[i * m * k..][..m * k],
                &bt[i * n * k..][..n * k],
                m,
                k,
                n,
            ));
        }
        assert_close(y.as_f32().unwrap(), &want, 1e-5);

        // Same B as [B, K, N] without the transpose flag.
        let mut bkn = vec![0.0f32; b * k * n];
        for i in 0..b {
            for nn in 0..n {
                for kk in 0..k {
                    bkn[i * k * n + kk * n + nn] = bt[i * n * k + nn * k + kk];
                }
            }
        }
        let bknt = Tensor::from_f32(vec![b, k, n], bkn).unwrap();
        let y2 = bmm(&at, &bknt, false).unwrap();
        assert_close(y2.as_f32().unwrap(), &want, 1e-5);

        // Broadcast b with batch 1.
        let b1 = Tensor::from_f32(vec![1, n, k], bt[..n * k].to_vec()).unwrap();
        let y3 = bmm(&at, &b1, true).unwrap();
        let mut want3 = Vec::new();
        for i in 0..b {
            want3.extend(naive_xwt(&a[i * m * k..][..m * k], &bt[..n * k], m, k, n));
        }
        assert_close(y3.as_f32().unwrap(), &want3, 1e-5);

        let bad = Tensor::from_f32(vec![2, n, k], vec![0.0; 2 * n * k]).unwrap();
        assert!(bmm(&at, &bad, true).is_err());
        assert!(bmm(&at, &btt, false).is_err());
    }
}
