//! Octo's predict as one graph: each camera's frames through its SmallStem (convolutions
//! channels last, GroupNorm, the patch convolution) to tokens, the instruction through
//! T5's encoder, the block-causal transformer over [task, then per step: cameras, proprio,
//! the task again, readouts] under the mask the host builds ([`super::rules`]), and the
//! head on the last step's readouts: every DDPM step unrolled (noise from the request), or
//! the L1 regression. Parts are public so the golden test checks each stage.

use super::config::{Head, OctoConfig, Stem, GN_EPS, GN_GROUPS, STEM_STAGES, T5_EPS};
use super::rules::Step;
use crate::graph::{GateAct, Graph, GraphBuilder, NodeId, Window};
use crate::layers::{self, Scope};
use crate::preprocess::FrameKey;
use crate::{Result, Tensor};

/// Input names: the instruction's T5 ids `[S]`, its key mask (`[1, 1, S]`, 0 or a large
/// negative), the transformer's mask (`[N, N]`, 1 = may attend), the noise (`[steps + 1,
/// horizon * dim]`: the start, then each step's); each window step's proprio bins (one-hot,
/// `[proprio_dim, bins]`, [`proprio_input`]).
pub const TOKENS: &str = "tokens";
pub const T5_MASK: &str = "t5.mask";
/// T5's relative-position bucket of each (query, key) pair, `[S * S]`
/// ([`super::rules::t5_buckets`]; an input, as ggml takes embedding ids only from inputs).
pub const T5_BUCKETS: &str = "t5.buckets";
pub const MASK: &str = "mask";
pub const NOISE: &str = "noise";
/// The proprio input of window step `step`.
pub fn proprio_input(step: usize) -> String {
    format!("proprio.{step}")
}
/// What the T5 mask adds to a padding key's score (Flax's T5 adds the dtype's minimum; any
/// value this low makes its weight exactly 0).
pub const MASKED: f32 = -1e30;

/// The frame input of window step `step`, camera `cam` (`[side, side, 3]`).
pub fn frame_input(cfg: &OctoConfig, step: usize, cam: usize) -> String {
    format!("image.{}", step * cfg.cameras().count() + cam)
}

/// A camera's frame `[side, side, 3]` (bytes, or floats in [0, 1]) as SmallStem takes it:
/// in [-1, 1], with the goal image's channels (a language task's zeros, so -1) stacked on
/// where the stem takes six.
pub fn stem_input(g: &mut GraphBuilder, name: &str, key: FrameKey, stem: &Stem) -> Result<NodeId> {
    let unit = if key.bytes { 1.0 / 127.5 } else { 2.0 };
    let id = format!("octo.pixels.{}", if key.bytes { "u8" } else { "f32" });
    let x = layers::scaled_frame(g, (name, key), &id, &[unit; 3], Some(&[-1.0; 3]))?;
    if stem.in_channels == 3 {
        return Ok(x);
    }
    let s = key.height;
    let goal = Tensor::from_f32(vec![s, s, 3], vec![-1.0; s * s * 3])?;
    let goal = g.constant(&format!("octo.goal.{s}"), goal)?;
    g.concat(&[x, goal], 2)
}

/// SmallStem: four 3x3 stride-2 convolutions (their kernels weight-standardised at load,
/// [`super::standardize_stems`]), each with GroupNorm and ReLU, then the patch convolution: the maps after each stage, then the
/// tokens `[grid * grid, features]`.
pub fn stem(g: &mut GraphBuilder, p: &Scope, stem: &Stem, x: NodeId) -> Result<Vec<NodeId>> {
    let mut maps = Vec::with_capacity(STEM_STAGES + 1);
    let mut x = x;
    for (i, &w) in stem.widths.iter().enumerate() {
        let s = p.pp("stem").pp(i);
        let y = layers::conv2d(g, x, &s.pp("conv"), w, Window::square(3, 2, 1))?;
        let (h, ww) = (g.shape(y)[0], g.shape(y)[1]);
        let y = g.reshape(y, &[h * ww, w])?;
        let y = layers::group_norm(g, y, &s.pp("gn"), GN_GROUPS, GN_EPS)?;
        let y = g.relu(y);
        x = g.reshape(y, &[h, ww, w])?;
        maps.push(x);
    }
    let k = stem.patch;
    let y = layers::conv2d(
        g,
        x,
        &p.pp("patch_embd"),
        stem.features,
        Window::square(k, k, 0),
    )?;
    let (h, w) = (g.shape(y)[0], g.shape(y)[1]);
    maps.push(g.reshape(y, &[h * w, stem.features])?);
    Ok(maps)
}

