//! Turning a decoded [`PredictRequest`] into a [`vla::policy::Observation`], with every
//! check that can be made without running the model. Each refusal names the field.

use crate::proto::{Encoding, PredictRequest};
use crate::{Error, Result};
use vla::policy::{Image, ImageData, Observation, PolicyInfo};

/// Protocol limits (vla.cpp's): pixels per image side and camera views per request.
pub const MAX_IMAGE_SIDE: u32 = 8192;
pub const MAX_VIEWS: usize = 16;

pub fn observation(req: &PredictRequest, info: &PolicyInfo) -> Result<Observation> {
    if !req.precomputed_img_emb.is_empty() || req.precomputed_img_emb_n_views != 0 {
        return Err(Error::unsupported(
            "precomputed_img_emb is not supported by this server: send images",
        ));
    }
    let n = req.images.len();
    if n == 0 || n > MAX_VIEWS {
        return Err(Error::bad_request(format!(
            "images: {n} views, expected 1..={MAX_VIEWS}"
        )));
    }
    if n != info.n_images {
        return Err(Error::bad_request(format!(
            "images: {n} views, this model takes {}",
            info.n_images
        )));
    }
    let images = req
        .images
        .iter()
        .enumerate()
        .map(|(i, img)| image(img).map_err(|e| prefix(&format!("images[{i}]"), e)))
        .collect::<Result<Vec<_>>>()?;

    let prompt = match req.prompt.is_empty() {
        true => None,
        false => Some(
            String::from_utf8(req.prompt.clone())
                .map_err(|e| Error::bad_request(format!("prompt: not valid UTF-8 ({e})")))?,
        ),
    };
    let tokens = (!req.lang_tokens.is_empty()).then(|| req.lang_tokens.clone());
    match (&prompt, &tokens) {
        (None, None) => {
            return Err(Error::bad_request(
                "no instruction: set prompt (text) or lang_tokens",
            ))
        }
        (Some(_), Some(_)) => {
            return Err(Error::bad_request("set prompt or lang_tokens, not both"))
        }
        _ => {}
    }
    if ![info.state_dim, info.max_state_dim].contains(&req.state.len()) {
        return Err(Error::bad_request(format!(
            "state: {} values, expected {} (or {} zero-padded)",
            req.state.len(),
            info.state_dim,
            info.max_state_dim
        )));
    }
    finite("state", &req.state)?;
    let noise = match req.noise.is_empty() {
        true => None,
        false => {
            let want = info.chunk_size * info.max_action_dim;
            if req.noise.len() != want {
                return Err(Error::bad_request(format!(
                    "noise: {} values, expected {want} (chunk_size {} x max_action_dim {}) or none",
                    req.noise.len(),
                    info.chunk_size,
                    info.max_action_dim
                )));
            }
            finite("noise", &req.noise)?;
            Some(req.noise.clone())
        }
    };
    Ok(Observation {
        images,
        state: req.state.clone(),
        prompt,
        tokens,
        noise,
    })
}

fn prefix(what: &str, e: Error) -> Error {
    match e {
        Error::Request { code, message } => Error::Request {
            code,
            message: format!("{what}: {message}"),
        },
        other => other,
    }
}

fn finite(what: &str, v: &[f32]) -> Result<()> {
    match v.iter().position(|x| !x.is_finite()) {
        Some(i) => Err(Error::bad_request(format!("{what}[{i}] is {}", v[i]))),
        None => Ok(()),
    }
}

fn check_side(what: &str, side: u32) -> Result<usize> {
    if side == 0 || side > MAX_IMAGE_SIDE {
        return Err(Error::bad_request(format!(
            "{what} {side}: expected 1..={MAX_IMAGE_SIDE}"
        )));
    }
    Ok(side as usize)
}

fn image(img: &crate::proto::Image) -> Result<Image> {
    let encoding = Encoding::try_from(img.encoding).map_err(|_| {
        Error::bad_request(format!(
            "encoding {}: expected JPEG (0), RGB_U8 (1) or F32_RGB_01 (2)",
            img.encoding
        ))
    })?;
    if encoding == Encoding::Jpeg {
        return jpeg(img);
    }
    let (h, w) = (
        check_side("height", img.height)?,
        check_side("width", img.width)?,
    );
    let pixels = h * w * 3;
    match encoding {
        Encoding::RgbU8 => {
            expect_len(img.data.len(), pixels, "RGB_U8 (3 bytes a pixel)", h, w)?;
            Ok(Image {
                height: h,
                width: w,
                data: ImageData::RgbU8(img.data.clone()),
            })
        }
        _ => {
            expect_len(
                img.data.len(),
                pixels * 4,
                "F32_RGB_01 (12 bytes a pixel)",
                h,
                w,
            )?;
            let v: Vec<f32> = img
                .data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            if let Some(i) = v.iter().position(|x| !(0.0..=1.0).contains(x)) {
                return Err(Error::bad_request(format!(
                    "F32_RGB_01 value {} at {i} is outside [0, 1]",
                    v[i]
                )));
            }
            Ok(Image {
                height: h,
                width: w,
                data: ImageData::RgbF32(v),
            })
        }
    }
}

fn expect_len(got: usize, want: usize, what: &str, h: usize, w: usize) -> Result<()> {
    match got == want {
        true => Ok(()),
        false => Err(Error::bad_request(format!(
            "{got} data bytes, {what} at {h}x{w} needs {want}"
        ))),
    }
}

fn jpeg(img: &crate::proto::Image) -> Result<Image> {
    let bad = |e: jpeg_decoder::Error| Error::bad_request(format!("JPEG: {e}"));
    let mut dec = jpeg_decoder::Decoder::new(&img.data[..]);
    dec.read_info().map_err(bad)?;
    let meta = dec
        .info()
        .ok_or_else(|| Error::bad_request("JPEG: no frame header"))?;
    // Size checks before decoding, so a tiny file cannot declare a huge image.
    let (h, w) = (
        check_side("JPEG height", meta.height.into())?,
        check_side("JPEG width", meta.width.into())?,
    );
    for (field, declared, actual) in [("height", img.height, h), ("width", img.width, w)] {
        if declared != 0 && declared as usize != actual {
            return Err(Error::bad_request(format!(
                "{field} {declared}, but the JPEG is {actual}"
            )));
        }
    }
    let pixels = dec.decode().map_err(bad)?;
    let rgb = match meta.pixel_format {
        jpeg_decoder::PixelFormat::RGB24 => pixels,
        jpeg_decoder::PixelFormat::L8 => pixels.iter().flat_map(|&l| [l, l, l]).collect(),
        other => {
            return Err(Error::unsupported(format!(
                "JPEG pixel format {other:?}: send RGB or grayscale"
            )))
        }
    };
    expect_len(rgb.len(), h * w * 3, "decoded JPEG", h, w)?;
    Ok(Image {
        height: h,
        width: w,
        data: ImageData::RgbU8(rgb),
    })
}
