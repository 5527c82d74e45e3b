//! Turning a request into model inputs on the host, apart from any graph: camera frames
//! resized, padded and mapped to the tower's value range, states normalised and actions
//! unnormalised with the checkpoint's statistics.

pub mod actions;
pub mod area;
pub mod bicubic;
pub mod frames;
pub mod image;
pub mod normalize;

pub use frames::{FrameKey, FramePlan};
pub use image::PadAlign;
pub use normalize::{embodiments, state_values, Normalizer};

use crate::policy::Image;
use crate::Result;
use image::{resize_with_pad, to_chw_unit};

/// How a tower wants its pixels, from [0, 1].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum PixelMap {
    /// `2x - 1` (SigLIP, PaliGemma, SmolVLM).
    #[default]
    MinusOneToOne,
    /// `(x - mean[c]) / std[c]` per channel (ImageNet statistics for DINOv2, TurboVLA).
    MeanStd { mean: [f32; 3], std: [f32; 3] },
}

impl PixelMap {
    /// ImageNet's channel statistics.
    pub const IMAGENET: PixelMap = PixelMap::MeanStd {
        mean: [0.485, 0.456, 0.406],
        std: [0.229, 0.224, 0.225],
    };

    /// The map `(x - mean[c]) / std[c]`: [`PixelMap::MinusOneToOne`] where that is what it
    /// computes (mean and std 0.5: the same values, bit for bit).
    pub fn from_mean_std(mean: [f32; 3], std: [f32; 3]) -> PixelMap {
        match mean == [0.5; 3] && std == [0.5; 3] {
            true => PixelMap::MinusOneToOne,
            false => PixelMap::MeanStd { mean, std },
        }
    }

    /// Its per-channel mean and std.
    pub fn mean_std(self) -> ([f32; 3], [f32; 3]) {
        match self {
            PixelMap::MinusOneToOne => ([0.5; 3], [0.5; 3]),
            PixelMap::MeanStd { mean, std } => (mean, std),
        }
    }

    fn apply(self, channel: usize, x: f32) -> f32 {
        match self {
            PixelMap::MinusOneToOne => x * 2.0 - 1.0,
            PixelMap::MeanStd { mean, std } => (x - mean[channel]) / std[channel],
        }
    }
}

/// How a frame becomes `height x width`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Resize {
    /// Bilinear (`F.interpolate`) keeping the aspect ratio, then padded (`pad`, `align`):
    /// SmolVLA, pi0, pi0.5.
    #[default]
    KeepAspectPad,
    /// Stretched with torchvision's anti-aliased bicubic on uint8 ([`bicubic`]; float frames
    /// are rounded to bytes first): GR00T's Eagle processor.
    StretchBicubicU8,
    /// Stretched with Pillow's `Image.resize(BICUBIC)` on bytes ([`bicubic::FixedPoint::Pillow`];
    /// the identity at the model's size): Prismatic's processor (`resize-naive`, OpenVLA-OFT
    /// and VLA-Adapter).
    StretchBicubicPillow,
    /// GR00T N1.6 / N1.7: with `letterbox` (N1.6) first [`area::letterbox`] (black bars to a
    /// square), then [`area::gr00t_frame`] (OpenCV area resizes to the shortest edge `edge`
    /// around a centre crop of `crop_fraction`), then the anti-aliased bicubic on bytes to the
    /// model's size (the processor's `smart_resize`, which the converter computed for the
    /// checkpoint's camera shape), rounding as `fixed` says: Pillow's for N1.6 (Eagle's
    /// `fetch_image`), torchvision's for N1.7 (lerobot's processor).
    Gr00tFrame {
        edge: usize,
        crop_fraction: f64,
        fixed: bicubic::FixedPoint,
        letterbox: bool,
    },
    /// VLA-JEPA: the [0, 1] frame area-averaged to `area` (`F.interpolate(mode="area")`)
    /// when set, then stretched with the float anti-aliased bicubic (the Qwen3-VL processor
    /// on float input) to the model's size.
    AreaThenBicubicF32 { area: Option<(usize, usize)> },
    /// Stretched with the float anti-aliased bicubic on the byte values, then clamped and
    /// rounded (half to even) back to bytes: torchvision's v1 `resize` on a uint8 tensor
    /// (Evo-1). Torch's own float kernel rounds a few values (0.01-0.1 %) one level apart
    /// from this one, depending on its build.
    StretchBicubicRounded,
}

