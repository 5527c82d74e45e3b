//! GR00T N1.5's graphs, shared by the policy and by tests that inspect intermediate tensors.
//! Each takes a builder over the GGUF (or a declaring one) and the config.

use super::Gr00tConfig;
use crate::graph::{Graph, GraphBuilder, NodeId};
use crate::layers::{layer_norm, linear, linear_in_out, rms_norm, splice_rows};
use crate::models::flow::{valid_rows, VALID};
use crate::modules::decoder::{finish_layer, norm_and_query, rotate, rotated_kv, Layer};
use crate::modules::dit::TIMESTEP_CHANNELS;
use crate::modules::dit::{block_kv, cross_blocks, dit, self_attention_stack, time_condition};
use crate::modules::vision::vision_tower;
use crate::Result;

/// `image.{i}` `[3, S, S]` in [-1, 1] -> image tokens `[n_images * T, hidden]`.
pub fn vision(mut g: GraphBuilder, cfg: &Gr00tConfig) -> Result<Graph> {
    let s = cfg.vision.image_size;
    let views = (0..cfg.io.n_images)
        .map(|i| {
            let img = g.input(format!("image.{i}"), &[3, s, s]);
            let x = vision_tower(&mut g, img, &cfg.vision)?;
            linear(&mut g, x, "mm.fc", cfg.lm.hidden, true)
        })
        .collect::<Result<Vec<_>>>()?;
    let out = match views.as_slice() {
        [one] => *one,
        _ => g.concat(&views, 0)?,
    };
    g.build(&[out])
}

/// The sequence's embeddings `[L, hidden]` with camera `i`'s image tokens in place of
/// its `<IMG_CONTEXT>` run ([`Gr00tConfig::image_starts`]).
fn spliced_embeddings(
    g: &mut GraphBuilder,
    cfg: &Gr00tConfig,
    img: NodeId,
    tokens: NodeId,
) -> Result<NodeId> {
    let (h, t) = (cfg.lm.hidden, cfg.n_img_tokens());
    let table = g.weight("token_embd.weight", &[cfg.lm.vocab_size, h])?;
    let text = g.embedding(table, tokens)?;
    let pieces = cfg
        .image_starts()
        .into_iter()
        .enumerate()
        .map(|(i, start)| Ok((start, g.slice(img, 0, i * t, t)?)))
        .collect::<Result<Vec<_>>>()?;
    splice_rows(g, text, &pieces, false)
}

/// The VLM's features (the Qwen3 decoder, causal, over the spliced prompt, then its
/// final norm) and what the head makes of them, `[L, hidden]` each: `vlln` and the VL
/// self-attention blocks (which see the real tokens only). Inputs `img_tokens`, `tokens`
/// `[L]`, `positions` `[L]`, `valid` `[L]`.
pub fn backbone(g: &mut GraphBuilder, cfg: &Gr00tConfig) -> Result<(NodeId, NodeId)> {
    let (l, h, a) = (cfg.seq_len(), cfg.lm.hidden, &cfg.attn);
    let img = g.input("img_tokens", &[cfg.io.n_images * cfg.n_img_tokens(), h]);
    let tokens = g.input("tokens", &[l]);
    let positions = g.input("positions", &[l]);
    let valid = g.input(VALID, &[l]);
    let mask = cfg.layout(l).allowed(g, valid)?;
    let mut x = spliced_embeddings(g, cfg, img, tokens)?;
    for i in 0..cfg.lm.n_layers {
        let layer = Layer::new("vlm", i, cfg.lm.inter);
        let (hn, q, _) = norm_and_query(g, x, &layer, a)?;
        let q = rotate(g, q, positions, a)?;
        let (k, v) = rotated_kv(g, hn, positions, &layer.prefix, a)?;
        x = finish_layer(g, x, q, k, v, Some(mask), None, &layer, a)?;
    }
    let lm = rms_norm(g, x, "vlm.output_norm", a.norm_eps)?;
    let x = layer_norm(g, lm, "aex.vlln", 1e-5)?;
    let keys = valid_rows(g, valid, l)?;
    Ok((
        lm,
        self_attention_stack(g, x, Some(keys), "aex.vlsa", &cfg.vlsa)?,
    ))
}

