//! Decoder-LM layers (Llama / SmolLM2 / Gemma style: pre-RMSNorm, GQA attention with rotary
//! positions, a gated FFN), split so an action expert can reuse a layer's pieces with its
//! keys and values coming from elsewhere.
//!
//! Weights under `<prefix>.blk.{i}.`: `attn_norm`, `attn_q`, `attn_k`, `attn_v`, `attn_o`,
//! `ffn_norm`, `ffn_gate`, `ffn_up`, `ffn_down`. A layer conditioned by adaRMS (pi0.5's
//! expert) has `ada_attn_norm` / `ada_ffn_norm` (weight and bias) in place of the two norm
//! gains, and gates both residual branches.

use crate::graph::{GraphBuilder, NodeId};
use crate::layers::{
    ada_rms_norm, attend, gated_ffn, linear, rms_norm, rope_neox, split_heads, GatedActivation,
};
use crate::Result;

#[derive(Clone, Debug, PartialEq)]
pub struct DecoderConfig {
    pub q_heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub rope_theta: f32,
    pub norm_eps: f32,
    /// SwiGLU (Llama, SmolLM2) or GeGLU with tanh GELU (Gemma).
    pub ffn: GatedActivation,
}

pub fn layer_prefix(stack: &str, i: usize) -> String {
    format!("{stack}.blk.{i}")
}

/// One layer: where its weights live and, for an adaRMS layer, its condition `[1, C]`.
#[derive(Clone, Debug)]
pub struct Layer {
    pub prefix: String,
    pub cond: Option<NodeId>,
}

impl Layer {
    pub fn new(stack: &str, i: usize) -> Self {
        Layer {
            prefix: layer_prefix(stack, i),
            cond: None,
        }
    }

    pub fn conditioned(stack: &str, i: usize, cond: Option<NodeId>) -> Self {
        Layer {
            prefix: layer_prefix(stack, i),
            cond,
        }
    }

    /// The `which` (`attn` or `ffn`) norm of `x`, and the residual gate of an adaRMS layer.
    fn norm(
        &self,
        g: &mut GraphBuilder,
        x: NodeId,
        which: &str,
        eps: f32,
    ) -> Result<(NodeId, Option<NodeId>)> {
        match self.cond {
            None => Ok((
                rms_norm(g, x, &format!("{}.{which}_norm", self.prefix), eps)?,
                None,
            )),
            Some(c) => {
                let (y, gate) =
                    ada_rms_norm(g, x, c, &format!("{}.ada_{which}_norm", self.prefix), eps)?;
                Ok((y, Some(gate)))
            }
        }
    }
}

/// The tensors of layer `prefix` with their row-major shapes: `width` wide, keys and
/// values projected from `kv_in` features, FFN `inter` wide; adaRMS norms conditioned on
/// `cond_dim` features when given.
pub fn layer_tensor_shapes(
    prefix: &str,
    width: usize,
    kv_in: usize,
    inter: usize,
    cfg: &DecoderConfig,
    cond_dim: Option<usize>,
) -> Vec<(String, Vec<usize>)> {
    let (qd, kvd) = (cfg.q_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim);
    let mut t: Vec<(String, Vec<usize>)> = Vec::new();
    let norm = |t: &mut Vec<(String, Vec<usize>)>, which: &str| match cond_dim {
        None => t.push((format!("{prefix}.{which}_norm.weight"), vec![width])),
        Some(c) => {
            t.push((
                format!("{prefix}.ada_{which}_norm.weight"),
                vec![3 * width, c],
            ));
            t.push((format!("{prefix}.ada_{which}_norm.bias"), vec![3 * width]));
        }
    };
    norm(&mut t, "attn");
    t.push((format!("{prefix}.attn_q.weight"), vec![qd, width]));
    t.push((format!("{prefix}.attn_k.weight"), vec![kvd, kv_in]));
    t.push((format!("{prefix}.attn_v.weight"), vec![kvd, kv_in]));
    t.push((format!("{prefix}.attn_o.weight"), vec![width, qd]));
    norm(&mut t, "ffn");
    t.push((format!("{prefix}.ffn_gate.weight"), vec![inter, width]));
    t.push((format!("{prefix}.ffn_up.weight"), vec![inter, width]));
    t.push((format!("{prefix}.ffn_down.weight"), vec![width, inter]));
    t
}

