//! Activations (elementwise) and gated-MLP helpers. `erf` is computed in f64 here (the
//! scalar reference forms); the tensor ops run in f32 with the vectorised `exp`.

use std::f64::consts::PI;

use rayon::prelude::*;

use super::kernels::exp_shifted;
use super::{f32s, out};
use crate::{Error, Result, Tensor};

/// The error function, accurate to about 1e-15 (absolute) in f64.
///
/// `|x| < 2.5`: the series `erf x = 2/sqrt(pi) e^(-x^2) sum_n 2^n x^(2n+1) / (2n+1)!!`, whose
/// terms are all positive (no cancellation); otherwise `1 - erfc(x)` from the continued
/// fraction.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    if a < 2.5 {
        erf_series(x)
    } else {
        (1.0 - erfc_cf(a)).copysign(x)
    }
}

/// The complementary error function `1 - erf(x)`, with full relative accuracy for large x.
pub fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x.abs() < 2.5 {
        1.0 - erf_series(x)
    } else if x > 0.0 {
        erfc_cf(x)
    } else {
        2.0 - erfc_cf(-x)
    }
}

fn erf_series(x: f64) -> f64 {
    let x2 = x * x;
    let mut term = x;
    let mut sum = x;
    let mut n = 0.0f64;
    loop {
        n += 1.0;
        term *= 2.0 * x2 / (2.0 * n + 1.0);
        sum += term;
        if term.abs() <= 1e-17 * sum.abs() || n > 200.0 {
            break;
        }
    }
    2.0 / PI.sqrt() * (-x2).exp() * sum
}

/// erfc for x >= 2.5: `e^(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))`.
fn erfc_cf(x: f64) -> f64 {
    let mut f = x;
    for k in (1..=50).rev() {
        f = x + (k as f64 * 0.5) / f;
    }
    (-x * x).exp() / PI.sqrt() / f
}

/// GELU with the exact erf: `0.5 x (1 + erf(x / sqrt 2))` (PyTorch `gelu`, `approximate="none"`).
pub fn gelu_erf_f32(x: f32) -> f32 {
    let x = x as f64;
    (0.5 * x * erfc(-x / std::f64::consts::SQRT_2)) as f32
}

/// GELU, tanh approximation: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`
/// (PyTorch `approximate="tanh"`, HF `gelu_pytorch_tanh`, used by SigLIP and Gemma).
pub fn gelu_tanh_f32(x: f32) -> f32 {
    0.5 * x * (1.0 + gelu_tanh_arg(x).tanh())
}

/// The tanh argument of tanh-GELU, `sqrt(2/pi) (x + 0.044715 x^3)`.
fn gelu_tanh_arg(x: f32) -> f32 {
    const C: f32 = std::f32::consts::FRAC_2_SQRT_PI * std::f32::consts::FRAC_1_SQRT_2; // sqrt(2/pi)
    C * (x + 0.044715 * x * x * x)
}

/// SiLU / swish: `x * sigmoid(x)`.
pub fn silu_f32(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

fn map(x: &Tensor, f: impl Fn(f32) -> f32 + Sync) -> Result<Tensor<'static>> {
    let mut v = f32s(x)?.into_owned();
    v.par_chunks_mut(4096)
        .for_each(|c| c.iter_mut().for_each(|a| *a = f(*a)));
    out(x.shape().to_vec(), v)
}

