//! BitVLA's graph, one pass: each camera through the ternary SigLIP tower, LLaVA's projector,
//! the proprio feature, the prompt's embeddings with the placeholders replaced, BitNet over
//! the whole sequence with no mask (the reference's `use_bi_attn`), the final norm at the
//! head's rows and OpenVLA-OFT's L1 head. Every ternary matrix is an integer site: the
//! graph builder makes one where a matmul meets I8 codes ([`crate::foldquant::ternary_form`]).

use super::BitvlaConfig;
use crate::graph::{GraphBuilder, NodeId};
use crate::layers::{attend, linear, linear_add, rms_norm};
use crate::models::openvla::{self, frame_input, OpenVlaArch, PromptShape, IDS, STATE};
use crate::models::openvla_oft::graphs::l1_head;
use crate::modules::decoder::{Layer, Rotary};
use crate::modules::vision::vision_tower;
use crate::{Result, Tensor};

/// Every camera's projected patches `[cameras * n_patches, lm hidden]`: the tower read at
/// its last layer, then `mm.linear_1`, GELU, `mm.linear_2`.
pub fn patches(g: &mut GraphBuilder, cfg: &BitvlaConfig, towers: &[NodeId]) -> Result<NodeId> {
    let x = match towers {
        [one] => *one,
        _ => g.concat(towers, 0)?,
    };
    let h = cfg.lm.hidden;
    let x = linear(g, x, "mm.linear_1", h, true)?;
    let x = g.gelu_erf(x);
    linear(g, x, "mm.linear_2", h, true)
}

/// Each camera's tower output `[n_patches, vit hidden]` from its frame input.
pub fn towers(g: &mut GraphBuilder, cfg: &BitvlaConfig) -> Result<Vec<NodeId>> {
    let (s, camera, tower) = (cfg.vision.image_size, cfg.camera(), cfg.vision.tower());
    (0..cfg.vision.num_images)
        .map(|i| {
            let x = g.input_u8(frame_input(i), &[s, s, 3]);
            let px = openvla::pixels(g, &camera, x, "sig")?;
            vision_tower(g, px, &tower)
        })
        .collect()
}

/// The language model's input `[P + slots + 1, hidden]` from `ids` `[P + 1]` (the prompt,
/// then the stop token): the prompt's embeddings with its image placeholders (from
/// `p.image_start`) replaced by the patches and the proprio placeholder after them by `pro`
/// `[1, hidden]`, the zeroed action slots, the stop token's embedding.
pub fn sequence(
    g: &mut GraphBuilder,
    cfg: &BitvlaConfig,
    ids: NodeId,
    patches: NodeId,
    pro: NodeId,
    p: PromptShape,
) -> Result<NodeId> {
    let (h, n, rows) = (cfg.lm.hidden, p.len, cfg.image_rows());
    let table = g.weight("token_embd.weight", &[cfg.lm.vocab, h])?;
    let emb = g.embedding(table, ids)?;
    let slots = cfg.slots();
    let zeros = g.constant(
        "lm.action_slots",
        Tensor::from_f32(vec![slots, h], vec![0.0; slots * h])?,
    )?;
    let after = p.image_start + rows + 1;
    let mut parts = Vec::new();
    if p.image_start > 0 {
        parts.push(g.slice(emb, 0, 0, p.image_start)?);
    }
    parts.extend([patches, pro]);
    if n > after {
        parts.push(g.slice(emb, 0, after, n - after)?);
    }
    parts.extend([zeros, g.slice(emb, 0, n, 1)?]);
    g.concat(&parts, 0)
}

/// BitNet layer `i` over `x` with no mask: attention with `attn_sub_norm` before `attn_o`,
/// then `ffn_down(ffn_sub_norm(relu(gate)² * up))`, both residuals added in the last
/// projection's op.
pub fn layer(
    g: &mut GraphBuilder,
    cfg: &BitvlaConfig,
    i: usize,
    x: NodeId,
    pos: NodeId,
) -> Result<NodeId> {
    let dec = cfg.lm.decoder(false);
    let (h, eps) = (cfg.lm.hidden, cfg.lm.rms_eps);
    let l = Layer::new("lm", i, cfg.lm.inter, &dec);
    let s = &l.scope;
    let query = l.query(g, x)?;
    let q = l.rotate(g, query.q, Rotary::Positions(pos))?;
    let kv = l.rotated_kv(g, query.normed, Rotary::Positions(pos))?;
    let o = attend(g, q, &[kv], None)?;
    let o = rms_norm(g, o, &s.pp("attn_sub_norm"), eps)?;
    let x = linear_add(g, o, &s.pp("attn_o"), h, x)?;
    let y = rms_norm(g, x, &s.pp("ffn_norm"), eps)?;
    let gate = linear(g, y, &s.pp("ffn_gate"), cfg.lm.inter, false)?;
    let up = linear(g, y, &s.pp("ffn_up"), cfg.lm.inter, false)?;
    let r = g.relu(gate);
    let r2 = g.mul(r, r)?;
    let y = g.mul(r2, up)?;
    let y = rms_norm(g, y, &s.pp("ffn_sub_norm"), eps)?;
    linear_add(g, y, &s.pp("ffn_down"), h, x)
}

/// The language model over `x` `[L, hidden]` at positions `0..L`: every layer's output.
pub fn language_model(g: &mut GraphBuilder, cfg: &BitvlaConfig, x: NodeId) -> Result<Vec<NodeId>> {
    let l = g.shape(x)[0];
    let pos: Vec<f32> = (0..l).map(|i| i as f32).collect();
    let pos = g.constant("lm.positions", Tensor::from_f32(vec![l], pos)?)?;
    let mut out = Vec::with_capacity(cfg.lm.layers);
    let mut x = x;
    for i in 0..cfg.lm.layers {
        x = layer(g, cfg, i, x, pos)?;
        out.push(x);
    }
    Ok(out)
}

/// The head's rows of the last layer's output `x` (one before each action slot: the
/// prompt's last token and all but the last slot), after the final norm.
pub fn head_rows(
    g: &mut GraphBuilder,
    cfg: &BitvlaConfig,
    x: NodeId,
    p: PromptShape,
) -> Result<NodeId> {
    let rows = g.slice(x, 0, p.len - 1, cfg.slots())?;
    rms_norm(g, rows, "lm.output_norm", cfg.lm.rms_eps)
}

/// The whole predict ([`openvla::OpenVlaArch::predict`]).
pub fn predict(g: &mut GraphBuilder, cfg: &BitvlaConfig, p: PromptShape) -> Result<NodeId> {
    let h = cfg.lm.hidden;
    let towers = towers(g, cfg)?;
    let ids = g.input(IDS, &[p.len + 1]);
    let state = g.input(STATE, &[1, cfg.io.proprio_dim]);
    let patches = patches(g, cfg, &towers)?;
    let pro = openvla::proprio(g, state, h)?;
    let x = sequence(g, cfg, ids, patches, pro, p)?;
    let layers = language_model(g, cfg, x)?;
    let rows = head_rows(g, cfg, layers[layers.len() - 1], p)?;
    let out = l1_head(g, &cfg.io, &cfg.head, h, rows)?;
    Ok(out[out.len() - 1])
}
