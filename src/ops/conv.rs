//! Convolution: the patch embedding (a ViT's stride-equals-kernel conv, `[C, H, W]` in) and,
//! channels last, `im2col` (a general conv is it followed by a matmul) and `max_pool`.

use rayon::prelude::*;

use super::matmul::{linear, matmul_add_packed, PackedWeight};
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
fn im2col_chw(x: &[f32], g: &Geom) -> Vec<f32> {
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
    let patches = Tensor::from_f32(vec![g.oh * g.ow, cols], im2col_chw(&f32s(x)?, &g))?;
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

/// A sliding window over an image's rows and columns: kernel size, stride, zero padding
/// on each side and dilation, `(rows, columns)` each, as PyTorch's `Conv2d` / `MaxPool2d`
/// take them ([`im2col`], [`max_pool`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Window {
    pub kernel: (usize, usize),
    pub stride: (usize, usize),
    pub padding: (usize, usize),
    pub dilation: (usize, usize),
}

impl Window {
    /// A square window without dilation.
    pub fn square(kernel: usize, stride: usize, padding: usize) -> Self {
        Window {
            kernel: (kernel, kernel),
            stride: (stride, stride),
            padding: (padding, padding),
            dilation: (1, 1),
        }
    }

    /// The output rows and columns over an `h x w` image (PyTorch's floor rule), or why the
    /// window does not fit.
    pub fn output(&self, h: usize, w: usize) -> std::result::Result<(usize, usize), String> {
        let ((kh, kw), (sh, sw)) = (self.kernel, self.stride);
        let ((ph, pw), (dh, dw)) = (self.padding, self.dilation);
        if [kh, kw, sh, sw, dh, dw].contains(&0) {
            return Err(format!(
                "kernel, stride and dilation must be positive: {self:?}"
            ));
        }
        // the extent a dilated kernel covers
        let (eh, ew) = ((kh - 1) * dh + 1, (kw - 1) * dw + 1);
        if h + 2 * ph < eh || w + 2 * pw < ew {
            return Err(format!(
                "a {eh}x{ew} window does not fit the padded {}x{} image",
                h + 2 * ph,
                w + 2 * pw
            ));
        }
        Ok(((h + 2 * ph - eh) / sh + 1, (w + 2 * pw - ew) / sw + 1))
    }

    /// The image row (or column) that kernel offset `k` of output position `o` reads, or
    /// `None` in the padding; `axis` 0 for rows, 1 for columns.
    #[inline]
    fn source(&self, axis: usize, o: usize, k: usize, size: usize) -> Option<usize> {
        let (s, p, d) = match axis {
            0 => (self.stride.0, self.padding.0, self.dilation.0),
            _ => (self.stride.1, self.padding.1, self.dilation.1),
        };
        (o * s + k * d).checked_sub(p).filter(|&i| i < size)
    }
}

fn hwc(op: &'static str, x: &Tensor, win: &Window) -> Result<(usize, usize, usize, usize, usize)> {
    if x.rank() != 3 {
        return Err(Error::shape(
            op,
            format!(
                "expected a channels-last image [H, W, C], got {:?}",
                x.shape()
            ),
        ));
    }
    let (h, w, c) = (x.shape()[0], x.shape()[1], x.shape()[2]);
    let (oh, ow) = win.output(h, w).map_err(|e| Error::shape(op, e))?;
    Ok((h, w, c, oh, ow))
}

/// Every output position's receptive field: `x [H, W, C]` (channels last) ->
/// `[OH * OW, C * KH * KW]`, zero where the window reads padding, each row in (c, ky, kx)
/// order: a PyTorch conv weight `[O, C, KH, KW]` read as `[O, C * KH * KW]` multiplies it
/// ([`crate::ops::linear`]) into the convolution's output `[OH * OW, O]`, channels last
/// again.
pub fn im2col(x: &Tensor, win: &Window) -> Result<Tensor<'static>> {
    let (h, w, c, oh, ow) = hwc("im2col", x, win)?;
    let cols = c * win.kernel.0 * win.kernel.1;
    let mut y = vec![0.0f32; oh * ow * cols];
    fields(&f32s(x)?, (h, w, c, ow), win, 0, &mut y);
    out(vec![oh * ow, cols], y)
}

