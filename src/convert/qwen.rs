//! Qwen checkpoints' tensor names: the Qwen3 / Qwen3-VL language model's, and the Qwen3-VL
//! vision tower's (transformers' `Qwen3VLVisionModel` names under `prefix`) as
//! [`crate::modules::qwen_vision`] reads them: the Conv3d kernel summed
//! over its two temporal slices (a still image repeats its frame), and the learned position
//! table resampled to the fixed patch grid as the reference's `fast_pos_embed_interpolate`
//! does (bilinear over `linspace(0, n - 1, side)`, in f32), row-major.

use super::{ckpt_err, Safetensors};
use crate::modules::qwen_vision::QwenVisionConfig;
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
    let k = st.f32(&name)?;
    let kernel: Vec<f32> = k
        .chunks(2 * p * p)
        .flat_map(|c| (0..p * p).map(move |i| c[i] + c[p * p + i]))
        .collect();
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
    let pos = resample(&table, per_side, d, rows, cols);
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

/// torch's float `linspace(0, n - 1, steps)`: from both ends towards the middle.
fn linspace(n: usize, steps: usize) -> Vec<f32> {
    let end = (n - 1) as f32;
    if steps == 1 {
        return vec![0.0];
    }
    let step = end / (steps - 1) as f32;
    (0..steps)
        .map(|i| match i < steps / 2 {
            true => step * i as f32,
            false => end - step * (steps - 1 - i) as f32,
        })
        .collect()
}

/// `table` `[n * n, d]` resampled bilinearly to `rows x cols` rows, row-major.
fn resample(table: &[f32], n: usize, d: usize, rows: usize, cols: usize) -> Vec<f32> {
    let axis = |len: usize| {
        let idx = linspace(n, len);
        let lo: Vec<usize> = idx.iter().map(|&x| x as usize).collect();
        let hi: Vec<usize> = lo.iter().map(|&i| (i + 1).min(n - 1)).collect();
        let frac: Vec<f32> = idx.iter().zip(&lo).map(|(&x, &i)| x - i as f32).collect();
        (lo, hi, frac)
    };
    let ((rlo, rhi, rf), (clo, chi, cf)) = (axis(rows), axis(cols));
    let mut out = Vec::with_capacity(rows * cols * d);
    for r in 0..rows {
        for c in 0..cols {
            let (dh, dw) = (rf[r], cf[c]);
            let taps = [
                (rlo[r] * n + clo[c], (1.0 - dh) * (1.0 - dw)),
                (rlo[r] * n + chi[c], (1.0 - dh) * dw),
                (rhi[r] * n + clo[c], dh * (1.0 - dw)),
                (rhi[r] * n + chi[c], dh * dw),
            ];
            for e in 0..d {
                let v = taps
                    .iter()
                    .fold(0f32, |acc, &(row, w)| acc + table[row * d + e] * w);
                out.push(v);
            }
        }
    }
    out
}