/// A bias-free projection `<prefix>.<name>` of `x` `[S, in]`, split to `[S, heads, head_dim]`.
pub fn project_heads(
    g: &mut GraphBuilder,
    x: NodeId,
    prefix: &str,
    name: &str,
    heads: usize,
    head_dim: usize,
) -> Result<NodeId> {
    let y = linear(g, x, &format!("{prefix}.{name}"), false)?;
    split_heads(g, y, heads, head_dim)
}

pub fn rotate(
    g: &mut GraphBuilder,
    x: NodeId,
    positions: NodeId,
    cfg: &DecoderConfig,
) -> Result<NodeId> {
    rope_neox(g, x, positions, cfg.rope_theta)
}

/// The attention norm of `x` `[S, width]`, its query `[S, q_heads, head_dim]` (not yet
/// rotated) and, for an adaRMS layer, the attention residual's gate. Keys and values are
/// projected from the returned norm.
pub fn norm_and_query(
    g: &mut GraphBuilder,
    x: NodeId,
    layer: &Layer,
    cfg: &DecoderConfig,
) -> Result<(NodeId, NodeId, Option<NodeId>)> {
    let (normed, gate) = layer.norm(g, x, "attn", cfg.norm_eps)?;
    let q = project_heads(
        g,
        normed,
        &layer.prefix,
        "attn_q",
        cfg.q_heads,
        cfg.head_dim,
    )?;
    Ok((normed, q, gate))
}

/// Keys and values `[S, kv_heads, head_dim]` projected from `normed`, keys rotated.
pub fn rotated_kv(
    g: &mut GraphBuilder,
    normed: NodeId,
    positions: NodeId,
    prefix: &str,
    cfg: &DecoderConfig,
) -> Result<(NodeId, NodeId)> {
    let k = project_heads(g, normed, prefix, "attn_k", cfg.kv_heads, cfg.head_dim)?;
    let v = project_heads(g, normed, prefix, "attn_v", cfg.kv_heads, cfg.head_dim)?;
    Ok((rotate(g, k, positions, cfg)?, v))
}

/// `x + y`, or `x + y * gate` for an adaRMS layer.
fn residual(g: &mut GraphBuilder, x: NodeId, y: NodeId, gate: Option<NodeId>) -> Result<NodeId> {
    let y = match gate {
        Some(gate) => g.mul(y, gate)?,
        None => y,
    };
    g.add(x, y)
}

/// Attention of `q` over `k`/`v` (`[S, H, D]`), output projection and residual (gated by
/// `attn_gate` from [`norm_and_query`]), then the FFN block with its residual.
#[allow(clippy::too_many_arguments)]
pub fn finish_layer(
    g: &mut GraphBuilder,
    x: NodeId,
    q: NodeId,
    k: NodeId,
    v: NodeId,
    mask: Option<NodeId>,
    attn_gate: Option<NodeId>,
    layer: &Layer,
    cfg: &DecoderConfig,
) -> Result<NodeId> {
    let o = attend(g, q, k, v, mask)?;
    let o = linear(g, o, &format!("{}.attn_o", layer.prefix), false)?;
    let x = residual(g, x, o, attn_gate)?;
    let (h, ffn_gate) = layer.norm(g, x, "ffn", cfg.norm_eps)?;
    let h = gated_ffn(g, h, &layer.prefix, cfg.ffn)?;
    residual(g, x, h, ffn_gate)
}
