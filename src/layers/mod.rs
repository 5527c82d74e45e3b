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

/// RMSNorm with gain `<prefix>.weight` (Llama style: no offset; Gemma's `1 + w` gains are
/// stored with the 1 added, as llama.cpp's converter does).
pub fn rms_norm(g: &mut GraphBuilder, x: NodeId, prefix: &str, eps: f32) -> Result<NodeId> {
    let w = g.weight(&format!("{prefix}.weight"))?;
    g.rms_norm(x, w, eps, 0.0)
}

pub fn layer_norm(g: &mut GraphBuilder, x: NodeId, prefix: &str, eps: f32) -> Result<NodeId> {
    let w = g.weight(&format!("{prefix}.weight"))?;
    let b = g.weight(&format!("{prefix}.bias"))?;
    g.layer_norm(x, w, b, eps)
}

/// The activation of a gated FFN's gate branch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GatedActivation {
    /// SwiGLU (Llama, SmolLM2).
    Silu,
    /// GeGLU with the tanh GELU (Gemma's `gelu_pytorch_tanh`).
    GeluTanh,
}

/// `down(act(gate(x)) * up(x))`, bias-free (Llama/SmolLM/Gemma-style FFN), weights
/// `<prefix>.ffn_{gate,up,down}`.
pub fn gated_ffn(
    g: &mut GraphBuilder,
    x: NodeId,
    prefix: &str,
    act: GatedActivation,
) -> Result<NodeId> {
    let gate = linear(g, x, &format!("{prefix}.ffn_gate"), false)?;
    let up = linear(g, x, &format!("{prefix}.ffn_up"), false)?;
    let act = match act {
        GatedActivation::Silu => g.silu(gate),
        GatedActivation::GeluTanh => g.gelu_tanh(gate),
    };
    let h = g.mul(act, up)?;
    linear(g, h, &format!("{prefix}.ffn_down"), false)
}

/// adaRMS (pi0.5): `rms(x) * (1 + scale) + shift`, where `[scale, shift, gate]` is the
/// linear map `<prefix>` (with bias) of the condition `cond` `[1, C]`. Returns the norm and
/// `gate` `[width]`, which scales the residual branch the norm feeds.
pub fn ada_rms_norm(
    g: &mut GraphBuilder,
    x: NodeId,
    cond: NodeId,
    prefix: &str,
    eps: f32,
) -> Result<(NodeId, NodeId)> {
    let width = g.shape(x).last().copied().unwrap_or(0);
    let m = linear(g, cond, prefix, true)?;
    let m = g.reshape(m, &[3 * width])?;
    let scale = g.slice(m, 0, 0, width)?;
    let shift = g.slice(m, 0, width, width)?;
    let gate = g.slice(m, 0, 2 * width, width)?;
    let y = g.rms_norm(x, scale, eps, 1.0)?;
    Ok((g.add(y, shift)?, gate))
}

/// `fc2(gelu_tanh(fc1(x)))` with biases (ViT-style MLP).
pub fn gelu_mlp(g: &mut GraphBuilder, x: NodeId, prefix: &str) -> Result<NodeId> {
    let h = linear(g, x, &format!("{prefix}.fc1"), true)?;
    let h = g.gelu_tanh(h);
    linear(g, h, &format!("{prefix}.fc2"), true)
}

/// `[S, H * D]` -> `[S, H, D]`.
pub fn split_heads(
    g: &mut GraphBuilder,
    x: NodeId,
    heads: usize,
    head_dim: usize,
) -> Result<NodeId> {
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
    let (q, k, v) = (
        swap_seq_heads(g, q)?,
        swap_seq_heads(g, k)?,
        swap_seq_heads(g, v)?,
    );
    let kind = if mask.is_some() {
        AttentionMask::Allowed
    } else {
        AttentionMask::None
    };
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