/// One tower's camera preprocessing: resize into `height x width` ([`Resize`]), map the
/// values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CameraInput {
    pub height: usize,
    pub width: usize,
    pub resize: Resize,
    /// Padding value in [0, 1] units (the references pad before mapping the range).
    pub pad: f32,
    pub align: PadAlign,
    pub pixels: PixelMap,
}

impl CameraInput {
    /// A square input of side `size`.
    pub fn square(
        size: usize,
        resize: Resize,
        pad: f32,
        align: PadAlign,
        pixels: PixelMap,
    ) -> Self {
        CameraInput {
            height: size,
            width: size,
            resize,
            pad,
            align,
            pixels,
        }
    }

    /// One camera view as a `[3, height, width]` model input.
    pub fn pixels(&self, img: &Image) -> Result<Vec<f32>> {
        let (h, w) = (self.height, self.width);
        let mut out = self.resized_unit(img)?;
        for (c, plane) in out.chunks_mut(h * w).enumerate() {
            for v in plane {
                *v = self.pixels.apply(c, *v);
            }
        }
        Ok(out)
    }

    /// One camera view resized to `[3, height, width]` in [0, 1], before the value map.
    pub(super) fn resized_unit(&self, img: &Image) -> Result<Vec<f32>> {
        let (h, w) = (self.height, self.width);
        Ok(match self.resize {
            Resize::KeepAspectPad => {
                let unit = to_chw_unit(img)?;
                resize_with_pad(&unit, img.height, img.width, h, w, self.pad, self.align)
            }
            Resize::AreaThenBicubicF32 { area } => {
                let mut size = (img.height, img.width);
                let mut unit = to_chw_unit(img)?;
                if let Some(a) = area.filter(|&a| a != size) {
                    unit = area::adaptive_avg_f32(&unit, size, a);
                    size = a;
                }
                bicubic::resize_bicubic_aa_f32(&unit, size, (h, w))
            }
            Resize::StretchBicubicU8
            | Resize::StretchBicubicPillow
            | Resize::Gr00tFrame { .. }
            | Resize::StretchBicubicRounded => hwc_u8_to_chw(&self.host_bytes(img)?, h * w, 255.0),
        })
    }
}

/// CHW planes of `n` HWC RGB bytes, each divided by `div` (255: `[0, 1]`).
pub(crate) fn hwc_u8_to_chw(bytes: &[u8], n: usize, div: f32) -> Vec<f32> {
    let mut out = vec![0f32; 3 * n];
    for (i, px) in bytes.chunks(3).enumerate() {
        for (c, &b) in px.iter().enumerate() {
            out[c * n + i] = f32::from(b) / div;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::ImageData;

    #[test]
    fn pixel_maps_follow_their_formulas() {
        let img = Image {
            height: 1,
            width: 1,
            data: ImageData::RgbF32(vec![0.0, 0.5, 1.0]),
        };
        let cam =
            |pixels| CameraInput::square(1, Resize::KeepAspectPad, 0.0, PadAlign::Center, pixels);
        assert_eq!(
            cam(PixelMap::MinusOneToOne).pixels(&img).unwrap(),
            vec![-1.0, 0.0, 1.0]
        );
        let got = cam(PixelMap::IMAGENET).pixels(&img).unwrap();
        let want = [-0.485 / 0.229, (0.5 - 0.456) / 0.224, (1.0 - 0.406) / 0.225];
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{got:?}");
        }
    }
}
