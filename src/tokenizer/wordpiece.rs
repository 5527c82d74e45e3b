//! WordPiece (BERT, whose `bert-base-uncased` is TurboVLA's text encoder), as Hugging Face
//! `tokenizers` encodes a `tokenizer.json` that transformers' `BertTokenizerFast` writes.
//!
//! Each piece of text between added tokens goes through `BertNormalizer` ([`BertNormalizer`]:
//! drop NUL, U+FFFD and control / format / private-use characters, turn every whitespace
//! character into a space, put a space on each side of a CJK ideograph, NFD then drop the
//! nonspacing marks, lowercase character by character), then `BertPreTokenizer` (split at
//! whitespace, which is dropped, and around each punctuation character: ASCII punctuation or
//! a Unicode `P*` character, which stays as a word of its own). Each word then becomes the
//! longest vocabulary entry that starts it, then the longest `##` entry that starts the rest,
//! and so on; a word with a rest that no entry starts, or of more than
//! `max_input_chars_per_word` characters (100), is one unknown token (`[UNK]`) as a whole.
//! With the special tokens, `[CLS]` goes first and `[SEP]` last (`TemplateProcessing`).
//!
//! The Unicode classes are `tokenizers`' own (wordpiece_tables.rs, generated from it): it
//! takes them from the `unicode_categories` crate, whose tables are older than Rust's (in
//! them U+0890 is not a format character, and 385 nonspacing marks and 106 punctuation
//! characters differ from Unicode 14's). Unassigned code points (Cn) are kept, though
//! `tokenizers`' comment says otherwise. Lowercasing is `char::to_lowercase` per character
//! (no final-sigma rule), as `tokenizers` does. Known differences (none in the golden inputs):
//! NFD is `unicode-normalization`'s, whitespace and lowercasing this Rust's Unicode version,
//! which differ from `tokenizers`' builds only for characters assigned in recent versions;
//! added tokens with `normalized: true` are refused (they would be matched in the lowercased
//! text).

use super::wordpiece_tables::{MARKS, PUNCTUATION, REMOVED};
use super::{err, Model, SpecialTokens, TokenType, Tokenizer};
use crate::Result;
use std::cmp::Ordering;
use std::collections::HashMap;
use unicode_normalization::UnicodeNormalization;

/// The prefix of a vocabulary entry that continues a word.
pub const CONTINUATION: &str = "##";

/// `BertNormalizer`'s options. `tokenizers`' `strip_accents: null` means the value of
/// `lowercase` (as in the original BERT).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BertNormalizer {
    pub clean_text: bool,
    pub handle_chinese_chars: bool,
    pub strip_accents: bool,
    pub lowercase: bool,
}

impl BertNormalizer {
    /// An uncased BERT's (`do_lower_case`, so accents stripped too): bert-base-uncased's.
    pub const UNCASED: Self = BertNormalizer {
        clean_text: true,
        handle_chinese_chars: true,
        strip_accents: true,
        lowercase: true,
    };

    /// A cased BERT's: case and accents kept.
    pub const CASED: Self = BertNormalizer {
        strip_accents: false,
        lowercase: false,
        ..Self::UNCASED
    };

    /// transformers' `BertTokenizer` options: `strip_accents` `None` follows `do_lower_case`.
    pub fn bert(do_lower_case: bool, strip_accents: Option<bool>, chinese: bool) -> Self {
        BertNormalizer {
            clean_text: true,
            handle_chinese_chars: chinese,
            strip_accents: strip_accents.unwrap_or(do_lower_case),
            lowercase: do_lower_case,
        }
    }

    /// The normalized text.
    pub fn normalize(&self, text: &str) -> String {
        let mut s = String::with_capacity(text.len() + text.len() / 4);
        for c in text.chars() {
            if self.clean_text {
                if in_table(REMOVED, c) {
                    continue;
                }
                if c.is_whitespace() {
                    s.push(' ');
                    continue;
                }
            }
            if self.handle_chinese_chars && is_chinese(c) {
                s.extend([' ', c, ' ']);
            } else {
                s.push(c);
            }
        }
        if self.strip_accents {
            s = s.nfd().filter(|&c| !in_table(MARKS, c)).collect();
        }
        if self.lowercase {
            s = s.chars().flat_map(char::to_lowercase).collect();
        }
        s
    }
}

