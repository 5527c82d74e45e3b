//! SentencePiece BPE (Gemma, PaliGemma): normalization, byte fallback, and merging by rank
//! or by score.
//!
//! A Hugging Face `tokenizer.json` of this kind is transformers' conversion of the
//! SentencePiece model: its merges are every split of a token into two tokens, ordered by
//! the merged token's score (highest first), then by the left part's length, then the
//! right part's (longest first), then by id (`generate_merges` in transformers'
//! `convert_slow_tokenizer.py`). llama.cpp's GGUF keeps the scores instead of the merges.
//! Merging by score with that same order ([`ScoreKey`]) therefore gives the ids merging by
//! those ranks gives; [`Tokenizer::scores_reproduce_merges`] checks it for a given list.

use super::bpe::{merge, merge_by_rank};
use super::{err, Model, SpecialTokens, TokenType, Tokenizer};
use crate::Result;
use std::cmp::{Ordering, Reverse};
use std::collections::HashMap;

/// SentencePiece's meta symbol for a space.
pub const SPACE: char = '\u{2581}';

/// `<0xNN>`, SentencePiece's byte-fallback token for `b`.
pub(super) fn byte_token(b: u8) -> String {
    format!("<0x{b:02X}>")
}

/// The byte a `<0xNN>` token stands for.
pub(super) fn token_byte(t: &str) -> Option<u8> {
    let hex = t.strip_prefix("<0x")?.strip_suffix('>')?;
    (hex.len() == 2 && hex.bytes().all(|c| c.is_ascii_hexdigit()))
        .then(|| u8::from_str_radix(hex, 16).ok())
        .flatten()
}

/// Appends the text of token `t` as Gemma's decoder gives it (`Replace("▁", " ")`,
/// `ByteFallback`, `Fuse`): `<0xNN>` is byte NN, `▁` a space.
pub(super) fn decode_token(t: &str, out: &mut Vec<u8>) {
    match token_byte(t) {
        Some(b) => out.push(b),
        None => {
            for c in t.chars() {
                let c = if c == SPACE { ' ' } else { c };
                out.extend(c.encode_utf8(&mut [0; 4]).as_bytes());
            }
        }
    }
}

#[derive(Clone, Debug)]
pub(super) struct Spm {
    /// Per token; no NaN, and no -0.0 (it sorts as 0.0, as in Python).
    scores: Vec<f32>,
    /// Merge by the given merges' ranks, else by `scores` (llama.cpp's files have no merges).
    by_rank: bool,
    /// Token text -> id (the first of duplicates).
    ids: HashMap<String, u32>,
    /// Characters per token, for the tie order.
    chars: Vec<u32>,
}

/// A score, highest first.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Desc(f32);

impl Eq for Desc {}

impl Ord for Desc {
    fn cmp(&self, other: &Self) -> Ordering {
        // Never NaN (checked at load).
        other.0.partial_cmp(&self.0).unwrap_or(Ordering::Equal)
    }
}

impl PartialOrd for Desc {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The order transformers generates merges in: merged token's score (highest first), left
/// part's length in characters, right part's (longest first), merged id, left id, right id.
type ScoreKey = (Desc, Reverse<u32>, Reverse<u32>, u32, u32, u32);

impl Tokenizer {
    /// Builds a SentencePiece BPE tokenizer (byte fallback to `<0xNN>` tokens) from its
    /// parts. With `merges`, encoding merges by their rank, as `tokenizers` does; without,
    /// by `scores`, as llama.cpp does (see the module doc). `scores` (one per token, finite)
    /// are required without merges; with merges and no scores they are derived from the
    /// merges ([`Tokenizer::scores`]).
    pub fn new_sentencepiece(
        tokens: Vec<String>,
        types: Vec<TokenType>,
        scores: Option<Vec<f32>>,
        merges: Option<&[(&str, &str)]>,
        add_space_prefix: bool,
        special: SpecialTokens,
    ) -> Result<Self> {
        let model = Model::SentencePiece { add_space_prefix };
        let by_rank = merges.is_some();
        let mut tok = Self::build(tokens, types, merges.unwrap_or_default(), model, special)?;
        let n = tok.tokens.len();
        let scores = match scores {
            Some(s) if s.len() != n => {
                return Err(err(format!("{} scores for {n} tokens", s.len())));
            }
            Some(s) => {
                if let Some(i) = s.iter().position(|v| !v.is_finite()) {
                    return Err(err(format!("token {i} has score {}", s[i])));
                }
                s.into_iter()
                    .map(|v| if v == 0.0 { 0.0 } else { v })
                    .collect()
            }
            None if by_rank => tok.derived_scores(),
            None => return Err(err("a SentencePiece vocabulary needs scores or merges")),
        };
        let mut ids = HashMap::with_capacity(n);
        for (i, t) in tok.tokens.iter().enumerate() {
            ids.entry(t.clone()).or_insert(i as u32);
        }
        let chars = tok
            .tokens
            .iter()
            .map(|t| t.chars().count() as u32)
            .collect();
        tok.spm = Some(Box::new(Spm {
            scores,
            by_rank,
            ids,
            chars,
        }));
        Ok(tok)
    }

