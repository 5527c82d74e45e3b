//! SentencePiece Unigram (T5, whose encoder is Octo's language model), as Hugging Face
//! `tokenizers` encodes a `tokenizer.json` that transformers converted from the SentencePiece
//! model (`T5Converter`).
//!
//! Each piece of text between added tokens goes through a [`Pipeline`]: the `Precompiled`
//! normalizer (SentencePiece's charsmap, [`Charsmap`]), then `Strip` / `Replace(" {2,}", ..)`
//! steps, then the pre-tokenizer (optionally `WhitespaceSplit`, then `Metaspace`: a space
//! becomes `▁`, a `▁` goes first unless there is one, and the text is cut before each
//! `▁`). Each word is then segmented by Viterbi: the segmentation into vocabulary pieces
//! with the highest total score (log-probability). A character that no piece covers alone
//! may still be inside a longer piece; where the best path needs it alone it is the unknown
//! token, scored 10 below the lowest piece score (`tokenizers`' `kUnkPenalty`), and
//! consecutive unknown characters make one unknown token (`fuse_unk`, always on in
//! `tokenizers`' Unigram). Ties keep the piece found first, that is the one starting
//! earliest, then the shorter, as `tokenizers`' `encode_optimized` does.
//!
//! Known differences from `tokenizers` (none shows in the golden inputs, nor on 20000 random
//! strings with T5's full `nmt_nfkc` charsmap): grapheme clusters are `unicode-segmentation`'s
//! and whitespace `char::is_whitespace`'s Unicode version, which differs only for recently
//! assigned characters; in GGUF the scores are f32 (as llama.cpp reads them), exact for a
//! SentencePiece model's (f32 in its protobuf), so only a hand-made `tokenizer.json` with
//! finer scores could segment differently after a round trip. Refused rather than followed:
//! `Metaspace`'s prepend scheme `first` (which depends on where a piece starts in the
//! original text), normalized added tokens, added tokens outside the vocabulary, byte
//! fallback, pieces over [`MAX_PIECE_BYTES`]. llama.cpp's own T5 tokenizer follows
//! SentencePiece instead (the longest charsmap key at each byte, no grapheme clusters,
//! control pieces out of the lattice), so for text such as `"ｅ\u{301}"` or `"\r\n"` it
//! may give other ids than ours for the same GGUF.

use super::charsmap::Charsmap;
use super::spm::SPACE;
use super::{err, Model, SpecialTokens, TokenType, Tokenizer};
use crate::Result;
use std::collections::HashMap;

/// A vocabulary piece longer than this is refused: the lattice's work at each position grows
/// with the longest piece (T5's are at most a few dozen bytes).
pub const MAX_PIECE_BYTES: usize = 1024;

/// `tokenizers`' (and SentencePiece's) `kUnkPenalty`: the unknown token scores this much
/// below the lowest piece.
const UNK_PENALTY: f64 = 10.0;

/// A normalizer after `Precompiled`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// `Strip`: whitespace (`char::is_whitespace`) off the left and/or right end.
    Strip { left: bool, right: bool },
    /// `Replace(Regex(" {2,}"), c)`: each run of two or more spaces becomes `c`, a space
    /// (transformers' older conversions) or `▁` (current ones).
    Collapse(char),
}

/// What a piece of text between added tokens goes through before the model.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Pipeline {
    /// `Precompiled`, the SentencePiece model's normalization rules (none for a model
    /// trained with the `identity` rule).
    pub charsmap: Option<Charsmap>,
    /// The normalizers after it, in order.
    pub steps: Vec<Step>,
    /// A `WhitespaceSplit` pre-tokenizer before `Metaspace` (transformers 3's conversions,
    /// still in older files on the hub).
    pub whitespace_split: bool,
    /// `Metaspace`'s `prepend_scheme`: `always` (true) or `never`.
    pub prepend: bool,
    /// `Metaspace`'s `split`: cut before each `▁`.
    pub split: bool,
}

impl Pipeline {
    /// transformers' current T5 conversion: `Strip(right)`, `Replace(" {2,}", "▁")`, then
    /// `Metaspace` splitting, a `▁` prepended.
    pub(super) fn current(charsmap: Option<Charsmap>) -> Self {
        Pipeline {
            charsmap,
            steps: vec![
                Step::Strip {
                    left: false,
                    right: true,
                },
                Step::Collapse(SPACE),
            ],
            whitespace_split: false,
            prepend: true,
            split: true,
        }
    }
}

#[derive(Clone, Debug)]
pub(super) struct Unigram {
    pub pipeline: Pipeline,
    /// Per token; finite.
    pub scores: Vec<f64>,
    trie: Trie,
    unk_score: f64,
}

