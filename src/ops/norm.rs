//! RMSNorm and LayerNorm over the last dimension. Statistics are accumulated in f64.

use rayon::prelude::*;

use super::{f32s, out};
use crate::{Error, Result, Tensor};

/// `Σ f(v)` over `row` in f64, eight independent partial sums (so it vectorises).
fn sum_f64(row: &[f32], f: impl Fn(f32) -> f64) -> f64 {
    let mut acc = [0.0f64; 8];
    let chunks = row.chunks_exact(8);
    let tail: f64 = chunks.remainder().iter().map(|&v| f(v)).sum();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f(v);
        }
    }
    acc.iter().sum::<f64>() + tail
}

fn last_dim(op: &'static str, x: &Tensor) -> Result<usize> {
    x.shape()
        .last()
        .copied()
        .ok_or_else(|| Error::shape(op, "x must have rank >= 1"))
}

fn check_param(op: &'static str, what: &str, p: &Tensor, d: usize) -> Result<()> {
    if p.rank() != 1 || p.shape()[0] != d {
        return Err(Error::shape(
            op,
            format!("{what} {:?} does not match the last dim {d}", p.shape()),
        ));
    }
    Ok(())
}

/// `y = x / sqrt(mean(x^2) + eps) * (offset + w)` over the last dim; `w` is `[D]`.
///
/// `offset = 0` is the usual RMSNorm (Llama, SmolLM, the SmolVLA expert); `offset = 1` is
/// Gemma's, whose checkpoints store `w - 1` (see [`rms_norm_gemma`]). Note: a GGUF converted
/// by llama.cpp's converter has already added the 1 to Gemma norm weights, so such a file
/// wants `offset = 0`.
pub fn rms_norm_offset(x: &Tensor, w: &Tensor, eps: f32, offset: f32) -> Result<Tensor<'static>> {
    const OP: &str = "rms_norm";
    let d = last_dim(OP, x)?;
    check_param(OP, "weight", w, d)?;
    let wd: Vec<f32> = f32s(w)?.iter().map(|v| v + offset).collect();
    let mut v = f32s(x)?.into_owned();
    if d > 0 {
        v.par_chunks_mut(d).for_each(|row| {
            let ss = sum_f64(row, |a| a as f64 * a as f64);
            let inv = (1.0 / (ss / d as f64 + eps as f64).sqrt()) as f32;
            for (a, g) in row.iter_mut().zip(&wd) {
                *a = *a * inv * g;
            }
        });
    }
    out(x.shape().to_vec(), v)
}

/// RMSNorm: `x / sqrt(mean(x^2) + eps) * w`.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor<'static>> {
    rms_norm_offset(x, w, eps, 0.0)
}

/// Gemma's RMSNorm: `x / sqrt(mean(x^2) + eps) * (1 + w)` (HF `GemmaRMSNorm`).
pub fn rms_norm_gemma(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor<'static>> {
    rms_norm_offset(x, w, eps, 1.0)
}

fn layer_norm_impl(
    x: &Tensor,
    w: Option<&Tensor>,
    b: Option<&Tensor>,
    eps: f32,
) -> Result<Tensor<'static>> {
    const OP: &str = "layer_norm";
    let d = last_dim(OP, x)?;
    let wd = match w {
        Some(w) => {
            check_param(OP, "weight", w, d)?;
            Some(f32s(w)?)
        }
        None => None,
    };
    let bd = match b {
        Some(b) => {
            check_param(OP, "bias", b, d)?;
            Some(f32s(b)?)
        }
        None => None,
    };
    let mut v = f32s(x)?.into_owned();
    if d > 0 {
        v.par_chunks_mut(d).for_each(|row| {
            let mean = sum_f64(row, |a| a as f64) / d as f64;
            let var = sum_f64(row, |a| (a as f64 - mean).powi(2)) / d as f64;
            // The statistics in f64, the normalisation in f32 (as PyTorch's kernel).
            let (mean, inv) = (mean as f32, (1.0 / (var + eps as f64).sqrt()) as f32);
            // One loop per parameter set, so each vectorises.
            match (&wd, &bd) {
                (Some(w), Some(b)) => {
                    for ((a, w), b) in row.iter_mut().zip(w.iter()).zip(b.iter()) {
                        *a = (*a - mean) * inv * w + b;
                    }
                }
                (Some(w), None) => {
                    for (a, w) in row.iter_mut().zip(w.iter()) {
                        *a = (*a - mean) * inv * w;
                    }
                }
                (None, Some(b)) => {
                    for (a, b) in row.iter_mut().zip(b.iter()) {
                        *a = (*a - mean) * inv + b;
                    }
                }
                (None, None) => row.iter_mut().for_each(|a| *a = (*a - mean) * inv),
            }
        });
    }
    out(x.shape().to_vec(), v)
}

