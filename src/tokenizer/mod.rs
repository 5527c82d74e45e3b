//! Byte-level BPE tokenization (the GPT-2 family, which SmolLM2 and so SmolVLA belong to),
//! loaded from llama.cpp's `tokenizer.ggml.*` GGUF metadata (see docs/GGUF.md) or from a
//! Hugging Face `tokenizer.json` (for converters).
//!
//! [`Tokenizer::encode`] follows Hugging Face `tokenizers`, the reference the tests compare
//! against: added tokens are split out literally first (leftmost, then longest), the rest
//! is pre-tokenized ([`PreTokenizer`]), each word's UTF-8 bytes become GPT-2's byte
//! characters, and merges apply lowest rank first.
//!
//! Known differences from `tokenizers` (neither shows in the golden inputs): added
//! tokens are found in one leftmost-longest pass (`tokenizers` first matches those with
//! `normalized: false`, then the others), which differs only when added tokens overlap;
//! the `\p{L}`/`\p{N}`/`\s` tables are the `regex` crate's Unicode version, not
//! Oniguruma's, which differs only for recently assigned characters. Options that would
//! change the ids (normalizers, `lstrip`/`rstrip`, other pre-tokenizers) are refused.

mod bpe;
pub mod demo;
mod gguf;
mod hf;
mod pretok;

pub use pretok::{byte_to_char, char_to_byte, PreTokenizer};

use crate::{Error, Result};
use std::collections::HashMap;

/// Vocabulary larger than this is refused as hostile (SmolLM2 has 49152; the largest
/// public vocabularies are a few hundred thousand).
pub const MAX_TOKENS: usize = 1 << 20;
/// Longer input is refused: an instruction is a sentence, and BPE cost grows with word
/// length.
pub const MAX_TEXT_BYTES: usize = 1 << 16;

/// llama.cpp's token types (`tokenizer.ggml.token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenType {
    Normal = 1,
    Unknown = 2,
    /// A special added token (BOS, `<|im_start|>`, ...): matched literally in the text.
    Control = 3,
    /// A non-special added token: also matched literally.
    UserDefined = 4,
    /// A placeholder for an id the source vocabulary leaves unused; never produced.
    Unused = 5,
    Byte = 6,
}

impl TokenType {
    pub fn from_i32(v: i32) -> Option<Self> {
        use TokenType::*;
        Some(match v {
            1 => Normal,
            2 => Unknown,
            3 => Control,
            4 => UserDefined,
            5 => Unused,
            6 => Byte,
            _ => return None,
        })
    }

    fn is_added(self) -> bool {
        matches!(self, TokenType::Control | TokenType::UserDefined)
    }
}

/// Ids with a role, and whether `encode` starts with BOS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub pad: Option<u32>,
    pub unk: Option<u32>,
    pub add_bos: bool,
}

#[derive(Clone, Debug)]
pub struct Tokenizer {
    tokens: Vec<String>,
    types: Vec<TokenType>,
    /// Merge pairs (as ids) in rank order, as given.
    merges: Vec<(u32, u32)>,
    pre: PreTokenizer,
    special: SpecialTokens,
    /// Pair -> (rank, merged id).
    ranks: HashMap<(u32, u32), (u32, u32)>,
    /// Each byte's single-character token.
    byte_ids: [Option<u32>; 256],
    /// Added tokens by first byte, longest first, for leftmost-longest matching.
    added: HashMap<u8, Vec<u32>>,
}

fn err(msg: impl Into<String>) -> Error {
    Error::Tokenizer(msg.into())
}

