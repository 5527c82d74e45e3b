//! torchvision's `resize(uint8, BICUBIC, antialias=True)` on the CPU, bit for bit: PyTorch's
//! separable anti-aliased kernel for uint8 (`_upsample_bicubic2d_aa`): per output pixel a
//! Keys cubic (a = -0.5) stretched by the downscale factor, weights normalised in f64 then
//! rounded to int16 fixed point at the largest precision that keeps them below 2^15, a
//! horizontal pass into a uint8 buffer, then a vertical pass, each rounded and clamped.
//! Pillow's `Image.resize(BICUBIC)`, which PyTorch's kernel was ported from, is the same but
//! for the fixed point: 22 fractional bits in int32 ([`FixedPoint::Pillow`]).
//! The aspect ratio is not kept (the image is stretched to the output size).

/// Whose fixed point a byte resize rounds its weights to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FixedPoint {
    /// PyTorch's (torchvision on uint8 tensors): int16 at the largest precision that fits.
    #[default]
    Torch,
    /// Pillow's (`Image.resize`): 22 fractional bits.
    Pillow,
}

/// Fixed-point taps of one output pixel: the first input index and the weights.
struct Taps {
    start: usize,
    weights: Vec<i32>,
}

/// Keys' cubic convolution kernel with a = -0.5.
fn cubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A
    } else {
        0.0
    }
}

/// The first input index and the normalised weights of every output pixel of a resize from
/// `input` to `output` samples.
pub(crate) fn float_taps(input: usize, output: usize) -> Vec<(usize, Vec<f64>)> {
    let scale = input as f64 / output as f64;
    let (support, invscale) = match scale >= 1.0 {
        true => (2.0 * scale, 1.0 / scale),
        false => (2.0, 1.0),
    };
    (0..output)
        .map(|i| {
            let center = scale * (i as f64 + 0.5);
            let start = ((center - support + 0.5) as i64).max(0) as usize;
            let end = ((center + support + 0.5) as i64).min(input as i64) as usize;
            let mut w: Vec<f64> = (start..end)
                .map(|j| cubic((j as f64 - center + 0.5) * invscale))
                .collect();
            let total: f64 = w.iter().sum();
            if total != 0.0 {
                w.iter_mut().for_each(|x| *x /= total);
            }
            (start, w)
        })
        .collect()
}

/// Pillow's fractional bits (`PRECISION_BITS`, 32 - 8 - 2).
const PILLOW_BITS: u32 = 22;

/// The taps of every output pixel of a resize from `input` to `output` samples, and the
/// fixed-point precision of their weights.
fn taps(input: usize, output: usize, fixed: FixedPoint) -> (Vec<Taps>, u32) {
    let float = float_taps(input, output);
    let precision = match fixed {
        FixedPoint::Pillow => PILLOW_BITS,
        FixedPoint::Torch => {
            let max = float
                .iter()
                .flat_map(|(_, w)| w.iter().copied())
                .fold(0.0f64, f64::max);
            let mut p = 0;
            while p < 22 && ((0.5 + max * f64::from(1u32 << (p + 1))) as i64) < 1 << 15 {
                p += 1;
            }
            p
        }
    };
    let unit = f64::from(1u32 << precision);
    let taps = float
        .into_iter()
        .map(|(start, w)| Taps {
            start,
            weights: w
                .iter()
                .map(|&x| {
                    let v = x * unit;
                    let v = if v < 0.0 { v - 0.5 } else { v + 0.5 };
                    match fixed {
                        FixedPoint::Torch => v as i16 as i32,
                        FixedPoint::Pillow => v as i32,
                    }
                })
                .collect(),
        })
        .collect();
    (taps, precision)
}

/// One fixed-point tap sum, rounded and clamped to a byte.
fn apply(values: impl Iterator<Item = u8>, weights: &[i32], precision: u32) -> u8 {
    let round = if precision > 0 {
        1i32 << (precision - 1)
    } else {
        0
    };
    let acc = values.zip(weights).fold(i64::from(round), |acc, (v, &w)| {
        acc + i64::from(v) * i64::from(w)
    });
    (acc >> precision).clamp(0, 255) as u8
}