    /// Per-token scores of a SentencePiece tokenizer (as read, or derived from the merges:
    /// tokens whose merges are interleaved in the list share a score, the first group
    /// scores 0, the next -1, and so on; tokens no merge makes score below all of them).
    /// `None` for byte-level BPE.
    pub fn scores(&self) -> Option<&[f32]> {
        self.spm.as_ref().map(|s| s.scores.as_slice())
    }

    /// Whether encoding uses the merges (a SentencePiece tokenizer from a `tokenizer.json`,
    /// or from a GGUF file that has merges) rather than the scores.
    pub fn merges_by_rank(&self) -> bool {
        self.spm.as_ref().is_none_or(|s| s.by_rank)
    }

    /// Scores that order the merges as given: each merged token's score is minus the index
    /// of its group, a group being the tokens whose rank intervals overlap.
    fn derived_scores(&self) -> Vec<f32> {
        let n = self.tokens.len();
        let mut last = vec![None::<usize>; n];
        let merged: Vec<u32> = self.merges.iter().map(|p| self.ranks[p].1).collect();
        for (r, &m) in merged.iter().enumerate() {
            last[m as usize] = Some(r);
        }
        let mut score = vec![f32::NAN; n];
        let mut group = 0u32;
        let mut open_until = 0;
        for (r, &m) in merged.iter().enumerate() {
            if r > open_until {
                group += 1;
            }
            open_until = open_until.max(last[m as usize].unwrap_or(r));
            if score[m as usize].is_nan() {
                // 0.0 - 0 is 0.0, not -0.0.
                score[m as usize] = 0.0 - group as f32;
            }
        }
        let floor = -1.0 - group as f32;
        for s in &mut score {
            if s.is_nan() {
                *s = floor;
            }
        }
        score
    }

    /// Whether merging by [`Tokenizer::scores`] gives the same ids as merging by the given
    /// merges: true when the merges are exactly those transformers generates from these
    /// scores (every split of every token into two tokens, ordered by the merged token's
    /// score, highest first, then by the left part's and the right part's length, longest
    /// first, then by id), as in any Gemma `tokenizer.json`. Always true without merges;
    /// false for byte-level BPE.
    pub fn scores_reproduce_merges(&self) -> bool {
        let Some(spm) = &self.spm else { return false };
        if !spm.by_rank {
            return true;
        }
        // More groups than f32 counts exactly cannot be told apart.
        if spm.scores.iter().any(|&s| s < -((1u32 << 24) as f32)) {
            return false;
        }
        let mut all: Vec<(ScoreKey, (u32, u32))> = Vec::with_capacity(self.merges.len());
        // Splitting costs a token's length squared: a hostile vocabulary of long tokens
        // gets the merges written instead (Gemma's takes about 1 << 24).
        let mut work = 0u64;
        for (t, text) in self.tokens.iter().enumerate() {
            let t = t as u32;
            if spm.ids[text] != t {
                continue;
            }
            work += (text.len() as u64).pow(2);
            if work > 1 << 31 {
                return false;
            }
            for (i, _) in text.char_indices().skip(1) {
                let (l, r) = text.split_at(i);
                if let (Some(&a), Some(&b)) = (spm.ids.get(l), spm.ids.get(r)) {
                    all.push((spm.key(a, b, t), (a, b)));
                    if all.len() > self.merges.len() {
                        return false;
                    }
                }
            }
        }
        all.sort_unstable_by_key(|&(k, _)| k);
        all.len() == self.merges.len()
            && all.iter().map(|(_, p)| *p).eq(self.merges.iter().copied())
    }

