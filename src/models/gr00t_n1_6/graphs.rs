//! GR00T N1.6's graphs, shared by the policy and by tests that inspect intermediate tensors.

use super::Gr00tN16Config;
use crate::graph::{Graph, GraphBuilder, NodeId};
use crate::layers::{place_rows, rms_norm};
use crate::models::flow::{valid_rows, VALID};
use crate::modules::decoder::DecoderStack;
use crate::modules::dit::{cross_blocks, BlockStack};
use crate::modules::flow::names;
use crate::modules::gr00t_head::{vl_context, Gr00tHead, HeadLinears};
use crate::modules::vision::embed_images;
use crate::Result;

use crate::models::gr00t_n1_7::graphs::alternating_masks;
pub use crate::models::gr00t_n1_7::graphs::{IMAGE_ROWS, TEXT_ROWS};

/// `image.{i}` `[3, S, S]` in [-1, 1] -> image tokens `[n_images * T, hidden]` (SigLIP2,
/// pixel unshuffle, `mlp1`).
pub fn vision(mut g: GraphBuilder, cfg: &Gr00tN16Config) -> Result<Graph> {
    let out = embed_images(
        &mut g,
        cfg.io.n_images,
        &cfg.vision,
        cfg.connector(),
        cfg.lm.hidden,
    )?;
    g.build(&[out])
}

/// The backbone's features (Qwen3, causal, over the prompt with the image tokens where the
/// request places them, its final norm) and the head's context (`vlln`), `[L, hidden]` each.
/// Inputs `img_tokens`, `tokens`, `positions`, `valid` `[L]`, `image_places` `[1, L, n]`,
/// `text_keep` `[L, 1]`.
pub fn backbone(g: &mut GraphBuilder, cfg: &Gr00tN16Config) -> Result<(NodeId, NodeId)> {
    let (l, h, n) = (cfg.seq_len(), cfg.lm.hidden, cfg.n_image_rows());
    let img = g.input(names::IMG_TOKENS, &[n, h]);
    let tokens = g.input(names::TOKENS, &[l]);
    let positions = g.input("positions", &[l]);
    let valid = g.input(VALID, &[l]);
    let places = g.input(names::IMAGE_PLACES, &[1, l, n]);
    let keep = g.input(names::TEXT_KEEP, &[l, 1]);
    let mask = cfg.layout(l).allowed(g, valid)?;
    let table = g.weight("token_embd.weight", &[cfg.lm.vocab_size, h])?;
    let text = g.embedding(table, tokens)?;
    let x = place_rows(g, text, img, places, keep)?;
    let lm = DecoderStack {
        stack: "vlm",
        layers: cfg.lm.n_layers,
        inter: cfg.lm.inter,
        cfg: &cfg.attn,
    };
    let x = lm.forward(g, x, positions.into(), Some(mask), &[])?;
    let features = rms_norm(g, x, "vlm.output_norm", cfg.attn.norm_eps)?;
    let keys = valid_rows(g, valid, l)?;
    let none = BlockStack {
        name: "vlsa",
        ..Default::default()
    };
    Ok((features, vl_context(g, features, keys, &none)?))
}

/// [`backbone`], then the keys and values of every cross-attending DiT block.
pub fn prefill(mut g: GraphBuilder, cfg: &Gr00tN16Config) -> Result<Graph> {
    let (_, vl) = backbone(&mut g, cfg)?;
    let outputs = action_head(cfg).cross_kv(&mut g, vl)?;
    g.build(&outputs)
}

/// One velocity. Inputs as N1.7's: `x_t`, `time_emb`, `state`, the prefill's `valid`,
/// `kv.{j}.k` / `kv.{j}.v`, and [`TEXT_ROWS`] / [`IMAGE_ROWS`]: cross-attending block `2 j`
/// sees the real text tokens or the image tokens ([`Gr00tN16Config::attends_text`]).
pub fn denoise(mut g: GraphBuilder, cfg: &Gr00tN16Config) -> Result<Graph> {
    let (l, s) = (cfg.seq_len(), cfg.suffix_len());
    let valid = g.input(VALID, &[l]);
    let head = action_head(cfg);
    let inputs = head.inputs(&mut g, l);
    let text = g.input(TEXT_ROWS, &[l]);
    let image = g.input(IMAGE_ROWS, &[l]);
    let blocks = cross_blocks(&cfg.dit);
    let masks = alternating_masks(
        &mut g,
        valid,
        (text, image),
        s,
        |j| cfg.attends_text(2 * j),
        blocks,
    )?;
    let v = head.velocity(&mut g, inputs, &masks)?;
    g.build(&[v])
}

fn action_head(cfg: &Gr00tN16Config) -> Gr00tHead<'_> {
    Gr00tHead {
        head: &cfg.head,
        dit: &cfg.dit,
        linears: HeadLinears::PerEmbodiment,
        io: cfg.chunk_shape(),
    }
}
