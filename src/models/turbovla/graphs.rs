//! TurboVLA's predict as one graph: each view through DINOv3 and the vision projection
//! (plus its view embedding), the instruction through BERT and the text projection, the
//! fusion layers (bi-directional cross-attention, then the text enhancer under the
//! sub-sentence mask), the state tokens, and the ACT decoder whose action queries attend to
//! [image, text, state] rows, then the action MLP and `tanh`. Parts are public so the golden
//! test checks each stage.

use super::config::{TurboConfig, LN_EPS};
use crate::graph::{Graph, GraphBuilder, NodeId};
use crate::layers::{self, attend, layer_norm, linear, split_heads, Scope};
use crate::modules::{bert, dinov3};
use crate::preprocess::{FrameKey, PixelMap};
use crate::{Result, Tensor};

/// Input names: each view's frame (`image.{v}`, `[S, S, 3]`), the instruction's padded ids
/// and BERT's positions (`[bert_len]`), BERT's mask (`[bert_len, bert_len]`), the enhancer's
/// (`[len, len]`), which text rows each image token may attend to (`[V * N, len]`), and the
/// normalised state (`[1, state_dim]`).
pub const IDS: &str = "text.ids";
pub const POSITIONS: &str = "text.positions";
pub const BERT_MASK: &str = "text.bert_mask";
pub const TEXT_MASK: &str = "text.mask";
pub const KEYS: &str = "text.keys";
pub const STATE: &str = "state";

pub fn frame_input(v: usize) -> String {
    format!("image.{v}")
}

/// A view's frame (bytes, or floats in [0, 1]) normalised with ImageNet's statistics, as
/// DINOv3's processor does: `[3, S, S]`.
pub fn pixels(g: &mut GraphBuilder, name: &str, key: FrameKey) -> Result<NodeId> {
    // as a frame plan maps a frame at the model's size (preprocess::frames)
    let unit = if key.bytes { 1.0 / 255.0 } else { 1.0 };
    let maps = [0, 1, 2].map(|c| PixelMap::IMAGENET.affine(c));
    let scale = maps.map(|(slope, _)| slope * unit);
    let offset = maps.map(|(_, offset)| offset);
    let id = format!("turbovla.pixels.{}", if key.bytes { "u8" } else { "f32" });
    let x = layers::scaled_frame(g, (name, key), &id, &scale, Some(&offset))?;
    g.permute(x, &[2, 0, 1])
}

/// The vision projection of tower features `x` `[rows, vit_dim]`:
/// `norm(skip(x) + mlp(norm(x)))`, `[rows, hidden]`.
pub fn vision_projection(g: &mut GraphBuilder, cfg: &TurboConfig, x: NodeId) -> Result<NodeId> {
    let p = Scope::new("vit_proj");
    let skip = linear(g, x, &p.pp("skip"), cfg.hidden, false)?;
    let h = layer_norm(g, x, &p.pp("input_norm"), LN_EPS)?;
    let h = linear(g, h, &p.pp("mlp.0"), cfg.proj_hidden, true)?;
    let h = g.gelu_erf(h);
    let h = linear(g, h, &p.pp("mlp.3"), cfg.hidden, true)?;
    let y = g.add(skip, h)?;
    layer_norm(g, y, &p.pp("output_norm"), LN_EPS)
}

/// The image tokens `[V * N, hidden]` of the towers' outputs `towers` (one `[N, vit_dim]` per
/// view): projected, each view's embedding added.
pub fn image_tokens(g: &mut GraphBuilder, cfg: &TurboConfig, towers: &[NodeId]) -> Result<NodeId> {
    let (v, n, d) = (cfg.num_views, cfg.vit.n_patches(), cfg.hidden);
    let x = g.concat(towers, 0)?;
    let x = vision_projection(g, cfg, x)?;
    let x = g.reshape(x, &[v, n, d])?;
    let views = match cfg.flat_views {
        true => g.weight("view_emb", &[v, d])?,
        false => g.weight("view_emb", &[1, v, d])?,
    };
    let views = g.reshape(views, &[v, 1, d])?;
    let x = g.add(x, views)?;
    g.reshape(x, &[v * n, d])
}

/// BERT over the instruction (the inputs [`IDS`], [`POSITIONS`], [`BERT_MASK`]): its
/// embeddings and each layer's output, `[bert_len, text_dim]`.
pub fn bert(g: &mut GraphBuilder, cfg: &TurboConfig, bert_len: usize) -> Result<Vec<NodeId>> {
    let ids = g.input(IDS, &[bert_len]);
    let positions = g.input(POSITIONS, &[bert_len]);
    let mask = g.input(BERT_MASK, &[bert_len, bert_len]);
    bert::bert_encoder(g, "text", &cfg.bert, ids, positions, mask)
}

