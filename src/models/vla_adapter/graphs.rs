//! VLA-Adapter's graph, one pass: the cameras through Prismatic's towers and projector, the
//! language model over `[first prompt token, patches, the rest of the prompt, action queries,
//! stop]` (causal), and the bridge-attention head reading every layer's hidden states at the
//! task rows (the sequence's first `n_patches` rows, as the reference slices them: the first
//! prompt token and all but the last patch) and at the action queries.

use super::VlaAdapterConfig;
use crate::graph::{AttentionMask, GraphBuilder, NodeId};
use crate::layers::{layer_norm, linear, rms_norm, split_heads, Scope};
use crate::models::openvla;
use crate::modules::decoder::{DecoderStack, Rotary};
use crate::{Result, Tensor};

/// The language model's input `[L, hidden]` from `ids` `[P + 1]` (the prompt's ids, then the
/// stop token's): the first prompt token, the patches, the rest of the prompt, the action
/// queries, the stop token.
pub fn sequence(
    g: &mut GraphBuilder,
    cfg: &VlaAdapterConfig,
    ids: NodeId,
    patches: NodeId,
) -> Result<NodeId> {
    let (h, p) = (cfg.lm.hidden, g.shape(ids)[0] - 1);
    let table = g.weight("token_embd.weight", &[cfg.lm.vocab, h])?;
    let emb = g.embedding(table, ids)?;
    let queries = g.weight("action_queries.weight", &[cfg.action.num_tokens, h])?;
    let mut parts = vec![g.slice(emb, 0, 0, 1)?, patches];
    if p > 1 {
        parts.push(g.slice(emb, 0, 1, p - 1)?);
    }
    parts.extend([queries, g.slice(emb, 0, p, 1)?]);
    g.concat(&parts, 0)
}

/// What the head reads of each layer `1..=layers`: `(task rows, adapter rows)`
/// ([`VlaAdapterConfig::adapter_start`]), the last layer's after the final norm (the
/// reference's last hidden state).
pub fn lm_states(
    g: &mut GraphBuilder,
    cfg: &VlaAdapterConfig,
    mut x: NodeId,
    n_prompt: usize,
) -> Result<Vec<(NodeId, NodeId)>> {
    let l = g.shape(x)[0];
    let dec = cfg.decoder();
    let stack = DecoderStack {
        stack: "lm",
        layers: cfg.lm.layers,
        inter: cfg.lm.inter,
        cfg: &dec,
    };
    let pos: Vec<f32> = (0..l).map(|i| i as f32).collect();
    let pos = g.constant("lm.positions", Tensor::from_f32(vec![l], pos)?)?;
    let (task, adapter) = (cfg.task_rows(), cfg.adapter_start(n_prompt));
    let mut out = Vec::with_capacity(cfg.lm.layers);
    for i in 0..cfg.lm.layers {
        let layer = stack.layer(i);
        let query = layer.query(g, x)?;
        let q = layer.rotate(g, query.q, Rotary::Positions(pos))?;
        let kv = layer.rotated_kv(g, query.normed, Rotary::Positions(pos))?;
        let q = crate::modules::decoder::Query { q, ..query };
        x = layer.finish_causal(g, x, q, &[kv])?;
        let rows = |g: &mut GraphBuilder, start: usize, n: usize| -> Result<NodeId> {
            let r = g.slice(x, 0, start, n)?;
            match i + 1 == cfg.lm.layers {
                true => rms_norm(g, r, "lm.output_norm", cfg.lm.rms_eps),
                false => Ok(r),
            }
        };
        let t = rows(g, 0, task)?;
        let a = rows(g, adapter, cfg.action.num_tokens)?;
        out.push((t, a));
    }
    Ok(out)
}

/// The head: `[chunk, action_dim]` normalised actions from each layer's states and the
/// projected state `p` `[1, hidden]`.
pub fn head(
    g: &mut GraphBuilder,
    cfg: &VlaAdapterConfig,
    states: &[(NodeId, NodeId)],
    p: NodeId,
) -> Result<NodeId> {
    let rows = head_rows(g, cfg, states, p)?;
    Ok(rows[rows.len() - 1])
}

