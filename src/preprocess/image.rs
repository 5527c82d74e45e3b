//! Camera-image resizing as the PyTorch references do it: HWC u8 or [0,1] floats to a
//! CHW f32 tensor, aspect-preserving bilinear resize (`F.interpolate`, `align_corners=False`,
//! no antialias) padded to the model's size, then an affine map of the value range.

use crate::policy::{Image, ImageData};
use crate::{Error, Result};

/// Largest side accepted (as the wire protocol's limit).
pub const MAX_SIDE: usize = 8192;

/// `[0, 1]` CHW planes of an image, checking its declared size against its data.
pub fn to_chw_unit(img: &Image) -> Result<Vec<f32>> {
    check_size(img)?;
    let n = img.height * img.width;
    let mut out = vec![0f32; n * 3];
    for i in 0..n {
        for c in 0..3 {
            out[c * n + i] = match &img.data {
                ImageData::RgbU8(d) => d[i * 3 + c] as f32 / 255.0,
                ImageData::RgbF32(d) => d[i * 3 + c],
            };
        }
    }
    Ok(out)
}

/// Checks an image's declared size against the protocol's limit and its data.
pub(crate) fn check_size(img: &Image) -> Result<()> {
    let (h, w) = (img.height, img.width);
    if h == 0 || w == 0 || h > MAX_SIDE || w > MAX_SIDE {
        return Err(Error::InvalidArgument(format!(
            "image {w}x{h}: each side must be 1..={MAX_SIDE}"
        )));
    }
    let len = match &img.data {
        ImageData::RgbU8(d) => d.len(),
        ImageData::RgbF32(d) => d.len(),
    };
    if len != h * w * 3 {
        return Err(Error::InvalidArgument(format!(
            "image {w}x{h}: {len} values, expected {}",
            h * w * 3
        )));
    }
    Ok(())
}

/// HWC RGB bytes of an image, its size checked; float frames become `trunc(clamp(x, 0, 1) *
/// 255)`, as lerobot's GR00T processor casts them (exact for every `k / 255`).
pub fn to_hwc_u8(img: &Image) -> Result<Vec<u8>> {
    check_size(img)?;
    Ok(match &img.data {
        ImageData::RgbU8(d) => d.clone(),
        ImageData::RgbF32(d) => d
            .iter()
            .map(|&x| (x.clamp(0.0, 1.0) * 255.0) as u8)
            .collect(),
    })
}

/// Per output sample of a bilinear resize from `in_len` to `out_len` samples
/// (`align_corners=False`): the two source samples and the second one's weight.
pub(crate) fn bilinear_taps(in_len: usize, out_len: usize) -> Vec<(usize, usize, f32)> {
    let scale = in_len as f32 / out_len as f32;
    (0..out_len)
        .map(|o| {
            let s = (scale * (o as f32 + 0.5) - 0.5).max(0.0);
            let i0 = (s as usize).min(in_len - 1);
            let i1 = (i0 + 1).min(in_len - 1);
            (i0, i1, s - i0 as f32)
        })
        .collect()
}

/// Bilinear resize of CHW planes, `F.interpolate(mode="bilinear", align_corners=False)`.
pub fn resize_bilinear(
    src: &[f32],
    c: usize,
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
) -> Vec<f32> {
    let (ty, tx) = (bilinear_taps(h, oh), bilinear_taps(w, ow));
    let mut out = vec![0f32; c * oh * ow];
    for ch in 0..c {
        let plane = &src[ch * h * w..(ch + 1) * h * w];
        for (oy, &(y0, y1, ly)) in ty.iter().enumerate() {
            for (ox, &(x0, x1, lx)) in tx.iter().enumerate() {
                let top = (1.0 - lx) * plane[y0 * w + x0] + lx * plane[y0 * w + x1];
                let bottom = (1.0 - lx) * plane[y1 * w + x0] + lx * plane[y1 * w + x1];
                out[ch * oh * ow + oy * ow + ox] = (1.0 - ly) * top + ly * bottom;
            }
        }
    }
    out
}

