//! Camera frames as the backend takes them. The host uploads a frame as it arrived (bytes
//! stay bytes, one a pixel channel) and the predict graph maps it to the tower's `[3, H, W]`
//! input with constants made here ([`FramePlan`]): the same map as
//! [`CameraInput::pixels`], the host reference, up to float rounding.
//!
//! Where the reference resizes floats (SmolVLA, pi0, pi0.5: bilinear + pad; VLA-JEPA: area
//! then bicubic), the resize is linear and separable: `out_c = rows · x_c · colsᵀ`, two
//! matrix products on the backend. Where the reference rounds the resized frame to bytes
//! (GR00T N1.5 / N1.7, Evo-1), the host resizes from bytes to bytes at the model's size and
//! the graph only maps the values.

use super::image::{bilinear_taps, check_size, pad_layout};
use super::{area, bicubic, CameraInput, PixelMap, Resize};
use crate::policy::{Image, ImageData};
use crate::{Result, Tensor};

/// Frames with more pixels than this (a 4K frame's) are resized on the host even where the
/// backend could: the frame as f32 on the device would take over 100 MB, more than some
/// adapters bind at once.
pub const DEVICE_RESIZE_MAX_PIXELS: usize = 3840 * 2160;

/// The frame one camera uploads: `[height, width, 3]`, bytes or f32 in [0, 1].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FrameKey {
    pub height: usize,
    pub width: usize,
    pub bytes: bool,
}

/// `img` as it arrived, checked, with its key: `[height, width, 3]`, bytes stay bytes (the
/// one-pass archs that run at the frame's own size, or refuse any other).
pub fn as_sent(img: &Image) -> Result<(FrameKey, Tensor<'static>)> {
    check_size(img)?;
    let shape = vec![img.height, img.width, 3];
    let (bytes, t) = match &img.data {
        ImageData::RgbU8(d) => (true, Tensor::from_u8(shape, d.clone())?),
        ImageData::RgbF32(d) => (false, Tensor::from_f32(shape, d.clone())?),
    };
    let key = FrameKey {
        height: img.height,
        width: img.width,
        bytes,
    };
    Ok((key, t))
}

/// How a graph turns an uploaded frame ([`FrameKey`]) into the tower's `[3, H, W]` input:
/// `out_c = rows · (scale_c x_c) · colsᵀ + offset_c`, or without `resize`
/// `scale_c x_c + offset_c` (then channels first).
#[derive(Clone, Debug, PartialEq)]
pub struct FramePlan {
    pub key: FrameKey,
    /// `(H, W)`.
    pub out: (usize, usize),
    /// Per channel: the unit (1/255 for bytes) times the value map's slope.
    pub scale: [f32; 3],
    /// `rows [H, height]` and `cols [W, width]`; `None` where both are the identity.
    pub resize: Option<(Vec<f32>, Vec<f32>)>,
    /// `[3, H, W]` with `resize` (the value map's offset, and the padding), else `[3]`.
    pub offset: Vec<f32>,
}

impl PixelMap {
    /// `(slope, offset)` of channel `c`'s map.
    pub fn affine(self, c: usize) -> (f32, f32) {
        match self {
            PixelMap::MinusOneToOne => (2.0, -1.0),
            PixelMap::MeanStd { mean, std } => (1.0 / std[c], -mean[c] / std[c]),
        }
    }
}

/// `a [m, k] · b [k, n]`, in f64.
fn product(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..k {
            let x = a[i * k + j];
            if x != 0.0 {
                for (o, &y) in out[i * n..(i + 1) * n]
                    .iter_mut()
                    .zip(&b[j * n..(j + 1) * n])
                {
                    *o += x * y;
                }
            }
        }
    }
    out
}

fn identity(n: usize) -> Vec<f64> {
    let mut m = vec![0f64; n * n];
    (0..n).for_each(|i| m[i * n + i] = 1.0);
    m
}

/// `[out, n]`: bilinear taps from `n` to `out` samples.
fn bilinear_matrix(n: usize, out: usize) -> Vec<f64> {
    let mut m = vec![0f64; out * n];
    for (o, (i0, i1, l)) in bilinear_taps(n, out).into_iter().enumerate() {
        m[o * n + i0] += f64::from(1.0 - l);
        m[o * n + i1] += f64::from(l);
    }
    m
}