/// Whether `c` is in a table of sorted inclusive ranges.
fn in_table(table: &[(u32, u32)], c: char) -> bool {
    let c = c as u32;
    table
        .binary_search_by(|&(lo, hi)| {
            if hi < c {
                Ordering::Less
            } else if lo > c {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        })
        .is_ok()
}

/// `tokenizers`' (and the original BERT's) CJK ideograph blocks.
fn is_chinese(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B920..=0x2CEAF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

/// `BertPreTokenizer`'s punctuation: ASCII punctuation (so `$+<=>^`|~` too), or `P*`.
fn is_punctuation(c: char) -> bool {
    c.is_ascii_punctuation() || (!c.is_ascii() && in_table(PUNCTUATION, c))
}

/// Calls `f` on each word of normalized text, as `BertPreTokenizer` splits it.
fn words(text: &str, mut f: impl FnMut(&str)) {
    let mut start = 0;
    for (i, c) in text.char_indices() {
        let white = c.is_whitespace();
        if white || is_punctuation(c) {
            if i > start {
                f(&text[start..i]);
            }
            let end = i + c.len_utf8();
            if !white {
                f(&text[i..end]);
            }
            start = end;
        }
    }
    if start < text.len() {
        f(&text[start..]);
    }
}

/// Options of a WordPiece tokenizer besides its vocabulary and special ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WordPieceOptions {
    pub normalizer: BertNormalizer,
    /// A word of more characters is the unknown token (`tokenizers`' default: 100).
    pub max_input_chars_per_word: usize,
    /// The mask token (`[MASK]`), kept for the GGUF metadata; encoding never produces it
    /// but where the text spells it.
    pub mask: Option<u32>,
}

impl Default for WordPieceOptions {
    fn default() -> Self {
        WordPieceOptions {
            normalizer: BertNormalizer::UNCASED,
            max_input_chars_per_word: 100,
            mask: None,
        }
    }
}

#[derive(Clone, Debug)]
pub(super) struct WordPiece {
    pub options: WordPieceOptions,
    /// Every token but the unused ones by its text (the last of duplicates wins, as in
    /// `tokenizers`' vocabulary).
    vocab: HashMap<String, u32>,
    /// The longest token's bytes: no match can be longer.
    longest: usize,
    unk: u32,
}

impl Tokenizer {
    /// Builds a WordPiece tokenizer from its parts: the tokens as a `vocab.txt` spells them
    /// (`##` before a continuation), their types (control and user-defined tokens are
    /// matched literally first), the special ids (an unknown token is required; with
    /// `add_bos`/`add_eos`, BOS is `[CLS]` and EOS `[SEP]`).
    pub fn new_wordpiece(
        tokens: Vec<String>,
        types: Vec<TokenType>,
        options: WordPieceOptions,
        special: SpecialTokens,
    ) -> Result<Self> {
        let mut tok = Self::build(tokens, types, &[], Model::WordPiece, special)?;
        let unk = special
            .unk
            .ok_or_else(|| err("a WordPiece tokenizer needs an unknown token ([UNK])"))?;
        let n = tok.tokens.len();
        if let Some(m) = options.mask.filter(|&m| m as usize >= n) {
            return Err(err(format!(
                "mask token id {m} is outside the vocabulary (0..{n})"
            )));
        }
        if options.max_input_chars_per_word == 0 {
            return Err(err(
                "max_input_chars_per_word is 0: every word would be unknown",
            ));
        }
        let mut vocab = HashMap::with_capacity(n);
        let mut longest = 0;
        for (i, t) in tok.tokens.iter().enumerate() {
            if tok.types[i] != TokenType::Unused {
                longest = longest.max(t.len());
                vocab.insert(t.clone(), i as u32);
            }
        }
        tok.wordpiece = Some(Box::new(WordPiece {
            options,
            vocab,
            longest,
            unk,
        }));
        Ok(tok)
    }

    /// The WordPiece options; `None` for the other kinds.
    pub fn wordpiece_options(&self) -> Option<WordPieceOptions> {
        self.wordpiece.as_ref().map(|w| w.options)
    }

    /// Appends the ids of `text` (no added tokens in it).
    pub(super) fn encode_wordpiece(&self, w: &WordPiece, text: &str, out: &mut Vec<u32>) {
        if text.is_empty() {
            return;
        }
        let norm = w.options.normalizer.normalize(text);
        let mut buf = String::new();
        words(&norm, |word| w.word(word, &mut buf, out));
    }

    /// Text for `ids` as `tokenizers`' `WordPiece` decoder gives it (special tokens kept):
    /// a `##` token joins the previous one, others follow a space, then its cleanup (no
    /// space before `.`, `?`, `!`, `,` and in contractions).
    pub(super) fn decode_wordpiece(&self, ids: &[u32]) -> String {
        let mut s = String::new();
        for (i, &id) in ids.iter().enumerate() {
            let t = self
                .tokens
                .get(id as usize)
                .map_or("\u{FFFD}", String::as_str);
            let mut piece = match t.strip_prefix(CONTINUATION) {
                Some(rest) if i > 0 => rest.to_owned(),
                _ if i > 0 => format!(" {t}"),
                _ => t.to_owned(),
            };
            for (from, to) in CLEANUP {
                piece = piece.replace(from, to);
            }
            s.push_str(&piece);
        }
        s
    }
}

/// `tokenizers`' `decoders::wordpiece::cleanup`, applied to each decoded token.
const CLEANUP: [(&str, &str); 11] = [
    (" .", "."),
    (" ?", "?"),
    (" !", "!"),
    (" ,", ","),
    (" ' ", "'"),
    (" n't", "n't"),
    (" 'm", "'m"),
    (" do not", " don't"),
    (" 's", "'s"),
    (" 've", "'ve"),
    (" 're", "'re"),
];

impl WordPiece {
    /// Greedy longest match first, as `tokenizers`' `WordPiece::tokenize`.
    fn word(&self, word: &str, buf: &mut String, out: &mut Vec<u32>) {
        if word
            .chars()
            .nth(self.options.max_input_chars_per_word)
            .is_some()
        {
            out.push(self.unk);
            return;
        }
        let first = out.len();
        let mut start = 0;
        while start < word.len() {
            let mut end = word.len().min(start + self.longest);
            while !word.is_char_boundary(end) {
                end -= 1;
            }
            let mut found = None;
            while end > start {
                buf.clear();
                if start > 0 {
                    buf.push_str(CONTINUATION);
                }
                buf.push_str(&word[start..end]);
                if let Some(&id) = self.vocab.get(buf.as_str()) {
                    found = Some(id);
                    break;
                }
                end -= word[..end].chars().next_back().map_or(1, char::len_utf8);
            }
            let Some(id) = found else {
                out.truncate(first);
                out.push(self.unk);
                return;
            };
            out.push(id);
            start = end;
        }
    }
}
