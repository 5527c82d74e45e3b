//! VLA-JEPA's graphs, shared by the policy and by tests that inspect intermediate tensors.

use super::VlaJepaConfig;
use crate::graph::{Graph, GraphBuilder, NodeId};
use crate::models::flow::VALID;
use crate::modules::flow::names;
use crate::modules::gr00t_head::{Gr00tHead, HeadLinears};
use crate::modules::qwen_text::{ImageRows, Images, QwenText};
use crate::modules::qwen_vision::towers_side_by_side;
use crate::Result;

/// The prefill's input selecting the embodied tokens' rows of the sequence: one-hot rows
/// `[n_embodied, L]` (a product with the features, which every backend runs exactly).
pub const EMBODIED_ROWS: &str = "embodied_rows";

/// `image.{i}` `[3, H, W]` in [-1, 1] -> `[n_images * T, (1 + taps) * hidden]`.
pub fn vision(mut g: GraphBuilder, cfg: &VlaJepaConfig) -> Result<Graph> {
    let out = towers_side_by_side(&mut g, &cfg.vision, cfg.io.n_images, "vit")?;
    g.build(&[out])
}

/// The embodied tokens' hidden states `[n_embodied, hidden]`: the language model over the
/// spliced prompt (causal, M-RoPE, deepstack), the last layer's output before the final
/// norm, at the rows `embodied_rows` selects. Inputs `img_tokens`, `tokens` `[L]`, `valid`
/// `[L]`, `embodied_rows` `[n_embodied, L]`.
pub fn conditioning(g: &mut GraphBuilder, cfg: &VlaJepaConfig) -> Result<NodeId> {
    let (l, h, v) = (cfg.seq_len(), cfg.lm.hidden, &cfg.vision);
    let taps = v.deepstack.len();
    let img = g.input(
        names::IMG_TOKENS,
        &[cfg.io.n_images * cfg.n_img_tokens(), (1 + taps) * h],
    );
    let tokens = g.input(names::TOKENS, &[l]);
    let valid = g.input(VALID, &[l]);
    let n = cfg.n_embodied();
    let rows = g.input(EMBODIED_ROWS, &[1, n, l]);
    let mask = cfg.layout(l).allowed(g, valid)?;
    let images = match cfg.prompt.from_client {
        true => Images::placed(g, img, v, l)?,
        false => Images::Spans(ImageRows::of_cameras(g, img, v, cfg.image_spans())?),
    };
    let lm = QwenText {
        lm: &cfg.lm,
        attn: &cfg.attn,
        mrope: &cfg.mrope,
    };
    let features = lm.features(g, tokens, &images, mask)?;
    let features = g.reshape(features, &[1, l, h])?;
    let cond = g.bmm(rows, features, false)?;
    g.reshape(cond, &[n, h])
}

/// [`conditioning`], then the keys and values of every cross-attending DiT block.
pub fn prefill(mut g: GraphBuilder, cfg: &VlaJepaConfig) -> Result<Graph> {
    let cond = conditioning(&mut g, cfg)?;
    let outputs = action_head(cfg).cross_kv(&mut g, cond)?;
    g.build(&outputs)
}

/// One velocity `[chunk, action_dim]`. Inputs `x_t`, `time_emb`, `state` `[1, state_dim]`
/// (normalised), `kv.{j}.k` / `kv.{j}.v` `[n_embodied, dit_heads, dit_head_dim]`, and the
/// prefill's `valid` (unused: every embodied token is real).
pub fn denoise(mut g: GraphBuilder, cfg: &VlaJepaConfig) -> Result<Graph> {
    let _ = g.input(VALID, &[cfg.seq_len()]);
    let head = action_head(cfg);
    let inputs = head.inputs(&mut g, cfg.n_embodied());
    let v = head.velocity(&mut g, inputs, &[])?;
    g.build(&[v])
}

/// The action head: its DiT, encoders and decoder stored as Plain.
fn action_head(cfg: &VlaJepaConfig) -> Gr00tHead<'_> {
    Gr00tHead {
        head: &cfg.head,
        dit: &cfg.dit,
        linears: HeadLinears::Plain,
        io: cfg.chunk_shape(),
    }
}
