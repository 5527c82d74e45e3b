//! Rotary position embeddings.
//!
//! Pair `i` (of `n_rot / 2`) at position `p` is rotated by the angle
//! `p * freq_scale * theta^(-2i / n_rot)`; dims `n_rot..head_dim` pass through unchanged.
//! Angles are computed in f64.

use rayon::prelude::*;

use super::{f32s, out};
use crate::{Error, Result, Tensor};

/// Which dims form a rotated pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeMode {
    /// Adjacent pairs `(x[2i], x[2i+1])` (ggml mode 0, GPT-J style; llama.cpp's llama
    /// GGUFs, whose converter permuted Q/K weights for it).
    Normal,
    /// Halves `(x[i], x[i + n_rot/2])` (ggml mode 2 / NeoX; HF `rotate_half`, i.e. plain HF
    /// Llama/Gemma/SmolLM checkpoints).
    Neox,
}

/// Input layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeLayout {
    /// `[seq, heads, head_dim]`: a projection output `[S, H*D]` reshaped, no transpose.
    SeqHeadDim,
    /// `[heads, seq, head_dim]`: the layout attention takes.
    HeadSeqDim,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeConfig {
    pub mode: RopeMode,
    /// Frequency base (10000 for Llama/Gemma, 100000 for SmolLM2, ...).
    pub theta: f32,
    /// Rotated dims (even, <= head_dim); `None` rotates all of head_dim.
    pub n_rot: Option<usize>,
    /// Linear position scaling (position interpolation); 1 for none.
    pub freq_scale: f32,
    pub layout: RopeLayout,
}

impl RopeConfig {
    /// Full rotation, no scaling, `[seq, heads, head_dim]` input.
    pub fn new(mode: RopeMode, theta: f32) -> Self {
        RopeConfig {
            mode,
            theta,
            n_rot: None,
            freq_scale: 1.0,
            layout: RopeLayout::SeqHeadDim,
        }
    }
}