/// Resizes HWC RGB bytes `h x w` to `oh x ow` as torchvision does (see the module doc).
pub fn resize_bicubic_aa(src: &[u8], h: usize, w: usize, oh: usize, ow: usize) -> Vec<u8> {
    resize_bicubic_fixed(src, (h, w), (oh, ow), FixedPoint::Torch)
}

/// Resizes HWC RGB bytes `h x w` to `oh x ow` with `fixed`'s rounding (see the module doc).
pub fn resize_bicubic_fixed(
    src: &[u8],
    (h, w): (usize, usize),
    (oh, ow): (usize, usize),
    fixed: FixedPoint,
) -> Vec<u8> {
    let mut img = src.to_vec();
    let (mut cur_w, c) = (w, 3);
    if ow != w {
        let (taps, p) = taps(w, ow, fixed);
        let mut out = vec![0u8; h * ow * c];
        for y in 0..h {
            for (x, t) in taps.iter().enumerate() {
                for ch in 0..c {
                    let px = (0..t.weights.len()).map(|k| img[(y * w + t.start + k) * c + ch]);
                    out[(y * ow + x) * c + ch] = apply(px, &t.weights, p);
                }
            }
        }
        img = out;
        cur_w = ow;
    }
    if oh != h {
        let (taps, p) = taps(h, oh, fixed);
        let mut out = vec![0u8; oh * cur_w * c];
        for (y, t) in taps.iter().enumerate() {
            for x in 0..cur_w {
                for ch in 0..c {
                    let px =
                        (0..t.weights.len()).map(|k| img[((t.start + k) * cur_w + x) * c + ch]);
                    out[(y * cur_w + x) * c + ch] = apply(px, &t.weights, p);
                }
            }
        }
        img = out;
    }
    img
}

/// The same kernel on float planes (`[c, h, w]`, torch's float path: no rounding or
/// clamping), width pass then height pass; the identity when the size is unchanged.
pub fn resize_bicubic_aa_f32(
    src: &[f32],
    (h, w): (usize, usize),
    (oh, ow): (usize, usize),
) -> Vec<f32> {
    let c = src.len() / (h * w).max(1);
    let mut img = src.to_vec();
    if ow != w {
        let taps = float_taps(w, ow);
        let mut out = vec![0f32; c * h * ow];
        for (row_in, row_out) in img.chunks(w).zip(out.chunks_mut(ow)) {
            for (o, (start, wts)) in row_out.iter_mut().zip(&taps) {
                let acc: f64 = wts
                    .iter()
                    .enumerate()
                    .map(|(k, &wt)| wt * f64::from(row_in[start + k]))
                    .sum();
                *o = acc as f32;
            }
        }
        img = out;
    }
    if oh != h {
        let taps = float_taps(h, oh);
        let mut out = vec![0f32; c * oh * ow];
        for (plane_in, plane_out) in img.chunks(h * ow).zip(out.chunks_mut(oh * ow)) {
            for (y, (start, wts)) in taps.iter().enumerate() {
                for x in 0..ow {
                    let acc: f64 = wts
                        .iter()
                        .enumerate()
                        .map(|(k, &wt)| wt * f64::from(plane_in[(start + k) * ow + x]))
                        .sum();
                    plane_out[y * ow + x] = acc as f32;
                }
            }
        }
        img = out;
    }
    img
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_constant_image_stays_constant_and_the_same_size_is_the_identity() {
        let flat = vec![77u8; 9 * 13 * 3];
        assert!(resize_bicubic_aa(&flat, 9, 13, 20, 5)
            .iter()
            .all(|&v| v == 77));
        let img: Vec<u8> = (0..6 * 7 * 3).map(|i| (i * 37 % 256) as u8).collect();
        assert_eq!(resize_bicubic_aa(&img, 6, 7, 6, 7), img);
    }

    #[test]
    fn weights_sum_to_one_in_fixed_point() {
        for (i, o) in [(96, 56), (40, 56), (224, 224 / 3), (7, 100)] {
            for fixed in [FixedPoint::Torch, FixedPoint::Pillow] {
                let (taps, p) = taps(i, o, fixed);
                for t in &taps {
                    let sum: i32 = t.weights.iter().sum();
                    assert!((sum - (1 << p)).abs() <= t.weights.len() as i32, "{i}->{o}");
                }
            }
        }
    }
}