/// The pieces as a byte trie, for the pieces that start at a position.
#[derive(Clone, Debug, Default)]
struct Trie {
    /// (node, byte) -> child node; node 0 is the root.
    edges: HashMap<(u32, u8), u32>,
    /// The piece id ending at each node, or `u32::MAX`.
    ids: Vec<u32>,
}

impl Trie {
    fn insert(&mut self, key: &[u8], id: u32) {
        if self.ids.is_empty() {
            self.ids.push(u32::MAX);
        }
        let mut node = 0;
        for &b in key {
            let next = self.ids.len() as u32;
            node = *self.edges.entry((node, b)).or_insert(next);
            if node == next {
                self.ids.push(u32::MAX);
            }
        }
        // A repeated piece: the last id wins, as in `tokenizers`' token map.
        self.ids[node as usize] = id;
    }

    /// Calls `f(length, id)` for each piece that starts `text`, shortest first.
    fn prefixes(&self, text: &[u8], mut f: impl FnMut(usize, u32)) {
        let mut node = 0;
        for (i, &b) in text.iter().enumerate() {
            match self.edges.get(&(node, b)) {
                Some(&next) => node = next,
                None => return,
            }
            if let Some(&id) = self.ids.get(node as usize).filter(|&&id| id != u32::MAX) {
                f(i + 1, id);
            }
        }
    }

    fn get(&self, key: &[u8]) -> Option<u32> {
        let mut node = 0;
        for &b in key {
            node = *self.edges.get(&(node, b))?;
        }
        self.ids
            .get(node as usize)
            .copied()
            .filter(|&id| id != u32::MAX)
    }
}

impl Tokenizer {
    /// Builds a Unigram tokenizer from its parts: one finite score per token, the pipeline
    /// that prepares the text. Every token but the unused ones is a piece of the model (so
    /// an added token's text is one too, as in a `tokenizer.json`'s Unigram vocabulary).
    pub(super) fn new_unigram(
        tokens: Vec<String>,
        types: Vec<TokenType>,
        scores: Vec<f64>,
        pipeline: Pipeline,
        special: SpecialTokens,
    ) -> Result<Self> {
        let mut tok = Self::build(tokens, types, &[], Model::Unigram, special)?;
        let n = tok.tokens.len();
        if scores.len() != n {
            return Err(err(format!("{} scores for {n} tokens", scores.len())));
        }
        if let Some(i) = scores.iter().position(|v| !v.is_finite()) {
            return Err(err(format!("token {i} has score {}", scores[i])));
        }
        let mut trie = Trie::default();
        let mut min = f64::INFINITY;
        for (i, t) in tok.tokens.iter().enumerate() {
            if tok.types[i] == TokenType::Unused {
                continue;
            }
            if t.len() > MAX_PIECE_BYTES {
                return Err(err(format!(
                    "token {i} has {} bytes (at most {MAX_PIECE_BYTES})",
                    t.len()
                )));
            }
            min = min.min(scores[i]);
            trie.insert(t.as_bytes(), i as u32);
        }
        tok.unigram = Some(Box::new(Unigram {
            pipeline,
            scores,
            trie,
            unk_score: min - UNK_PENALTY,
        }));
        Ok(tok)
    }

