//! A TurboVLA file: what its graph declares (the tensors and their stored shapes) and a
//! random-weight one.

use super::config::TurboConfig;
use super::stats::TurboStats;
use super::{graphs, ARCH};
use crate::gguf::{GgmlType, GgufWriter};
use crate::graph::GraphBuilder;
use crate::preprocess::FrameKey;
use crate::tokenizer::Tokenizer;
use crate::Result;

/// Every weight the graph reads, with its stored shape.
pub fn tensor_shapes(cfg: &TurboConfig) -> Result<Vec<(String, Vec<usize>)>> {
    let s = cfg.vit.image_size;
    let frame = FrameKey {
        height: s,
        width: s,
        bytes: true,
    };
    let frames = vec![frame; cfg.num_views];
    let g = graphs::predict(GraphBuilder::over(None), cfg, &frames, (2, cfg.text_len))?;
    crate::graph::declared_weights(&[g])
}

/// Whether `name` is a matrix that `--dtype` stores in its type: the layers' weights, not
/// the token and position tables, the queries, the patch kernel.
pub fn is_matrix(name: &str) -> bool {
    ![
        "text.embed.",
        "act.q.",
        "vit.patch_embed.",
        "view_emb",
        "state.proj.position",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// A random-weight TurboVLA file of `cfg`'s sizes (matrices of type `ty`, the rest f32),
/// with `stats` and, where given, the tokenizer.
pub fn random_writer(
    cfg: &TurboConfig,
    seed: u64,
    ty: GgmlType,
    stats: &TurboStats,
    tokenizer: Option<&Tokenizer>,
) -> Result<GgufWriter<'static>> {
    let mut w = GgufWriter::new();
    cfg.write(&mut w)?;
    w.add_metadata("general.name", format!("{ARCH} random-weight model"))?;
    let shapes = tensor_shapes(cfg)?;
    crate::models::common::add_random_tensors(&mut w, &shapes, seed, ty, is_matrix)?;
    stats.write(&mut w)?;
    if let Some(t) = tokenizer {
        t.write_gguf(&mut w)?;
    }
    Ok(w)
}

/// Words the demo vocabulary holds whole (LIBERO's task vocabulary, roughly).
const DEMO_WORDS: [&str; 28] = [
    "pick", "up", "the", "black", "bowl", "and", "place", "it", "on", "plate", "put", "in",
    "basket", "open", "top", "drawer", "of", "cabinet", "cube", "red", "blue", "green", "push",
    "to", "left", "right", "stove", "turn",
];

/// A random-weight demo model of `cfg`'s sizes: the released LIBERO model's statistics and
/// a bert-base-uncased-shaped vocabulary of `cfg.bert.vocab` tokens
/// ([`crate::tokenizer::demo::bert_like_wordpiece`]), so text prompts work.
pub fn demo_writer(cfg: &TurboConfig, seed: u64, ty: GgmlType) -> Result<GgufWriter<'static>> {
    let tok = crate::tokenizer::demo::bert_like_wordpiece(&DEMO_WORDS, cfg.bert.vocab)?;
    random_writer(cfg, seed, ty, &TurboStats::libero(), Some(&tok))
}
