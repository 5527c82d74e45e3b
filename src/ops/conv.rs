//! 2-D convolution via im2col + matmul (so the weight may be any matmul dtype).

use rayon::prelude::*;

use super::matmul::linear;
use super::{f32s, out};
use crate::{Error, Result, Tensor};

struct Geom {
    c: usize,
    h: usize,
    w: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    ph: usize,
    pw: usize,
    oh: usize,
    ow: usize,
}

fn geometry(
    op: &'static str,
    x: &Tensor,
    w: &Tensor,
    stride: (usize, usize),
    padding: (usize, usize),
) -> Result<(Geom, usize)> {
    if x.rank() != 3 || w.rank() != 4 {
        return Err(Error::shape(
            op,
            format!(
                "expected image [C, H, W] and weight [O, C, KH, KW], got {:?} and {:?}",
                x.shape(),
                w.shape()
            ),
        ));
    }
    let (c, h, wd) = (x.shape()[0], x.shape()[1], x.shape()[2]);
    let (o, wc, kh, kw) = (w.shape()[0], w.shape()[1], w.shape()[2], w.shape()[3]);
    if wc != c {
        return Err(Error::shape(
            op,
            format!("image has {c} channels, weight expects {wc}"),
        ));
    }
    let (sh, sw) = stride;
    let (ph, pw) = padding;
    if sh == 0 || sw == 0 || kh == 0 || kw == 0 {
        return Err(Error::shape(op, "stride and kernel size must be positive"));
    }
    if h + 2 * ph < kh || wd + 2 * pw < kw {
        return Err(Error::shape(
            op,
            format!(
                "kernel {kh}x{kw} larger than padded image {}x{}",
                h + 2 * ph,
                wd + 2 * pw
            ),
        ));
    }
    let oh = (h + 2 * ph - kh) / sh + 1;
    let ow = (wd + 2 * pw - kw) / sw + 1;
    Ok((
        Geom {
            c,
            h,
            w: wd,
            kh,
            kw,
            sh,
            sw,
            ph,
            pw,
            oh,
            ow,
        },
        o,
    ))
}

/// `[OH*OW, C*KH*KW]` patches, each flattened in the weight's (c, ky, kx) order.
fn im2col(x: &[f32], g: &Geom) -> Vec<f32> {
    let cols = g.c * g.kh * g.kw;
    let mut p = vec![0.0f32; g.oh * g.ow * cols];
    if cols == 0 {
        return p;
    }
    p.par_chunks_mut(cols).enumerate().for_each(|(r, row)| {
        let (oy, ox) = (r / g.ow, r % g.ow);
        for ci in 0..g.c {
            for ky in 0..g.kh {
                let iy = (oy * g.sh + ky) as isize - g.ph as isize;
                if iy < 0 || iy >= g.h as isize {
                    continue;
                }
                for kx in 0..g.kw {
                    let ix = (ox * g.sw + kx) as isize - g.pw as isize;
                    if ix < 0 || ix >= g.w as isize {
                        continue;
                    }
                    row[(ci * g.kh + ky) * g.kw + kx] =
                        x[(ci * g.h + iy as usize) * g.w + ix as usize];
                }
            }
        }
    });
    p
}

fn conv_rows(
    op: &'static str,
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    stride: (usize, usize),
    padding: (usize, usize),
) -> Result<(Tensor<'static>, Geom, usize)> {
    let (g, o) = geometry(op, x, w, stride, padding)?;
    if let Some(b) = bias {
        if b.rank() != 1 || b.shape()[0] != o {
            return Err(Error::shape(
                op,
                format!("bias {:?} does not match {o} outputs", b.shape()),
            ));
        }
    }
    let cols = g.c * g.kh * g.kw;
    let patches = Tensor::from_f32(vec![g.oh * g.ow, cols], im2col(&f32s(x)?, &g))?;
    let w2 = w.view().reshape(vec![o, cols])?;
    let y = linear(&patches, &w2, bias)?;
    Ok((y, g, o))
}

/// Patch embedding (ViT/SigLIP): `image [C, H, W]`, `weight [O, C, P, Q]`, `bias [O]`,
/// stride `(P, Q)`, no padding (a remainder of rows/columns is dropped, like PyTorch).
/// Returns `[num_patches, O]`, patches ordered row-major (patch rows, then columns).
pub fn patch_embed(
    image: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
) -> Result<Tensor<'static>> {
    if weight.rank() != 4 {
        return Err(Error::shape(
            "patch_embed",
            format!("weight must be [O, C, P, Q], got {:?}", weight.shape()),
        ));
    }
    let stride = (weight.shape()[2], weight.shape()[3]);
    Ok(conv_rows("patch_embed", image, weight, bias, stride, (0, 0))?.0)
}