/// Row `step` of a position table `<name>` `[max_horizon, n, D]`: `[n, D]`.
fn step_rows(
    g: &mut GraphBuilder,
    cfg: &OctoConfig,
    name: &str,
    n: usize,
    step: usize,
) -> Result<NodeId> {
    let t = g.weight(name, &[cfg.max_horizon, n, cfg.d])?;
    let t = g.slice(t, 0, step, 1)?;
    g.reshape(t, &[n, cfg.d])
}

/// T5's encoder over the instruction's ids: `[S, t5_d]` (the last hidden state).
pub fn t5_encoder(g: &mut GraphBuilder, cfg: &OctoConfig) -> Result<NodeId> {
    let (s, h, kv) = (cfg.lang_tokens, cfg.t5_heads, cfg.t5_kv);
    let t5 = Scope::new("octo.t5");
    let ids = g.input(TOKENS, &[s]);
    let table = g.weight(&t5.pp("tok_embd.weight"), &[cfg.t5_vocab, cfg.t5_d])?;
    let mut x = g.embedding(table, ids)?;
    // the position bias of every (query, key) pair, per head, plus the padding keys' mask
    let buckets = g.input(T5_BUCKETS, &[s * s]);
    let rel = g.weight(&t5.pp("blk.0.attn_rel_b.weight"), &[cfg.t5_buckets, h])?;
    let bias = g.embedding(rel, buckets)?;
    let bias = g.reshape(bias, &[s, s, h])?;
    let bias = g.permute(bias, &[2, 0, 1])?;
    let mask = g.input(T5_MASK, &[1, 1, s]);
    let bias = g.add(bias, mask)?;
    let heads = |g: &mut GraphBuilder, y: NodeId| -> Result<NodeId> {
        let y = g.reshape(y, &[s, h, kv])?;
        g.permute(y, &[1, 0, 2])
    };
    for i in 0..cfg.t5_layers {
        let p = t5.pp("blk").pp(i);
        let y = layers::rms_norm(g, x, &p.pp("attn_norm"), T5_EPS)?;
        let q = layers::linear(g, y, &p.pp("attn_q"), h * kv, false)?;
        let k = layers::linear(g, y, &p.pp("attn_k"), h * kv, false)?;
        let v = layers::linear(g, y, &p.pp("attn_v"), h * kv, false)?;
        let (q, k, v) = (heads(g, q)?, heads(g, k)?, heads(g, v)?);
        // T5 does not scale its scores
        let scores = g.bmm(q, k, true)?;
        let scores = g.add(scores, bias)?;
        let probs = g.softmax(scores);
        let o = g.bmm(probs, v, false)?;
        let o = g.permute(o, &[1, 0, 2])?;
        let o = g.reshape(o, &[s, h * kv])?;
        x = layers::linear_add(g, o, &p.pp("attn_o"), cfg.t5_d, x)?;
        let y = layers::rms_norm(g, x, &p.pp("ffn_norm"), T5_EPS)?;
        let y = match cfg.t5_gated {
            true => {
                let gate = g.weight(&p.pp("ffn_gate.weight"), &[cfg.t5_ffn, cfg.t5_d])?;
                let up = g.weight(&p.pp("ffn_up.weight"), &[cfg.t5_ffn, cfg.t5_d])?;
                g.gated_matmul(y, gate, up, GateAct::GeluTanh)?
            }
            false => {
                let y = layers::linear(g, y, &p.pp("ffn_up"), cfg.t5_ffn, false)?;
                g.relu(y)
            }
        };
        x = layers::linear_add(g, y, &p.pp("ffn_down"), cfg.t5_d, x)?;
    }
    layers::rms_norm(g, x, &t5.pp("output_norm"), T5_EPS)
}

