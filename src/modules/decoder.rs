//! Decoder-LM layers (Llama / SmolLM2 / Gemma / Qwen style: pre-RMSNorm, GQA attention with
//! rotary positions, a gated FFN), split so an action expert can reuse a layer's pieces with
//! its keys and values coming from elsewhere.
//!
//! Weights under `<prefix>.blk.{i}.`: `attn_norm`, `attn_q`, `attn_k`, `attn_v`, `attn_o`,
//! `ffn_norm`, `ffn_gate`, `ffn_up`, `ffn_down`; with [`DecoderConfig::qkv_bias`] the three
//! projections have biases, with [`DecoderConfig::qk_norm`] queries and keys are
//! RMS-normalised per head (`attn_q_norm`, `attn_k_norm`, Qwen3) before the rotation. A layer
//! conditioned by adaRMS (pi0.5's expert) has `ada_attn_norm` / `ada_ffn_norm` (weight and
//! bias) in place of the two norm gains, and gates both residual branches.

use crate::config::limits::MAX_LAYERS;
use crate::config::{bounded, first_failing, positive, Keys, Section};
use crate::graph::{GraphBuilder, NodeId};
use crate::layers::{
    ada_rms_norm, attend, gated_ffn, linear, linear_add, rms_norm, rope_neox, rope_tables,
    splice_rows, split_heads, width, GatedActivation, ADA_GATE_PART,
};
use crate::Result;

/// Attention and FFN options of a decoder stack. Keys: `n_q_heads`, `n_kv_heads`,
/// `head_dim`, `rope_theta`, `norm_eps`; the FFN activation, QK-norm and qkv bias are the
/// arch's.
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderConfig {
    pub q_heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub rope_theta: f32,
    pub norm_eps: f32,
    /// SwiGLU (Llama, SmolLM2, Qwen) or GeGLU with tanh GELU (Gemma).
    pub ffn: GatedActivation,
    /// Per-head RMSNorm of queries and keys before RoPE (Qwen3).
    pub qk_norm: bool,
    /// Biases on the query, key and value projections (Qwen2.5).
    pub qkv_bias: bool,
}

impl Default for DecoderConfig {
    fn default() -> Self {
        DecoderConfig {
            q_heads: 0,
            kv_heads: 0,
            head_dim: 0,
            rope_theta: 0.0,
            norm_eps: 0.0,
            ffn: GatedActivation::Silu,
            qk_norm: false,
            qkv_bias: false,
        }
    }
}

impl Section for DecoderConfig {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        k.usize("n_q_heads", &mut self.q_heads)?;
        k.usize("n_kv_heads", &mut self.kv_heads)?;
        k.usize("head_dim", &mut self.head_dim)?;
        k.f32("rope_theta", &mut self.rope_theta)?;
        k.f32("norm_eps", &mut self.norm_eps)
    }

    fn check(&self) -> std::result::Result<(), String> {
        positive("head_dim", self.head_dim)?;
        first_failing(&[
            (
                self.kv_heads > 0 && self.q_heads.is_multiple_of(self.kv_heads),
                "n_q_heads must be a multiple of n_kv_heads",
            ),
            (self.head_dim.is_multiple_of(2), "head_dim must be even"),
            // ggml asserts eps >= 0; a negative one is NaN on the other backends.
            (
                self.norm_eps >= 0.0 && self.norm_eps.is_finite(),
                "norm_eps must be finite and >= 0",
            ),
            (
                self.rope_theta > 0.0 && self.rope_theta.is_finite(),
                "rope_theta must be positive",
            ),
        ])
    }
}

/// The language model's sizes. Keys: `hidden`, `n_layers`, `lm_inter`, `vocab_size`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LmConfig {
    pub hidden: usize,
    pub n_layers: usize,
    /// FFN width.
    pub inter: usize,
    pub vocab_size: usize,
}

impl Section for LmConfig {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        k.usize("hidden", &mut self.hidden)?;
        k.usize("n_layers", &mut self.n_layers)?;
        k.usize("lm_inter", &mut self.inter)?;
        k.usize("vocab_size", &mut self.vocab_size)
    }

    fn check(&self) -> std::result::Result<(), String> {
        positive("hidden", self.hidden)?;
        positive("lm_inter", self.inter)?;
        bounded("n_layers", self.n_layers, 1, MAX_LAYERS)?;
        positive("vocab_size", self.vocab_size)
    }
}