/// [`backbone`], then the keys and values `[L, dit_heads, dit_head_dim]` of every
/// cross-attending DiT block, in block order (k, v).
pub fn prefill(mut g: GraphBuilder, cfg: &Gr00tConfig) -> Result<Graph> {
    let (_, vl) = backbone(&mut g, cfg)?;
    let mut outputs = Vec::new();
    for j in 0..cross_blocks(&cfg.dit) {
        let (k, v) = block_kv(&mut g, vl, &format!("aex.dit.{}", 2 * j), &cfg.dit)?;
        outputs.extend([k, v]);
    }
    g.build(&outputs)
}

/// An embodiment MLP `<prefix>.{layers}` with ReLU between layers.
fn embodiment_mlp(
    g: &mut GraphBuilder,
    x: NodeId,
    prefix: &str,
    widths: [usize; 2],
) -> Result<NodeId> {
    let h = linear_in_out(g, x, &format!("{prefix}.l1"), widths[0])?;
    let h = g.relu(h);
    linear_in_out(g, h, &format!("{prefix}.l2"), widths[1])
}

/// One velocity. Inputs `x_t` `[chunk, max_action_dim]`, `time_emb` `[chunk, E + 256]`
/// ([`FlowArch::time_input`]), `state` `[1, max_state_dim]` (normalised, padded), the
/// prefill's `valid` `[L]` and `kv.{j}.k` / `kv.{j}.v`. Output `[chunk,
/// max_action_dim]`.
pub fn denoise(mut g: GraphBuilder, cfg: &Gr00tConfig) -> Result<Graph> {
    let v = velocity(&mut g, cfg)?;
    g.build(&[v])
}

fn velocity(g: &mut GraphBuilder, cfg: &Gr00tConfig) -> Result<NodeId> {
    let (hd, io) = (&cfg.head, &cfg.io);
    let (c, e, l) = (io.chunk_size, hd.embed, cfg.seq_len());
    let x_t = g.input("x_t", &[c, io.max_action_dim]);
    let time = g.input("time_emb", &[c, e + TIMESTEP_CHANNELS]);
    let state = g.input("state", &[1, io.max_state_dim]);
    let valid = g.input(VALID, &[l]);
    let state = embodiment_mlp(g, state, "aex.state_enc", [hd.hidden, e])?;
    let tau = g.slice(time, 1, 0, e)?;
    let a = linear_in_out(g, x_t, "aex.act_enc.W1", e)?;
    let a = g.concat(&[a, tau], 1)?;
    let a = linear_in_out(g, a, "aex.act_enc.W2", e)?;
    let a = g.silu(a);
    let a = linear_in_out(g, a, "aex.act_enc.W3", e)?;
    let pos = g.weight("aex.pos_embd.weight", &[hd.max_seq_len, e])?;
    let pos = g.slice(pos, 0, 0, c)?;
    let a = g.add(a, pos)?;
    let mut parts = vec![state];
    if hd.future_tokens > 0 {
        parts.push(g.weight("aex.future_tokens.weight", &[hd.future_tokens, e])?);
    }
    parts.push(a);
    let x = g.concat(&parts, 0)?;
    let proj = g.slice(time, 0, 0, 1)?;
    let proj = g.slice(proj, 1, e, TIMESTEP_CHANNELS)?;
    let temb = time_condition(g, proj, "aex.dit", cfg.dit.width())?;
    let cross: Vec<(NodeId, NodeId)> = (0..cross_blocks(&cfg.dit))
        .map(|j| {
            let (hh, dd) = (cfg.dit.heads, cfg.dit.head_dim);
            let k = g.input(format!("kv.{j}.k"), &[l, hh, dd]);
            let v = g.input(format!("kv.{j}.v"), &[l, hh, dd]);
            (k, v)
        })
        .collect();
    let mask = valid_rows(g, valid, cfg.suffix_len())?;
    let out = dit(
        g,
        x,
        temb,
        &cross,
        Some(mask),
        "aex.dit",
        &cfg.dit,
        hd.hidden,
    )?;
    let s = cfg.suffix_len();
    let out = g.slice(out, 0, s - c, c)?;
    embodiment_mlp(g, out, "aex.act_dec", [hd.hidden, io.max_action_dim])
}
