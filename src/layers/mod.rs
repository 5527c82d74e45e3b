//! Building blocks over [`GraphBuilder`]: each adds the nodes of one layer, naming its
//! weights by a prefix (`<prefix>.weight`, `<prefix>.bias`). Nothing here knows a model.

use crate::graph::{AttentionMask, GraphBuilder, NodeId};
use crate::ops::{RopeConfig, RopeMode};
use crate::Result;

/// `x @ W^T (+ b)` with `<prefix>.weight` `[out, in]` and, when `bias`, `<prefix>.bias`.
pub fn linear(g: &mut GraphBuilder, x: NodeId, prefix: &str, bias: bool) -> Result<NodeId> {
    let w = g.weight(&format!("{prefix}.weight"))?;
    let y = g.matmul(x, w)?;
    if !bias {
        return Ok(y);
    }
    let b = g.weight(&format!("{prefix}.bias"))?;
    g.add(y, b)
}

/// RMSNorm with gain `<prefix>.weight` (Llama style: no offset).
pub fn rms_norm(g: &mut GraphBuilder, x: NodeId, prefix: &str, eps: f32) -> Result<NodeId> {
    let w = g.weight(&format!("{prefix}.weight"))?;
    g.rms_norm(x, w, eps, 0.0)
}

pub fn layer_norm(g: &mut GraphBuilder, x: NodeId, prefix: &str, eps: f32) -> Result<NodeId> {
    let w = g.weight(&format!("{prefix}.weight"))?;
    let b = g.weight(&format!("{prefix}.bias"))?;
    g.layer_norm(x, w, b, eps)
}

/// `down(silu(gate(x)) * up(x))`, bias-free (Llama/SmolLM/Gemma-style FFN).
pub fn swiglu_ffn(g: &mut GraphBuilder, x: NodeId, prefix: &str) -> Result<NodeId> {
    let gate = linear(g, x, &format!("{prefix}.ffn_gate"), false)?;
    let up = linear(g, x, &format!("{prefix}.ffn_up"), false)?;
    let act = g.silu(gate);
    let h = g.mul(act, up)?;
    linear(g, h, &format!("{prefix}.ffn_down"), false)
}

/// `fc2(gelu_tanh(fc1(x)))` with biases (ViT-style MLP).
pub fn gelu_mlp(g: &mut GraphBuilder, x: NodeId, prefix: &str) -> Result<NodeId> {
    let h = linear(g, x, &format!("{prefix}.fc1"), true)?;
    let h = g.gelu_tanh(h);
    linear(g, h, &format!("{prefix}.fc2"), true)
}

/// `[S, H * D]` -> `[S, H, D]`.
pub fn split_heads(g: &mut GraphBuilder, x: NodeId, heads: usize, head_dim: usize) -> Result<NodeId> {
    let s = g.shape(x)[0];
    g.reshape(x, &[s, heads, head_dim])
}

/// `[S, H, D]` <-> `[H, S, D]`.
pub fn swap_seq_heads(g: &mut GraphBuilder, x: NodeId) -> Result<NodeId> {
    g.permute(x, &[1, 0, 2])
}

/// Attention over `[S, H, D]` projections: returns `[Sq, Hq * Dv]`.
pub fn attend(
    g: &mut GraphBuilder,
    q: NodeId,
    k: NodeId,
    v: NodeId,
    mask: Option<NodeId>,
) -> Result<NodeId> {
    let (q, k, v) = (swap_seq_heads(g, q)?, swap_seq_heads(g, k)?, swap_seq_heads(g, v)?);
    let kind = if mask.is_some() { AttentionMask::Allowed } else { AttentionMask::None };
    let o = g.attention(q, k, v, kind, mask, None)?;
    let o = swap_seq_heads(g, o)?;
    let (s, h, d) = (g.shape(o)[0], g.shape(o)[1], g.shape(o)[2]);
    g.reshape(o, &[s, h * d])
}

/// Rotary embedding over the halves of each head (`rotate_half`, GPT-NeoX layout) on
/// `[S, H, D]`, at the positions in `positions` `[S]`.
pub fn rope_neox(g: &mut GraphBuilder, x: NodeId, positions: NodeId, theta: f32) -> Result<NodeId> {
    g.rope(x, positions, RopeConfig::new(RopeMode::Neox, theta))
}