/// `[out, n]`: torch's adaptive average from `n` to `out` samples.
fn area_matrix(n: usize, out: usize) -> Vec<f64> {
    let mut m = vec![0f64; out * n];
    for o in 0..out {
        let (a, b) = area::adaptive_range(o, n, out);
        (a..b).for_each(|i| m[o * n + i] = 1.0 / (b - a) as f64);
    }
    m
}

/// `[out, n]`: the float anti-aliased bicubic from `n` to `out` samples (the identity at
/// the same size, as the reference skips that pass).
fn bicubic_matrix(n: usize, out: usize) -> Vec<f64> {
    if n == out {
        return identity(n);
    }
    let mut m = vec![0f64; out * n];
    for (o, (start, w)) in bicubic::float_taps(n, out).into_iter().enumerate() {
        for (k, x) in w.into_iter().enumerate() {
            m[o * n + start + k] = x;
        }
    }
    m
}

/// `m [rows, n]` placed at row `at` of a zero `[total, n]` matrix (rows past `total` cut).
fn embed(m: &[f64], n: usize, at: usize, total: usize) -> Vec<f64> {
    let mut out = vec![0f64; total * n];
    let rows = (m.len() / n).min(total.saturating_sub(at));
    out[at * n..(at + rows) * n].copy_from_slice(&m[..rows * n]);
    out
}

impl CameraInput {
    /// Whether the reference resizes floats (a linear map the backend applies) rather than
    /// rounding the resized frame to bytes (done on the host).
    fn resizes_on_device(&self) -> bool {
        matches!(
            self.resize,
            Resize::KeepAspectPad | Resize::AreaThenBicubicF32 { .. }
        )
    }

    /// Whether the backend resizes `img` ([`Self::resizes_on_device`], and not too large).
    fn device_resizes(&self, img: &Image) -> bool {
        self.resizes_on_device() && img.height.saturating_mul(img.width) <= DEVICE_RESIZE_MAX_PIXELS
    }

    /// One camera view as the backend takes it: the frame as it arrived (`[h, w, 3]`, bytes
    /// stay bytes), or where the host resizes, the resized bytes `[H, W, 3]` (or, for a
    /// frame over [`DEVICE_RESIZE_MAX_PIXELS`], the resized [0, 1] floats).
    pub fn frame(&self, img: &Image) -> Result<(FrameKey, Tensor<'static>)> {
        let key = self.frame_key(img);
        let shape = vec![key.height, key.width, 3];
        let t = match (self.device_resizes(img), self.resizes_on_device()) {
            (true, _) => {
                check_size(img)?;
                match &img.data {
                    ImageData::RgbU8(d) => Tensor::from_u8(shape, d.clone())?,
                    ImageData::RgbF32(d) => Tensor::from_f32(shape, d.clone())?,
                }
            }
            // over the limit: the reference's float resize on the host, channels last
            (false, true) => {
                let n = key.height * key.width;
                let chw = self.resized_unit(img)?;
                let hwc: Vec<f32> = (0..3 * n).map(|i| chw[(i % 3) * n + i / 3]).collect();
                Tensor::from_f32(shape, hwc)?
            }
            (false, false) => Tensor::from_u8(shape, self.host_bytes(img)?)?,
        };
        Ok((key, t))
    }

    /// The frame [`Self::frame`] makes of `img`.
    pub fn frame_key(&self, img: &Image) -> FrameKey {
        match (self.resizes_on_device(), self.device_resizes(img)) {
            (true, true) => FrameKey {
                height: img.height,
                width: img.width,
                bytes: matches!(img.data, ImageData::RgbU8(_)),
            },
            (device, _) => FrameKey {
                height: self.height,
                width: self.width,
                bytes: !device,
            },
        }
    }

    /// The frame a client sends when it sends bytes at the model's size.
    pub fn model_frame(&self) -> FrameKey {
        FrameKey {
            height: self.height,
            width: self.width,
            bytes: true,
        }
    }