    /// Appends the ids of `text` (no added tokens in it).
    pub(super) fn encode_unigram(&self, u: &Unigram, text: &str, out: &mut Vec<u32>) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let p = &u.pipeline;
        let mut norm = String::with_capacity(text.len());
        match &p.charsmap {
            Some(m) => m.normalize(text, &mut norm)?,
            None => norm.push_str(text),
        }
        for &step in &p.steps {
            norm = match step {
                Step::Strip { left, right } => {
                    let s = if left { norm.trim_start() } else { &norm };
                    let s = if right { s.trim_end() } else { s };
                    s.to_owned()
                }
                Step::Collapse(c) => collapse_spaces(&norm, c),
            };
        }
        if p.whitespace_split {
            for word in norm.split(char::is_whitespace).filter(|w| !w.is_empty()) {
                self.metaspace(u, word, out)?;
            }
            Ok(())
        } else {
            self.metaspace(u, &norm, out)
        }
    }

    /// `Metaspace`, then the model on each of its words.
    fn metaspace(&self, u: &Unigram, text: &str, out: &mut Vec<u32>) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let mut s = String::with_capacity(text.len() + 3);
        if u.pipeline.prepend && !text.starts_with([' ', SPACE]) {
            s.push(SPACE);
        }
        s.extend(text.chars().map(|c| if c == ' ' { SPACE } else { c }));
        if !u.pipeline.split {
            return self.viterbi(u, &s, out);
        }
        // Cut before each "▁" (MergedWithNext).
        let mut start = 0;
        for (i, _) in s.match_indices(SPACE) {
            if i > start {
                self.viterbi(u, &s[start..i], out)?;
            }
            start = i;
        }
        self.viterbi(u, &s[start..], out)
    }

    /// The best segmentation of `word` into pieces (see the module doc).
    fn viterbi(&self, u: &Unigram, word: &str, out: &mut Vec<u32>) -> Result<()> {
        const NONE: usize = usize::MAX;
        #[derive(Clone, Copy)]
        struct Best {
            score: f64,
            start: usize,
            id: u32,
        }
        let bytes = word.as_bytes();
        let n = bytes.len();
        let unk = self.special.unk;
        let mut best = vec![
            Best {
                score: 0.0,
                start: NONE,
                id: 0,
            };
            n + 1
        ];
        for (pos, c) in word.char_indices() {
            let here = best[pos].score;
            let mblen = c.len_utf8();
            let mut alone = false;
            u.trie.prefixes(&bytes[pos..], |len, id| {
                let score = here + u.scores[id as usize];
                let t = &mut best[pos + len];
                if t.start == NONE || score > t.score {
                    *t = Best {
                        score,
                        start: pos,
                        id,
                    };
                }
                alone |= len == mblen;
            });
            if alone {
                continue;
            }
            let score = here + u.unk_score;
            let t = &mut best[pos + mblen];
            if t.start == NONE || score > t.score {
                let id = unk.ok_or_else(|| {
                    err(format!(
                        "{c:?} is not in the vocabulary and there is no unk token"
                    ))
                })?;
                *t = Best {
                    score,
                    start: pos,
                    id,
                };
            }
        }
        // Back from the end; unknown tokens next to each other are one, whose id is that of
        // their text when it is a piece (as `tokenizers` looks every token up by its text).
        let first = out.len();
        let mut end = n;
        let mut unk_span: Option<(usize, usize)> = None;
        let flush = |span: &mut Option<(usize, usize)>, out: &mut Vec<u32>| {
            if let (Some((s, e)), Some(unk)) = (span.take(), unk) {
                out.push(u.trie.get(&bytes[s..e]).unwrap_or(unk));
            }
        };
        while end > 0 {
            let b = best[end];
            if b.start == NONE {
                return Err(err(format!("no segmentation of {word:?}")));
            }
            if Some(b.id) == unk {
                unk_span = Some((b.start, unk_span.map_or(end, |(_, e)| e)));
            } else {
                flush(&mut unk_span, out);
                out.push(b.id);
            }
            end = b.start;
        }
        flush(&mut unk_span, out);
        out[first..].reverse();
        Ok(())
    }
}

/// Each run of two or more spaces as `c` (`Replace(Regex(" {2,}"), c)`).
fn collapse_spaces(text: &str, c: char) -> String {
    let mut out = String::with_capacity(text.len());
    let mut run = 0;
    for ch in text.chars().chain(['\0']) {
        if ch == ' ' {
            run += 1;
            continue;
        }
        match run {
            0 => {}
            1 => out.push(' '),
            _ => out.push(c),
        }
        run = 0;
        out.push(ch);
    }
    out.pop();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(pieces: &[(&str, f64)], pipeline: Pipeline) -> Tokenizer {
        let tokens = pieces.iter().map(|(t, _)| t.to_string()).collect();
        let scores = pieces.iter().map(|&(_, s)| s).collect();
        let types = vec![TokenType::Normal; pieces.len()];
        let special = SpecialTokens {
            unk: Some(0),
            ..Default::default()
        };
        Tokenizer::new_unigram(tokens, types, scores, pipeline, special).unwrap()
    }

    #[test]
    fn best_segmentation_and_fused_unknowns() {
        // tokenizers' own doc example: "abcdacdxx" -> abcd a cd xx(unk).
        let pieces = [
            ("<unk>", 0.0),
            ("a", 0.0),
            ("b", 0.0),
            ("c", 0.0),
            ("d", 0.0),
            ("cd", 1.0),
            ("ab", 2.0),
            ("abc", 5.0),
            ("abcd", 10.0),
        ];
        let mut p = Pipeline::current(None);
        p.prepend = false;
        let t = tiny(&pieces, p);
        assert_eq!(t.encode("abcdacdxx").unwrap(), [8, 1, 5, 0]);
        assert_eq!(t.encode("xaxx").unwrap(), [0, 1, 0]);
    }

    #[test]
    fn collapses_space_runs() {
        assert_eq!(collapse_spaces("a  b c   d ", SPACE), "a▁b c▁d ");
        assert_eq!(collapse_spaces("  ", ' '), " ");
        assert_eq!(collapse_spaces("", ' '), "");
    }
}