/// The head's rows `[chunk, hidden]` after its input layer and after each block, then its
/// output (the stages a golden test checks).
pub fn head_rows(
    g: &mut GraphBuilder,
    cfg: &VlaAdapterConfig,
    states: &[(NodeId, NodeId)],
    p: NodeId,
) -> Result<Vec<NodeId>> {
    let (a, h) = (&cfg.action, cfg.lm.hidden);
    let io = &cfg.io;
    let s = Scope::new("aex.head");
    // The reference's input is all zeros: its LayerNorm gives the bias, the same each row.
    let zeros = g.constant(
        "aex.head.zeros",
        Tensor::from_f32(
            vec![io.chunk, io.action_dim * h],
            vec![0.0; io.chunk * io.action_dim * h],
        )?,
    )?;
    let x = layer_norm(g, zeros, &s.pp("ln1"), a.ln_eps)?;
    let x = linear(g, x, &s.pp("fc1"), h, true)?;
    let mut x = g.relu(x);
    let mut rows = vec![x];
    for (i, &(task, adapter)) in states.iter().enumerate() {
        x = head_block(g, cfg, i, x, task, adapter, p)?;
        rows.push(x);
    }
    let x = layer_norm(g, x, &s.pp("ln2"), a.ln_eps)?;
    rows.push(linear(g, x, &s.pp("fc2"), io.action_dim, true)?);
    Ok(rows)
}

/// Block `i` of the head (`MLPResNetBlock_Pro`): the chunk rows' queries over their own keys,
/// the adapter's (`[action queries; p]`) and the task rows' (scores times `tanh(gating)`),
/// one softmax; each part rotated from position 0; then `relu(ffn_lin(ffn_ln(o + x)))`.
pub fn head_block(
    g: &mut GraphBuilder,
    cfg: &VlaAdapterConfig,
    i: usize,
    x: NodeId,
    task: NodeId,
    adapter: NodeId,
    p: NodeId,
) -> Result<NodeId> {
    let (a, h) = (&cfg.action, cfg.lm.hidden);
    let s = Scope::new("aex.head.blk").pp(i);
    let hd = h / a.head_heads;
    let heads = |g: &mut GraphBuilder, x: NodeId, n: &str| -> Result<NodeId> {
        let y = linear(g, x, &s.pp(n), h, true)?;
        split_heads(g, y, a.head_heads, hd)
    };
    let rotated = |g: &mut GraphBuilder, x: NodeId, n: &str| -> Result<NodeId> {
        let y = heads(g, x, n)?;
        rope_pairs(g, y, a.head_rope_base)
    };
    let adapter = g.concat(&[adapter, p], 0)?;
    let q = rotated(g, x, "q_proj")?;
    let k_self = rotated(g, x, "k_self")?;
    let k_adapter = rotated(g, adapter, "k_adapter")?;
    let k_task = rotated(g, task, "k_task")?;
    let gate = g.weight(&s.pp("gating.weight"), &[1])?;
    let gate = tanh1(g, gate)?;
    let k_task = g.mul(k_task, gate)?;
    let v_self = heads(g, x, "v_self")?;
    let v_adapter = heads(g, adapter, "v_adapter")?;
    let v_task = heads(g, task, "v_task")?;
    let k = g.concat(&[k_self, k_adapter, k_task], 0)?;
    let v = g.concat(&[v_self, v_adapter, v_task], 0)?;
    let o = g.attention(q, &[(k, v)], AttentionMask::None, None, None)?;
    let t = g.shape(o)[0];
    let o = g.reshape(o, &[t, h])?;
    let o = linear(g, o, &s.pp("o_proj"), h, true)?;
    let y = g.add(o, x)?;
    let y = layer_norm(g, y, &s.pp("ffn_ln"), a.ln_eps)?;
    let y = linear(g, y, &s.pp("ffn_lin"), h, true)?;
    Ok(g.relu(y))
}