    /// The map from a `key` frame to the tower's input ([`FramePlan`]).
    pub fn frame_plan(&self, key: FrameKey) -> FramePlan {
        let (oh, ow) = (self.height, self.width);
        let (h, w) = (key.height, key.width);
        let unit = if key.bytes { 1.0 / 255.0 } else { 1.0 };
        let maps: Vec<(f32, f32)> = (0..3).map(|c| self.pixels.affine(c)).collect();
        let scale = [0, 1, 2].map(|c| maps[c].0 * unit);
        // rows, cols, and the window [y0, y1) x [x0, x1) the resized frame covers
        let (rows, cols, window) = match self.resize {
            Resize::KeepAspectPad => {
                let (rh, rw, ph, pw) = pad_layout(h, w, oh, ow, self.align);
                let rows = embed(&bilinear_matrix(h, rh), h, ph, oh);
                let cols = embed(&bilinear_matrix(w, rw), w, pw, ow);
                (rows, cols, (ph, (ph + rh).min(oh), pw, (pw + rw).min(ow)))
            }
            Resize::AreaThenBicubicF32 { area } => {
                let a = area.filter(|&a| a != (h, w)).unwrap_or((h, w));
                let rows = product(&bicubic_matrix(a.0, oh), &area_matrix(h, a.0), oh, a.0, h);
                let cols = product(&bicubic_matrix(a.1, ow), &area_matrix(w, a.1), ow, a.1, w);
                (rows, cols, (0, oh, 0, ow))
            }
            _ => (identity(oh), identity(ow), (0, oh, 0, ow)),
        };
        let is_identity = (h, w) == (oh, ow) && rows == identity(oh) && cols == identity(ow);
        if is_identity {
            let offset = maps.iter().map(|m| m.1).collect();
            return FramePlan {
                key,
                out: (oh, ow),
                scale,
                resize: None,
                offset,
            };
        }
        let (y0, y1, x0, x1) = window;
        let mut offset = Vec::with_capacity(3 * oh * ow);
        for (slope, off) in maps {
            for y in 0..oh {
                for x in 0..ow {
                    let inside = (y0..y1).contains(&y) && (x0..x1).contains(&x);
                    offset.push(if inside { off } else { slope * self.pad + off });
                }
            }
        }
        let f32s = |m: Vec<f64>| m.into_iter().map(|x| x as f32).collect();
        FramePlan {
            key,
            out: (oh, ow),
            scale,
            resize: Some((f32s(rows), f32s(cols))),
            offset,
        }
    }

