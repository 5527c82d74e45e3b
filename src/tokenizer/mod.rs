//! Tokenization of three kinds, chosen by the file ([`Model`]):
//!
//! - byte-level BPE (the GPT-2 family, which SmolLM2 and so SmolVLA belong to, and
//!   Qwen2/Qwen3, which Eagle 2.5 and so GR00T N1.5 use): llama.cpp's
//!   `tokenizer.ggml.model = "gpt2"`, a `tokenizer.json` without normalizer (Qwen2: NFC);
//! - SentencePiece BPE with byte fallback (Gemma, and so PaliGemma, which pi0 and pi0.5
//!   tokenize with): llama.cpp's `"llama"`, a `tokenizer.json` whose normalizer replaces
//!   `" "` by `"▁"` (U+2581);
//! - SentencePiece Unigram (T5, whose encoder Octo uses): llama.cpp's `"t5"`, a
//!   `tokenizer.json` with a `Unigram` model; see unigram.rs (and charsmap.rs for its
//!   normalizer), whose doc covers its encoding and differences;
//! - WordPiece (BERT, whose encoder TurboVLA uses): llama.cpp's `"bert"`, a `tokenizer.json`
//!   with a `WordPiece` model, or a folder with only `vocab.txt`; see wordpiece.rs.
//!
//! Each is loaded from llama.cpp's `tokenizer.ggml.*` GGUF metadata (see docs/GGUF.md) or
//! from a Hugging Face `tokenizer.json` (for converters), and written back as GGUF metadata.
//! A SentencePiece Unigram model is also read from its own serialized model (`spiece.model`,
//! which vla.cpp's Octo files carry; see spm_model.rs).
//!
//! [`Tokenizer::encode`] follows Hugging Face `tokenizers`, the reference the tests compare
//! against. All kinds first split added tokens out literally (leftmost, then longest).
//! Byte-level BPE then normalizes (Qwen2: NFC) and pre-tokenizes the rest
//! ([`PreTokenizer`]), maps each word's UTF-8 bytes to GPT-2's byte characters and merges
//! lowest rank first. SentencePiece BPE replaces each space by `▁` (and puts a `▁` before
//! each piece of text when the tokenizer has a dummy prefix: Llama does, Gemma does not),
//! starts from the characters of the whole piece (a character outside the vocabulary
//! becomes one `<0xNN>` token per UTF-8 byte), and merges either by rank, when it has
//! merges (a `tokenizer.json`), or by score, when it has only scores (llama.cpp's files):
//! the adjacent pair whose merged token has the highest score goes first. Ties are broken
//! as transformers orders the merges it generates from SentencePiece scores (longer left
//! part, then longer right part, then lower ids, then leftmost), so that scores and the
//! merges made from them give the same ids; llama.cpp takes the leftmost pair of a tie
//! instead, which differs only where two overlapping candidate pairs tie (Gemma's
//! user-defined pieces all score 0), see docs/GGUF.md.
//!
//! Known differences from `tokenizers` (none shows in the golden inputs): added tokens are
//! found in one leftmost-longest pass (`tokenizers` first matches those with
//! `normalized: false`, then the others), which differs only when added tokens overlap;
//! the `\p{L}`/`\p{N}`/`\s` tables are the `regex` crate's Unicode version, not
//! Oniguruma's, and NFC's are `unicode-normalization`'s, not those of `tokenizers`' older
//! copy, which differs only for recently assigned characters; with NFC, added tokens are
//! found before normalizing (`tokenizers` finds those with `normalized: true` after), which
//! differs only where a combining mark follows or precedes one. Options that would
//! change the ids (other normalizers, `lstrip`/`rstrip`, other pre-tokenizers, a
//! normalized added token the SentencePiece normalizer could change) are refused.

mod bpe;
mod charsmap;
pub mod demo;
mod gguf;
mod gguf_bert;
mod hf;
mod hf_folder;
mod hf_unigram;
mod hf_wordpiece;
mod pretok;
mod spm;
mod spm_model;
mod unigram;
mod wordpiece;
mod wordpiece_tables;

pub use hf_folder::hf_tokenizer_in;
pub use pretok::{byte_to_char, char_to_byte, PreTokenizer};
pub use unigram::MAX_PIECE_BYTES;
pub use wordpiece::{BertNormalizer, WordPieceOptions, CONTINUATION};

use crate::{Error, Result};
use std::collections::HashMap;

/// Vocabulary larger than this is refused as hostile (SmolLM2 has 49152, PaliGemma 257152;
/// the largest public vocabularies are a few hundred thousand).
pub const MAX_TOKENS: usize = 1 << 20;
/// Longer input is refused: an instruction is a sentence, and BPE cost grows with word
/// length.
pub const MAX_TEXT_BYTES: usize = 1 << 16;