/// The receptive fields of output positions `first..` into `rows` (whole rows of `C * KH *
/// KW` values, every value written), `map` being `[h, w, c]` with `ow` output columns.
fn fields(
    map: &[f32],
    (h, w, c, ow): (usize, usize, usize, usize),
    win: &Window,
    first: usize,
    rows: &mut [f32],
) {
    let (kh, kw) = win.kernel;
    let cols = c * kh * kw;
    if cols == 0 {
        return;
    }
    rows.par_chunks_mut(cols).enumerate().for_each(|(r, row)| {
        let (oy, ox) = ((first + r) / ow, (first + r) % ow);
        for ky in 0..kh {
            let iy = win.source(0, oy, ky, h);
            for kx in 0..kw {
                let px = match (iy, win.source(1, ox, kx, w)) {
                    (Some(iy), Some(ix)) => Some(&map[(iy * w + ix) * c..][..c]),
                    _ => None,
                };
                for ci in 0..c {
                    row[(ci * kh + ky) * kw + kx] = px.map_or(0.0, |p| p[ci]);
                }
            }
        }
    });
}

/// Values of receptive fields [`conv_matmul`] keeps at once: a block that stays in the
/// cache, so the fields never go out to memory and back.
const CONV_BLOCK_VALUES: usize = 1 << 20;

/// [`im2col`] then [`crate::ops::matmul_add_packed`] by `weight` (`[O, C * KH * KW]`, `packed`
/// its integer tiles if any) plus `addend` (`[O]` or the output's shape): the same
/// `[OH * OW, O]`, made a block of output positions at a time (the receptive fields of a
/// block written to a scratch of [`CONV_BLOCK_VALUES`], multiplied, written out), so the
/// whole field matrix (9x the feature map for a 3 x 3 kernel) is never made.
pub fn conv_matmul(
    x: &Tensor,
    win: &Window,
    weight: &Tensor,
    packed: Option<&PackedWeight>,
    addend: Option<&Tensor>,
) -> Result<Tensor<'static>> {
    conv_in_blocks(x, win, (weight, packed), addend, CONV_BLOCK_VALUES)
}

/// [`conv_matmul`] with blocks of `block_values` field values (at least 64 rows).
fn conv_in_blocks(
    x: &Tensor,
    win: &Window,
    (weight, packed): (&Tensor, Option<&PackedWeight>),
    addend: Option<&Tensor>,
    block_values: usize,
) -> Result<Tensor<'static>> {
    let (h, w, c, oh, ow) = hwc("conv_matmul", x, win)?;
    let cols = c * win.kernel.0 * win.kernel.1;
    let (rows, o) = (oh * ow, weight.shape().first().copied().unwrap_or(0));
    if weight.shape() != [o, cols] {
        return Err(Error::shape(
            "conv_matmul",
            format!("weight {:?} for {cols} field values", weight.shape()),
        ));
    }
    let full = addend.filter(|a| a.rank() != 1);
    if full.is_some_and(|a| a.shape() != [rows, o]) {
        return Err(Error::shape(
            "conv_matmul",
            "addend of another shape".to_string(),
        ));
    }
    let map = f32s(x)?;
    let full = full.map(f32s).transpose()?;
    let block = (block_values / cols.max(1)).max(64);
    let mut y = Vec::with_capacity(rows * o);
    for first in (0..rows).step_by(block) {
        let n = block.min(rows - first);
        let mut fields_of = vec![0.0f32; n * cols];
        fields(&map, (h, w, c, ow), win, first, &mut fields_of);
        let part = Tensor::from_f32(vec![n, cols], fields_of)?;
        let c = match &full {
            Some(a) => Some(Tensor::from_f32(
                vec![n, o],
                a[first * o..(first + n) * o].to_vec(),
            )?),
            None => None,
        };
        let c = c.as_ref().or(addend.filter(|a| a.rank() == 1));
        let z = matmul_add_packed(&part, weight, packed, c)?;
        y.extend_from_slice(z.as_f32()?);
    }
    out(vec![rows, o], y)
}