/// An action expert's sizes (it has the LM's depth and heads). Keys: `expert_h`,
/// `expert_inter`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExpertConfig {
    pub hidden: usize,
    pub inter: usize,
}

impl Section for ExpertConfig {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        k.usize("expert_h", &mut self.hidden)?;
        k.usize("expert_inter", &mut self.inter)
    }

    fn check(&self) -> std::result::Result<(), String> {
        positive("expert_inter", self.inter)?;
        positive("expert_h", self.hidden)?;
        // The sinusoidal time embedding is expert_h wide: half sines, half cosines.
        first_failing(&[(self.hidden.is_multiple_of(2), "expert_h must be even")])
    }
}

pub fn layer_prefix(stack: &str, i: usize) -> String {
    format!("{stack}.blk.{i}")
}

/// One layer: where its weights live, its FFN width and, for an adaRMS layer, its
/// condition `[1, C]`.
#[derive(Clone, Debug)]
pub struct Layer {
    pub prefix: String,
    pub inter: usize,
    pub cond: Option<NodeId>,
}

impl Layer {
    pub fn new(stack: &str, i: usize, inter: usize) -> Self {
        Layer::conditioned(stack, i, inter, None)
    }

    pub fn conditioned(stack: &str, i: usize, inter: usize, cond: Option<NodeId>) -> Self {
        Layer {
            prefix: layer_prefix(stack, i),
            inter,
            cond,
        }
    }