    /// The resized frame in bytes, `[H, W, 3]`, for the resizes that round to bytes.
    pub(super) fn host_bytes(&self, img: &Image) -> Result<Vec<u8>> {
        let (h, w) = (self.height, self.width);
        let bytes = super::image::to_hwc_u8(img)?;
        let size = (img.height, img.width);
        Ok(match self.resize {
            Resize::StretchBicubicU8 => {
                bicubic::resize_bicubic_aa(&bytes, img.height, img.width, h, w)
            }
            Resize::StretchBicubicPillow => {
                bicubic::resize_bicubic_fixed(&bytes, size, (h, w), bicubic::FixedPoint::Pillow)
            }
            Resize::Gr00tFrame {
                edge,
                crop_fraction,
                letterbox,
                fixed,
            } => {
                let (bytes, size) = match letterbox {
                    true => {
                        let (square, side) = area::letterbox(&bytes, size);
                        (square, (side, side))
                    }
                    false => (bytes, size),
                };
                let (frame, (fh, fw)) = area::gr00t_frame(&bytes, size, edge, crop_fraction);
                bicubic::resize_bicubic_fixed(&frame, (fh, fw), (h, w), fixed)
            }
            Resize::StretchBicubicRounded => {
                let levels = super::hwc_u8_to_chw(&bytes, img.height * img.width, 1.0);
                let chw = bicubic::resize_bicubic_aa_f32(&levels, size, (h, w));
                let n = h * w;
                (0..3 * n)
                    .map(|i| chw[(i % 3) * n + i / 3].clamp(0.0, 255.0).round_ties_even() as u8)
                    .collect()
            }
            Resize::KeepAspectPad | Resize::AreaThenBicubicF32 { .. } => {
                unreachable!("resized on the device")
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preprocess::PadAlign;

    /// The plan applied on the host, naively.
    fn apply(plan: &FramePlan, frame: &Tensor) -> Vec<f32> {
        let k = plan.key;
        let (h, w) = (k.height, k.width);
        let x: Vec<f32> = match k.bytes {
            true => frame.raw_bytes().iter().map(|&b| f32::from(b)).collect(),
            false => frame.to_vec_f32().unwrap(),
        };
        let (oh, ow) = plan.out;
        let mut out = vec![0f32; 3 * oh * ow];
        for c in 0..3 {
            let px = |y: usize, x_: usize| plan.scale[c] * x[(y * w + x_) * 3 + c];
            for y in 0..oh {
                for xo in 0..ow {
                    let v = match &plan.resize {
                        None => px(y, xo) + plan.offset[c],
                        Some((rows, cols)) => {
                            let mut acc = 0f64;
                            for i in 0..h {
                                for j in 0..w {
                                    let wt = rows[y * h + i] * cols[xo * w + j];
                                    acc += f64::from(wt) * f64::from(px(i, j));
                                }
                            }
                            acc as f32 + plan.offset[(c * oh + y) * ow + xo]
                        }
                    };
                    out[(c * oh + y) * ow + xo] = v;
                }
            }
        }
        out
    }

    /// A frame over the limit is resized on the host, to [0, 1] floats at the model's size.
    #[test]
    fn frames_over_the_limit_are_resized_on_the_host() {
        let cam = CameraInput::square(
            8,
            Resize::KeepAspectPad,
            0.0,
            PadAlign::BottomRight,
            PixelMap::MinusOneToOne,
        );
        let img = image(2161, 3840, true);
        let (key, plan, err) = through_plan(&cam, &img);
        let want = FrameKey {
            height: 8,
            width: 8,
            bytes: false,
        };
        assert_eq!(key, want);
        assert!(plan.resize.is_none());
        assert!(err < 1e-6, "{err}");
    }

    /// `img` through its frame and plan: the key, the plan, and the max error against the
    /// host reference's pixels.
    fn through_plan(cam: &CameraInput, img: &Image) -> (FrameKey, FramePlan, f32) {
        let (key, frame) = cam.frame(img).unwrap();
        let plan = cam.frame_plan(key);
        let (got, want) = (apply(&plan, &frame), cam.pixels(img).unwrap());
        let err = (got.iter().zip(&want))
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        (key, plan, err)
    }

    fn image(h: usize, w: usize, bytes: bool) -> Image {
        let v = (0..h * w * 3).map(|i| ((i * 37 + i / 7) % 256) as u8);
        let data = match bytes {
            true => ImageData::RgbU8(v.collect()),
            false => ImageData::RgbF32(v.map(|b| f32::from(b) / 255.0).collect()),
        };
        Image {
            height: h,
            width: w,
            data,
        }
    }

    /// Every resize kind, through its plan, gives the host reference's pixels, for frames
    /// smaller, larger, of odd sizes and of the model's size, bytes and floats.
    #[test]
    fn plans_match_the_host_reference() {
        let mean_std = PixelMap::IMAGENET;
        let kinds = [
            (
                Resize::KeepAspectPad,
                0.0,
                PadAlign::BottomRight,
                PixelMap::MinusOneToOne,
            ),
            (Resize::KeepAspectPad, 0.3, PadAlign::Center, mean_std),
            (
                Resize::AreaThenBicubicF32 { area: None },
                0.0,
                PadAlign::Center,
                mean_std,
            ),
            (
                Resize::AreaThenBicubicF32 {
                    area: Some((9, 11)),
                },
                0.0,
                PadAlign::Center,
                PixelMap::MinusOneToOne,
            ),
            (Resize::StretchBicubicU8, 0.0, PadAlign::Center, mean_std),
            (
                Resize::StretchBicubicRounded,
                0.0,
                PadAlign::Center,
                mean_std,
            ),
        ];
        for (resize, pad, align, pixels) in kinds {
            let cam = CameraInput {
                height: 12,
                width: 10,
                resize,
                pad,
                align,
                pixels,
            };
            for (h, w) in [(12, 10), (7, 13), (25, 19), (12, 31), (1, 1)] {
                for bytes in [true, false] {
                    let img = image(h, w, bytes);
                    let (key, plan, err) = through_plan(&cam, &img);
                    assert_eq!(key, cam.frame_key(&img));
                    assert!(
                        err < 2e-5,
                        "{resize:?} {h}x{w} bytes {bytes}: max error {err}"
                    );
                    let area = matches!(resize, Resize::AreaThenBicubicF32 { area: Some(_) });
                    if (h, w) == (12, 10) && !area {
                        assert!(
                            plan.resize.is_none(),
                            "{resize:?}: the identity at the model's size"
                        );
                    }
                }
            }
        }
    }
}
