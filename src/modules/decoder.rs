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
use crate::graph::{AttentionMask, GraphBuilder, NodeId};
use crate::layers::{
    ada_rms_norm, attend, gated_ffn, linear, linear_add, rms_norm, rope_neox, rope_tables,
    splice_rows, split_heads, width, GatedActivation, Scope, ADA_GATE_PART,
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

/// A layer's attention input: the attention norm of `x` (keys and values are projected
/// from it), the query `[S, q_heads, head_dim]` and, for an adaRMS layer, the modulation
/// vector holding the attention residual's gate.
#[derive(Clone, Copy, Debug)]
pub struct Query {
    pub normed: NodeId,
    pub q: NodeId,
    pub gate: Option<NodeId>,
}

/// One decoder layer `<stack>.blk.{i}`: its weights' scope, the stack's options, its FFN
/// width and, for an adaRMS layer, its condition `[1, C]`.
#[derive(Clone, Debug)]
pub struct Layer<'c> {
    pub scope: Scope,
    pub cfg: &'c DecoderConfig,
    pub inter: usize,
    pub cond: Option<NodeId>,
}

impl<'c> Layer<'c> {
    pub fn new(stack: &str, i: usize, inter: usize, cfg: &'c DecoderConfig) -> Self {
        Layer {
            scope: Scope::new(stack).pp("blk").pp(i),
            cfg,
            inter,
            cond: None,
        }
    }

    /// This layer with adaRMS norms conditioned by `cond` (pi0.5's expert), or plain ones.
    pub fn conditioned(self, cond: Option<NodeId>) -> Self {
        Layer { cond, ..self }
    }

    /// The `which` (`attn` or `ffn`) norm of `x`, and for an adaRMS layer its modulation
    /// vector, whose gate scales the residual ([`residual`]).
    fn norm(
        &self,
        g: &mut GraphBuilder,
        x: NodeId,
        which: &str,
    ) -> Result<(NodeId, Option<NodeId>)> {
        let eps = self.cfg.norm_eps;
        match self.cond {
            None => Ok((
                rms_norm(g, x, &self.scope.pp(format!("{which}_norm")), eps)?,
                None,
            )),
            Some(c) => {
                let scope = self.scope.pp(format!("ada_{which}_norm"));
                let (y, gate) = ada_rms_norm(g, x, c, &scope, eps)?;
                Ok((y, Some(gate)))
            }
        }
    }

    /// The projection `name` of `x` `[S, in]` to `heads` heads, with a bias when the stack
    /// has qkv biases, split to `[S, heads, head_dim]`.
    pub fn project_heads(
        &self,
        g: &mut GraphBuilder,
        x: NodeId,
        name: &str,
        heads: usize,
    ) -> Result<NodeId> {
        let cfg = self.cfg;
        let y = linear(
            g,
            x,
            &self.scope.pp(name),
            heads * cfg.head_dim,
            cfg.qkv_bias,
        )?;
        split_heads(g, y, heads, cfg.head_dim)
    }

    /// [`Self::project_heads`], then with [`DecoderConfig::qk_norm`] the per-head RMSNorm
    /// `<name>_norm` (`[head_dim]`): for queries and keys.
    fn project_qk(
        &self,
        g: &mut GraphBuilder,
        x: NodeId,
        name: &str,
        heads: usize,
    ) -> Result<NodeId> {
        let y = self.project_heads(g, x, name, heads)?;
        match self.cfg.qk_norm {
            true => rms_norm(
                g,
                y,
                &self.scope.pp(format!("{name}_norm")),
                self.cfg.norm_eps,
            ),
            false => Ok(y),
        }
    }

    /// `x` `[S, H, D]` rotated at `rotary`.
    pub fn rotate(
        &self,
        g: &mut GraphBuilder,
        x: NodeId,
        rotary: impl Into<Rotary>,
    ) -> Result<NodeId> {
        match rotary.into() {
            Rotary::Positions(p) => rope_neox(g, x, p, self.cfg.rope_theta),
            Rotary::Tables { cos, sin } => rope_tables(g, x, cos, sin),
        }
    }

    /// The attention norm of `x` `[S, width]` and its query, not yet rotated.
    pub fn query(&self, g: &mut GraphBuilder, x: NodeId) -> Result<Query> {
        let (normed, gate) = self.norm(g, x, "attn")?;
        let q = self.project_qk(g, normed, "attn_q", self.cfg.q_heads)?;
        Ok(Query { normed, q, gate })
    }

    /// Keys and values `[S, kv_heads, head_dim]` projected from `normed`, keys rotated.
    pub fn rotated_kv(
        &self,
        g: &mut GraphBuilder,
        normed: NodeId,
        rotary: impl Into<Rotary>,
    ) -> Result<(NodeId, NodeId)> {
        let k = self.project_qk(g, normed, "attn_k", self.cfg.kv_heads)?;
        let v = self.project_heads(g, normed, "attn_v", self.cfg.kv_heads)?;
        Ok((self.rotate(g, k, rotary)?, v))
    }