/// Applies RoPE to `x` (rank 3, layout `cfg.layout`) with one explicit position per sequence
/// index (`positions.len() == seq`; integer or fractional, any order — prefix models pass
/// custom positions).
pub fn rope<P: Copy + Into<f64>>(
    x: &Tensor,
    positions: &[P],
    cfg: &RopeConfig,
) -> Result<Tensor<'static>> {
    const OP: &str = "rope";
    if x.rank() != 3 {
        return Err(Error::shape(
            OP,
            format!("expected rank 3, got {:?}", x.shape()),
        ));
    }
    let (a, b, d) = (x.shape()[0], x.shape()[1], x.shape()[2]);
    let (seq, heads) = match cfg.layout {
        RopeLayout::SeqHeadDim => (a, b),
        RopeLayout::HeadSeqDim => (b, a),
    };
    if positions.len() != seq {
        return Err(Error::shape(
            OP,
            format!("{} positions for a sequence of {seq}", positions.len()),
        ));
    }
    let n_rot = cfg.n_rot.unwrap_or(d);
    if !n_rot.is_multiple_of(2) || n_rot > d {
        return Err(Error::shape(
            OP,
            format!("n_rot {n_rot} must be even and <= head_dim {d}"),
        ));
    }
    if cfg.theta.is_nan() || cfg.theta <= 0.0 {
        return Err(Error::InvalidArgument(format!(
            "rope: theta must be > 0, got {}",
            cfg.theta
        )));
    }
    let half = n_rot / 2;
    // cos/sin table [seq, half].
    let inv_freq: Vec<f64> = (0..half)
        .map(|i| (cfg.theta as f64).powf(-2.0 * i as f64 / n_rot as f64))
        .collect();
    let mut cs = vec![(0.0f32, 0.0f32); seq * half];
    for (s, &p) in positions.iter().enumerate() {
        let p: f64 = p.into() * cfg.freq_scale as f64;
        for i in 0..half {
            let (sin, cos) = (p * inv_freq[i]).sin_cos();
            cs[s * half + i] = (cos as f32, sin as f32);
        }
    }
    let mut v = f32s(x)?.into_owned();
    if d == 0 || half == 0 {
        return out(x.shape().to_vec(), v);
    }
    v.par_chunks_mut(d).enumerate().for_each(|(r, row)| {
        let s = match cfg.layout {
            RopeLayout::SeqHeadDim => r / heads,
            RopeLayout::HeadSeqDim => r % seq,
        };
        let tab = &cs[s * half..(s + 1) * half];
        for (i, &(c, sn)) in tab.iter().enumerate() {
            let (i0, i1) = match cfg.mode {
                RopeMode::Normal => (2 * i, 2 * i + 1),
                RopeMode::Neox => (i, i + half),
            };
            let (x0, x1) = (row[i0], row[i1]);
            row[i0] = x0 * c - x1 * sn;
            row[i1] = x0 * sn + x1 * c;
        }
    });
    out(x.shape().to_vec(), v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::{assert_close, Rng};

    fn norms(v: &[f32], d: usize) -> Vec<f32> {
        v.chunks(d)
            .map(|r| r.iter().map(|a| a * a).sum::<f32>().sqrt())
            .collect()
    }

    #[test]
    fn position_zero_is_identity_and_norms_are_preserved() {
        let mut r = Rng::new(21);
        let (s, h, d) = (5, 3, 8);
        let v = r.vec(s * h * d);
        let x = Tensor::from_f32(vec![s, h, d], v.clone()).unwrap();
        for mode in [RopeMode::Normal, RopeMode::Neox] {
            let cfg = RopeConfig::new(mode, 10000.0);
            let y = rope(&x, &[0i32; 5], &cfg).unwrap();
            assert_eq!(y.as_f32().unwrap(), &v[..]);
            let y = rope(&x, &[0, 1, 7, 100, 5000], &cfg).unwrap();
            assert_close(&norms(y.as_f32().unwrap(), d), &norms(&v, d), 1e-5);
            assert!(y.as_f32().unwrap() != &v[..]);
        }
    }

    #[test]
    fn known_2d_rotation() {
        // head_dim 2: a single pair with frequency 1 -> rotation by `pos` radians.
        let x = Tensor::from_f32(vec![2, 1, 2], vec![1.0, 0.0, 1.0, 0.0]).unwrap();
        let cfg = RopeConfig::new(RopeMode::Normal, 10000.0);
        let p = std::f32::consts::FRAC_PI_2;
        let y = rope(&x, &[p, std::f32::consts::PI], &cfg).unwrap();
        assert_close(y.as_f32().unwrap(), &[0.0, 1.0, -1.0, 0.0], 1e-6);

        // head_dim 4, theta 100: pair 1 has frequency 100^(-1/2) = 0.1.
        // Normal pairs (x0,x1),(x2,x3); NeoX pairs (x0,x2),(x1,x3).
        let x = Tensor::from_f32(vec![1, 1, 4], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
        let pos = [10.0f32]; // angles: 10 and 1
        let (c0, s0) = (10f32.cos(), 10f32.sin());
        let (c1, s1) = (1f32.cos(), 1f32.sin());
        let y = rope(&x, &pos, &RopeConfig::new(RopeMode::Normal, 100.0)).unwrap();
        let want = [
            1.0 * c0 - 2.0 * s0,
            1.0 * s0 + 2.0 * c0,
            3.0 * c1 - 4.0 * s1,
            3.0 * s1 + 4.0 * c1,
        ];
        assert_close(y.as_f32().unwrap(), &want, 1e-5);
        let y = rope(&x, &pos, &RopeConfig::new(RopeMode::Neox, 100.0)).unwrap();
        let want = [
            1.0 * c0 - 3.0 * s0,
            2.0 * c1 - 4.0 * s1,
            1.0 * s0 + 3.0 * c0,
            2.0 * s1 + 4.0 * c1,
        ];
        assert_close(y.as_f32().unwrap(), &want, 1e-5);
    }

    #[test]
    fn relative_property() {
        // <rope(q, m), rope(k, n)> depends only on m - n.
        let mut r = Rng::new(5);
        let d = 16;
        let q = r.vec(d);
        let k = r.vec(d);
        for mode in [RopeMode::Normal, RopeMode::Neox] {
            let cfg = RopeConfig::new(mode, 10000.0);
            let qt = Tensor::from_f32(vec![1, 1, d], q.clone()).unwrap();
            let kt = Tensor::from_f32(vec![1, 1, d], k.clone()).unwrap();
            let dotat = |m: i32, n: i32| {
                let a = rope(&qt, &[m], &cfg).unwrap();
                let b = rope(&kt, &[n], &cfg).unwrap();
                a.as_f32()
                    .unwrap()
                    .iter()
                    .zip(b.as_f32().unwrap())
                    .map(|(x, y)| x * y)
                    .sum::<f32>()
            };
            let base = dotat(3, 1);
            assert!((dotat(12, 10) - base).abs() < 1e-4);
            assert!((dotat(102, 100) - base).abs() < 1e-4);
            assert!(
                (dotat(1, 3) - base).abs() > 1e-3,
                "asymmetric offsets should differ"
            );
        }
    }

    #[test]
    fn partial_rotation_layouts_and_errors() {
        let mut r = Rng::new(6);
        let (h, s, d) = (2, 3, 6);
        let v = r.vec(h * s * d);
        let pos = [4i32, 9, 2];
        let mut cfg = RopeConfig::new(RopeMode::Neox, 10000.0);
        cfg.n_rot = Some(4);
        cfg.layout = RopeLayout::HeadSeqDim;
        let x = Tensor::from_f32(vec![h, s, d], v.clone()).unwrap();
        let y = rope(&x, &pos, &cfg).unwrap();
        let yv = y.as_f32().unwrap();
        // Dims 4, 5 untouched.
        for row in 0..h * s {
            assert_eq!(yv[row * d + 4..row * d + 6], v[row * d + 4..row * d + 6]);
        }
        // Same values as the [seq, heads, dim] layout on the transposed input.
        let mut vt = vec![0.0; v.len()];
        for hh in 0..h {
            for ss in 0..s {
                vt[(ss * h + hh) * d..][..d].copy_from_slice(&v[(hh * s + ss) * d..][..d]);
            }
        }
        cfg.layout = RopeLayout::SeqHeadDim;
        let y2 = rope(&Tensor::from_f32(vec![s, h, d], vt).unwrap(), &pos, &cfg).unwrap();
        let y2v = y2.as_f32().unwrap();
        for hh in 0..h {
            for ss in 0..s {
                assert_eq!(yv[(hh * s + ss) * d..][..d], y2v[(ss * h + hh) * d..][..d]);
            }
        }
        assert!(rope(&x, &[1i32, 2, 3, 4], &cfg).is_err());
        cfg.n_rot = Some(5);
        assert!(rope(&x, &pos, &cfg).is_err());
        let x2 = Tensor::from_f32(vec![3, 6], vec![0.0; 18]).unwrap();
        assert!(rope(&x2, &pos, &RopeConfig::new(RopeMode::Normal, 1e4)).is_err());
    }
}
