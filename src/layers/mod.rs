//! Building blocks over [`GraphBuilder`]: each adds the nodes of one layer, declaring its
//! weights by a prefix (`<prefix>.weight`, `<prefix>.bias`) with the shapes the layer
//! implies. Nothing here knows a model.

mod scope;

pub use scope::Scope;

use crate::graph::{AttentionMask, GateAct, GraphBuilder, NodeId, Window};
use crate::ops::{RopeConfig, RopeMode};
use crate::preprocess::{FrameKey, FramePlan};
use crate::{Result, Tensor};

/// The last dimension of `x`.
pub fn width(g: &GraphBuilder, x: NodeId) -> usize {
    g.shape(x).last().copied().unwrap_or(0)
}

/// `x [.., in] @ W^T (+ b)` with `<prefix>.weight` `[out, in]` and, when `bias`,
/// `<prefix>.bias` `[out]`.
pub fn linear(
    g: &mut GraphBuilder,
    x: NodeId,
    prefix: &str,
    out: usize,
    bias: bool,
) -> Result<NodeId> {
    let w = g.weight(&format!("{prefix}.weight"), &[out, width(g, x)])?;
    if !bias {
        return g.matmul(x, w);
    }
    let b = g.weight(&format!("{prefix}.bias"), &[out])?;
    // one op: the bias is added as the product is written
    g.matmul_add(x, w, b)
}

/// `x [.., in] @ W^T + addend` with `<prefix>.weight` `[out, in]` (no bias) as one op: the
/// residual stream `addend` is added as the product is written.
pub fn linear_add(
    g: &mut GraphBuilder,
    x: NodeId,
    prefix: &str,
    out: usize,
    addend: NodeId,
) -> Result<NodeId> {
    let w = g.weight(&format!("{prefix}.weight"), &[out, width(g, x)])?;
    g.matmul_add(x, w, addend)
}

/// A 2-D convolution of a channels-last map `x [H, W, C]` with bias: `<prefix>.weight`
/// (PyTorch's `[O, C, KH, KW]`, read as the matrix `[O, C * KH * KW]`: a loader reshapes the
/// stored kernel, header only) and `<prefix>.bias` `[O]`. Returns `[OH, OW, O]`: im2col,
/// then one matmul with the bias added as it is written.
pub fn conv2d(
    g: &mut GraphBuilder,
    x: NodeId,
    prefix: &str,
    out: usize,
    win: Window,
) -> Result<NodeId> {
    let s = g.shape(x).to_vec();
    let cols = g.im2col(x, win)?;
    let (oh, ow) = win.output(s[0], s[1]).expect("im2col checked the window");
    let y = linear(g, cols, prefix, out, true)?;
    g.reshape(y, &[oh, ow, out])
}

/// RMSNorm over the last dimension with gain `<prefix>.weight` (Llama style: no offset;
/// Gemma's `1 + w` gains are stored with the 1 added, as llama.cpp's converter does).
pub fn rms_norm(g: &mut GraphBuilder, x: NodeId, prefix: &str, eps: f32) -> Result<NodeId> {
    let w = g.weight(&format!("{prefix}.weight"), &[width(g, x)])?;
    g.rms_norm(x, w, eps, 0.0)
}

pub fn layer_norm(g: &mut GraphBuilder, x: NodeId, prefix: &str, eps: f32) -> Result<NodeId> {
    let d = width(g, x);
    let w = g.weight(&format!("{prefix}.weight"), &[d])?;
    let b = g.weight(&format!("{prefix}.bias"), &[d])?;
    g.layer_norm(x, w, b, eps)
}

/// LayerNorm without a learned affine (`elementwise_affine=False`): the gain and bias are
/// graph constants of ones and zeros.
pub fn plain_layer_norm(g: &mut GraphBuilder, x: NodeId, eps: f32) -> Result<NodeId> {
    let d = width(g, x);
    let ones = filled(g, d, 1.0)?;
    let zeros = filled(g, d, 0.0)?;
    g.layer_norm(x, ones, zeros, eps)
}