/// The transformer's input `[N, D]`: the language tokens (projected, plus their positions),
/// then per window step each camera's tokens, the proprio's, the task again
/// (`repeat_task_tokens`) and the readouts' positions.
pub fn sequence(g: &mut GraphBuilder, cfg: &OctoConfig, frames: &[FrameKey]) -> Result<NodeId> {
    let d = cfg.d;
    let t5 = t5_encoder(g, cfg)?;
    let lang = layers::linear(g, t5, "octo.task.language.proj", d, true)?;
    let pos = g.weight("octo.task.language.pos_embd", &[cfg.lang_tokens, d])?;
    let lang = g.add(lang, pos)?;
    let mut all = vec![lang];
    let ncams = cfg.cameras().count();
    for step in 0..cfg.window {
        for (c, (cam, stem)) in cfg.cameras().enumerate() {
            let p = Scope::new(format!("octo.obs.{cam}"));
            let key = frames[step * ncams + c];
            let x = stem_input(g, &frame_input(cfg, step, c), key, stem)?;
            let m = self::stem(g, &p, stem, x)?;
            let feats = *m.last().expect("the stem's tokens");
            let tokens = layers::linear(g, feats, &p.pp("proj"), d, true)?;
            let n = g.shape(tokens)[0];
            let pos = step_rows(g, cfg, &p.pp("pos_embd"), n, step)?;
            all.push(g.add(tokens, pos)?);
        }
        if cfg.proprio_dim > 0 {
            // each dimension's bin, one-hot: its product picks the bin's column
            let bins = g.input(proprio_input(step), &[cfg.proprio_dim, cfg.proprio_bins]);
            let x = layers::linear(g, bins, "octo.obs.proprio.proj", d, true)?;
            let pos = step_rows(g, cfg, "octo.obs.proprio.pos_embd", cfg.proprio_dim, step)?;
            all.push(g.add(x, pos)?);
        }
        if cfg.repeat_task_tokens {
            all.push(lang);
        }
        all.push(step_rows(
            g,
            cfg,
            "octo.readout.action.pos_embd",
            cfg.readouts,
            step,
        )?);
    }
    g.concat(&all, 0)
}

/// Transformer block `i` over `x [N, D]` under the mask node `mask` (`[N, N]`).
pub fn block(
    g: &mut GraphBuilder,
    cfg: &OctoConfig,
    x: NodeId,
    mask: NodeId,
    i: usize,
) -> Result<NodeId> {
    let (d, h, hd) = (cfg.d, cfg.heads, cfg.head_dim());
    let p = Scope::new("octo.blk").pp(i);
    let y = layers::layer_norm(g, x, &p.pp("attn_norm"), cfg.ln_eps)?;
    let qkv = layers::linear(g, y, &p.pp("attn_qkv"), 3 * d, true)?;
    let part = |g: &mut GraphBuilder, k: usize| -> Result<NodeId> {
        let y = g.slice(qkv, 1, k * d, d)?;
        layers::split_heads(g, y, h, hd)
    };
    let (q, k, v) = (part(g, 0)?, part(g, 1)?, part(g, 2)?);
    let o = layers::attend(g, q, &[(k, v)], Some(mask))?;
    let o = layers::linear(g, o, &p.pp("attn_o"), d, true)?;
    let x = g.add(x, o)?;
    let y = layers::layer_norm(g, x, &p.pp("ffn_norm"), cfg.ln_eps)?;
    let y = layers::gelu_mlp_named(g, y, &p.pp("ffn_up"), &p.pp("ffn_down"), cfg.ffn)?;
    g.add(x, y)
}

/// The transformer over `x [N, D]` (the mask an input, [`MASK`]): each block's output, then
/// the final LayerNorm's.
pub fn transformer(g: &mut GraphBuilder, cfg: &OctoConfig, x: NodeId) -> Result<Vec<NodeId>> {
    let n = g.shape(x)[0];
    let mask = g.input(MASK, &[n, n]);
    let mut outs = Vec::with_capacity(cfg.layers + 1);
    let mut x = x;
    for i in 0..cfg.layers {
        x = block(g, cfg, x, mask, i)?;
        outs.push(x);
    }
    outs.push(layers::layer_norm(g, x, "octo.output_norm", cfg.ln_eps)?);
    Ok(outs)
}