/// Elementwise [`gelu_erf_f32`] in f32 with the vectorised `exp`: `0.5 x erfc(z)`, `z = -x /
/// sqrt 2`, with the Chebyshev-fitted `erfc |z| = t exp(-z^2 + P(t))`, `t = 1 / (1 + |z| / 2)`
/// (fractional error below 1.2e-7 everywhere; `erfc z = 2 - erfc |z|` for `z < 0`), so the
/// negative tail keeps its relative accuracy. Within 1e-6 (1 + |y|) of the f64 form (tested).
pub fn gelu_erf(x: &Tensor) -> Result<Tensor<'static>> {
    let mut v = f32s(x)?.into_owned();
    v.par_chunks_mut(4096).for_each_init(Vec::new, |e, c| {
        e.clear();
        e.extend(c.iter().map(|&a| {
            let z = (a * -std::f32::consts::FRAC_1_SQRT_2).abs();
            let t = 1.0 / (1.0 + 0.5 * z);
            -z * z + erfc_poly(t)
        }));
        exp_shifted(e, 0.0);
        for (a, &ex) in c.iter_mut().zip(e.iter()) {
            let t = 1.0 / (1.0 + 0.5 * (*a * std::f32::consts::FRAC_1_SQRT_2).abs());
            let tail = t * ex; // erfc(|z|)
            let erfc = if *a > 0.0 { 2.0 - tail } else { tail };
            *a = 0.5 * *a * erfc;
        }
    });
    out(x.shape().to_vec(), v)
}

/// `P(t)` of the Chebyshev fit `erfc x = t exp(-x^2 + P(t))` (Numerical Recipes' `erfcc`).
fn erfc_poly(t: f32) -> f32 {
    const C: [f32; 10] = [
        -1.265_512_2,
        1.000_023_7,
        0.374_091_96,
        0.096_784_18,
        -0.186_288_06,
        0.278_868_07,
        -1.135_204,
        1.488_515_9,
        -0.822_152_2,
        0.170_872_77,
    ];
    C.iter().rev().fold(0.0, |acc, &c| acc * t + c)
}

/// `x / (1 + exp(arg(x)))` elementwise with the vectorised `exp`: the logistic form of
/// SiLU (`arg = -x`) and of tanh-GELU (`0.5 x (1 + tanh u) = x / (1 + exp(-2u))`).
fn map_logistic(x: &Tensor, arg: impl Fn(f32) -> f32 + Sync) -> Result<Tensor<'static>> {
    let mut v = f32s(x)?.into_owned();
    v.par_chunks_mut(4096).for_each_init(Vec::new, |t, c| {
        t.clear();
        t.extend(c.iter().map(|&a| arg(a)));
        exp_shifted(t, 0.0);
        for (a, e) in c.iter_mut().zip(t.iter()) {
            *a /= 1.0 + e;
        }
    });
    out(x.shape().to_vec(), v)
}

/// Elementwise [`gelu_tanh_f32`] (computed in its logistic form, see `map_logistic`).
pub fn gelu_tanh(x: &Tensor) -> Result<Tensor<'static>> {
    map_logistic(x, |a| -2.0 * gelu_tanh_arg(a))
}

/// Elementwise [`silu_f32`].
pub fn silu(x: &Tensor) -> Result<Tensor<'static>> {
    map_logistic(x, |a| -a)
}

pub fn sigmoid(x: &Tensor) -> Result<Tensor<'static>> {
    map(x, |a| 1.0 / (1.0 + (-a).exp()))
}

pub fn tanh(x: &Tensor) -> Result<Tensor<'static>> {
    map(x, f32::tanh)
}

/// Elementwise `max(x, 0)`.
pub fn relu(x: &Tensor) -> Result<Tensor<'static>> {
    map(x, |a| a.max(0.0))
}

/// `act(gate) * up`, the activation computed as the tensor function `act` does (so the
/// result equals its output times `up`).
fn gated(
    op: &'static str,
    gate: &Tensor,
    up: &Tensor,
    act: impl Fn(&Tensor) -> Result<Tensor<'static>>,
) -> Result<Tensor<'static>> {
    if gate.shape() != up.shape() {
        return Err(Error::shape(
            op,
            format!("gate {:?} and up {:?} differ", gate.shape(), up.shape()),
        ));
    }
    let mut a = act(gate)?;
    let u = f32s(up)?;
    a.as_f32_mut()?
        .par_chunks_mut(4096)
        .zip(u.par_chunks(4096))
        .for_each(|(a, u)| a.iter_mut().zip(u).for_each(|(a, b)| *a *= b));
    Ok(a)
}

