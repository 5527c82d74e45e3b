//! OpenVLA-OFT's graph, one pass: the cameras through Prismatic's towers and projector, the
//! proprio token, Llama 2 over the whole sequence with no mask (bidirectional, as the
//! reference's transformers fork runs it), the final norm at the head's rows, and the L1
//! head's MLP-ResNet.

use super::{OftHead, OpenVlaOftConfig};
use crate::graph::{GraphBuilder, NodeId};
use crate::layers::{layer_norm, linear, rms_norm, Scope};
use crate::models::openvla;
use crate::models::openvla::ActionIo;
use crate::modules::decoder::{DecoderStack, Rotary};
use crate::{Result, Tensor};

/// The language model's input `[L, hidden]` from `ids` `[P + 1]` (the prompt's ids, the empty
/// token last, then the stop token's), the patches and the proprio token `p` `[1, hidden]`:
/// `[BOS, patches, proprio, the rest of the prompt, zeroed action slots, stop]`.
pub fn sequence(
    g: &mut GraphBuilder,
    cfg: &OpenVlaOftConfig,
    ids: NodeId,
    patches: NodeId,
    p: NodeId,
) -> Result<NodeId> {
    let (h, n) = (cfg.lm.hidden, g.shape(ids)[0] - 1);
    let table = g.weight("token_embd.weight", &[cfg.lm.vocab, h])?;
    let emb = g.embedding(table, ids)?;
    let slots = cfg.slots();
    let zeros = g.constant(
        "lm.action_slots",
        Tensor::from_f32(vec![slots, h], vec![0.0; slots * h])?,
    )?;
    let mut parts = vec![g.slice(emb, 0, 0, 1)?, patches, p];
    if n > 1 {
        parts.push(g.slice(emb, 0, 1, n - 1)?);
    }
    parts.extend([zeros, g.slice(emb, 0, n, 1)?]);
    g.concat(&parts, 0)
}

/// The last hidden state at the head's rows ([`OpenVlaOftConfig::head_start`], `slots`
/// rows), after the final norm.
pub fn head_rows(
    g: &mut GraphBuilder,
    cfg: &OpenVlaOftConfig,
    x: NodeId,
    n_prompt: usize,
) -> Result<NodeId> {
    let l = g.shape(x)[0];
    let dec = cfg.lm.decoder(false);
    let stack = DecoderStack {
        stack: "lm",
        layers: cfg.lm.layers,
        inter: cfg.lm.inter,
        cfg: &dec,
    };
    let pos: Vec<f32> = (0..l).map(|i| i as f32).collect();
    let pos = g.constant("lm.positions", Tensor::from_f32(vec![l], pos)?)?;
    let x = stack.forward(g, x, Rotary::Positions(pos), None, &[])?;
    let rows = g.slice(x, 0, cfg.head_start(n_prompt), cfg.slots())?;
    rms_norm(g, rows, "lm.output_norm", cfg.lm.rms_eps)
}

/// The L1 head over the rows `[slots, hidden]`: reshaped `[chunk, action_dim * hidden]`,
/// `ln1`, `fc1`, ReLU, each block `x + relu(lin(ln(x)))`, `ln2`, `fc2`; then rows after
/// `fc1` + ReLU and after each block, then the output `[chunk, action_dim]` (the stages a
/// golden test checks).
pub fn head(g: &mut GraphBuilder, cfg: &OpenVlaOftConfig, rows: NodeId) -> Result<Vec<NodeId>> {
    l1_head(g, &cfg.io, &cfg.head, cfg.lm.hidden, rows)
}

/// [`head`] of any arch with OpenVLA-OFT's head (BitVLA's too), `hidden` the rows' width.
pub fn l1_head(
    g: &mut GraphBuilder,
    io: &ActionIo,
    hd: &OftHead,
    hidden: usize,
    rows: NodeId,
) -> Result<Vec<NodeId>> {
    let s = Scope::new("aex.head");
    let x = g.reshape(rows, &[io.chunk, io.action_dim * hidden])?;
    let x = layer_norm(g, x, &s.pp("ln1"), hd.head_ln_eps)?;
    let x = linear(g, x, &s.pp("fc1"), hd.head_hidden, true)?;
    let mut x = g.relu(x);
    let mut out = vec![x];
    for i in 0..hd.head_blocks {
        let b = s.pp("blk").pp(i);
        let y = layer_norm(g, x, &b.pp("ln"), hd.head_ln_eps)?;
        let y = linear(g, y, &b.pp("lin"), hd.head_hidden, true)?;
        let y = g.relu(y);
        x = g.add(x, y)?;
        out.push(x);
    }
    let x = layer_norm(g, x, &s.pp("ln2"), hd.head_ln_eps)?;
    out.push(linear(g, x, &s.pp("fc2"), io.action_dim, true)?);
    Ok(out)
}

/// The whole predict ([`openvla::OpenVlaArch::predict`]).
pub fn predict(g: &mut GraphBuilder, cfg: &OpenVlaOftConfig, n_prompt: usize) -> Result<NodeId> {
    let h = cfg.lm.hidden;
    let (ids, state, patches) = openvla::inputs(g, &cfg.vision, &cfg.io, n_prompt, h)?;
    let p = openvla::proprio(g, state, h)?;
    let x = sequence(g, cfg, ids, patches, p)?;
    let rows = head_rows(g, cfg, x, n_prompt)?;
    let out = head(g, cfg, rows)?;
    Ok(out[out.len() - 1])
}