/// GroupNorm over a channels-last map `x [P, C]` (statistics per group of `C / groups`
/// channels over all positions) with gain and bias `<prefix>.weight` / `.bias`: the groups
/// brought together, a plain LayerNorm over each, and back.
pub fn group_norm(
    g: &mut GraphBuilder,
    x: NodeId,
    prefix: &str,
    groups: usize,
    eps: f32,
) -> Result<NodeId> {
    let (p, c) = (g.shape(x)[0], width(g, x));
    let cg = c / groups.max(1);
    let y = g.reshape(x, &[p, groups, cg])?;
    let y = g.permute(y, &[1, 0, 2])?;
    let y = g.reshape(y, &[groups, p * cg])?;
    let y = plain_layer_norm(g, y, eps)?;
    let y = g.reshape(y, &[groups, p, cg])?;
    let y = g.permute(y, &[1, 0, 2])?;
    let y = g.reshape(y, &[p, c])?;
    let w = g.weight(&format!("{prefix}.weight"), &[c])?;
    let b = g.weight(&format!("{prefix}.bias"), &[c])?;
    let y = g.mul(y, w)?;
    g.add(y, b)
}

/// A `[d]` graph constant of `value` (one node per (d, value)).
fn filled(g: &mut GraphBuilder, d: usize, value: f32) -> Result<NodeId> {
    let t = Tensor::from_f32(vec![d], vec![value; d])?;
    g.constant(&format!("const.fill.{d}.{value}"), t)
}

/// `LayerNorm(x) * (1 + scale) + shift` (no learned affine) with `scale`, `shift` `[width]`:
/// diffusers' adaLN modulation.
pub fn modulated_layer_norm(
    g: &mut GraphBuilder,
    x: NodeId,
    scale: NodeId,
    shift: NodeId,
    eps: f32,
) -> Result<NodeId> {
    let d = width(g, x);
    let ones = filled(g, d, 1.0)?;
    let gain = g.add(scale, ones)?;
    g.layer_norm(x, gain, shift, eps)
}

/// `x [M, in] @ W + b` with `<prefix>.W` stored `[in, out]` (not transposed, as GR00T's
/// `CategorySpecificLinear` keeps it, one category's slice) and `<prefix>.b` `[out]`.
pub fn linear_in_out(g: &mut GraphBuilder, x: NodeId, prefix: &str, out: usize) -> Result<NodeId> {
    let (m, k) = (g.shape(x)[0], width(g, x));
    let w = g.weight(&format!("{prefix}.W"), &[k, out])?;
    let w = g.reshape(w, &[1, k, out])?;
    let x = g.reshape(x, &[1, m, k])?;
    let y = g.bmm(x, w, false)?;
    let y = g.reshape(y, &[m, out])?;
    let b = g.weight(&format!("{prefix}.b"), &[out])?;
    g.add(y, b)
}

/// The activation of a gated FFN's gate branch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GatedActivation {
    /// SwiGLU (Llama, SmolLM2).
    Silu,
    /// GeGLU with the tanh GELU (Gemma's `gelu_pytorch_tanh`).
    GeluTanh,
}

/// `down(act(gate(x)) * up(x))`, bias-free (Llama/SmolLM/Gemma-style FFN) and `inter`
/// wide, weights `<prefix>.ffn_{gate,up,down}`; plus `residual` in the down projection's
/// op when given.
pub fn gated_ffn(
    g: &mut GraphBuilder,
    x: NodeId,
    prefix: &str,
    inter: usize,
    act: GatedActivation,
    residual: Option<NodeId>,
) -> Result<NodeId> {
    let d = width(g, x);
    let gate = g.weight(&format!("{prefix}.ffn_gate.weight"), &[inter, d])?;
    let up = g.weight(&format!("{prefix}.ffn_up.weight"), &[inter, d])?;
    let act = match act {
        GatedActivation::Silu => GateAct::Silu,
        GatedActivation::GeluTanh => GateAct::GeluTanh,
    };
    let h = g.gated_matmul(x, gate, up, act)?;
    let down = format!("{prefix}.ffn_down");
    match residual {
        Some(r) => linear_add(g, h, &down, d, r),
        None => linear(g, h, &down, d, false),
    }
}

/// Where the gate sits in an adaRMS modulation vector `[scale, shift, gate]` (its part, in
/// widths).
pub const ADA_GATE_PART: usize = 2;

