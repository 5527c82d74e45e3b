//! Evo-1 files (`convert_evo1_to_gguf.py`, from the official checkpoint's
//! `mp_rank_00_model_states.pt`): the language model's and the head's sizes under other keys,
//! InternViT's and the head's fused attention inputs (`attn_qkv`, `attn_in`: split where they
//! lie, [`GgufFile::split_outer`]), other names for a few tensors, the positional tables with
//! their leading 1 (and the action table's rows past the chunk), the statistics zero-padded
//! to 24 (narrowed to the real dimensions), no prompt template: clients send the whole
//! sequence, `<IMG_CONTEXT>` slots included, or none (then every view's `<img>`, image
//! tokens and `</img>` go first), and hide absent views with `attention_mask`.
//!
//! Keys: `lm_hidden`, `lm_layers_used`, `lm_q_heads`, `lm_kv_heads`, `lm_head_dim`,
//! `lm_rope_theta` (f64), `lm_rms_eps` (ours `hidden`, `n_layers`, `n_q_heads`,
//! `n_kv_heads`, `head_dim`, `rope_theta`, `norm_eps`; vla.cpp's `norm_eps` is the
//! statistics' epsilon); `embed_dim`, `dit_heads`, `dit_layers`, `mlp_head_hidden` (ours
//! `head_embed`, `head_heads`, `head_layers`, `head_hidden`); `horizon`, `per_action_dim`,
//! `num_inference_timesteps`, `max_text_length` (the whole sequence's bound),
//! `img_context_token_id` (ours `chunk_size`, `max_action_dim`, `num_steps`,
//! `tokenizer_max_length`, `image_token_id`); `n_images` is also the prompt's views (ours
//! `max_views`); the state encoder's widths come from its first layer.

use crate::gguf::{GgufFile, Value};
use crate::models::evo1::ARCH;
use crate::{Error, Result};

use super::u32_of;

fn key(k: &str) -> String {
    format!("{ARCH}.{k}")
}

/// vla.cpp's key -> ours, both u32 (besides the language model's, [`super::lm_keys`]).
const RENAMED: [(&str, &str); 10] = [
    ("embed_dim", "head_embed"),
    ("dit_heads", "head_heads"),
    ("dit_layers", "head_layers"),
    ("mlp_head_hidden", "head_hidden"),
    ("horizon", "chunk_size"),
    ("per_action_dim", "max_action_dim"),
    ("num_inference_timesteps", "num_steps"),
    ("max_text_length", "tokenizer_max_length"),
    ("img_context_token_id", "image_token_id"),
    ("n_images", "max_views"),
];

/// Per layer: vla.cpp's name -> ours (`{i}` the layer).
const VIT_LAYER: [(&str, &str); 6] = [
    ("norm1.weight", "ln1.weight"),
    ("norm1.bias", "ln1.bias"),
    ("norm2.weight", "ln2.weight"),
    ("norm2.bias", "ln2.bias"),
    ("ls1", "ls1.weight"),
    ("ls2", "ls2.weight"),
];

pub(super) fn evo1(file: &mut GgufFile) -> Result<()> {
    super::lm_keys(file, ARCH, &RENAMED)?;
    check_fixed(file)?;
    // the state encoder's input and hidden widths (vla.cpp pads the state to its input)
    let fc1 = file.tensor_info("aex.state_enc.fc1.weight")?.dims.clone();
    let [inp, hidden] = fc1[..] else {
        return Err(Error::InvalidArgument(
            "aex.state_enc.fc1.weight: expected a matrix".into(),
        ));
    };
    file.set_metadata(key("max_state_dim"), Value::U32(u32_of("state", inp)?));
    file.set_metadata(
        key("head_state_hidden"),
        Value::U32(u32_of("state", hidden)?),
    );
    tensors(file)?;
    for (what, real) in [("state", "real_state_dim"), ("action", "real_action_dim")] {
        let n = file.get_u64(&key(real))?;
        for stat in ["min", "max"] {
            file.narrow_outer(&format!("{what}_{stat}"), n)?;
        }
    }
    Ok(())
}