/// BERT's last hidden state `hidden` `[bert_len, text_dim]` extended with zero rows to `len`
/// and projected: the text tokens `[len, hidden]`.
pub fn text_tokens(
    g: &mut GraphBuilder,
    cfg: &TurboConfig,
    hidden: NodeId,
    len: usize,
) -> Result<NodeId> {
    let (rows, d) = (g.shape(hidden)[0], cfg.bert.hidden);
    let extra = len.checked_sub(rows).ok_or_else(|| {
        crate::Error::InvalidArgument(format!("text tokens: {rows} BERT rows for {len} text rows"))
    })?;
    let x = match extra {
        0 => hidden,
        extra => {
            let zeros = Tensor::from_f32(vec![extra, d], vec![0.0; extra * d])?;
            let zeros = g.constant(&format!("turbovla.text_zeros.{extra}"), zeros)?;
            g.concat(&[hidden, zeros], 0)?
        }
    };
    linear(g, x, "text_proj", cfg.hidden, true)
}

/// Fusion layer `i` over image tokens `v` `[V * N, hidden]` and text tokens `l`
/// `[len, hidden]`: both normalised, the image tokens attend to the text rows `keys` allows
/// and the text to every image token through shared projections, each side's result scaled
/// by its gain and added to its normalised input. Returns the new `(v, l)`.
pub fn fusion(
    g: &mut GraphBuilder,
    cfg: &TurboConfig,
    (v, l): (NodeId, NodeId),
    keys: NodeId,
    i: usize,
) -> Result<(NodeId, NodeId)> {
    let p = Scope::new("vl_fusion").pp(i);
    let (fd, heads) = (cfg.fusion_dim, cfg.fusion_heads);
    let vn = layer_norm(g, v, &p.pp("norm_v"), LN_EPS)?;
    let ln = layer_norm(g, l, &p.pp("norm_l"), LN_EPS)?;
    let proj = |g: &mut GraphBuilder, x: NodeId, name: &str| {
        let y = linear(g, x, &p.pp(name), fd, true)?;
        split_heads(g, y, heads, fd / heads)
    };
    let q = proj(g, vn, "v_proj")?;
    let k = proj(g, ln, "l_proj")?;
    let values_v = proj(g, vn, "values_v")?;
    let values_l = proj(g, ln, "values_l")?;
    let ov = attend(g, q, &[(k, values_l)], Some(keys))?;
    let ol = attend(g, k, &[(q, values_v)], None)?;
    let mut out = [vn, ln];
    for (x, o, side) in [(0, ov, "v"), (1, ol, "l")] {
        let o = linear(g, o, &p.pp(format!("out_{side}")), cfg.hidden, true)?;
        let gain = g.weight(&p.pp(format!("gamma_{side}")), &[cfg.hidden])?;
        let o = g.mul(o, gain)?;
        out[x] = g.add(out[x], o)?;
    }
    Ok((out[0], out[1]))
}

/// Text-enhancer layer `i` over `l` `[len, hidden]` under `mask` `[len, len]`: post-norm
/// self-attention and a ReLU FFN.
pub fn enhancer(
    g: &mut GraphBuilder,
    cfg: &TurboConfig,
    l: NodeId,
    mask: NodeId,
    i: usize,
) -> Result<NodeId> {
    let p = Scope::new("vl_text").pp(i);
    let d = cfg.hidden;
    let qkv = packed(g, cfg, l, &p.pp("attn_qkv"), cfg.enhancer_heads, &[0, 1, 2])?;
    let (q, k, v) = (qkv[0], qkv[1], qkv[2]);
    let o = attend(g, q, &[(k, v)], Some(mask))?;
    let o = linear(g, o, &p.pp("attn_o"), d, true)?;
    let x = g.add(l, o)?;
    let x = layer_norm(g, x, &p.pp("ln1"), LN_EPS)?;
    let h = linear(g, x, &p.pp("fc1"), cfg.enhancer_ffn, true)?;
    let h = g.relu(h);
    let h = linear(g, h, &p.pp("fc2"), d, true)?;
    let x = g.add(x, h)?;
    layer_norm(g, x, &p.pp("ln2"), LN_EPS)
}

/// The state tokens `[state_tokens, hidden]` of the normalised state input [`STATE`].
pub fn state_tokens(g: &mut GraphBuilder, cfg: &TurboConfig) -> Result<NodeId> {
    let p = Scope::new("state.proj");
    let (s, d) = (cfg.state_tokens, cfg.hidden);
    let x = g.input(STATE, &[1, cfg.state_dim]);
    let x = layer_norm(g, x, &p.pp("0"), LN_EPS)?;
    let x = linear(g, x, &p.pp("1"), cfg.state_hidden, true)?;
    let x = g.gelu_erf(x);
    let x = linear(g, x, &p.pp("4"), s * d, true)?;
    let x = g.reshape(x, &[s, d])?;
    let pos = g.weight(&p.pp("position"), &[1, s, d])?;
    let pos = g.reshape(pos, &[s, d])?;
    let x = g.add(x, pos)?;
    layer_norm(g, x, &p.pp("output_norm"), LN_EPS)
}