/// adaRMS (pi0.5): `rms(x) * (1 + scale) + shift`, where `[scale, shift, gate]` is the
/// linear map `<prefix>` (with bias) of the condition `cond` `[1, C]`. Returns the norm and
/// that modulation vector `[3 width]`, whose gate (part [`ADA_GATE_PART`]) scales the
/// residual branch the norm feeds ([`GraphBuilder::add_gated`] reads it in place).
pub fn ada_rms_norm(
    g: &mut GraphBuilder,
    x: NodeId,
    cond: NodeId,
    prefix: &str,
    eps: f32,
) -> Result<(NodeId, NodeId)> {
    let width = width(g, x);
    let m = linear(g, cond, prefix, 3 * width, true)?;
    let m = g.reshape(m, &[3 * width])?;
    // scale and shift read in place; the gate stays in `m` for the residual
    Ok((g.ada_rms_norm(x, m, eps)?, m))
}

/// `fc2(gelu_tanh(fc1(x)))` with biases, `inter` wide (ViT-style MLP).
pub fn gelu_mlp(g: &mut GraphBuilder, x: NodeId, prefix: &str, inter: usize) -> Result<NodeId> {
    let (fc1, fc2) = (format!("{prefix}.fc1"), format!("{prefix}.fc2"));
    gelu_mlp_named(g, x, &fc1, &fc2, inter)
}