/// The last step's readout tokens `[readouts, D]` in the transformer's output.
pub fn last_readouts(g: &mut GraphBuilder, cfg: &OctoConfig, out: NodeId) -> Result<NodeId> {
    let n = g.shape(out)[0];
    g.slice(out, 0, n - cfg.readouts, cfg.readouts)
}

/// The readouts' mean `[1, D]` (the heads' embedding without attention pooling).
pub fn mean_rows(g: &mut GraphBuilder, rows: NodeId) -> Result<NodeId> {
    let r = g.shape(rows)[0];
    let mut sum = g.slice(rows, 0, 0, 1)?;
    for i in 1..r {
        let row = g.slice(rows, 0, i, 1)?;
        sum = g.add(sum, row)?;
    }
    Ok(match r {
        1 => sum,
        _ => g.scale(sum, 1.0 / r as f32),
    })
}

/// `clip(x, -a, a)` as `relu(x + a) - relu(x - a) - a` (within an ulp of `a`).
fn clip(g: &mut GraphBuilder, x: NodeId, a: f32) -> Result<NodeId> {
    let c = |g: &mut GraphBuilder, v: f32| {
        g.constant(
            &format!("octo.clip.{v}"),
            Tensor::from_f32(vec![1], vec![v])?,
        )
    };
    let (pa, na) = (c(g, a)?, c(g, -a)?);
    let hi = g.add(x, pa)?;
    let hi = g.relu(hi);
    let lo = g.add(x, na)?;
    let lo = g.relu(lo);
    let lo = g.scale(lo, -1.0);
    let y = g.add(hi, lo)?;
    g.add(y, na)
}

/// The DDPM head: `steps` (in the reverse process's order) unrolled over the embedding
/// `emb [1, D]`; `tff` `[steps, time_dim]` the Fourier features of each step's time, in that
/// order; `keep` the flattened action's 0/1 mask of the embodiment's dimensions (None: all).
/// Returns the first step's noise prediction and the actions `[1, horizon * dim]`.
pub fn diffusion(
    g: &mut GraphBuilder,
    cfg: &OctoConfig,
    emb: NodeId,
    tff: &[f32],
    steps: &[Step],
    keep: Option<&[f32]>,
) -> Result<(NodeId, NodeId)> {
    let ha = cfg.horizon * cfg.action_dim;
    let (td, hid) = (cfg.time_dim, cfg.hidden);
    let p = Scope::new("octo.head.diffusion");
    let noise = g.input(NOISE, &[steps.len() + 1, ha]);
    let tff = g.constant(
        "octo.head.tff",
        Tensor::from_f32(vec![steps.len(), td], tff.to_vec())?,
    )?;
    let c = layers::linear(g, tff, &p.pp("cond.0"), 2 * td, true)?;
    let c = g.silu(c);
    let cond = layers::linear(g, c, &p.pp("cond.1"), td, true)?;
    let keep = match keep {
        Some(k) => {
            let on = g.constant("octo.keep", Tensor::from_f32(vec![1, ha], k.to_vec())?)?;
            let off: Vec<f32> = k.iter().map(|v| 1.0 - v).collect();
            let off = g.constant("octo.drop", Tensor::from_f32(vec![1, ha], off)?)?;
            Some((on, off))
        }
        None => None,
    };
    let mut x = g.slice(noise, 0, 0, 1)?;
    let mut first = None;
    for (i, st) in steps.iter().enumerate() {
        let c = g.slice(cond, 0, i, 1)?;
        let inp = g.concat(&[c, emb, x], 1)?;
        let mut h = layers::linear(g, inp, &p.pp("reverse.in"), hid, true)?;
        for b in 0..cfg.blocks {
            let q = p.pp("reverse.blk").pp(b);
            let y = match cfg.head_ln {
                true => layers::layer_norm(g, h, &q.pp("ln"), cfg.ln_eps)?,
                false => h,
            };
            let y = layers::linear(g, y, &q.pp("fc1"), 4 * hid, true)?;
            let y = g.silu(y);
            let y = layers::linear(g, y, &q.pp("fc2"), hid, true)?;
            h = g.add(h, y)?;
        }
        let h = g.silu(h);
        let eps = layers::linear(g, h, &p.pp("reverse.out"), ha, true)?;
        first.get_or_insert(eps);
        let e = g.scale(eps, -st.a2);
        let y = g.add(x, e)?;
        let mut y = g.scale(y, st.a1);
        let z = g.slice(noise, 0, i + 1, 1)?;
        if st.noise > 0.0 {
            let zn = g.scale(z, st.noise);
            y = g.add(y, zn)?;
        }
        y = clip(g, y, cfg.max_action)?;
        if let Some((on, off)) = keep {
            let kept = g.mul(y, on)?;
            let zm = g.scale(z, st.masked);
            let zm = g.mul(zm, off)?;
            y = g.add(kept, zm)?;
        }
        x = y;
    }
    Ok((first.expect("at least one step"), x))
}