/// General 2-D convolution (no groups, no dilation): `x [C, H, W]`, `weight [O, C, KH, KW]`,
/// `bias [O]`, zero padding `(ph, pw)` on each side. Returns `[O, OH, OW]`.
pub fn conv2d(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    stride: (usize, usize),
    padding: (usize, usize),
) -> Result<Tensor<'static>> {
    let (y, g, o) = conv_rows("conv2d", x, weight, bias, stride, padding)?;
    let yv = y.as_f32()?;
    let np = g.oh * g.ow;
    let mut t = vec![0.0f32; o * np];
    for p in 0..np {
        for oc in 0..o {
            t[oc * np + p] = yv[p * o + oc];
        }
    }
    out(vec![o, g.oh, g.ow], t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::{assert_close, Rng};

    /// Oracle: the convolution sum written out directly.
    #[allow(clippy::too_many_arguments)]
    fn naive_conv(
        x: &[f32],
        c: usize,
        h: usize,
        w: usize,
        wt: &[f32],
        o: usize,
        kh: usize,
        kw: usize,
        b: &[f32],
        s: (usize, usize),
        p: (usize, usize),
    ) -> (Vec<f32>, usize, usize) {
        let oh = (h + 2 * p.0 - kh) / s.0 + 1;
        let ow = (w + 2 * p.1 - kw) / s.1 + 1;
        let mut out = vec![0.0f32; o * oh * ow];
        for oc in 0..o {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = b[oc] as f64;
                    for ci in 0..c {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let iy = (oy * s.0 + ky) as i64 - p.0 as i64;
                                let ix = (ox * s.1 + kx) as i64 - p.1 as i64;
                                if iy >= 0 && ix >= 0 && (iy as usize) < h && (ix as usize) < w {
                                    acc += x[(ci * h + iy as usize) * w + ix as usize] as f64
                                        * wt[((oc * c + ci) * kh + ky) * kw + kx] as f64;
                                }
                            }
                        }
                    }
                    out[(oc * oh + oy) * ow + ox] = acc as f32;
                }
            }
        }
        (out, oh, ow)
    }

    #[test]
    fn patch_embed_matches_explicit_loops() {
        let mut r = Rng::new(31);
        let (c, h, w, o, p) = (3, 10, 14, 5, 4); // 2x3 patches, remainder dropped
        let x = r.vec(c * h * w);
        let wt = r.vec(o * c * p * p);
        let b = r.vec(o);
        let y = patch_embed(
            &Tensor::from_f32(vec![c, h, w], x.clone()).unwrap(),
            &Tensor::from_f32(vec![o, c, p, p], wt.clone()).unwrap(),
            Some(&Tensor::from_f32(vec![o], b.clone()).unwrap()),
        )
        .unwrap();
        assert_eq!(y.shape(), &[6, o]);
        let yv = y.as_f32().unwrap();
        for py in 0..2 {
            for px in 0..3 {
                for oc in 0..o {
                    let mut acc = b[oc] as f64;
                    for ci in 0..c {
                        for ky in 0..p {
                            for kx in 0..p {
                                acc += x[(ci * h + py * p + ky) * w + px * p + kx] as f64
                                    * wt[((oc * c + ci) * p + ky) * p + kx] as f64;
                            }
                        }
                    }
                    let got = yv[(py * 3 + px) * o + oc];
                    assert!((got as f64 - acc).abs() < 1e-5, "{got} vs {acc}");
                }
            }
        }
    }

    #[test]
    fn conv2d_with_stride_and_padding() {
        let mut r = Rng::new(32);
        let (c, h, w, o, kh, kw) = (2, 7, 6, 3, 3, 2);
        let x = r.vec(c * h * w);
        let wt = r.vec(o * c * kh * kw);
        let b = r.vec(o);
        for (s, p) in [((1, 1), (0, 0)), ((2, 1), (1, 1)), ((3, 2), (2, 0))] {
            let y = conv2d(
                &Tensor::from_f32(vec![c, h, w], x.clone()).unwrap(),
                &Tensor::from_f32(vec![o, c, kh, kw], wt.clone()).unwrap(),
                Some(&Tensor::from_f32(vec![o], b.clone()).unwrap()),
                s,
                p,
            )
            .unwrap();
            let (want, oh, ow) = naive_conv(&x, c, h, w, &wt, o, kh, kw, &b, s, p);
            assert_eq!(y.shape(), &[o, oh, ow]);
            assert_close(y.as_f32().unwrap(), &want, 1e-5);
        }
    }

    #[test]
    fn conv_shape_errors() {
        let x = Tensor::from_f32(vec![3, 4, 4], vec![0.0; 48]).unwrap();
        let w = Tensor::from_f32(vec![2, 2, 2, 2], vec![0.0; 16]).unwrap();
        assert!(patch_embed(&x, &w, None).is_err());
        let w = Tensor::from_f32(vec![2, 3, 5, 5], vec![0.0; 150]).unwrap();
        assert!(patch_embed(&x, &w, None).is_err());
        assert!(conv2d(&x, &w, None, (0, 1), (0, 0)).is_err());
        let w = Tensor::from_f32(vec![2, 3, 2, 2], vec![0.0; 24]).unwrap();
        let b = Tensor::from_f32(vec![3], vec![0.0; 3]).unwrap();
        assert!(patch_embed(&x, &w, Some(&b)).is_err());
    }
}
