//! Decoder-LM layers (Llama / SmolLM2 style: pre-RMSNorm, GQA attention with rotary
//! positions, SwiGLU FFN), split so an action expert can reuse a layer's pieces with its
//! keys and values coming from elsewhere.
//!
//! Weights under `<prefix>.blk.{i}.`: `attn_norm`, `attn_q`, `attn_k`, `attn_v`, `attn_o`,
//! `ffn_norm`, `ffn_gate`, `ffn_up`, `ffn_down`.

use crate::graph::{GraphBuilder, NodeId};
use crate::layers::{attend, linear, rms_norm, rope_neox, split_heads, swiglu_ffn};
use crate::Result;

#[derive(Clone, Debug, PartialEq)]
pub struct AttentionConfig {
    pub q_heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub rope_theta: f32,
    pub norm_eps: f32,
}

pub fn layer_prefix(stack: &str, i: usize) -> String {
    format!("{stack}.blk.{i}")
}

/// A bias-free projection `<prefix>.<name>` of `x` `[S, in]`, split to `[S, heads, head_dim]`.
pub fn project_heads(g: &mut GraphBuilder, x: NodeId, prefix: &str, name: &str, heads: usize, head_dim: usize) -> Result<NodeId> {
    let y = linear(g, x, &format!("{prefix}.{name}"), false)?;
    split_heads(g, y, heads, head_dim)
}

pub fn rotate(g: &mut GraphBuilder, x: NodeId, positions: NodeId, cfg: &AttentionConfig) -> Result<NodeId> {
    rope_neox(g, x, positions, cfg.rope_theta)
}

/// The attention norm of `x` `[S, width]` and its query `[S, q_heads, head_dim]`, not yet
/// rotated; returns `(normed, q)` so keys and values can be projected from `normed` too.
pub fn norm_and_query(g: &mut GraphBuilder, x: NodeId, prefix: &str, cfg: &AttentionConfig) -> Result<(NodeId, NodeId)> {
    let normed = rms_norm(g, x, &format!("{prefix}.attn_norm"), cfg.norm_eps)?;
    let q = project_heads(g, normed, prefix, "attn_q", cfg.q_heads, cfg.head_dim)?;
    Ok((normed, q))
}

/// Keys and values `[S, kv_heads, head_dim]` projected from `normed`, keys rotated.
pub fn rotated_kv(g: &mut GraphBuilder, normed: NodeId, positions: NodeId, prefix: &str, cfg: &AttentionConfig) -> Result<(NodeId, NodeId)> {
    let k = project_heads(g, normed, prefix, "attn_k", cfg.kv_heads, cfg.head_dim)?;
    let v = project_heads(g, normed, prefix, "attn_v", cfg.kv_heads, cfg.head_dim)?;
    Ok((rotate(g, k, positions, cfg)?, v))
}

/// Attention of `q` over `k`/`v` (`[S, H, D]`), output projection and residual, then the
/// FFN block with its residual.
#[allow(clippy::too_many_arguments)]
pub fn finish_layer(
    g: &mut GraphBuilder,
    residual: NodeId,
    q: NodeId,
    k: NodeId,
    v: NodeId,
    mask: Option<NodeId>,
    prefix: &str,
    cfg: &AttentionConfig,
) -> Result<NodeId> {
    let o = attend(g, q, k, v, mask)?;
    let o = linear(g, o, &format!("{prefix}.attn_o"), false)?;
    let x = g.add(residual, o)?;
    let h = rms_norm(g, x, &format!("{prefix}.ffn_norm"), cfg.norm_eps)?;
    let h = swiglu_ffn(g, h, prefix)?;
    g.add(x, h)
}