/// LayerNorm over the last dim (biased variance, like PyTorch): `(x - mean) / sqrt(var +
/// eps) * w + b`, `w` and `b` of shape `[D]`.
pub fn layer_norm(x: &Tensor, w: &Tensor, b: Option<&Tensor>, eps: f32) -> Result<Tensor<'static>> {
    layer_norm_impl(x, Some(w), b, eps)
}

/// LayerNorm without affine parameters (`elementwise_affine=False`, e.g. adaLN blocks).
pub fn layer_norm_no_affine(x: &Tensor, eps: f32) -> Result<Tensor<'static>> {
    layer_norm_impl(x, None, None, eps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::{assert_close, Rng};

    #[test]
    fn rms_norm_of_constant_vector() {
        // x = c everywhere -> rms = |c| -> y = sign(c) * w (eps = 0).
        let x =
            Tensor::from_f32(vec![2, 4], vec![3.0, 3.0, 3.0, 3.0, -0.5, -0.5, -0.5, -0.5]).unwrap();
        let w = Tensor::from_f32(vec![4], vec![1.0, 2.0, 0.5, -1.0]).unwrap();
        let y = rms_norm(&x, &w, 0.0).unwrap();
        assert_close(
            y.as_f32().unwrap(),
            &[1.0, 2.0, 0.5, -1.0, -1.0, -2.0, -0.5, 1.0],
            1e-6,
        );
        // Gemma: (1 + w).
        let y = rms_norm_gemma(&x, &w, 0.0).unwrap();
        assert_close(
            y.as_f32().unwrap(),
            &[2.0, 3.0, 1.5, 0.0, -2.0, -3.0, -1.5, 0.0],
            1e-6,
        );
    }

    #[test]
    fn rms_norm_hand_value_with_eps() {
        // x = [1, 2, 2]: mean(x^2) = 3; eps = 1 -> divide by 2.
        let x = Tensor::from_f32(vec![3], vec![1.0, 2.0, 2.0]).unwrap();
        let w = Tensor::from_f32(vec![3], vec![1.0; 3]).unwrap();
        let y = rms_norm(&x, &w, 1.0).unwrap();
        assert_close(y.as_f32().unwrap(), &[0.5, 1.0, 1.0], 1e-6);
        let bad = Tensor::from_f32(vec![2], vec![1.0; 2]).unwrap();
        assert!(matches!(rms_norm(&x, &bad, 1e-6), Err(Error::Shape { .. })));
    }

    #[test]
    fn layer_norm_mean_zero_var_one_then_affine() {
        let mut r = Rng::new(4);
        let d = 17;
        let v: Vec<f32> = r.vec(7 * d).iter().map(|x| x * 10.0 + 3.0).collect();
        let x = Tensor::from_f32(vec![7, d], v).unwrap();
        let y = layer_norm_no_affine(&x, 0.0).unwrap();
        for row in y.as_f32().unwrap().chunks(d) {
            let mean: f64 = row.iter().map(|&a| a as f64).sum::<f64>() / d as f64;
            let var: f64 = row.iter().map(|&a| (a as f64 - mean).powi(2)).sum::<f64>() / d as f64;
            assert!(mean.abs() < 1e-6, "{mean}");
            assert!((var - 1.0).abs() < 1e-5, "{var}");
        }
        let w = Tensor::from_f32(vec![d], vec![2.0; d]).unwrap();
        let b = Tensor::from_f32(vec![d], vec![0.5; d]).unwrap();
        let z = layer_norm(&x, &w, Some(&b), 0.0).unwrap();
        let want: Vec<f32> = y.as_f32().unwrap().iter().map(|a| a * 2.0 + 0.5).collect();
        assert_close(z.as_f32().unwrap(), &want, 1e-5);
    }

    #[test]
    fn layer_norm_hand_value() {
        // [1, 3]: mean 2, var 1 -> [-1, 1].
        let x = Tensor::from_f32(vec![1, 2], vec![1.0, 3.0]).unwrap();
        let w = Tensor::from_f32(vec![2], vec![1.0, 1.0]).unwrap();
        let y = layer_norm(&x, &w, None, 0.0).unwrap();
        assert_close(y.as_f32().unwrap(), &[-1.0, 1.0], 1e-6);
    }
}