/// llama.cpp's token types (`tokenizer.ggml.token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenType {
    Normal = 1,
    /// The unknown token (`<unk>`): matched literally in the text, as llama.cpp does.
    Unknown = 2,
    /// A special added token (BOS, `<|im_start|>`, ...): matched literally in the text.
    Control = 3,
    /// A non-special added token: also matched literally.
    UserDefined = 4,
    /// A placeholder for an id the source vocabulary leaves unused; never produced.
    Unused = 5,
    /// SentencePiece's `<0xNN>` byte-fallback tokens.
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

    /// Whether the token is matched literally in the text before BPE.
    fn is_added(self) -> bool {
        matches!(
            self,
            TokenType::Control | TokenType::UserDefined | TokenType::Unknown
        )
    }
}

/// Ids with a role, and whether `encode` starts with BOS and ends with EOS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub pad: Option<u32>,
    pub unk: Option<u32>,
    pub add_bos: bool,
    /// Only for [`Model::Unigram`] (T5's `$A </s>` post-processor) and
    /// [`Model::WordPiece`] (BERT's `[CLS] $A [SEP]`: BOS is `[CLS]`, EOS `[SEP]`).
    pub add_eos: bool,
}

/// The tokenization algorithm, chosen by the file: llama.cpp's `tokenizer.ggml.model`
/// (`gpt2`, `llama` or `t5`), or a `tokenizer.json`'s model and normalizer (BPE with none,
/// or with `" "` -> `"▁"`; Unigram).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    /// Byte-level BPE after the given pre-tokenizer (GPT-2 family, SmolLM2, Qwen2).
    ByteLevel(PreTokenizer),
    /// SentencePiece BPE with byte fallback (Gemma, PaliGemma, Llama 1/2). With
    /// `add_space_prefix`, each piece of text between added tokens gets a leading `▁`
    /// (SentencePiece's dummy prefix: Llama has it, Gemma not).
    SentencePiece { add_space_prefix: bool },
    /// SentencePiece Unigram (T5, and so Octo): the charsmap normalizer, `Metaspace`, the
    /// best segmentation by piece scores, EOS appended (see `unigram.rs`).
    Unigram,
    /// WordPiece (BERT, and so TurboVLA): `BertNormalizer`, `BertPreTokenizer`, greedy
    /// longest match with `##` continuations (see `wordpiece.rs`).
    WordPiece,
}

#[derive(Clone, Debug)]
pub struct Tokenizer {
    tokens: Vec<String>,
    types: Vec<TokenType>,
    /// Merge pairs (as ids) in rank order, as given.
    merges: Vec<(u32, u32)>,
    model: Model,
    special: SpecialTokens,
    /// Pair -> (rank, merged id).
    ranks: HashMap<(u32, u32), (u32, u32)>,
    /// Each byte's token: its GPT-2 character (byte-level), or `<0xNN>` (SentencePiece).
    byte_ids: [Option<u32>; 256],
    /// Added tokens by first byte, longest first, for leftmost-longest matching.
    added: HashMap<u8, Vec<u32>>,
    /// What SentencePiece BPE needs besides; `None` for the other kinds.
    spm: Option<Box<spm::Spm>>,
    /// What Unigram needs besides; `None` for the other kinds.
    unigram: Option<Box<unigram::Unigram>>,
    /// What WordPiece needs besides; `None` for the other kinds.
    wordpiece: Option<Box<wordpiece::WordPiece>>,
    /// Every token by its text, where a word that is a token is that token without
    /// merging (`ignore_merges`: Llama 3's); `None` otherwise.
    whole: Option<HashMap<String, u32>>,
}

fn err(msg: impl Into<String>) -> Error {
    Error::Tokenizer(msg.into())
}

/// Checks that every special id is in a vocabulary of `n` tokens, and that BOS and EOS
/// exist where they are added (EOS only by Unigram: the BPE kinds' files never ask for it).
fn check_special(special: &SpecialTokens, n: usize, model: Model) -> Result<()> {
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
    if special.add_eos && special.eos.is_none() {
        return Err(err("add_eos is set but there is no eos token"));
    }
    if special.add_eos && !matches!(model, Model::Unigram | Model::WordPiece) {
        return Err(err(
            "add_eos is only supported for Unigram and WordPiece tokenizers",
        ));
    }
    Ok(())
}

impl Tokenizer {
    /// Builds a byte-level BPE tokenizer from its parts, checking that they are consistent:
    /// every merge's parts and result are tokens, every special id is in range.
    pub fn new(
        tokens: Vec<String>,
        types: Vec<TokenType>,
        merges: &[(&str, &str)],
        pre: PreTokenizer,
        special: SpecialTokens,
    ) -> Result<Self> {
        Self::build(tokens, types, merges, Model::ByteLevel(pre), special)
    }

