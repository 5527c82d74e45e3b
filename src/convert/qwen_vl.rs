//! A Qwen3-VL backbone inside a policy checkpoint (GR00T N1.7, VLA-JEPA): its sizes from the
//! Qwen3-VL folder's `config.json` and `preprocessor_config.json`, the frame size the
//! processor makes of a camera, the name map with the tied embeddings and the unused final
//! norm, and the tensors written derived (patch embedding, position table).

use super::{ckpt_err, qwen, Json, Safetensors, Tensors};
use crate::gguf::{GgmlType, GgufWriter};
use crate::layers::GatedActivation;
use crate::modules::decoder::{DecoderConfig, LmConfig};
use crate::modules::qwen_text::MropeConfig;
use crate::modules::qwen_vision::QwenVisionConfig;
use crate::preprocess::PixelMap;
use crate::Result;

/// The backbone's config, `lm.n_layers` = the layers the checkpoint stores.
pub struct Backbone {
    pub vision: QwenVisionConfig,
    pub lm: LmConfig,
    pub attn: DecoderConfig,
    pub mrope: MropeConfig,
    pub image_token: usize,
}

/// Qwen2-VL's `smart_resize` with factor `f`: sides rounded to multiples of `f` (half to
/// even), scaled down or up to fit `[min_pixels, max_pixels]`.
pub fn smart_resize(
    h: usize,
    w: usize,
    f: usize,
    min_pixels: usize,
    max_pixels: usize,
) -> (usize, usize) {
    let (hf, wf, ff) = (h as f64, w as f64, f as f64);
    let mut hb = ((hf / ff).round_ties_even() * ff) as usize;
    let mut wb = ((wf / ff).round_ties_even() * ff) as usize;
    if hb * wb > max_pixels {
        let beta = (hf * wf / max_pixels as f64).sqrt();
        hb = f.max(((hf / beta / ff).floor() * ff) as usize);
        wb = f.max(((wf / beta / ff).floor() * ff) as usize);
    } else if hb * wb < min_pixels {
        let beta = (min_pixels as f64 / (hf * wf)).sqrt();
        hb = ((hf * beta / ff).ceil() * ff) as usize;
        wb = ((wf * beta / ff).ceil() * ff) as usize;
    }
    (hb, wb)
}

/// The backbone of `qwen_cfg` (a Qwen3-VL `config.json`) whose tower sees frames of `frame`
/// pixels after the processor `image_proc` (`preprocessor_config.json`: the pixel bounds)
/// resizes them; `n_layers` language-model layers.
pub fn backbone(
    qwen_cfg: &Json,
    image_proc: &Json,
    frame: (usize, usize),
    n_layers: usize,
) -> Result<Backbone> {
    let v = qwen_cfg.obj("vision_config")?;
    let t = qwen_cfg.obj("text_config")?;
    let rope = t
        .obj("rope_parameters")
        .or_else(|_| t.obj("rope_scaling"))?;
    let rope_theta = rope.f64("rope_theta").or_else(|_| t.f64("rope_theta"))?;
    let sections: Vec<usize> = rope
        .get("mrope_section")
        .and_then(|s| s.as_array())
        .map(|s| {
            s.iter()
                .filter_map(|x| x.as_u64().map(|x| x as usize))
                .collect()
        })
        .unwrap_or_default();
    if sections.len() != 3 || !rope.bool_or("mrope_interleaved", true) {
        return Err(ckpt_err(
            qwen_cfg.path,
            "text_config: expected an interleaved mrope_section of 3 values",
        ));
    }
    if v.usize("temporal_patch_size")? != 2 {
        return Err(ckpt_err(
            qwen_cfg.path,
            "temporal_patch_size != 2: not supported",
        ));
    }
    let (patch, merge) = (v.usize("patch_size")?, v.usize("spatial_merge_size")?);
    let size = image_proc.get("size");
    let pixels = |new: &str, old: &str| -> Result<usize> {
        size.and_then(|s| s.get(new))
            .or_else(|| image_proc.get(old))
            .and_then(|x| x.as_u64())
            .map(|x| x as usize)
            .ok_or_else(|| ckpt_err(image_proc.path, format!("no size.{new} or {old}")))
    };
    let bounds = (
        pixels("shortest_edge", "min_pixels")?,
        pixels("longest_edge", "max_pixels")?,
    );
    let (image_h, image_w) = smart_resize(frame.0, frame.1, patch * merge, bounds.0, bounds.1);
    Ok(Backbone {
        vision: QwenVisionConfig {
            hidden: v.usize("hidden_size")?,
            layers: v.usize("depth")?,
            heads: v.usize("num_heads")?,
            inter: v.usize("intermediate_size")?,
            image_h,
            image_w,
            patch_size: patch,
            merge,
            out: v.usize("out_hidden_size")?,
            deepstack: v
                .get("deepstack_visual_indexes")
                .and_then(|d| d.as_array())
                .map(|d| {
                    d.iter()
                        .filter_map(|x| x.as_u64().map(|x| x as usize))
                        .collect()
                })
                .unwrap_or_default(),
        },
        lm: LmConfig {
            hidden: t.usize("hidden_size")?,
            n_layers,
            inter: t.usize("intermediate_size")?,
            vocab_size: t.usize("vocab_size")?,
        },
        attn: DecoderConfig {
            q_heads: t.usize("num_attention_heads")?,
            kv_heads: t.usize("num_key_value_heads")?,
            head_dim: t.usize("head_dim")?,
            rope_theta: rope_theta as f32,
            norm_eps: t.f64("rms_norm_eps")? as f32,
            ffn: GatedActivation::Silu,
            qk_norm: true,
            ..Default::default()
        },
        mrope: MropeConfig {
            sections: [sections[0], sections[1], sections[2]],
        },
        image_token: qwen_cfg.usize("image_token_id")?,
    })
}