    /// Appends the ids of `text` (no added tokens in it).
    pub(super) fn encode_spm(
        &self,
        spm: &Spm,
        text: &str,
        add_space_prefix: bool,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        // The normalizer: Replace(" ", "▁"), after Prepend("▁") with a dummy prefix.
        let mut norm = String::with_capacity(text.len() + 3);
        if add_space_prefix {
            norm.push(SPACE);
        }
        norm.extend(text.chars().map(|c| if c == ' ' { SPACE } else { c }));

        // Characters, those outside the vocabulary as their bytes' <0xNN> tokens, else as
        // <unk>. As in `tokenizers`: consecutive unknown characters make one <unk>, and a
        // pending <unk> is only written before the next character in the vocabulary.
        let mut id = Vec::with_capacity(norm.len());
        let mut unk_pending = false;
        for (i, c) in norm.char_indices() {
            let s = &norm[i..i + c.len_utf8()];
            if let Some(&t) = spm.ids.get(s) {
                if std::mem::take(&mut unk_pending) {
                    id.extend(self.special.unk);
                }
                id.push(t);
                continue;
            }
            let bytes: Option<Vec<u32>> = s.bytes().map(|b| self.byte_ids[b as usize]).collect();
            if let Some(bytes) = bytes {
                id.extend(bytes);
                continue;
            }
            if self.special.unk.is_none() {
                return Err(err(format!(
                    "{c:?} is not in the vocabulary, nor are its bytes, and there is no unk token"
                )));
            }
            unk_pending = true;
        }
        if unk_pending {
            id.extend(self.special.unk);
        }

        if spm.by_rank {
            merge_by_rank(self, id, out);
        } else {
            let mut buf = String::new();
            merge(id, out, |a, b| {
                buf.clear();
                buf.push_str(&self.tokens[a as usize]);
                buf.push_str(&self.tokens[b as usize]);
                let &m = spm.ids.get(buf.as_str())?;
                Some((spm.key(a, b, m), m))
            });
        }
        Ok(())
    }
}

impl Spm {
    fn key(&self, a: u32, b: u32, merged: u32) -> ScoreKey {
        (
            Desc(self.scores[merged as usize]),
            Reverse(self.chars[a as usize]),
            Reverse(self.chars[b as usize]),
            merged,
            a,
            b,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_tokens() {
        assert_eq!(byte_token(0x0a), "<0x0A>");
        assert_eq!(token_byte("<0x0A>"), Some(0x0a));
        assert_eq!(token_byte("<0xff>"), Some(0xff));
        for t in ["<0x0>", "<0xZZ>", "0x0A", "<0x0A", "<0x+1>"] {
            assert_eq!(token_byte(t), None, "{t}");
        }
        let mut out = Vec::new();
        for t in ["▁pick", "<0xE4>", "<0xB8>", "<0xAD>", "<bos>"] {
            decode_token(t, &mut out);
        }
        assert_eq!(String::from_utf8(out).unwrap(), " pick中<bos>");
    }

    /// Symbols "a a a" where "aa" (score -1) merges; "aaa" only by score from "aa"+"a".
    fn tiny(merges: Option<&[(&str, &str)]>, scores: Option<Vec<f32>>) -> Tokenizer {
        let tokens: Vec<String> = ["<unk>", "a", "b", "aa", "ab", "aab", "▁", "▁a"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let types = vec![TokenType::Normal; tokens.len()];
        let special = SpecialTokens {
            unk: Some(0),
            ..Default::default()
        };
        Tokenizer::new_sentencepiece(tokens, types, scores, merges, false, special).unwrap()
    }

    #[test]
    fn scores_derived_from_merges_reproduce_them() {
        let merges = [("a", "a"), ("aa", "b"), ("a", "ab"), ("a", "b"), ("▁", "a")];
        let t = tiny(Some(&merges), None);
        // aab's two merges are consecutive: one group.
        assert_eq!(
            t.scores().unwrap(),
            [-4.0, -4.0, -4.0, 0.0, -2.0, -1.0, -4.0, -3.0]
        );
        assert!(t.scores_reproduce_merges());
        // "a b" ranked before "a ab": no longer the generated order.
        let swapped = [("a", "a"), ("aa", "b"), ("a", "b"), ("a", "ab"), ("▁", "a")];
        assert!(!tiny(Some(&swapped), None).scores_reproduce_merges());
        // A missing split ("a ab"): merging by score would make "aab" from "a"+"ab".
        let missing = [("a", "a"), ("aa", "b"), ("a", "b"), ("▁", "a")];
        assert!(!tiny(Some(&missing), None).scores_reproduce_merges());
    }

    #[test]
    fn by_score_equals_by_rank_for_generated_merges() {
        let merges = [("a", "a"), ("aa", "b"), ("a", "ab"), ("a", "b"), ("▁", "a")];
        let by_rank = tiny(Some(&merges), None);
        let by_score = tiny(None, Some(by_rank.scores().unwrap().to_vec()));
        assert!(!by_score.merges_by_rank());
        for text in ["aab", "aaab", "abab", " aab", "a aab", "c", "cc ab", ""] {
            assert_eq!(
                by_rank.encode(text).unwrap(),
                by_score.encode(text).unwrap(),
                "{text:?}"
            );
        }
        // Unknown characters without byte tokens fuse into one <unk>.
        assert_eq!(by_rank.encode("cc ab").unwrap(), [0, 6, 4]);
    }
}