/// `tanh` of a `[1]` tensor from the ops there are: `2 softmax([2x, 0])_0 - 1`.
fn tanh1(g: &mut GraphBuilder, x: NodeId) -> Result<NodeId> {
    let zero = g.constant("zero.1", Tensor::from_f32(vec![1], vec![0.0])?)?;
    let two_x = g.scale(x, 2.0);
    let both = g.concat(&[two_x, zero], 0)?;
    let both = g.reshape(both, &[1, 2])?;
    let sig = g.softmax(both);
    let sig = g.slice(sig, 1, 0, 1)?;
    let sig = g.reshape(sig, &[1])?;
    let minus_one = g.constant("minus_one.1", Tensor::from_f32(vec![1], vec![-1.0])?)?;
    let y = g.scale(sig, 2.0);
    g.add(y, minus_one)
}

/// The head's rotary embedding on `x` `[S, H, D]` at positions `0..S`, as the reference
/// writes it: the table holds `cat(freqs, freqs)` (the half-split layout) while the rotation
/// pairs neighbours, `(x_{2j}, x_{2j+1}) -> (-x_{2j+1}, x_{2j})`; so element `d` turns by
/// frequency `d mod D/2`.
pub fn rope_pairs(g: &mut GraphBuilder, x: NodeId, base: f32) -> Result<NodeId> {
    let (s, h, d) = (g.shape(x)[0], g.shape(x)[1], g.shape(x)[2]);
    let (cos, sin) = pair_tables(s, d, base);
    let cos = g.constant(
        &format!("aex.head.rope.{s}x{d}.cos"),
        Tensor::from_f32(vec![s, 1, d], cos)?,
    )?;
    let sin = g.constant(
        &format!("aex.head.rope.{s}x{d}.sin"),
        Tensor::from_f32(vec![s, 1, d], sin)?,
    )?;
    let pairs = g.reshape(x, &[s, h, d / 2, 2])?;
    let even = g.slice(pairs, 3, 0, 1)?;
    let odd = g.slice(pairs, 3, 1, 1)?;
    let odd = g.scale(odd, -1.0);
    let rot = g.concat(&[odd, even], 3)?;
    let rot = g.reshape(rot, &[s, h, d])?;
    let a = g.mul(x, cos)?;
    let b = g.mul(rot, sin)?;
    g.add(a, b)
}

/// `cos` and `sin` `[s, d]` of `t * inv_freq[j mod d/2]` as the reference computes them in
/// its bf16 head (the buffer `inv_freq = 1 / base^(2j/d)` cast to bf16, the positions `t` an
/// `arange` in bf16: 257 becomes 256; their product, cosine and sine each rounded to bf16).
/// The released models were trained and run so; a table exact in f32 differs by up to 1.7 at
/// the 512 task positions.
pub fn pair_tables(s: usize, d: usize, base: f32) -> (Vec<f32>, Vec<f32>) {
    let bf = |x: f32| half::bf16::from_f32(x).to_f32();
    let half = d / 2;
    let inv: Vec<f32> = (0..half)
        .map(|j| bf(1.0 / base.powf((2 * j) as f32 / d as f32)))
        .collect();
    let mut cos = Vec::with_capacity(s * d);
    let mut sin = Vec::with_capacity(s * d);
    for t in 0..s {
        for k in 0..d {
            let a = bf(bf(t as f32) * inv[k % half]);
            cos.push(bf(a.cos()));
            sin.push(bf(a.sin()));
        }
    }
    (cos, sin)
}

/// The whole predict ([`openvla::OpenVlaArch::predict`]).
pub fn predict(g: &mut GraphBuilder, cfg: &VlaAdapterConfig, n_prompt: usize) -> Result<NodeId> {
    let (ids, state, patches) = openvla::inputs(g, &cfg.vision, &cfg.io, n_prompt, cfg.lm.hidden)?;
    let x = sequence(g, cfg, ids, patches)?;
    let states = lm_states(g, cfg, x, n_prompt)?;
    let p = openvla::proprio(g, state, cfg.lm.hidden)?;
    head(g, cfg, &states, p)
}