/// The L1 head before its `tanh` squash (applied on the host): the readouts pooled (by
/// attention with the learned probe, or their mean) and projected, `[1, horizon * dim]`.
pub fn l1(g: &mut GraphBuilder, cfg: &OctoConfig, readouts: NodeId) -> Result<NodeId> {
    let d = cfg.d;
    let ha = cfg.horizon * cfg.action_dim;
    let p = Scope::new("octo.head.l1");
    let emb = match cfg.use_map {
        true => {
            let m = p.pp("map");
            let probe = g.weight(&m.pp("probe"), &[1, 1, d])?;
            let probe = g.reshape(probe, &[1, d])?;
            let (h, hd) = (cfg.map_heads, d / cfg.map_heads);
            let pq = layers::linear(g, probe, &m.pp("attn_qkv"), 3 * d, true)?;
            let kv = layers::linear(g, readouts, &m.pp("attn_qkv"), 3 * d, true)?;
            let q = g.slice(pq, 1, 0, d)?;
            let k = g.slice(kv, 1, d, d)?;
            let v = g.slice(kv, 1, 2 * d, d)?;
            let (q, k, v) = (
                layers::split_heads(g, q, h, hd)?,
                layers::split_heads(g, k, h, hd)?,
                layers::split_heads(g, v, h, hd)?,
            );
            let o = layers::attend(g, q, &[(k, v)], None)?;
            let o = layers::linear(g, o, &m.pp("attn_o"), d, true)?;
            let y = layers::layer_norm(g, o, &m.pp("norm"), cfg.ln_eps)?;
            let y = layers::gelu_mlp_named(g, y, &m.pp("ffn_up"), &m.pp("ffn_down"), 4 * d)?;
            g.add(o, y)?
        }
        false => mean_rows(g, readouts)?,
    };
    layers::linear(g, emb, &p.pp("mean_proj"), ha, true)
}

/// The whole predict: the frames (window steps, then cameras, oldest first) to the chunk
/// `[horizon, dim]` (the diffusion head's, normalized; the L1 head's before its squash).
pub fn predict(
    mut g: GraphBuilder,
    cfg: &OctoConfig,
    frames: &[FrameKey],
    tff: &[f32],
    steps: &[Step],
    keep: Option<&[f32]>,
) -> Result<Graph> {
    g.stage("tokens");
    let x = sequence(&mut g, cfg, frames)?;
    g.stage("transformer");
    let outs = transformer(&mut g, cfg, x)?;
    let readouts = last_readouts(&mut g, cfg, *outs.last().expect("the output norm"))?;
    g.stage("head");
    let y = match cfg.head {
        Head::Diffusion => {
            let emb = mean_rows(&mut g, readouts)?;
            diffusion(&mut g, cfg, emb, tff, steps, keep)?.1
        }
        Head::L1 => l1(&mut g, cfg, readouts)?,
    };
    let y = g.reshape(y, &[cfg.horizon, cfg.action_dim])?;
    g.build(&[y])
}