/// `silu(gate) * up` (Llama/SmolLM MLP), same shapes: `Op::Gated(GateAct::Silu)`.
pub fn swiglu(gate: &Tensor, up: &Tensor) -> Result<Tensor<'static>> {
    gated("swiglu", gate, up, silu)
}

/// `gelu_tanh(gate) * up` (Gemma's GeGLU MLP, `gelu_pytorch_tanh`), same shapes:
/// `Op::Gated(GateAct::GeluTanh)`.
pub fn geglu(gate: &Tensor, up: &Tensor) -> Result<Tensor<'static>> {
    gated("geglu", gate, up, gelu_tanh)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_known_values() {
        // Reference values (mpmath / Abramowitz-Stegun tables).
        let cases = [
            (0.0, 0.0),
            (0.1, 0.1124629160182849),
            (0.5, 0.5204998778130465),
            (1.0, 0.8427007929497149),
            (1.5, 0.9661051464753108),
            (2.0, 0.9953222650189527),
            (2.5, 0.999593047982555),
            (3.0, 0.9999779095030014),
            (-1.0, -0.8427007929497149),
            (-3.0, -0.9999779095030014),
            (6.0, 1.0),
        ];
        for (x, want) in cases {
            assert!(
                (erf(x) - want).abs() < 1e-13,
                "erf({x}) = {} != {want}",
                erf(x)
            );
        }
        // erfc keeps relative accuracy in the tail.
        for (x, want) in [
            (3.0, 2.209049699858544e-05),
            (5.0, 1.537_459_794_428_035e-12),
            (1.0, 0.15729920705028513),
        ] {
            assert!(
                ((erfc(x) - want) / want).abs() < 1e-12,
                "erfc({x}) = {}",
                erfc(x)
            );
        }
        assert!((erfc(-1.0) - 1.8427007929497148).abs() < 1e-13);
        // Odd symmetry and monotonicity on a grid.
        let mut prev = -1.0;
        for i in -400..=400 {
            let x = i as f64 / 50.0;
            assert!((erf(x) + erf(-x)).abs() < 1e-15);
            assert!(erf(x) >= prev);
            prev = erf(x);
        }
    }

    #[test]
    fn gelu_known_values() {
        assert!((gelu_erf_f32(1.0) as f64 - 0.8413447460685429).abs() < 1e-7);
        assert!((gelu_tanh_f32(1.0) as f64 - 0.8411919906082768).abs() < 1e-7);
        assert!((gelu_erf_f32(-1.0) as f64 - -0.15865525393145707).abs() < 1e-7);
        assert!((gelu_erf_f32(2.0) as f64 - 1.9544997361036416).abs() < 1e-6);
        assert_eq!(gelu_erf_f32(0.0), 0.0);
        // Far tail: tiny negative, not NaN.
        let t = gelu_erf_f32(-10.0);
        assert!(t <= 0.0 && t > -1e-20);
        assert!((gelu_tanh_f32(-10.0)).abs() < 1e-6);
        let x = Tensor::from_f32(vec![2], vec![1.0, -1.0]).unwrap();
        let y = gelu_erf(&x).unwrap();
        assert!((y.as_f32().unwrap()[1] - -0.158_655_25).abs() < 1e-6);
    }

    /// The f32 erf-GELU against the f64 form over the range, the tails and an odd length.
    #[test]
    fn gelu_erf_tensor_matches_f64() {
        let xs: Vec<f32> = (0..4099).map(|i| -14.0 + i as f32 * 0.00731).collect();
        let x = Tensor::from_f32(vec![xs.len()], xs.clone()).unwrap();
        let y = gelu_erf(&x).unwrap();
        let y = y.as_f32().unwrap();
        for (i, &a) in xs.iter().enumerate() {
            let want = 0.5 * a as f64 * erfc(-(a as f64) / std::f64::consts::SQRT_2);
            let got = y[i] as f64;
            assert!(
                (got - want).abs() <= 1e-6 * (1.0 + want.abs()),
                "gelu_erf({a}): {got} vs {want}"
            );
            // The negative tail keeps its relative accuracy down to f32's normal range.
            if want.abs() > 1e-30 {
                assert!(
                    ((got - want) / want).abs() < 2e-5,
                    "gelu_erf({a}): {got} vs {want}"
                );
            }
        }
        let special = Tensor::from_f32(vec![4], vec![0.0, -100.0, 100.0, f32::NAN]).unwrap();
        let s = gelu_erf(&special).unwrap();
        let s = s.as_f32().unwrap();
        assert_eq!(&s[..3], &[0.0, -0.0, 100.0]);
        assert!(s[3].is_nan());
    }

    /// The tensor ops (logistic form, vectorised exp) against f64 formulas over the range,
    /// tails and an odd length (SIMD remainder).
    #[test]
    fn gelu_tanh_and_silu_tensors_match_f64() {
        let xs: Vec<f32> = (0..4099).map(|i| -60.0 + i as f32 * 0.0293).collect();
        let x = Tensor::from_f32(vec![xs.len()], xs.clone()).unwrap();
        let g = gelu_tanh(&x).unwrap();
        let si = silu(&x).unwrap();
        let c = (2.0 / PI).sqrt();
        for (i, &a) in xs.iter().enumerate() {
            let a = a as f64;
            let want_g = 0.5 * a * (1.0 + (c * (a + 0.044715 * a * a * a)).tanh());
            let want_s = a / (1.0 + (-a).exp());
            let (gv, sv) = (
                g.as_f32().unwrap()[i] as f64,
                si.as_f32().unwrap()[i] as f64,
            );
            assert!(
                (gv - want_g).abs() <= 1e-6 * (1.0 + want_g.abs()),
                "gelu_tanh({a}): {gv} vs {want_g}"
            );
            assert!(
                (sv - want_s).abs() <= 1e-6 * (1.0 + want_s.abs()),
                "silu({a}): {sv} vs {want_s}"
            );
        }
        let nan = Tensor::from_f32(vec![1], vec![f32::NAN]).unwrap();
        assert!(silu(&nan).unwrap().as_f32().unwrap()[0].is_nan());
    }

    #[test]
    fn silu_sigmoid_relu_values() {
        // silu(1) = 1 / (1 + e^-1)
        assert!((silu_f32(1.0) - 0.731_058_6).abs() < 1e-6);
        assert_eq!(silu_f32(0.0), 0.0);
        assert!(silu_f32(-100.0).abs() < 1e-30);
        let x = Tensor::from_f32(vec![3], vec![-2.0, 0.0, 2.0]).unwrap();
        let s = sigmoid(&x).unwrap();
        let sv = s.as_f32().unwrap();
        assert!((sv[0] + sv[2] - 1.0).abs() < 1e-6 && sv[1] == 0.5);
        assert_eq!(relu(&x).unwrap().as_f32().unwrap(), &[0.0, 0.0, 2.0]);
        assert!((tanh(&x).unwrap().as_f32().unwrap()[2] - 0.964_027_6).abs() < 1e-6);
    }

    #[test]
    fn gated_helpers() {
        let g = Tensor::from_f32(vec![2], vec![1.0, 2.0]).unwrap();
        let u = Tensor::from_f32(vec![2], vec![3.0, -1.0]).unwrap();
        let y = swiglu(&g, &u).unwrap();
        let yv = y.as_f32().unwrap();
        assert!((yv[0] - 3.0 * 0.731_058_6).abs() < 1e-5);
        assert!((yv[1] + 2.0 / (1.0 + (-2.0f32).exp())).abs() < 1e-5);
        let y = geglu(&g, &u).unwrap();
        assert!((y.as_f32().unwrap()[0] - 3.0 * 0.841_192).abs() < 1e-5);
        let bad = Tensor::from_f32(vec![1, 2], vec![0.0; 2]).unwrap();
        assert!(swiglu(&g, &bad).is_err());
    }
}
