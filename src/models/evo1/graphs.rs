//! Evo-1's graphs, shared by the policy and by tests that inspect intermediate tensors.

use super::{Evo1Config, CONNECTOR};
use crate::graph::{Graph, GraphBuilder, NodeId};
use crate::layers::{place_rows, rms_norm, splice_rows};
use crate::models::flow::{valid_rows, PrefixLayout, VALID};
use crate::modules::decoder::DecoderStack;
use crate::modules::evo1_head::{HeadInputs, TIME_ROWS};
use crate::modules::flow::names;
use crate::modules::vision::embed_images;
use crate::{Result, Tensor};

/// `image.{i}` `[3, S, S]` (ImageNet-normalised) -> image tokens `[n_images * n, hidden]`.
pub fn vision(mut g: GraphBuilder, cfg: &Evo1Config) -> Result<Graph> {
    let out = embed_images(
        &mut g,
        cfg.io.n_images,
        &cfg.vision,
        CONNECTOR,
        cfg.lm.hidden,
    )?;
    g.build(&[out])
}

/// The language model's output after its final norm, `[L, hidden]`: the token embeddings
/// with each present camera's image tokens in its view's `<IMG_CONTEXT>` run, the decoder
/// layers (causal, keys restricted to `valid`, positions `0..L`). Inputs `img_tokens`,
/// `tokens` `[L]`, `valid` `[L]`.
pub fn features(g: &mut GraphBuilder, cfg: &Evo1Config) -> Result<NodeId> {
    let (l, h, n) = (cfg.seq_len(), cfg.lm.hidden, cfg.n_img_tokens());
    let img = g.input(names::IMG_TOKENS, &[cfg.io.n_images * n, h]);
    let tokens = g.input(names::TOKENS, &[l]);
    let valid = g.input(VALID, &[l]);
    let mask = PrefixLayout::causal(l, l).allowed(g, valid)?;
    let table = g.weight("token_embd.weight", &[cfg.lm.vocab_size, h])?;
    let text = g.embedding(table, tokens)?;
    let x = match cfg.prompt.from_client {
        true => {
            let places = g.input(names::IMAGE_PLACES, &[1, l, cfg.io.n_images * n]);
            let keep = g.input(names::TEXT_KEEP, &[l, 1]);
            place_rows(g, text, img, places, keep)?
        }
        false => {
            let pieces = cfg
                .image_starts()
                .into_iter()
                .take(cfg.io.n_images)
                .enumerate()
                .map(|(i, start)| Ok((start, g.slice(img, 0, i * n, n)?)))
                .collect::<Result<Vec<_>>>()?;
            splice_rows(g, text, &pieces, false)?
        }
    };
    let positions = (0..l).map(|p| p as f32).collect::<Vec<_>>();
    let positions = g.constant(
        &format!("evo1.positions.{l}"),
        Tensor::from_f32(vec![l], positions)?,
    )?;
    let (layers, inter, a) = (cfg.lm.n_layers, cfg.lm.inter, &cfg.attn);
    let lm = DecoderStack {
        stack: "vlm",
        layers,
        inter,
        cfg: a,
    };
    let x = lm.forward(g, x, positions.into(), Some(mask), &[])?;
    rms_norm(g, x, "vlm.output_norm", a.norm_eps)
}

/// [`features`] and the state's row as the head's context, then every block's keys and
/// values over it, in block order (k, v). Inputs as [`features`] and `state` `[1,
/// max_state_dim]` (normalised, padded).
pub fn prefill(mut g: GraphBuilder, cfg: &Evo1Config) -> Result<Graph> {
    let lm = features(&mut g, cfg)?;
    let state = g.input(names::STATE, &[1, cfg.io.max_state_dim]);
    let ctx = cfg.head.context(&mut g, lm, state)?;
    let outputs = cfg.head.cross_kv(&mut g, ctx)?;
    g.build(&outputs)
}

/// One velocity `[chunk, max_action_dim]`. Inputs `x_t`, `time_emb` `[1, 1, TIME_ROWS]` (the
/// time table's row, one-hot), the prefill's `valid` `[L]` and `kv.{j}.k` / `kv.{j}.v` `[L + 1, heads, head_dim]`.
pub fn denoise(mut g: GraphBuilder, cfg: &Evo1Config) -> Result<Graph> {
    let (io, l) = (&cfg.io, cfg.seq_len());
    let x_t = g.input(names::X_T, &[io.chunk_size, io.max_action_dim]);
    let time = g.input(names::TIME_EMB, &[1, 1, TIME_ROWS]);
    let valid = g.input(VALID, &[l]);
    let (heads, hd) = (cfg.head.heads, cfg.head.embed / cfg.head.heads);
    let kv = (0..cfg.head.layers)
        .flat_map(|j| [names::key(j), names::value(j)])
        .map(|name| g.input(name, &[l + 1, heads, hd]))
        .collect::<Vec<_>>();
    // The state's row is always visible.
    let one = g.constant("evo1.one", Tensor::from_f32(vec![1], vec![1.0])?)?;
    let keys = g.concat(&[valid, one], 0)?;
    let allowed = valid_rows(&mut g, keys, io.chunk_size)?;
    let mask = Tensor::from_f32(vec![io.max_action_dim], cfg.action_mask())?;
    let mask = g.constant("evo1.action_mask", mask)?;
    let inputs = HeadInputs {
        x_t,
        time,
        action_mask: mask,
    };
    let v = cfg.head.velocity(&mut g, inputs, &kv, allowed)?;
    g.build(&[v])
}