/// The processor's pixel normalisation of [0, 1] values (`image_mean`, `image_std`;
/// `do_normalize` false: none). Its rescale step is not read: lerobot hands it frames already
/// in [0, 1] with `do_rescale` off (VLA-JEPA's `qwen_interface.py`).
pub fn pixel_map(image_proc: &Json) -> Result<PixelMap> {
    let normalize = image_proc.get("do_normalize").and_then(|v| v.as_bool());
    if normalize == Some(false) {
        return Ok(PixelMap::from_mean_std([0.0; 3], [1.0; 3]));
    }
    let three = |key: &str| -> Result<[f32; 3]> {
        let v: Vec<f32> = image_proc
            .get(key)
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_f64())
                    .map(|x| x as f32)
                    .collect()
            })
            .unwrap_or_default();
        <[f32; 3]>::try_from(v).map_err(|v| {
            ckpt_err(
                image_proc.path,
                format!("{key}: {v:?}, expected 3 numbers (one per channel)"),
            )
        })
    };
    Ok(PixelMap::from_mean_std(
        three("image_mean")?,
        three("image_std")?,
    ))
}

/// Rows of the token embedding table stored under `pre` (`model.language_model.embed_tokens`,
/// or the tied `lm_head`): the vocabulary the model reads, which exceeds the config's
/// `vocab_size` when lerobot grew the tokenizer (`resize_token_embeddings`).
pub fn table_rows(st: &Safetensors, pre: &str) -> Result<usize> {
    let embed = format!("{pre}model.language_model.embed_tokens.weight");
    let name = match st.contains(&embed) {
        true => embed,
        false => format!("{pre}lm_head.weight"),
    };
    Ok(st.config_shape(&name, 2)?[0])
}

/// The backbone's tensors under `pre` (`…backbone.model.` for N1.7: `model.visual.`,
/// `model.language_model.`, `lm_head.weight`) copied as they are: our name -> the
/// checkpoint's, without the final norm (the policies read the features before it) and with
/// the tied embeddings from `lm_head` when `embed_tokens` is not stored. Also the checkpoint
/// names and prefixes that are known and not copied, for [`super::check_coverage`].
pub fn name_map(
    st: &Safetensors,
    vision: &QwenVisionConfig,
    n_layers: usize,
    pre: &str,
    notes: &mut Vec<String>,
) -> (Vec<(String, String)>, Vec<String>, Vec<String>) {
    let vit = format!("{pre}model.visual.");
    let lm = format!("{pre}model.language_model.");
    let mut map = qwen::vision_name_map(vision, &vit, "vit");
    map.extend(qwen::lm_name_map(&lm, n_layers));
    map.retain(|(ours, _)| ours != "vlm.output_norm.weight");
    let tied = format!("{pre}lm_head.weight");
    if let Some(e) = map.iter_mut().find(|(ours, _)| ours == "token_embd.weight") {
        if !st.contains(&e.1) && st.contains(&tied) {
            e.1 = tied.clone();
            notes.push("token embeddings from lm_head.weight (tied)".into());
        }
    }
    let unused = vec![tied, format!("{lm}norm.weight")];
    let derived = vec![format!("{vit}patch_embed."), format!("{vit}pos_embed.")];
    (map, unused, derived)
}

/// Writes `tensors` ([`super::write_tensors`]), then the derived tensors
/// ([`qwen::vision_derived`]) of the tower `vision` under the checkpoint prefix `pre`.
pub(crate) fn write(
    w: &mut GgufWriter,
    st: &Safetensors,
    mut tensors: Tensors<String>,
    (vision, pre): (&QwenVisionConfig, &str),
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<()> {
    let extra = qwen::vision_derived(st, vision, &format!("{pre}model.visual."), "vit")?;
    (tensors.shapes).retain(|(n, _)| !extra.iter().any(|(e, _, _)| e == n));
    let dtype = tensors.dtype;
    super::write_tensors(w, st, tensors, |_, _| {}, progress)?;
    for (name, shape, vals) in extra {
        let ty = match super::takes_float_dtype(&name, &shape) {
            true => dtype,
            false => GgmlType::F32,
        };
        w.add_f32(name, ty, &super::ggml_dims(&shape), &vals)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smart_resize_rounds_to_the_factor_and_fits_the_pixel_bounds() {
        assert_eq!(smart_resize(64, 97, 32, 4096, 1 << 20), (64, 96));
        assert_eq!(smart_resize(256, 256, 32, 65536, 1 << 24), (256, 256));
        // Too few pixels: scaled up; too many: scaled down.
        assert_eq!(smart_resize(40, 40, 32, 4096, 1 << 20), (64, 64));
        assert_eq!(smart_resize(1000, 1000, 32, 1024, 512 * 512), (512, 512));
    }
}
