//! Turning a decoded [`PredictRequest`] into a [`vla::policy::Observation`], with every
//! check that can be made without running the model. Each refusal names the field.

use crate::proto::{Encoding, PredictRequest};
use crate::{Error, Result};
use vla::policy::{Image, ImageData, Observation, PolicyInfo};

/// Protocol limits (vla.cpp's): pixels per image side and camera views per request.
pub const MAX_IMAGE_SIDE: u32 = 8192;
pub const MAX_VIEWS: usize = 16;
/// Pixels of one JPEG (a 4K frame). A JPEG of a flat colour compresses thousands of times,
/// so this bounds what a small request can make the server decode and hold; raw images are
/// bounded by the bytes their sender pays for.
pub const MAX_JPEG_PIXELS: usize = 3840 * 2160;
/// Bytes of an instruction's text: far beyond any robot instruction, and leaving room for
/// what a model adds before tokenizing (pi0.5's state bins) under the tokenizer's limit.
pub const MAX_PROMPT_BYTES: usize = 32 << 10;
/// Encoded bytes of `lang_tokens`: 8192 ids (a model's most) of up to 5 bytes each, and more.
pub const MAX_TOKEN_BYTES: usize = 64 << 10;

/// Limits checked on the encoded message, before decoding it: decoding allocates more than
/// the bytes (an empty `Image` is 2 bytes on the wire and ~40 in memory), so a 512 MiB
/// message could otherwise cost gigabytes before any count is looked at.
pub fn check_encoded(payload: &[u8]) -> Result<()> {
    let malformed = |at: usize, why: &str| {
        Error::bad_request(format!(
            "malformed PredictRequest ({} bytes): {why} at byte {at}",
            payload.len()
        ))
    };
    let varint = |at: &mut usize| -> Result<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *payload
                .get(*at)
                .ok_or_else(|| malformed(*at, "truncated varint"))?;
            *at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(malformed(*at, "varint longer than 10 bytes"))
    };
    let (mut at, mut views, mut token_bytes) = (0, 0, 0);
    while at < payload.len() {
        let start = at;
        let key = varint(&mut at)?;
        let len = match key & 7 {
            0 => varint(&mut at).map(|_| 0)?,
            1 => 8,
            5 => 4,
            2 => usize::try_from(varint(&mut at)?).unwrap_or(usize::MAX),
            wire => return Err(malformed(start, &format!("wire type {wire}"))),
        };
        if len > payload.len() - at {
            return Err(malformed(start, "a field runs past the end"));
        }
        at += len;
        match key >> 3 {
            1 => views += 1,
            2 => token_bytes += at - start,
            _ => {}
        }
    }
    if views > MAX_VIEWS {
        return Err(Error::bad_request(format!(
            "images: {views} views in the encoded request, expected 1..={MAX_VIEWS}"
        )));
    }
    if token_bytes > MAX_TOKEN_BYTES {
        return Err(Error::bad_request(format!(
            "lang_tokens: {token_bytes} bytes encoded, at most {MAX_TOKEN_BYTES}"
        )));
    }
    Ok(())
}

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
    // a model over a window of steps (Octo) takes the last steps' views too, the earlier
    // steps then padding, as its reference's history wrapper pads an episode's first steps
    let steps = info.window.max(1);
    let per_step = info.n_images / steps;
    let given = match n == info.n_images {
        true => steps,
        false if steps > 1 && per_step > 0 && n.is_multiple_of(per_step) => n / per_step,
        false => {
            return Err(Error::bad_request(format!(
                "images: {n} views, this model takes {}",
                info.n_images
            )))
        }
    };
    let names = &info.camera_names[info.camera_names.len().min((steps - given) * per_step)..];
    let order = camera_order(&req.image_names, n, names)?;
    let images = order
        .iter()
        .map(|&i| image(&req.images[i]).map_err(|e| prefix(&format!("images[{i}]"), e)))
        .collect::<Result<Vec<_>>>()?;

    if req.prompt.len() > MAX_PROMPT_BYTES {
        return Err(Error::bad_request(format!(
            "prompt: {} bytes, at most {MAX_PROMPT_BYTES}",
            req.prompt.len()
        )));
    }
    let prompt = match req.prompt.is_empty() {
        true => None,
        false => Some(
            String::from_utf8(req.prompt.clone())
                .map_err(|e| Error::bad_request(format!("prompt: not valid UTF-8 ({e})")))?,
        ),
    };
    let (tokens, token_mask) = match req.attention_mask.is_empty() {
        true => (
            (!req.lang_tokens.is_empty()).then(|| req.lang_tokens.clone()),
            None,
        ),
        false => {
            let (tokens, mask) = unpadded(&req.lang_tokens, &req.attention_mask)?;
            (Some(tokens), mask)
        }
    };
    // neither: the model's instruction for none (FlowArch::missing_task)
    if prompt.is_some() && tokens.is_some() {
        return Err(Error::bad_request("set prompt or lang_tokens, not both"));
    }
    // the given steps' state (all of it for a model without a window)
    let (state_dim, max_state_dim) = (
        info.state_dim / steps * given,
        info.max_state_dim / steps * given,
    );
    if ![state_dim, max_state_dim].contains(&req.state.len()) {
        return Err(Error::bad_request(format!(
            "state: {} values, expected {state_dim} (or {max_state_dim} zero-padded)",
            req.state.len(),
        )));
    }
    finite("state", &req.state)?;
    let noise = match req.noise.is_empty() {
        true => None,
        false => {
            let [rows, cols] = info.noise_dims();
            if req.noise.len() != rows * cols {
                return Err(Error::bad_request(format!(
                    "noise: {} values, expected {} ({rows} x {cols}: noise_shape in INFO) or none",
                    req.noise.len(),
                    rows * cols
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
        token_mask,
    })
}

/// Which of the `n` sent images goes to each of the model's cameras: as sent without
/// `names`, else by name (`model`: the model's `camera_names` for the views sent, or their
/// part after `observation.images.`).
fn camera_order(names: &[String], n: usize, model: &[String]) -> Result<Vec<usize>> {
    if names.is_empty() {
        return Ok((0..n).collect());
    }
    if model.is_empty() {
        return Err(Error::bad_request(
            "image_names: this model's file keeps no camera names (convert it again with \
             vla-convert to keep them): send the images in the model's camera order, unnamed",
        ));
    }
    let short = |m: &str| {
        m.strip_prefix("observation.images.")
            .unwrap_or(m)
            .to_owned()
    };
    let mismatch = || {
        Error::bad_request(format!(
            "image_names {names:?} are not this model's cameras {model:?} (each once, in any \
             order; the part after observation.images. will do)"
        ))
    };
    if names.len() != n {
        return Err(mismatch());
    }
    let mut order = Vec::with_capacity(n);
    for m in model {
        let at = names
            .iter()
            .position(|g| g == m || *g == short(m))
            .ok_or_else(mismatch)?;
        if order.contains(&at) {
            return Err(mismatch());
        }
        order.push(at);
    }
    Ok(order)
}

/// The ids `attention_mask` marks as real: vla.cpp's `lang_tokens` up to the last one it
/// marks (the zeros after it: the padding the reference's tokenizer adds on the right, or
/// the mask's own, longer than the ids, as vla.cpp's Evo-1 client sends it), and, where it
/// hides ids among them (that client's absent camera views), which (`false`).
fn unpadded(tokens: &[i32], mask: &[u32]) -> Result<(Vec<i32>, Option<Vec<bool>>)> {
    if mask.len() < tokens.len() {
        return Err(Error::bad_request(format!(
            "attention_mask: {} values for {} lang_tokens",
            mask.len(),
            tokens.len()
        )));
    }
    if let Some(i) = mask.iter().position(|&m| m > 1) {
        return Err(Error::bad_request(format!(
            "attention_mask[{i}] is {}: expected 0 or 1",
            mask[i]
        )));
    }
    let Some(last) = mask.iter().rposition(|&m| m == 1) else {
        return Err(Error::bad_request(
            "attention_mask marks no id as real: send the instruction's ids, or none",
        ));
    };
    if last >= tokens.len() {
        return Err(Error::bad_request(format!(
            "attention_mask[{last}] is 1 past the {} lang_tokens",
            tokens.len()
        )));
    }
    let real = &mask[..=last];
    let hidden = real.contains(&0);
    let token_mask = hidden.then(|| real.iter().map(|&m| m == 1).collect());
    Ok((tokens[..=last].to_vec(), token_mask))
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
    if h * w > MAX_JPEG_PIXELS {
        return Err(Error::bad_request(format!(
            "JPEG: {w}x{h} is more than {MAX_JPEG_PIXELS} pixels (a 4K frame); send it smaller"
        )));
    }
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