    /// The parts every kind has; SentencePiece adds [`spm::Spm`] afterwards.
    fn build(
        tokens: Vec<String>,
        types: Vec<TokenType>,
        merges: &[(&str, &str)],
        model: Model,
        special: SpecialTokens,
    ) -> Result<Self> {
        let n = tokens.len();
        if n == 0 || n > MAX_TOKENS {
            return Err(err(format!("{n} tokens: expected 1..={MAX_TOKENS}")));
        }
        if types.len() != n {
            return Err(err(format!("{} token types for {n} tokens", types.len())));
        }
        check_special(&special, n, model)?;
        // The first of duplicate strings wins, as a merge or byte lookup needs one id.
        let mut ids: HashMap<&str, u32> = HashMap::with_capacity(n);
        for (i, t) in tokens.iter().enumerate() {
            ids.entry(t.as_str()).or_insert(i as u32);
        }
        let mut ranks = HashMap::with_capacity(merges.len());
        let mut merge_ids = Vec::with_capacity(merges.len());
        let mut merged = String::new();
        for (rank, &(a, b)) in merges.iter().enumerate() {
            let id = |s: &str| {
                ids.get(s).copied().ok_or_else(|| {
                    err(format!(
                        "merge {rank} ({a:?} {b:?}): {s:?} is not in the vocabulary"
                    ))
                })
            };
            if a.contains(' ') || b.contains(' ') {
                // GGUF spells a merge "a b"; byte-level tokens spell a space as `Ġ`,
                // SentencePiece ones as `▁`.
                return Err(err(format!(
                    "merge {rank} ({a:?} {b:?}): a part contains a space"
                )));
            }
            let pair = (id(a)?, id(b)?);
            merged.clear();
            merged.push_str(a);
            merged.push_str(b);
            let merged = id(&merged)?;
            merge_ids.push(pair);
            // A repeated pair keeps its first (lowest) rank.
            ranks.entry(pair).or_insert((rank as u32, merged));
        }
        let mut byte_ids = [None; 256];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            *slot = match model {
                Model::ByteLevel(_) => ids.get(byte_to_char()[b].encode_utf8(&mut [0; 4]) as &str),
                Model::SentencePiece { .. } => ids.get(spm::byte_token(b as u8).as_str()),
                Model::Unigram | Model::WordPiece => None,
            }
            .copied();
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
        let whole = (model == Model::ByteLevel(PreTokenizer::Llama3)).then(|| {
            (ids.iter())
                .filter(|(_, &i)| !types[i as usize].is_added())
                .map(|(&t, &i)| (t.to_owned(), i))
                .collect()
        });
        drop(ids);
        Ok(Tokenizer {
            whole,
            tokens,
            types,
            merges: merge_ids,
            model,
            special,
            ranks,
            byte_ids,
            added,
            spm: None,
            unigram: None,
            wordpiece: None,
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

    /// The same tokenizer with other special ids (checked as in [`Tokenizer::new`]).
    pub fn with_special(mut self, special: SpecialTokens) -> Result<Self> {
        check_special(&special, self.tokens.len(), self.model)?;
        self.special = special;
        Ok(self)
    }

    pub fn model(&self) -> Model {
        self.model
    }

    /// The pre-tokenizer of byte-level BPE; `None` for the SentencePiece kinds.
    pub fn pre_tokenizer(&self) -> Option<PreTokenizer> {
        match self.model {
            Model::ByteLevel(pre) => Some(pre),
            Model::SentencePiece { .. } | Model::Unigram | Model::WordPiece => None,
        }
    }

    /// The token string of `id` (byte-level characters for normal byte-level tokens, `▁`
    /// for a space in SentencePiece ones).
    pub fn token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// Token ids for `text`, with BOS first and EOS last when the tokenizer adds them.
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
        if self.special.add_eos {
            out.extend(self.special.eos);
        }
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

    /// Encodes text that holds no added token.
    fn encode_plain(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        if let Some(u) = &self.unigram {
            return self.encode_unigram(u, text, out);
        }
        if let Some(w) = &self.wordpiece {
            self.encode_wordpiece(w, text, out);
            return Ok(());
        }
        match (self.model, &self.spm) {
            (Model::ByteLevel(pre), _) => {
                let text = pre.normalize(text);
                let mut result = Ok(());
                pre.split(&text, |word| {
                    if result.is_ok() {
                        result = self.encode_word(word, out);
                    }
                });
                result
            }
            (Model::SentencePiece { add_space_prefix }, Some(spm)) => {
                self.encode_spm(spm, text, add_space_prefix, out)
            }
            (Model::SentencePiece { .. }, None) | (Model::Unigram | Model::WordPiece, _) => {
                unreachable!("built with Spm, Unigram or WordPiece")
            }
        }
    }

    /// Text for `ids` (lossy where the ids split a UTF-8 sequence; out-of-range ids show
    /// as U+FFFD). For debugging: no cleanup of spaces, special tokens kept.
    pub fn decode(&self, ids: &[u32]) -> String {
        if self.wordpiece.is_some() {
            return self.decode_wordpiece(ids);
        }
        let mut bytes = Vec::new();
        for &id in ids {
            let Some(t) = self.tokens.get(id as usize) else {
                bytes.extend("\u{FFFD}".as_bytes());
                continue;
            };
            if self.spm.is_some() {
                spm::decode_token(t, &mut bytes);
                continue;
            }
            if self.unigram.is_some() {
                let text = t.replace(spm::SPACE, " ");
                bytes.extend(text.as_bytes());
                continue;
            }
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
