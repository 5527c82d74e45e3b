//! BERT's encoder (Hugging Face's `BertModel`, read at its last hidden state): word,
//! position and token-type embeddings summed and normalised, then post-LN layers of
//! attention under a given mask and an exact-erf GELU MLP. Tensors in Hugging Face's names
//! under a prefix, as vla.cpp keeps them: `{p}.embed.{word,position,token_type}_embeddings`,
//! `{p}.embed.LayerNorm`, `{p}.encoder.layer.{i}.attention.self.{query,key,value}`,
//! `.attention.output.{dense,LayerNorm}`, `.intermediate.dense`, `.output.{dense,LayerNorm}`.

use crate::graph::{GraphBuilder, NodeId};
use crate::layers::{attend, layer_norm, linear, split_heads, Scope};
use crate::Result;

/// BERT's LayerNorm epsilon (`layer_norm_eps`, 1e-12 in every released BERT).
pub const LN_EPS: f32 = 1e-12;

/// A BERT encoder's sizes; the tables' rows as stored.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BertConfig {
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub inter: usize,
    pub vocab: usize,
    pub max_positions: usize,
    pub token_types: usize,
}

/// The embeddings of `ids` `[S]` at `positions` `[S]` (token type 0), normalised: `[S, hidden]`.
pub fn bert_embeddings(
    g: &mut GraphBuilder,
    p: &Scope,
    cfg: &BertConfig,
    ids: NodeId,
    positions: NodeId,
) -> Result<NodeId> {
    let e = p.pp("embed");
    let d = cfg.hidden;
    let words = g.weight(&e.pp("word_embeddings"), &[cfg.vocab, d])?;
    let x = g.embedding(words, ids)?;
    let table = g.weight(&e.pp("position_embeddings"), &[cfg.max_positions, d])?;
    let pos = g.embedding(table, positions)?;
    let x = g.add(x, pos)?;
    let types = g.weight(&e.pp("token_type_embeddings"), &[cfg.token_types, d])?;
    let first = g.slice(types, 0, 0, 1)?;
    let x = g.add(x, first)?;
    layer_norm(g, x, &e.pp("LayerNorm"), LN_EPS)
}

/// Layer `i` over `x` `[S, hidden]`, keys allowed by `mask` (`[S, S]`, nonzero = may attend).
pub fn bert_layer(
    g: &mut GraphBuilder,
    p: &Scope,
    cfg: &BertConfig,
    x: NodeId,
    mask: NodeId,
    i: usize,
) -> Result<NodeId> {
    let (d, hd) = (cfg.hidden, cfg.hidden / cfg.heads);
    let l = p.pp("encoder.layer").pp(i);
    let a = l.pp("attention");
    let heads = |g: &mut GraphBuilder, n: &str| {
        let y = linear(g, x, &a.pp("self").pp(n), d, true)?;
        split_heads(g, y, cfg.heads, hd)
    };
    let (q, k, v) = (heads(g, "query")?, heads(g, "key")?, heads(g, "value")?);
    let o = attend(g, q, &[(k, v)], Some(mask))?;
    let o = linear(g, o, &a.pp("output.dense"), d, true)?;
    let x = g.add(x, o)?;
    let x = layer_norm(g, x, &a.pp("output.LayerNorm"), LN_EPS)?;
    let h = linear(g, x, &l.pp("intermediate.dense"), cfg.inter, true)?;
    let h = g.gelu_erf(h);
    let h = linear(g, h, &l.pp("output.dense"), d, true)?;
    let x = g.add(x, h)?;
    layer_norm(g, x, &l.pp("output.LayerNorm"), LN_EPS)
}

/// The encoder over `ids` `[S]` at `positions` `[S]` under `mask` `[S, S]`: the embeddings,
/// then each layer's output (the last is the last hidden state).
pub fn bert_encoder(
    g: &mut GraphBuilder,
    prefix: &str,
    cfg: &BertConfig,
    ids: NodeId,
    positions: NodeId,
    mask: NodeId,
) -> Result<Vec<NodeId>> {
    let p = Scope::new(prefix);
    let mut out = vec![bert_embeddings(g, &p, cfg, ids, positions)?];
    for i in 0..cfg.layers {
        let x = *out.last().expect("embeddings first");
        out.push(bert_layer(g, &p, cfg, x, mask, i)?);
    }
    Ok(out)
}
