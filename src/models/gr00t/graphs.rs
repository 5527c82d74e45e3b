//! GR00T N1.5's graphs, shared by the policy and by tests that inspect intermediate tensors.
//! Each takes a builder over the GGUF (or a declaring one) and the config.

use super::Gr00tConfig;
use crate::graph::{Graph, GraphBuilder, NodeId};
use crate::layers::{linear, place_rows, rms_norm, splice_rows};
use crate::models::flow::{valid_rows, VALID};
use crate::modules::decoder::DecoderStack;
use crate::modules::dit::cross_blocks;
use crate::modules::flow::names;
use crate::modules::gr00t_head::{vl_context, Gr00tHead, HeadLinears};
use crate::modules::vision::vision_tower;
use crate::Result;

/// `image.{i}` `[3, S, S]` in [-1, 1] -> image tokens `[n_images * T, hidden]`.
pub fn vision(mut g: GraphBuilder, cfg: &Gr00tConfig) -> Result<Graph> {
    let s = cfg.vision.image_size;
    let views = (0..cfg.io.n_images)
        .map(|i| {
            let img = g.input(names::image(i), &[3, s, s]);
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
/// its `<IMG_CONTEXT>` run ([`Gr00tConfig::image_starts`]); where the file has no template,
/// where the request's inputs place them ([`names::IMAGE_PLACES`], [`names::TEXT_KEEP`]).
fn spliced_embeddings(
    g: &mut GraphBuilder,
    cfg: &Gr00tConfig,
    img: NodeId,
    tokens: NodeId,
) -> Result<NodeId> {
    let (h, t) = (cfg.lm.hidden, cfg.n_img_tokens());
    let table = g.weight("token_embd.weight", &[cfg.lm.vocab_size, h])?;
    let text = g.embedding(table, tokens)?;
    if cfg.prompt.from_client {
        let (l, n) = (cfg.seq_len(), cfg.io.n_images * t);
        let places = g.input(names::IMAGE_PLACES, &[1, l, n]);
        let keep = g.input(names::TEXT_KEEP, &[l, 1]);
        return place_rows(g, text, img, places, keep);
    }
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
    let img = g.input(
        names::IMG_TOKENS,
        &[cfg.io.n_images * cfg.n_img_tokens(), h],
    );
    let tokens = g.input(names::TOKENS, &[l]);
    let positions = g.input("positions", &[l]);
    let valid = g.input(VALID, &[l]);
    let mask = cfg.layout(l).allowed(g, valid)?;
    let x = spliced_embeddings(g, cfg, img, tokens)?;
    let (n, inter) = (cfg.lm.n_layers, cfg.lm.inter);
    let lm = DecoderStack {
        stack: "vlm",
        layers: n,
        inter,
        cfg: a,
    };
    let x = lm.forward(g, x, positions.into(), Some(mask), &[])?;
    let lm = rms_norm(g, x, "vlm.output_norm", a.norm_eps)?;
    let keys = valid_rows(g, valid, l)?;
    Ok((lm, vl_context(g, lm, keys, &cfg.vlsa)?))
}

/// [`backbone`], then the keys and values `[L, dit_heads, dit_head_dim]` of every
/// cross-attending DiT block, in block order (k, v).
pub fn prefill(mut g: GraphBuilder, cfg: &Gr00tConfig) -> Result<Graph> {
    let (_, vl) = backbone(&mut g, cfg)?;
    let outputs = action_head(cfg).cross_kv(&mut g, vl)?;
    g.build(&outputs)
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
    let l = cfg.seq_len();
    let valid = g.input(VALID, &[l]);
    let head = action_head(cfg);
    let inputs = head.inputs(g, l);
    let mask = valid_rows(g, valid, cfg.suffix_len())?;
    let masks = vec![mask; cross_blocks(&cfg.dit)];
    head.velocity(g, inputs, &masks)
}

/// The action head: its DiT, encoders and decoder stored as PerEmbodiment.
fn action_head(cfg: &Gr00tConfig) -> Gr00tHead<'_> {
    Gr00tHead {
        head: &cfg.head,
        dit: &cfg.dit,
        linears: HeadLinears::PerEmbodiment,
        io: cfg.chunk_shape(),
    }
}