/// Max pooling: `x [H, W, C]` (channels last) -> `[OH, OW, C]`, the largest value in each
/// window; padding never wins (PyTorch pads with -inf). A window wholly in the padding
/// cannot occur for PyTorch's limit `padding <= kernel / 2`, which the graph builder checks.
pub fn max_pool(x: &Tensor, win: &Window) -> Result<Tensor<'static>> {
    let (h, w, c, oh, ow) = hwc("max_pool", x, win)?;
    let xs = f32s(x)?;
    let mut y = vec![f32::NEG_INFINITY; oh * ow * c];
    if c > 0 {
        y.par_chunks_mut(c).enumerate().for_each(|(r, px)| {
            let (oy, ox) = (r / ow, r % ow);
            for ky in 0..win.kernel.0 {
                let Some(iy) = win.source(0, oy, ky, h) else {
                    continue;
                };
                for kx in 0..win.kernel.1 {
                    let Some(ix) = win.source(1, ox, kx, w) else {
                        continue;
                    };
                    for (m, &v) in px.iter_mut().zip(&xs[(iy * w + ix) * c..][..c]) {
                        *m = m.max(v);
                    }
                }
            }
        });
    }
    out(vec![oh, ow, c], y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::{assert_close, Rng};

    /// Oracle: the convolution sum written out directly, `x [C, H, W]` -> `[O, OH, OW]`.
    fn naive_conv(
        x: &[f32],
        (c, h, w): (usize, usize, usize),
        wt: &[f32],
        o: usize,
        b: &[f32],
        win: &Window,
    ) -> (Vec<f32>, usize, usize) {
        let ((kh, kw), (sh, sw)) = (win.kernel, win.stride);
        let ((ph, pw), (dh, dw)) = (win.padding, win.dilation);
        let oh = (h + 2 * ph - (kh - 1) * dh - 1) / sh + 1;
        let ow = (w + 2 * pw - (kw - 1) * dw - 1) / sw + 1;
        let mut out = vec![0.0f32; o * oh * ow];
        for oc in 0..o {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = b[oc] as f64;
                    for ci in 0..c {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let iy = (oy * sh + ky * dh) as i64 - ph as i64;
                                let ix = (ox * sw + kx * dw) as i64 - pw as i64;
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

    /// `[C, H, W]` to channels last.
    fn to_hwc(x: &[f32], c: usize, h: usize, w: usize) -> Vec<f32> {
        let mut y = vec![0.0; x.len()];
        for ci in 0..c {
            for p in 0..h * w {
                y[p * c + ci] = x[ci * h * w + p];
            }
        }
        y
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
    fn im2col_then_linear_is_the_convolution() {
        let mut r = Rng::new(32);
        let (c, h, w, o, kh, kw) = (2, 7, 6, 3, 3, 2);
        let x = r.vec(c * h * w);
        let wt = r.vec(o * c * kh * kw);
        let b = r.vec(o);
        let xt = Tensor::from_f32(vec![h, w, c], to_hwc(&x, c, h, w)).unwrap();
        let w2 = Tensor::from_f32(vec![o, c * kh * kw], wt.clone()).unwrap();
        let bt = Tensor::from_f32(vec![o], b.clone()).unwrap();
        for (s, p, d) in [
            ((1, 1), (0, 0), (1, 1)),
            ((2, 1), (1, 1), (1, 1)),
            ((3, 2), (2, 0), (1, 1)),
            ((1, 2), (2, 1), (2, 2)),
        ] {
            let win = Window {
                kernel: (kh, kw),
                stride: s,
                padding: p,
                dilation: d,
            };
            let cols = im2col(&xt, &win).unwrap();
            let y = linear(&cols, &w2, Some(&bt)).unwrap();
            let (want, oh, ow) = naive_conv(&x, (c, h, w), &wt, o, &b, &win);
            assert_eq!(y.shape(), &[oh * ow, o]);
            assert_close(y.as_f32().unwrap(), &to_hwc(&want, o, oh, ow), 1e-5);
        }
    }

    /// The blocked convolution is the im2col matrix's product, with a bias or a full addend,
    /// over blocks of rows that do not divide the output.
    #[test]
    fn conv_matmul_is_im2col_then_matmul() {
        let mut r = Rng::new(33);
        let (c, h, w, o) = (40, 31, 29, 6);
        let x = Tensor::from_f32(vec![h, w, c], r.vec(h * w * c)).unwrap();
        let win = Window::square(3, 1, 1);
        let wt = Tensor::from_f32(vec![o, c * 9], r.vec(o * c * 9)).unwrap();
        let bias = Tensor::from_f32(vec![o], r.vec(o)).unwrap();
        let full = Tensor::from_f32(vec![h * w, o], r.vec(h * w * o)).unwrap();
        for (addend, block) in [
            (None, 1 << 16),
            (Some(&bias), 1 << 15),
            (Some(&full), 1 << 20),
        ] {
            let cols = im2col(&x, &win).unwrap();
            let want = matmul_add_packed(&cols, &wt, None, addend).unwrap();
            let got = conv_in_blocks(&x, &win, (&wt, None), addend, block).unwrap();
            assert_eq!(got.shape(), want.shape());
            assert_close(got.as_f32().unwrap(), want.as_f32().unwrap(), 1e-6);
        }
        let bad = Tensor::from_f32(vec![o, c], r.vec(o * c)).unwrap();
        assert!(conv_matmul(&x, &win, &bad, None, None).is_err());
        assert!(h * w > (1 << 15) / (c * 9), "several blocks");
    }

    #[test]
    fn max_pool_takes_each_windows_largest() {
        // one channel 3x4, ResNet's window (3, stride 2, padding 1), and a second channel
        // holding the negation (so padding, were it 0, would win there)
        let v: Vec<f32> = (0..12).map(|i| ((i * 7) % 12) as f32 - 5.0).collect();
        let x: Vec<f32> = v.iter().flat_map(|&a| [a, -a - 20.0]).collect();
        let y = max_pool(
            &Tensor::from_f32(vec![3, 4, 2], x).unwrap(),
            &Window::square(3, 2, 1),
        )
        .unwrap();
        assert_eq!(y.shape(), &[2, 2, 2]);
        let at = |r: usize, c: usize| v[r * 4 + c];
        let want = |rs: std::ops::Range<usize>, cs: std::ops::Range<usize>, neg: bool| {
            let mut m = f32::NEG_INFINITY;
            for r in rs {
                for c in cs.clone() {
                    m = m.max(if neg { -at(r, c) - 20.0 } else { at(r, c) });
                }
            }
            m
        };
        let ys = y.as_f32().unwrap();
        for (i, (rs, cs)) in [(0..2, 0..2), (0..2, 1..4), (1..3, 0..2), (1..3, 1..4)]
            .into_iter()
            .enumerate()
        {
            assert_eq!(ys[2 * i], want(rs.clone(), cs.clone(), false));
            assert_eq!(ys[2 * i + 1], want(rs, cs, true));
        }
    }

    #[test]
    fn conv_shape_errors() {
        let x = Tensor::from_f32(vec![3, 4, 4], vec![0.0; 48]).unwrap();
        let w = Tensor::from_f32(vec![2, 2, 2, 2], vec![0.0; 16]).unwrap();
        assert!(patch_embed(&x, &w, None).is_err());
        let w = Tensor::from_f32(vec![2, 3, 5, 5], vec![0.0; 150]).unwrap();
        assert!(patch_embed(&x, &w, None).is_err());
        let hwc = Tensor::from_f32(vec![4, 4, 3], vec![0.0; 48]).unwrap();
        assert!(im2col(&hwc, &Window::square(5, 1, 0)).is_err());
        assert!(im2col(&hwc, &Window::square(3, 0, 0)).is_err());
        assert!(max_pool(
            &x.view().reshape(vec![48]).unwrap(),
            &Window::square(1, 1, 0)
        )
        .is_err());
        let w = Tensor::from_f32(vec![2, 3, 2, 2], vec![0.0; 24]).unwrap();
        let b = Tensor::from_f32(vec![3], vec![0.0; 3]).unwrap();
        assert!(patch_embed(&x, &w, Some(&b)).is_err());
    }
}