impl Tokenizer {
    /// Builds a tokenizer from its parts, checking that they are consistent: every merge's
    /// parts and result are tokens, every special id is in range.
    pub fn new(
        tokens: Vec<String>,
        types: Vec<TokenType>,
        merges: &[(&str, &str)],
        pre: PreTokenizer,
        special: SpecialTokens,
    ) -> Result<Self> {
        let n = tokens.len();
        if n == 0 || n > MAX_TOKENS {
            return Err(err(format!("{n} tokens: expected 1..={MAX_TOKENS}")));
        }
        if types.len() != n {
            return Err(err(format!("{} token types for {n} tokens", types.len())));
        }
        for (what, id) in [
            ("bos", special.bos),
            ("eos", special.eos),
            ("pad", special.pad),
            ("unk", special.unk),
        ] {
            if let Some(id) = id.filter(|&id| id as usize >= n) {
                return Err(err(format!(
                    "{what} token id {id} is outside the vocabulary (0..{n})"
                )));
            }
        }
        if special.add_bos && special.bos.is_none() {
            return Err(err("add_bos is set but there is no bos token"));
        }
        // The first of duplicate strings wins, as a merge or byte lookup needs one id.
        let mut ids: HashMap<&str, u32> = HashMap::with_capacity(n);
        for (i, t) in tokens.iter().enumerate() {
            ids.entry(t.as_str()).or_insert(i as u32);
        }
        let mut ranks = HashMap::with_capacity(merges.len());
        let mut merge_ids = Vec::with_capacity(merges.len());
        for (rank, &(a, b)) in merges.iter().enumerate() {
            let id = |s: &str| {
                ids.get(s).copied().ok_or_else(|| {
                    err(format!(
                        "merge {rank} ({a:?} {b:?}): {s:?} is not in the vocabulary"
                    ))
                })
            };
            if a.contains(' ') || b.contains(' ') {
                // GGUF spells a merge "a b"; byte-level tokens spell a space as `Ġ`.
                return Err(err(format!(
                    "merge {rank} ({a:?} {b:?}): a part contains a space"
                )));
            }
            let pair = (id(a)?, id(b)?);
            let merged = id(&format!("{a}{b}"))?;
            merge_ids.push(pair);
            // A repeated pair keeps its first (lowest) rank.
            ranks.entry(pair).or_insert((rank as u32, merged));
        }
        let mut byte_ids = [None; 256];
        for (b, c) in byte_to_char().iter().enumerate() {
            byte_ids[b] = ids.get(c.encode_utf8(&mut [0; 4]) as &str).copied();
        }
        let mut added: HashMap<u8, Vec<u32>> = HashMap::new();
        for (i, t) in tokens.iter().enumerate() {
            if types[i].is_added() && !t.is_empty() {
                added.entry(t.as_bytes()[0]).or_default().push(i as u32);
            }
        }
        for list in added.values_mut() {
            list.sort_by_key(|&i| std::cmp::Reverse(tokens[i as usize].len()));
        }
        drop(ids);
        Ok(Tokenizer {
            tokens,
            types,
            merges: merge_ids,
            pre,
            special,
            ranks,
            byte_ids,
            added,
        })
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    pub fn special(&self) -> SpecialTokens {
        self.special
    }

    pub fn pre_tokenizer(&self) -> PreTokenizer {
        self.pre
    }

    /// The token string of `id` (byte-level characters for normal tokens).
    pub fn token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// Token ids for `text`, with BOS first when the tokenizer adds it.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        if text.len() > MAX_TEXT_BYTES {
            return Err(err(format!(
                "text of {} bytes (at most {MAX_TEXT_BYTES})",
                text.len()
            )));
        }
        let mut out = Vec::new();
        if self.special.add_bos {
            out.extend(self.special.bos);
        }
        let mut rest = text;
        while let Some((start, id)) = self.next_added(rest) {
            self.encode_plain(&rest[..start], &mut out)?;
            out.push(id);
            rest = &rest[start + self.tokens[id as usize].len()..];
        }
        self.encode_plain(rest, &mut out)?;
        Ok(out)
    }

    /// The leftmost added token in `text`, the longest one starting there.
    fn next_added(&self, text: &str) -> Option<(usize, u32)> {
        if self.added.is_empty() {
            return None;
        }
        // A token's first byte is never a UTF-8 continuation byte, so a match starts on a
        // character boundary.
        let bytes = text.as_bytes();
        (0..bytes.len()).find_map(|i| {
            let list = self.added.get(&bytes[i])?;
            let found = list
                .iter()
                .find(|&&id| bytes[i..].starts_with(self.tokens[id as usize].as_bytes()));
            found.map(|&id| (i, id))
        })
    }

    fn encode_plain(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        let mut result = Ok(());
        self.pre.split(text, |word| {
            if result.is_ok() {
                result = self.encode_word(word, out);
            }
        });
        result
    }

    /// Text for `ids` (lossy where the ids split a UTF-8 sequence; out-of-range ids show
    /// as U+FFFD). For debugging: no cleanup of spaces, special tokens kept.
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            let Some(t) = self.tokens.get(id as usize) else {
                bytes.extend("\u{FFFD}".as_bytes());
                continue;
            };
            if self.types[id as usize].is_added() {
                bytes.extend(t.as_bytes());
                continue;
            }
            for c in t.chars() {
                match char_to_byte(c) {
                    Some(b) => bytes.push(b),
                    None => bytes.extend(c.encode_utf8(&mut [0; 4]).as_bytes()),
                }
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }
}
