//! Diffusion-transformer action heads (GR00T's `DiT` and `SelfAttentionTransformer`, diffusers'
//! `BasicTransformerBlock`): pre-LayerNorm blocks of attention (self- or cross-) and a tanh-GELU
//! feed-forward, both with biases; in the DiT the first norm of every block is modulated by
//! the time embedding (adaLN), the second has no affine, and the output is modulated again
//! before the last projection.
//!
//! Weights, per block `<prefix>.{i}.`: `attn_{q,k,v,o}` (weight and bias), `ff0`, `ff2`, and
//! `adaln` (DiT: `[2 width, width]`, scale then shift) or `norm1` / `norm3` (affine
//! LayerNorms, the VL self-attention blocks). DiT-level: `time_emb.l{1,2}`,
//! `proj_out{1,2}`.

use crate::config::limits::MAX_LAYERS;
use crate::config::{bounded, positive, Keys, Section};
use crate::graph::{GraphBuilder, NodeId};
use crate::layers::{
    attend, layer_norm, linear, modulated_layer_norm, plain_layer_norm, split_heads, width, Scope,
};
use crate::Result;

/// diffusers' LayerNorm epsilon in the blocks.
const BLOCK_EPS: f32 = 1e-5;
/// The DiT's output norm epsilon.
const OUT_EPS: f32 = 1e-6;
/// The width of the sinusoidal timestep projection (diffusers `Timesteps(256)`).
pub const TIMESTEP_CHANNELS: usize = 256;

/// One stack of transformer blocks. Keys under `<name>_`: `layers`, `heads`, `head_dim`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BlockStack {
    /// Key prefix (`dit`, `vlsa`).
    pub name: &'static str,
    pub layers: usize,
    pub heads: usize,
    pub head_dim: usize,
}

impl Section for BlockStack {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        let n = self.name;
        k.usize(&format!("{n}_layers"), &mut self.layers)?;
        k.usize(&format!("{n}_heads"), &mut self.heads)?;
        k.usize(&format!("{n}_head_dim"), &mut self.head_dim)
    }

    fn check(&self) -> std::result::Result<(), String> {
        bounded(&format!("{}_layers", self.name), self.layers, 1, MAX_LAYERS)?;
        positive(&format!("{}_heads", self.name), self.heads)?;
        positive(&format!("{}_head_dim", self.name), self.head_dim)
    }
}

impl BlockStack {
    pub fn width(&self) -> usize {
        self.heads * self.head_dim
    }
}

/// One block `<scope>` of a stack: attention (self- or cross-) and the feed-forward, with
/// affine LayerNorms (`norm1`, `norm3`: the VL self-attention blocks) or, in the DiT, an
/// adaLN-modulated first norm and a plain second one.
#[derive(Clone, Debug)]
pub struct Block<'c> {
    pub scope: Scope,
    pub cfg: &'c BlockStack,
    /// The second norm has the `norm3` weights (else no affine).
    pub affine: bool,
}

impl Block<'_> {
    /// Keys and values `[S, heads, head_dim]` of this block's attention over `context`.
    pub fn kv(&self, g: &mut GraphBuilder, context: NodeId) -> Result<(NodeId, NodeId)> {
        let cfg = self.cfg;
        let d = cfg.width();
        let k = linear(g, context, &self.scope.pp("attn_k"), d, true)?;
        let v = linear(g, context, &self.scope.pp("attn_v"), d, true)?;
        Ok((
            split_heads(g, k, cfg.heads, cfg.head_dim)?,
            split_heads(g, v, cfg.heads, cfg.head_dim)?,
        ))
    }

    /// The rest of the block after its first norm `normed`: attention of its queries over
    /// `kv` (projected from `normed` itself when `None`) under `mask`, the residual, the
    /// second norm, the feed-forward and its residual.
    fn finish(
        &self,
        g: &mut GraphBuilder,
        x: NodeId,
        normed: NodeId,
        kv: Option<(NodeId, NodeId)>,
        mask: Option<NodeId>,
    ) -> Result<NodeId> {
        let (s, cfg) = (&self.scope, self.cfg);
        let d = width(g, x);
        let q = linear(g, normed, &s.pp("attn_q"), cfg.width(), true)?;
        let q = split_heads(g, q, cfg.heads, cfg.head_dim)?;
        let (k, v) = match kv {
            Some(kv) => kv,
            None => self.kv(g, normed)?,
        };
        let o = attend(g, q, &[(k, v)], mask)?;
        let o = linear(g, o, &s.pp("attn_o"), d, true)?;
        let x = g.add(x, o)?;
        let h = match self.affine {
            true => layer_norm(g, x, &s.pp("norm3"), BLOCK_EPS)?,
            false => plain_layer_norm(g, x, BLOCK_EPS)?,
        };
        let h = linear(g, h, &s.pp("ff0"), 4 * d, true)?;
        let h = g.gelu_tanh(h);
        let h = linear(g, h, &s.pp("ff2"), d, true)?;
        g.add(x, h)
    }
}

