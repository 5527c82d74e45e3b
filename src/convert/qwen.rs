//! Qwen checkpoints' tensor names: the Qwen3 / Qwen3-VL language model's, and the Qwen3-VL
//! vision tower's (transformers' `Qwen3VLVisionModel` names under `prefix`) as
//! [`crate::modules::qwen_vision`] reads them: the Conv3d kernel summed
//! over its two temporal slices (a still image repeats its frame), and the learned position
//! table resampled to the fixed patch grid as the reference's `fast_pos_embed_interpolate`
//! does (bilinear over `linspace(0, n - 1, side)`, in f32), row-major.

use super::{ckpt_err, Safetensors};
use crate::modules::qwen_vision::{resample_positions, still_frame_kernel, QwenVisionConfig};
use crate::Result;

/// One tensor for the GGUF: our name, row-major shape, values.
pub type Converted = (String, Vec<usize>, Vec<f32>);

/// The vision tower: our name -> the checkpoint's, for the tensors copied as they are.
pub fn vision_name_map(cfg: &QwenVisionConfig, prefix: &str, ours: &str) -> Vec<(String, String)> {
    let mut m = Vec::new();
    let mut wb = |a: String, b: String| {
        for p in ["weight", "bias"] {
            m.push((format!("{a}.{p}"), format!("{prefix}{b}.{p}")));
        }
    };
    for i in 0..cfg.layers {
        for (a, b) in [
            ("ln1", "norm1"),
            ("ln2", "norm2"),
            ("attn_qkv", "attn.qkv"),
            ("attn_o", "attn.proj"),
            ("fc1", "mlp.linear_fc1"),
            ("fc2", "mlp.linear_fc2"),
        ] {
            wb(format!("{ours}.blk.{i}.{a}"), format!("blocks.{i}.{b}"));
        }
    }
    for (a, b) in [
        ("norm", "norm"),
        ("fc1", "linear_fc1"),
        ("fc2", "linear_fc2"),
    ] {
        wb(format!("{ours}.merger.{a}"), format!("merger.{b}"));
        for j in 0..cfg.deepstack.len() {
            let (a, b) = (
                format!("{ours}.deepstack.{j}.{a}"),
                format!("deepstack_merger_list.{j}.{b}"),
            );
            wb(a, b);
        }
    }
    m
}

/// The patch embedding (temporal slices summed) and the resampled position table.
pub fn vision_derived(
    st: &Safetensors,
    cfg: &QwenVisionConfig,
    prefix: &str,
    ours: &str,
) -> Result<Vec<Converted>> {
    let (d, p, (rows, cols)) = (cfg.hidden, cfg.patch_size, cfg.grid());
    let name = format!("{prefix}patch_embed.proj.weight");
    let shape = st.require_shape(&name)?.to_vec();
    if shape != [d, 3, 2, p, p] {
        return Err(ckpt_err(
            st.path(),
            format!("{name} has shape {shape:?}, expected [{d}, 3, 2, {p}, {p}]"),
        ));
    }
    let kernel = still_frame_kernel(&st.f32(&name)?, p);
    let bias = st.f32(&format!("{prefix}patch_embed.proj.bias"))?;
    let table_name = format!("{prefix}pos_embed.weight");
    let n = st.config_shape(&table_name, 2)?[0];
    let per_side = (n as f64).sqrt() as usize;
    if per_side * per_side != n || per_side == 0 {
        return Err(ckpt_err(
            st.path(),
            format!("{table_name}: {n} rows, not a square table"),
        ));
    }
    let table = st.f32(&table_name)?;
    let pos = resample_positions(&table, per_side, d, (rows, cols));
    Ok(vec![
        (
            format!("{ours}.patch_embd.weight"),
            vec![d, 3, p, p],
            kernel,
        ),
        (format!("{ours}.patch_embd.bias"), vec![d], bias),
        (format!("{ours}.pos_embd.weight"), vec![rows * cols, d], pos),
    ])
}

/// A Qwen3 decoder's layers under `prefix` (`...model.`): our name -> the checkpoint's, for
/// `n_layers` layers (QK-norm), the final norm and the token embeddings.
pub fn lm_name_map(prefix: &str, n_layers: usize) -> Vec<(String, String)> {
    let mut m = vec![
        (
            "token_embd.weight".to_owned(),
            format!("{prefix}embed_tokens.weight"),
        ),
        (
            "vlm.output_norm.weight".to_owned(),
            format!("{prefix}norm.weight"),
        ),
    ];
    for i in 0..n_layers {
        let (ours, theirs) = (format!("vlm.blk.{i}"), format!("{prefix}layers.{i}"));
        for (a, b) in [
            ("attn_q", "self_attn.q_proj"),
            ("attn_k", "self_attn.k_proj"),
            ("attn_v", "self_attn.v_proj"),
            ("attn_o", "self_attn.o_proj"),
            ("attn_q_norm", "self_attn.q_norm"),
            ("attn_k_norm", "self_attn.k_norm"),
            ("ffn_gate", "mlp.gate_proj"),
            ("ffn_up", "mlp.up_proj"),
            ("ffn_down", "mlp.down_proj"),
            ("attn_norm", "input_layernorm"),
            ("ffn_norm", "post_attention_layernorm"),
        ] {
            m.push((format!("{ours}.{a}.weight"), format!("{theirs}.{b}.weight")));
        }
    }
    m
}
