//! GR00T N1.7's graphs, shared by the policy and by tests that inspect intermediate tensors.
//! Each takes a builder over the GGUF (or a declaring one) and the config.

use super::Gr00tN17Config;
use crate::graph::{Graph, GraphBuilder, NodeId};
use crate::models::flow::{mask_constant, valid_rows, VALID};
use crate::modules::dit::cross_blocks;
use crate::modules::flow::names;
use crate::modules::gr00t_head::{vl_context, Gr00tHead, HeadLinears};
use crate::modules::qwen_text::{ImageRows, Images, QwenText};
use crate::modules::qwen_vision::towers_side_by_side;
use crate::Result;

/// A client's sequence (a file without a template): 1 at its non-image and image tokens,
/// `[L]` each, inputs of [`denoise`].
pub const TEXT_ROWS: &str = "text_rows";
pub const IMAGE_ROWS: &str = "image_rows";

/// `image.{i}` `[3, H, W]` in [-1, 1] -> `[n_images * T, (1 + taps) * hidden]`
/// ([`towers_side_by_side`]).
pub fn vision(mut g: GraphBuilder, cfg: &Gr00tN17Config) -> Result<Graph> {
    let out = towers_side_by_side(&mut g, &cfg.vision, cfg.io.n_images, "vit")?;
    g.build(&[out])
}

/// The backbone's features (the language model over the spliced prompt, causal, multimodal
/// RoPE, the deepstack features added at the image rows after the first layers; the last
/// kept layer's output, no final norm) and the head's context from them (`vlln`, the VL
/// self-attention over the real tokens), `[L, hidden]` each. Inputs `img_tokens` (the
/// vision graph's output), `tokens` `[L]`, `valid` `[L]` (and, for a client's sequence,
/// [`Images::placed`]'s and the rotary tables, [`crate::modules::qwen_text::mrope_inputs`]).
pub fn backbone(g: &mut GraphBuilder, cfg: &Gr00tN17Config) -> Result<(NodeId, NodeId)> {
    let (l, h) = (cfg.seq_len(), cfg.lm.hidden);
    let taps = cfg.vision.deepstack.len();
    let img = g.input(
        names::IMG_TOKENS,
        &[cfg.io.n_images * cfg.n_img_tokens(), (1 + taps) * h],
    );
    let tokens = g.input(names::TOKENS, &[l]);
    let valid = g.input(VALID, &[l]);
    let mask = cfg.layout(l).allowed(g, valid)?;
    let images = match cfg.prompt.from_client {
        true => Images::placed(g, img, &cfg.vision, l)?,
        false => Images::Spans(ImageRows::of_cameras(
            g,
            img,
            &cfg.vision,
            cfg.image_spans(),
        )?),
    };
    let lm = QwenText {
        lm: &cfg.lm,
        attn: &cfg.attn,
        mrope: &cfg.mrope,
    };
    let features = lm.features(g, tokens, &images, mask)?;
    let keys = valid_rows(g, valid, l)?;
    Ok((features, vl_context(g, features, keys, &cfg.vlsa)?))
}

/// [`backbone`], then the keys and values `[L, dit_heads, dit_head_dim]` of every
/// cross-attending DiT block, in block order (k, v).
pub fn prefill(mut g: GraphBuilder, cfg: &Gr00tN17Config) -> Result<Graph> {
    let (_, vl) = backbone(&mut g, cfg)?;
    let outputs = action_head(cfg).cross_kv(&mut g, vl)?;
    g.build(&outputs)
}

/// One velocity. Inputs `x_t` `[chunk, max_action_dim]`, `time_emb` `[chunk, E + 256]`,
/// `state` `[1, max_state_dim]`, the prefill's `valid` `[L]` and `kv.{j}.k` / `kv.{j}.v`
/// (and, for a client's sequence, [`TEXT_ROWS`] and [`IMAGE_ROWS`] `[L]`). Cross-attending
/// block `2 j` sees the real text tokens or the image tokens
/// ([`Gr00tN17Config::attends_text`]). Output `[chunk, max_action_dim]`.
pub fn denoise(mut g: GraphBuilder, cfg: &Gr00tN17Config) -> Result<Graph> {
    let (l, s) = (cfg.seq_len(), cfg.suffix_len());
    let valid = g.input(VALID, &[l]);
    let head = action_head(cfg);
    let inputs = head.inputs(&mut g, l);
    let (text, image) = match cfg.prompt.from_client {
        true => {
            let text = g.input(TEXT_ROWS, &[l]);
            let image = g.input(IMAGE_ROWS, &[l]);
            (text, image)
        }
        false => {
            let is_image = cfg.image_rows();
            let text = mask_constant(&mut g, "mask.text_tokens", 1, l, |_, j| !is_image[j])?;
            let image = mask_constant(&mut g, "mask.image_tokens", 1, l, |_, j| is_image[j])?;
            (g.reshape(text, &[l])?, g.reshape(image, &[l])?)
        }
    };
    let masks = alternating_masks(
        &mut g,
        valid,
        (text, image),
        s,
        |j| cfg.attends_text(2 * j),
        cross_blocks(&cfg.dit),
    )?;
    let v = head.velocity(&mut g, inputs, &masks)?;
    g.build(&[v])
}

/// The masks `[s, L]` of an AlternateVLDiT's `blocks` cross-attending blocks: block `j` sees
/// the real text rows (`text` times `valid`) where `attends_text(j)`, else the image rows
/// (`text`, `image`: `[L]`, 1 at the sequence's non-image and image tokens).
pub fn alternating_masks(
    g: &mut GraphBuilder,
    valid: NodeId,
    (text, image): (NodeId, NodeId),
    s: usize,
    attends_text: impl Fn(usize) -> bool,
    blocks: usize,
) -> Result<Vec<NodeId>> {
    let text = g.mul(valid, text)?;
    let text = valid_rows(g, text, s)?;
    let image = valid_rows(g, image, s)?;
    Ok((0..blocks)
        .map(|j| match attends_text(j) {
            true => text,
            false => image,
        })
        .collect())
}

/// The action head: its DiT, encoders and decoder stored as PerEmbodiment.
fn action_head(cfg: &Gr00tN17Config) -> Gr00tHead<'_> {
    Gr00tHead {
        head: &cfg.head,
        dit: &cfg.dit,
        linears: HeadLinears::PerEmbodiment,
        io: cfg.chunk_shape(),
    }
}