/// The VL self-attention blocks over `x` `[S, width]` (affine LayerNorms, keys limited by
/// `mask` `[S, S]`), weights `<scope>.{i}`.
pub fn self_attention_stack(
    g: &mut GraphBuilder,
    mut x: NodeId,
    mask: Option<NodeId>,
    scope: &Scope,
    cfg: &BlockStack,
) -> Result<NodeId> {
    for i in 0..cfg.layers {
        let block = Block {
            scope: scope.pp(i),
            cfg,
            affine: true,
        };
        let h = layer_norm(g, x, &block.scope.pp("norm1"), BLOCK_EPS)?;
        x = block.finish(g, x, h, None, mask)?;
    }
    Ok(x)
}

/// `linear(silu(temb))` split in two `[width]` halves, in stored order.
fn modulation(
    g: &mut GraphBuilder,
    temb: NodeId,
    name: &str,
    d: usize,
) -> Result<(NodeId, NodeId)> {
    let t = g.silu(temb);
    let m = linear(g, t, name, 2 * d, true)?;
    let m = g.reshape(m, &[2 * d])?;
    Ok((g.slice(m, 0, 0, d)?, g.slice(m, 0, d, d)?))
}

/// The DiT `<scope>`: blocks `<scope>.{i}` conditioned on the time (adaLN), then the
/// modulated output norm and `proj_out2` to `out` wide.
#[derive(Clone, Debug)]
pub struct Dit<'c> {
    pub scope: Scope,
    pub cfg: &'c BlockStack,
    pub out: usize,
}

impl<'c> Dit<'c> {
    pub fn block(&self, i: usize) -> Block<'c> {
        Block {
            scope: self.scope.pp(i),
            cfg: self.cfg,
            affine: false,
        }
    }

    /// The time condition `[1, width]`: `l2(silu(l1(proj)))` of the timestep projection
    /// `proj` `[1, 256]` ([`timestep_projection`]), weights `time_emb.l{1,2}`.
    pub fn time_condition(&self, g: &mut GraphBuilder, proj: NodeId) -> Result<NodeId> {
        let d = self.cfg.width();
        let t = linear(g, proj, &self.scope.pp("time_emb.l1"), d, true)?;
        let t = g.silu(t);
        linear(g, t, &self.scope.pp("time_emb.l2"), d, true)
    }

    /// The keys and values `[L, heads, head_dim]` every cross-attending block reads from
    /// `context`, in block order (k, v).
    pub fn cross_kv(&self, g: &mut GraphBuilder, context: NodeId) -> Result<Vec<NodeId>> {
        let mut outputs = Vec::new();
        for j in 0..cross_blocks(self.cfg) {
            let (k, v) = self.block(2 * j).kv(g, context)?;
            outputs.extend([k, v]);
        }
        Ok(outputs)
    }

    /// The DiT over `x` `[S, width]` with time condition `temb` `[1, width]`: block `i`
    /// attends to `cross[i / 2]` (keys and values of the context, allowed keys
    /// `cross_masks[i / 2]` `[S, context]`, all when there is no such mask) when `i` is even
    /// and to itself when odd (`interleave_self_attention`).
    pub fn forward(
        &self,
        g: &mut GraphBuilder,
        mut x: NodeId,
        temb: NodeId,
        cross: &[(NodeId, NodeId)],
        cross_masks: &[NodeId],
    ) -> Result<NodeId> {
        let d = self.cfg.width();
        for i in 0..self.cfg.layers {
            let block = self.block(i);
            let (scale, shift) = modulation(g, temb, &block.scope.pp("adaln"), d)?;
            let h = modulated_layer_norm(g, x, scale, shift, BLOCK_EPS)?;
            let (kv, mask) = match i % 2 {
                0 => (Some(cross[i / 2]), cross_masks.get(i / 2).copied()),
                _ => (None, None),
            };
            x = block.finish(g, x, h, kv, mask)?;
        }
        let (shift, scale) = modulation(g, temb, &self.scope.pp("proj_out1"), d)?;
        let x = modulated_layer_norm(g, x, scale, shift, OUT_EPS)?;
        linear(g, x, &self.scope.pp("proj_out2"), self.out, true)
    }
}

/// The number of DiT blocks that cross-attend (the even ones).
pub fn cross_blocks(cfg: &BlockStack) -> usize {
    cfg.layers.div_ceil(2)
}

/// diffusers' `Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=1)` of timestep `t`:
/// `[cos(t f_i)..., sin(t f_i)...]` with `f_i = exp(-ln(10000) i / (128 - 1))`, in f32 as
/// the reference computes it.
pub fn timestep_projection(t: f32) -> Vec<f32> {
    let half = TIMESTEP_CHANNELS / 2;
    let ln = 10000f64.ln() as f32;
    let freq = |i: usize| (-ln * i as f32 / (half as f32 - 1.0)).exp();
    let args: Vec<f32> = (0..half).map(|i| t * freq(i)).collect();
    args.iter()
        .map(|a| a.cos())
        .chain(args.iter().map(|a| a.sin()))
        .collect()
}

/// GR00T's action-encoder `SinusoidalPositionalEncoding` of timestep `t`, `dim` wide:
/// `[sin(t f_i)..., cos(t f_i)...]` with `f_i = exp(-i ln(10000) / (dim / 2))`, in f32.
pub fn action_time_encoding(t: f32, dim: usize) -> Vec<f32> {
    let half = dim / 2;
    let step = 10000f32.ln() / half as f32;
    let args: Vec<f32> = (0..half).map(|i| t * (-(i as f32) * step).exp()).collect();
    args.iter()
        .map(|a| a.sin())
        .chain(args.iter().map(|a| a.cos()))
        .collect()
}