    /// The `which` (`attn` or `ffn`) norm of `x`, and for an adaRMS layer its modulation
    /// vector, whose gate scales the residual ([`residual`]).
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

/// The projection `<prefix>.<name>` of `x` `[S, in]` to `heads` heads, with a bias when
/// `bias`, split to `[S, heads, head_dim]`.
pub fn project_heads(
    g: &mut GraphBuilder,
    x: NodeId,
    prefix: &str,
    name: &str,
    heads: usize,
    cfg: &DecoderConfig,
) -> Result<NodeId> {
    let y = linear(
        g,
        x,
        &format!("{prefix}.{name}"),
        heads * cfg.head_dim,
        cfg.qkv_bias,
    )?;
    split_heads(g, y, heads, cfg.head_dim)
}

/// [`project_heads`], then with [`DecoderConfig::qk_norm`] the per-head RMSNorm
/// `<prefix>.<name>_norm` (`[head_dim]`): for queries and keys.
fn project_qk(
    g: &mut GraphBuilder,
    x: NodeId,
    prefix: &str,
    name: &str,
    heads: usize,
    cfg: &DecoderConfig,
) -> Result<NodeId> {
    let y = project_heads(g, x, prefix, name, heads, cfg)?;
    match cfg.qk_norm {
        true => rms_norm(g, y, &format!("{prefix}.{name}_norm"), cfg.norm_eps),
        false => Ok(y),
    }
}

/// How a decoder's queries and keys are rotated.
#[derive(Clone, Copy, Debug)]
pub enum Rotary {
    /// RoPE (`rotate_half` layout, base `rope_theta`) at the positions `[S]` of this node.
    Positions(NodeId),
    /// Precomputed `cos` and `sin` tables `[S, 1, head_dim]` (multimodal RoPE: Qwen3-VL).
    Tables { cos: NodeId, sin: NodeId },
}

impl From<NodeId> for Rotary {
    fn from(positions: NodeId) -> Self {
        Rotary::Positions(positions)
    }
}

pub fn rotate(
    g: &mut GraphBuilder,
    x: NodeId,
    rotary: impl Into<Rotary>,
    cfg: &DecoderConfig,
) -> Result<NodeId> {
    match rotary.into() {
        Rotary::Positions(p) => rope_neox(g, x, p, cfg.rope_theta),
        Rotary::Tables { cos, sin } => rope_tables(g, x, cos, sin),
    }
}

/// The attention norm of `x` `[S, width]`, its query `[S, q_heads, head_dim]` (not yet
/// rotated) and, for an adaRMS layer, the modulation vector holding the attention
/// residual's gate. Keys and values are projected from the returned norm.
pub fn norm_and_query(
    g: &mut GraphBuilder,
    x: NodeId,
    layer: &Layer,
    cfg: &DecoderConfig,
) -> Result<(NodeId, NodeId, Option<NodeId>)> {
    let (normed, gate) = layer.norm(g, x, "attn", cfg.norm_eps)?;
    let q = project_qk(g, normed, &layer.prefix, "attn_q", cfg.q_heads, cfg)?;
    Ok((normed, q, gate))
}

/// Keys and values `[S, kv_heads, head_dim]` projected from `normed`, keys rotated.
pub fn rotated_kv(
    g: &mut GraphBuilder,
    normed: NodeId,
    positions: impl Into<Rotary>,
    prefix: &str,
    cfg: &DecoderConfig,
) -> Result<(NodeId, NodeId)> {
    let k = project_qk(g, normed, prefix, "attn_k", cfg.kv_heads, cfg)?;
    let v = project_heads(g, normed, prefix, "attn_v", cfg.kv_heads, cfg)?;
    Ok((rotate(g, k, positions, cfg)?, v))
}

/// `x + y`, or for an adaRMS layer `x + y * gate`, the gate read in place from the
/// modulation vector `m` (one op).
fn residual(g: &mut GraphBuilder, x: NodeId, y: NodeId, m: Option<NodeId>) -> Result<NodeId> {
    match m {
        Some(m) => g.add_gated(x, y, m, ADA_GATE_PART),
        None => g.add(x, y),
    }
}

/// Attention of `q` over the `(k, v)` parts `kv` (`[S, H, D]`; see [`attend`]), output
/// projection and residual (gated by `attn_gate` from [`norm_and_query`]), then the FFN
/// block with its residual.
#[allow(clippy::too_many_arguments)]
pub fn finish_layer(
    g: &mut GraphBuilder,
    x: NodeId,
    q: NodeId,
    kv: &[(NodeId, NodeId)],
    mask: Option<NodeId>,
    attn_gate: Option<NodeId>,
    layer: &Layer,
    cfg: &DecoderConfig,
) -> Result<NodeId> {
    let o = attend(g, q, kv, mask)?;
    let attn_o = format!("{}.attn_o", layer.prefix);
    // An ungated residual is added inside the projection's op (one dispatch, no pass).
    let x = match attn_gate {
        None => linear_add(g, o, &attn_o, width(g, x), x)?,
        Some(_) => {
            let o = linear(g, o, &attn_o, width(g, x), false)?;
            residual(g, x, o, attn_gate)?
        }
    };
    let (h, ffn_gate) = layer.norm(g, x, "ffn", cfg.norm_eps)?;
    match ffn_gate {
        None => gated_ffn(g, h, &layer.prefix, layer.inter, cfg.ffn, Some(x)),
        Some(_) => {
            let h = gated_ffn(g, h, &layer.prefix, layer.inter, cfg.ffn, None)?;
            residual(g, x, h, ffn_gate)
        }
    }
}

/// `n_layers` decoder layers `<stack>.blk.{i}` over `x` `[L, hidden]` under `mask`, rotated
/// by `rotary`; after layer `l`, `adds[l]`'s `(start, rows)` are added at their rows (Qwen3-VL's
/// deepstack features; `adds` may be shorter than the stack, or empty).
#[allow(clippy::too_many_arguments)]
pub fn decoder_stack(
    g: &mut GraphBuilder,
    mut x: NodeId,
    stack: &str,
    n_layers: usize,
    inter: usize,
    cfg: &DecoderConfig,
    rotary: Rotary,
    mask: Option<NodeId>,
    adds: &[Vec<(usize, NodeId)>],
) -> Result<NodeId> {
    for i in 0..n_layers {
        let layer = Layer::new(stack, i, inter);
        let (hn, q, _) = norm_and_query(g, x, &layer, cfg)?;
        let q = rotate(g, q, rotary, cfg)?;
        let (k, v) = rotated_kv(g, hn, rotary, &layer.prefix, cfg)?;
        x = finish_layer(g, x, q, &[(k, v)], mask, None, &layer, cfg)?;
        if let Some(rows) = adds.get(i) {
            x = splice_rows(g, x, rows, true)?;
        }
    }
    Ok(x)
}