/// The packed projection `{prefix}` (`[3 hidden, hidden]`, q, k, v) over `x`, split into
/// `[rows, heads, head_dim]` parts `parts` (0: q, 1: k, 2: v). The product covers all three
/// (a weight's slice cannot be a matmul operand on every backend).
fn packed(
    g: &mut GraphBuilder,
    cfg: &TurboConfig,
    x: NodeId,
    prefix: &str,
    heads: usize,
    parts: &[usize],
) -> Result<Vec<NodeId>> {
    let d = cfg.hidden;
    let y = linear(g, x, prefix, 3 * d, true)?;
    parts
        .iter()
        .map(|&k| {
            let part = g.slice(y, 1, k * d, d)?;
            split_heads(g, part, heads, d / heads)
        })
        .collect()
}

/// Decoder layer `i` (pre-norm, as PyTorch's `norm_first`): self-attention over the
/// queries `x` `[horizon, hidden]`, cross-attention to `memory`, a ReLU FFN.
pub fn decoder_layer(
    g: &mut GraphBuilder,
    cfg: &TurboConfig,
    x: NodeId,
    memory: NodeId,
    i: usize,
) -> Result<NodeId> {
    let p = Scope::new("act.dec").pp(i);
    let d = cfg.hidden;
    let heads = cfg.action_heads;
    let h = layer_norm(g, x, &p.pp("ln1"), LN_EPS)?;
    let qkv = packed(g, cfg, h, &p.pp("self_qkv"), heads, &[0, 1, 2])?;
    let o = attend(g, qkv[0], &[(qkv[1], qkv[2])], None)?;
    let o = linear(g, o, &p.pp("self_out"), d, true)?;
    let x = g.add(x, o)?;
    let h = layer_norm(g, x, &p.pp("ln2"), LN_EPS)?;
    let cross = p.pp("cross_qkv");
    let q = packed(g, cfg, h, &cross, heads, &[0])?[0];
    let kv = packed(g, cfg, memory, &cross, heads, &[1, 2])?;
    let o = attend(g, q, &[(kv[0], kv[1])], None)?;
    let o = linear(g, o, &p.pp("cross_out"), d, true)?;
    let x = g.add(x, o)?;
    let h = layer_norm(g, x, &p.pp("ln3"), LN_EPS)?;
    let h = linear(g, h, &p.pp("fc1"), cfg.decoder_ffn, true)?;
    let h = g.relu(h);
    let h = linear(g, h, &p.pp("fc2"), d, true)?;
    g.add(x, h)
}

/// The decoder over `memory` `[rows, hidden]`: each layer's output, then the actions
/// before their `tanh` `[horizon, action_dim]` (the host squashes them: no graph op has it).
pub fn decoder(g: &mut GraphBuilder, cfg: &TurboConfig, memory: NodeId) -> Result<Vec<NodeId>> {
    let mut x = g.weight("act.q.weight", &[cfg.horizon, cfg.hidden])?;
    let mut out = Vec::with_capacity(cfg.decoder_layers + 1);
    for i in 0..cfg.decoder_layers {
        x = decoder_layer(g, cfg, x, memory, i)?;
        out.push(x);
    }
    let h = linear(g, x, "act.proj.0", cfg.action_hidden, true)?;
    let h = g.relu(h);
    let h = linear(g, h, "act.proj.1", cfg.action_hidden, true)?;
    let h = g.relu(h);
    out.push(linear(g, h, "act.proj.2", cfg.action_dim, true)?);
    Ok(out)
}

/// The whole predict for frames `frames` (one per view) and a text plan of `bert_len` ids
/// seen as `len` rows: the actions before their `tanh` `[horizon, action_dim]`.
pub fn predict(
    mut g: GraphBuilder,
    cfg: &TurboConfig,
    frames: &[FrameKey],
    (bert_len, len): (usize, usize),
) -> Result<Graph> {
    g.stage("vision");
    let towers = frames
        .iter()
        .enumerate()
        .map(|(v, &key)| {
            let x = pixels(&mut g, &frame_input(v), key)?;
            dinov3::dinov3_tower(&mut g, x, &cfg.vit)
        })
        .collect::<Result<Vec<_>>>()?;
    let mut v = image_tokens(&mut g, cfg, &towers)?;
    g.stage("text");
    let hidden = *bert(&mut g, cfg, bert_len)?.last().expect("BERT's layers");
    let mut l = text_tokens(&mut g, cfg, hidden, len)?;
    g.stage("fusion");
    let rows = g.shape(v)[0];
    let keys = g.input(KEYS, &[rows, len]);
    let mask = g.input(TEXT_MASK, &[len, len]);
    for i in 0..cfg.fusion_layers {
        (v, l) = fusion(&mut g, cfg, (v, l), keys, i)?;
        l = enhancer(&mut g, cfg, l, mask, i)?;
    }
    g.stage("decoder");
    let state = state_tokens(&mut g, cfg)?;
    let memory = g.concat(&[v, l, state], 0)?;
    let out = *decoder(&mut g, cfg, memory)?.last().expect("the actions");
    g.build(&[out])
}