/// Where [`resize_with_pad`] puts the resized image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PadAlign {
    /// Padding on the left and top only (lerobot SmolVLA's `resize_with_pad`).
    BottomRight,
    /// Padding split evenly, the odd row or column at the bottom or right (openpi's
    /// `resize_with_pad`, which pi0 and pi0.5 use).
    Center,
}

/// Where [`resize_with_pad`] puts an `h x w` image in `out_h x out_w`: the resized size
/// `(rh, rw)` and the padding before it `(pad_h, pad_w)`.
pub(crate) fn pad_layout(
    h: usize,
    w: usize,
    out_h: usize,
    out_w: usize,
    align: PadAlign,
) -> (usize, usize, usize, usize) {
    let ratio = (w as f64 / out_w as f64).max(h as f64 / out_h as f64);
    let rh = ((h as f64 / ratio) as usize).max(1);
    let rw = ((w as f64 / ratio) as usize).max(1);
    let (pad_h, pad_w) = (out_h.saturating_sub(rh), out_w.saturating_sub(rw));
    match align {
        PadAlign::BottomRight => (rh, rw, pad_h, pad_w),
        PadAlign::Center => (rh, rw, pad_h / 2, pad_w / 2),
    }
}

/// Resizes to fit `out_h x out_w` keeping the aspect ratio and pads with `pad`.
pub fn resize_with_pad(
    src: &[f32],
    h: usize,
    w: usize,
    out_h: usize,
    out_w: usize,
    pad: f32,
    align: PadAlign,
) -> Vec<f32> {
    let (rh, rw, pad_h, pad_w) = pad_layout(h, w, out_h, out_w, align);
    let resized = if (rh, rw) == (h, w) {
        src.to_vec()
    } else {
        resize_bilinear(src, 3, h, w, rh, rw)
    };
    let mut out = vec![pad; 3 * out_h * out_w];
    for c in 0..3 {
        for y in 0..rh.min(out_h) {
            let dst = c * out_h * out_w + (y + pad_h) * out_w + pad_w;
            let s = c * rh * rw + y * rw;
            out[dst..dst + rw.min(out_w)].copy_from_slice(&resized[s..s + rw.min(out_w)]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downscale_by_two_averages_pixel_pairs() {
        // align_corners=False at scale 2 samples exactly between source pixels.
        let src: Vec<f32> = (0..3 * 4 * 4).map(|i| i as f32).collect();
        let out = resize_bilinear(&src, 3, 4, 4, 2, 2);
        let p = |c: usize, y: usize, x: usize| src[c * 16 + y * 4 + x];
        let want = (p(0, 0, 0) + p(0, 0, 1) + p(0, 1, 0) + p(0, 1, 1)) / 4.0;
        assert!((out[0] - want).abs() < 1e-5);
    }

    #[test]
    fn padding_goes_left_and_top() {
        // A 2x4 (h x w) image into 4x4: width fits, 2 rows of padding on top.
        let src = vec![1.0f32; 3 * 2 * 4];
        let out = resize_with_pad(&src, 2, 4, 4, 4, -1.0, PadAlign::BottomRight);
        assert!(out[..8].iter().all(|&v| v == -1.0));
        assert!(out[8..16].iter().all(|&v| v == 1.0));
    }

    #[test]
    fn centred_padding_puts_the_odd_row_at_the_bottom() {
        // A 1x4 image into 4x4: one row on top, two below (openpi's divmod split).
        let src = vec![1.0f32; 3 * 4];
        let out = resize_with_pad(&src, 1, 4, 4, 4, -1.0, PadAlign::Center);
        let rows: Vec<f32> = (0..4).map(|y| out[y * 4]).collect();
        assert_eq!(rows, vec![-1.0, 1.0, -1.0, -1.0]);
    }
}