    /// Attention of the query `q` (rotated) over the `(k, v)` parts `kv` (`[S, H, D]`; see
    /// [`attend`]) under `mask`, output projection and residual (gated by `q.gate`), then
    /// the FFN block with its residual.
    pub fn finish(
        &self,
        g: &mut GraphBuilder,
        x: NodeId,
        q: Query,
        kv: &[(NodeId, NodeId)],
        mask: Option<NodeId>,
    ) -> Result<NodeId> {
        let o = attend(g, q.q, kv, mask)?;
        self.finish_attended(g, x, o, q.gate)
    }

    /// [`Self::finish`] with a causal mask: query row `i` sees key rows `0..=i`.
    pub fn finish_causal(
        &self,
        g: &mut GraphBuilder,
        x: NodeId,
        q: Query,
        kv: &[(NodeId, NodeId)],
    ) -> Result<NodeId> {
        let o = g.attention(q.q, kv, AttentionMask::Causal, None, None)?;
        let (s, h, d) = (g.shape(o)[0], g.shape(o)[1], g.shape(o)[2]);
        let o = g.reshape(o, &[s, h * d])?;
        self.finish_attended(g, x, o, q.gate)
    }

    /// The attention's output `o` `[S, heads * head_dim]` projected and added to `x`, then
    /// the FFN block.
    fn finish_attended(
        &self,
        g: &mut GraphBuilder,
        x: NodeId,
        o: NodeId,
        gate: Option<NodeId>,
    ) -> Result<NodeId> {
        let attn_o = self.scope.pp("attn_o");
        // An ungated residual is added inside the projection's op (one dispatch, no pass).
        let x = match gate {
            None => linear_add(g, o, &attn_o, width(g, x), x)?,
            Some(_) => {
                let o = linear(g, o, &attn_o, width(g, x), false)?;
                residual(g, x, o, gate)?
            }
        };
        let (h, ffn_gate) = self.norm(g, x, "ffn")?;
        let ffn = self.cfg.ffn;
        match ffn_gate {
            None => gated_ffn(g, h, &self.scope, self.inter, ffn, Some(x)),
            Some(_) => {
                let h = gated_ffn(g, h, &self.scope, self.inter, ffn, None)?;
                residual(g, x, h, ffn_gate)
            }
        }
    }

    /// The whole layer over `x` attending to itself: query and keys rotated by `rotary`.
    pub fn forward(
        &self,
        g: &mut GraphBuilder,
        x: NodeId,
        rotary: Rotary,
        mask: Option<NodeId>,
    ) -> Result<NodeId> {
        let query = self.query(g, x)?;
        let q = self.rotate(g, query.q, rotary)?;
        let kv = self.rotated_kv(g, query.normed, rotary)?;
        self.finish(g, x, Query { q, ..query }, &[kv], mask)
    }
}

/// `x + y`, or for an adaRMS layer `x + y * gate`, the gate read in place from the
/// modulation vector `m` (one op).
fn residual(g: &mut GraphBuilder, x: NodeId, y: NodeId, m: Option<NodeId>) -> Result<NodeId> {
    match m {
        Some(m) => g.add_gated(x, y, m, ADA_GATE_PART),
        None => g.add(x, y),
    }
}

/// A stack of decoder layers `<stack>.blk.{i}`, `layers` deep with FFNs `inter` wide.
#[derive(Clone, Debug)]
pub struct DecoderStack<'c> {
    pub stack: &'c str,
    pub layers: usize,
    pub inter: usize,
    pub cfg: &'c DecoderConfig,
}

impl<'c> DecoderStack<'c> {
    pub fn layer(&self, i: usize) -> Layer<'c> {
        Layer::new(self.stack, i, self.inter, self.cfg)
    }

    /// The layers over `x` `[L, hidden]` under `mask`, rotated by `rotary`; after layer
    /// `l`, `adds[l]`'s `(start, rows)` are added at their rows (Qwen3-VL's deepstack
    /// features; `adds` may be shorter than the stack, or empty).
    pub fn forward(
        &self,
        g: &mut GraphBuilder,
        mut x: NodeId,
        rotary: Rotary,
        mask: Option<NodeId>,
        adds: &[Vec<(usize, NodeId)>],
    ) -> Result<NodeId> {
        for i in 0..self.layers {
            x = self.layer(i).forward(g, x, rotary, mask)?;
            if let Some(rows) = adds.get(i) {
                x = splice_rows(g, x, rows, true)?;
            }
        }
        Ok(x)
    }
}