/// `down(gelu_tanh(up(x)))` with biases, `inter` wide, the two linear maps named `up` and
/// `down`.
pub fn gelu_mlp_named(
    g: &mut GraphBuilder,
    x: NodeId,
    up: &str,
    down: &str,
    inter: usize,
) -> Result<NodeId> {
    let d = width(g, x);
    let h = linear(g, x, up, inter, true)?;
    let h = g.gelu_tanh(h);
    linear(g, h, down, d, true)
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

/// Attention of `[S, H, D]` queries over one or two `(keys, values)` parts (a cache, then
/// new rows: read in place, not concatenated): returns `[Sq, Hq * Dv]`. The op reads and
/// writes heads inside positions, so no permute runs on either side.
pub fn attend(
    g: &mut GraphBuilder,
    q: NodeId,
    kv: &[(NodeId, NodeId)],
    mask: Option<NodeId>,
) -> Result<NodeId> {
    let kind = if mask.is_some() {
        AttentionMask::Allowed
    } else {
        AttentionMask::None
    };
    let o = g.attention(q, kv, kind, mask, None)?;
    let (s, h, d) = (g.shape(o)[0], g.shape(o)[1], g.shape(o)[2]);
    g.reshape(o, &[s, h * d])
}

/// Rotary embedding over the halves of each head (`rotate_half`, GPT-NeoX layout) on
/// `[S, H, D]`, at the positions in `positions` `[S]`.
pub fn rope_neox(g: &mut GraphBuilder, x: NodeId, positions: NodeId, theta: f32) -> Result<NodeId> {
    g.rope(x, positions, RopeConfig::new(RopeMode::Neox, theta))
}

/// `x * cos + rotate_half(x) * sin` on `x` `[S, H, D]` with tables `[S, 1, D]`.
pub fn rope_tables(g: &mut GraphBuilder, x: NodeId, cos: NodeId, sin: NodeId) -> Result<NodeId> {
    let d = g.shape(x)[2];
    let lo = g.slice(x, 2, 0, d / 2)?;
    let hi = g.slice(x, 2, d / 2, d / 2)?;
    let hi = g.scale(hi, -1.0);
    let rot = g.concat(&[hi, lo], 2)?;
    let a = g.mul(x, cos)?;
    let b = g.mul(rot, sin)?;
    g.add(a, b)
}

/// `x` `[L, D]` with rows `start..start + n` replaced (or, with `add`, increased) by each
/// `(start, rows [n, D])` of `pieces` (sorted, not overlapping): image tokens spliced into a
/// prompt's embeddings, or features added at their positions.
pub fn splice_rows(
    g: &mut GraphBuilder,
    x: NodeId,
    pieces: &[(usize, NodeId)],
    add: bool,
) -> Result<NodeId> {
    let l = g.shape(x)[0];
    let mut parts = Vec::new();
    let mut at = 0;
    for &(start, rows) in pieces {
        let n = g.shape(rows)[0];
        if start > at {
            parts.push(g.slice(x, 0, at, start - at)?);
        }
        parts.push(match add {
            true => {
                let old = g.slice(x, 0, start, n)?;
                g.add(old, rows)?
            }
            false => rows,
        });
        at = start + n;
    }
    if at < l {
        parts.push(g.slice(x, 0, at, l - at)?);
    }
    g.concat(&parts, 0)
}

/// `x` `[L, d]` with `rows` `[n, d]` placed where run-time inputs say (a client's sequence,
/// whose image slots a request places): `places` `[1, L, n]` one-hot (position p takes row
/// j where it is 1) and `keep` `[L, 1]` (1 where x's row stays, 0 where it is replaced).
/// Exact: each output row is x's or one of `rows`, every other term a zero.
pub fn place_rows(
    g: &mut GraphBuilder,
    x: NodeId,
    rows: NodeId,
    places: NodeId,
    keep: NodeId,
) -> Result<NodeId> {
    let placed = scatter_rows(g, rows, places)?;
    let kept = g.mul(x, keep)?;
    g.add(kept, placed)
}

/// `rows` `[n, d]` at the positions `places` `[1, L, n]` (one-hot, as [`place_rows`]) names,
/// zero elsewhere: `[L, d]`. Exact.
pub fn scatter_rows(g: &mut GraphBuilder, rows: NodeId, places: NodeId) -> Result<NodeId> {
    let (n, d) = (g.shape(rows)[0], g.shape(rows)[1]);
    let l = g.shape(places)[1];
    let rows = g.reshape(rows, &[1, n, d])?;
    let placed = g.bmm(places, rows, false)?;
    g.reshape(placed, &[l, d])
}

/// The camera frame input `name` `[h, w, 3]` (bytes or f32, as `key` says) times the
/// per-channel `scale`, plus the per-channel `offset` where given, channels last; the
/// constants are named `{id}.scale` and `{id}.offset`.
pub fn scaled_frame(
    g: &mut GraphBuilder,
    (name, key): (&str, FrameKey),
    id: &str,
    scale: &[f32],
    offset: Option<&[f32]>,
) -> Result<NodeId> {
    let shape = [key.height, key.width, 3];
    let x = match key.bytes {
        true => g.input_u8(name, &shape),
        false => g.input(name, &shape),
    };
    frame_map(g, x, id, scale, offset)
}

/// A frame `x` `[h, w, 3]` times the per-channel `scale`, plus the per-channel `offset`
/// where given (constants `{id}.scale`, `{id}.offset`): one frame through several towers'
/// value maps.
pub fn frame_map(
    g: &mut GraphBuilder,
    x: NodeId,
    id: &str,
    scale: &[f32],
    offset: Option<&[f32]>,
) -> Result<NodeId> {
    let scale = g.constant(
        &format!("{id}.scale"),
        Tensor::from_f32(vec![3], scale.to_vec())?,
    )?;
    let x = g.mul(x, scale)?;
    match offset {
        Some(o) => {
            let o = g.constant(
                &format!("{id}.offset"),
                Tensor::from_f32(vec![3], o.to_vec())?,
            )?;
            g.add(x, o)
        }
        None => Ok(x),
    }
}

/// The tower's `[3, H, W]` input from the camera frame input `name` (`[h, w, 3]`, bytes or
/// f32, as [`FramePlan::key`] says) through `plan`: the per-channel scale, then the resize as
/// two products with the plan's constant matrices, plus its offset. The constants are named
/// by the frame's size, so cameras of one size share them.
pub fn frame_pixels(g: &mut GraphBuilder, name: &str, plan: &FramePlan) -> Result<NodeId> {
    let k = plan.key;
    let (h, w) = (k.height, k.width);
    let (oh, ow) = plan.out;
    let id = format!("frame.{h}x{w}.{}", if k.bytes { "u8" } else { "f32" });
    let constant = |g: &mut GraphBuilder, what: &str, shape: Vec<usize>, v: &[f32]| {
        g.constant(
            &format!("{id}.{what}"),
            Tensor::from_f32(shape, v.to_vec())?,
        )
    };
    let offset = plan.resize.is_none().then_some(plan.offset.as_slice());
    let x = scaled_frame(g, (name, k), &id, &plan.scale, offset)?;
    match &plan.resize {
        None => g.permute(x, &[2, 0, 1]),
        Some((rows, cols)) => {
            let x = g.permute(x, &[2, 1, 0])?; // [3, w, h]
            let rows = constant(g, "rows", vec![oh, h], rows)?;
            let x = g.matmul(x, rows)?; // [3, w, H]
            let x = g.permute(x, &[0, 2, 1])?; // [3, H, w]
            let cols = constant(g, "cols", vec![ow, w], cols)?;
            let offset = constant(g, "offset", vec![3, oh, ow], &plan.offset)?;
            g.matmul_add(x, cols, offset)
        }
    }
}