/// The sizes ours fixes or derives, as the file states them.
fn check_fixed(file: &GgufFile) -> Result<()> {
    let u = |k: &str| file.get_u64(&key(k));
    let refuse = |k: &str, v: String, want: String| {
        Err(Error::InvalidArgument(format!(
            "vla.cpp's {ARCH} file: {k} = {v}; vla-rs runs Evo-1 with {want} only"
        )))
    };
    if let Ok(eps) = file.get_f64(&key("proj_ln_eps")) {
        if eps as f32 != 1e-5 {
            return refuse("proj_ln_eps", eps.to_string(), "1e-5".into());
        }
    }
    let (size, patch) = (u("image_size")?, u("patch_size")?);
    let grid = size.checked_div(patch).unwrap_or(0);
    let tokens = u("num_image_token")?;
    if tokens != (grid / 2) * (grid / 2) {
        let want = ((grid / 2) * (grid / 2)).to_string();
        return refuse("num_image_token", tokens.to_string(), want);
    }
    let (horizon, per) = (u("horizon")?, u("per_action_dim")?);
    if u("action_dim")? != horizon * per {
        let want = format!("horizon x per_action_dim = {}", horizon * per);
        return refuse("action_dim", u("action_dim")?.to_string(), want);
    }
    Ok(())
}

fn tensors(file: &mut GgufFile) -> Result<()> {
    let chunk = file.get_u64(&key("horizon"))?;
    for i in 0..file.get_u64(&key("vit_layers"))? {
        let blk = format!("vit.blk.{i}");
        for (theirs, ours) in VIT_LAYER {
            file.rename_tensor(&format!("{blk}.{theirs}"), &format!("{blk}.{ours}"))?;
        }
        for p in ["weight", "bias"] {
            let from = format!("{blk}.attn_proj.{p}");
            file.rename_tensor(&from, &format!("{blk}.attn_o.{p}"))?;
            split_qkv(file, &format!("{blk}.attn_qkv"), &blk, p)?;
        }
    }
    for i in 0..file.get_u64(&key("dit_layers"))? {
        let blk = format!("aex.blk.{i}");
        for p in ["weight", "bias"] {
            let from = format!("{blk}.attn_out.{p}");
            file.rename_tensor(&from, &format!("{blk}.attn_o.{p}"))?;
            split_qkv(file, &format!("{blk}.attn_in"), &blk, p)?;
        }
    }
    for w in ["W1", "W2", "W3"] {
        for p in ["weight", "bias"] {
            let ours = format!("aex.action_enc.{w}.{p}");
            file.rename_tensor(&format!("aex.ae.{w}.{p}"), &ours)?;
        }
    }
    // tables stored with their leading 1 ([1, rows, width])
    let tables = [
        ("vit.class_embd", "vit.class_embd.weight", None),
        ("vit.pos_embd", "vit.pos_embd.weight", None),
        ("aex.ae.pos_enc", "aex.action_enc.pos.weight", Some(chunk)),
        ("aex.time_pos_enc", "aex.time_pos.weight", None),
    ];
    for (theirs, ours, rows) in tables {
        let dims = file.tensor_info(theirs)?.dims.clone();
        let kept: Vec<u64> = match dims.iter().rposition(|&d| d != 1) {
            Some(last) => dims[..=last].to_vec(),
            None => vec![1],
        };
        file.reshape_tensor(theirs, &kept)?;
        if let Some(rows) = rows.filter(|&r| kept.len() == 2 && kept[1] > r) {
            file.narrow_outer(theirs, rows)?;
        }
        file.rename_tensor(theirs, ours)?;
    }
    Ok(())
}

/// `{fused}.{p}` (q, k and v stacked by rows) as `{blk}.attn_{q,k,v}.{p}`.
fn split_qkv(file: &mut GgufFile, fused: &str, blk: &str, p: &str) -> Result<()> {
    let parts = ["q", "k", "v"].map(|x| format!("{blk}.attn_{x}.{p}"));
    file.split_outer(&format!("{fused}.{p}"), &parts)
}
