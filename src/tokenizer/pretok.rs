//! Pre-tokenization: splitting text into the words that BPE encodes separately, and
//! GPT-2's byte-to-character mapping.
//!
//! Semantics are Hugging Face `tokenizers`' (the reference the tests compare against):
//! `Digits(individual_digits)` isolates every `char::is_numeric` character, then
//! `ByteLevel(use_regex)` splits each piece with GPT-2's pattern
//! `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
//! Qwen2's tokenizers normalize to NFC first and split with their own pattern
//! ([`QWEN2_PATTERN`]) instead: single digits, letters after one other character,
//! case-insensitive contractions, punctuation runs with their trailing newlines.

use regex::Regex;
use std::borrow::Cow;
use std::sync::OnceLock;
use unicode_normalization::{is_nfc_quick, IsNormalized, UnicodeNormalization};

/// Qwen2's (and Qwen3's) `Split` pattern as its `tokenizer.json` spells it.
pub(super) const QWEN2_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Llama 3's: Qwen2's with digits in runs of up to three.
pub(super) const LLAMA3_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Which split runs before BPE; the names are llama.cpp's `tokenizer.ggml.pre` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreTokenizer {
    /// GPT-2's pattern alone (`gpt2`).
    Gpt2,
    /// Every digit on its own, then GPT-2's pattern (`smollm`: SmolLM/SmolLM2, StarCoder).
    Gpt2Digits,
    /// NFC, then Qwen2's pattern (`qwen2`: Qwen2, Qwen2.5, Qwen3, and so Eagle 2.5).
    Qwen2,
    /// Llama 3's pattern, and a word that is a token as a whole is that token
    /// (`ignore_merges`; `llama-bpe`: Llama 3, and so BitNet b1.58 and BitVLA).
    Llama3,
}

impl PreTokenizer {
    pub fn from_gguf_name(name: &str) -> Option<Self> {
        match name {
            "gpt2" => Some(Self::Gpt2),
            "smollm" => Some(Self::Gpt2Digits),
            "qwen2" => Some(Self::Qwen2),
            "llama-bpe" => Some(Self::Llama3),
            _ => None,
        }
    }

    pub fn gguf_name(self) -> &'static str {
        match self {
            Self::Gpt2 => "gpt2",
            Self::Gpt2Digits => "smollm",
            Self::Qwen2 => "qwen2",
            Self::Llama3 => "llama-bpe",
        }
    }

    /// The text the split sees: Unicode NFC for Qwen2 (its `tokenizer.json`'s normalizer),
    /// unchanged otherwise. Most text is NFC already and is then borrowed.
    pub fn normalize(self, text: &str) -> Cow<'_, str> {
        match self {
            Self::Qwen2 if is_nfc_quick(text.chars()) != IsNormalized::Yes => {
                Cow::Owned(text.nfc().collect())
            }
            _ => Cow::Borrowed(text),
        }
    }

    /// Calls `word` with each pre-token of `text` (already [`normalized`](Self::normalize)),
    /// in order; together they cover `text`.
    pub fn split<'t>(self, text: &'t str, mut word: impl FnMut(&'t str)) {
        match self {
            Self::Gpt2 => gpt2_split(text, &mut word),
            Self::Gpt2Digits => {
                let mut start = 0;
                for (i, c) in text.char_indices() {
                    if c.is_numeric() {
                        gpt2_split(&text[start..i], &mut word);
                        let end = i + c.len_utf8();
                        word(&text[i..end]);
                        start = end;
                    }
                }
                gpt2_split(&text[start..], &mut word);
            }
            Self::Qwen2 => regex_split(qwen2_regex(), true, text, &mut word),
            Self::Llama3 => regex_split(llama3_regex(), true, text, &mut word),
        }
    }
}

/// GPT-2's pattern without its `\s+(?!\S)` alternative, which the `regex` crate cannot
/// express (no look-around); [`regex_split`] restores its effect. `regex` gives exact
/// Unicode `\p{L}`, `\p{N}` and `\s` (White_Space) classes, which `char::is_alphabetic`
/// does not (it also counts combining marks and some symbols).
fn gpt2_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+")
            .expect("constant pattern")
    })
}

/// [`QWEN2_PATTERN`] without `\s+(?!\S)`, likewise. `(?i)` folds case as Oniguruma does
/// for these letters (`'ſ` is a contraction in both).
fn qwen2_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        let pattern = QWEN2_PATTERN.replace(r"|\s+(?!\S)", "");
        Regex::new(&pattern).expect("constant pattern")
    })
}

/// [`LLAMA3_PATTERN`] without `\s+(?!\S)`, likewise.
fn llama3_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        let pattern = LLAMA3_PATTERN.replace(r"|\s+(?!\S)", "");
        Regex::new(&pattern).expect("constant pattern")
    })
}

fn gpt2_split<'t>(text: &'t str, word: &mut impl FnMut(&'t str)) {
    regex_split(gpt2_regex(), false, text, word)
}

/// Splits `text` at the matches of `re`, a pattern whose `\s+(?!\S)` alternative (just
/// before a final `\s+`) was left out. With `newline_alt`, the pattern has Qwen2's
/// `\s*[\r\n]+` before those, which takes every whitespace run holding a newline.
fn regex_split<'t>(re: &Regex, newline_alt: bool, text: &'t str, word: &mut impl FnMut(&'t str)) {
    let mut pos = 0;
    while let Some(m) = re.find_at(text, pos) {
        let mut end = m.end();
        // `\s+(?!\S)` comes before `\s+` in the full pattern: a whitespace run followed by
        // a non-space gives back its last character, which then starts the next word
        // (" word") or stands alone; a single whitespace character cannot give one back.
        // Only `\s*[\r\n]+` or `\s+` match whitespace alone, and the first one any newline.
        let ws = m.as_str();
        let from_ws_alt =
            ws.chars().all(char::is_whitespace) && !(newline_alt && ws.contains(['\r', '\n']));
        if end < text.len() && from_ws_alt {
            let last = ws.chars().next_back().map_or(0, char::len_utf8);
            if ws.len() > last {
                end -= last;
            }
        }
        word(&text[m.start()..end]);
        pos = end;
    }
}

/// GPT-2's reversible map from bytes to printable characters: printable Latin-1 bytes map
/// to themselves, the rest (controls, space, soft hyphen) to U+0100 onwards in byte order.
pub fn byte_to_char() -> &'static [char; 256] {
    static MAP: OnceLock<[char; 256]> = OnceLock::new();
    MAP.get_or_init(|| {
        let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        let mut map = ['\0'; 256];
        let mut next = 256u32;
        for b in 0..=255u8 {
            map[b as usize] = if printable(b) {
                char::from(b)
            } else {
                next += 1;
                char::from_u32(next - 1).expect("below U+0200")
            };
        }
        map
    })
}

/// The inverse of [`byte_to_char`]; `None` for characters outside its image.
pub fn char_to_byte(c: char) -> Option<u8> {
    // Every image character is below U+0144 (256 + 68 non-printable bytes).
    static INV: OnceLock<[Option<u8>; 324]> = OnceLock::new();
    let inv = INV.get_or_init(|| {
        let mut inv = [None; 324];
        for (b, &c) in byte_to_char().iter().enumerate() {
            inv[c as usize] = u8::try_from(b).ok();
        }
        inv
    });
    inv.get(c as usize).copied().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(pre: PreTokenizer, s: &str) -> Vec<&str> {
        let mut v = Vec::new();
        pre.split(s, |w| v.push(w));
        v
    }

    #[test]
    fn byte_map_is_a_bijection_onto_printables() {
        let map = byte_to_char();
        for b in 0..=255u8 {
            let c = map[b as usize];
            assert!(!c.is_whitespace() && !c.is_control(), "byte {b} -> {c:?}");
            assert_eq!(char_to_byte(c), Some(b));
        }
        assert_eq!(map[b' ' as usize], 'Ġ');
        assert_eq!(map[b'\n' as usize], 'Ċ');
        assert_eq!(char_to_byte('€'), None);
    }

    /// Expected splits are `tokenizers` 0.23.3's `pre_tokenize_str` for
    /// `ByteLevel(add_prefix_space=False)` (and `Sequence([Digits(True), ByteLevel])`),
    /// shown before byte mapping.
    #[test]
    fn whitespace_runs_leave_their_last_space_to_the_next_word() {
        let g = PreTokenizer::Gpt2;
        assert_eq!(words(g, "a   b"), ["a", "  ", " b"]);
        assert_eq!(words(g, "a\n\nb"), ["a", "\n", "\n", "b"]);
        assert_eq!(words(g, "a \tb  "), ["a", " ", "\t", "b", "  "]);
        assert_eq!(words(g, "it's 12ab!?"), ["it", "'s", " 12", "ab", "!?"]);
        assert_eq!(
            words(PreTokenizer::Gpt2Digits, "it's 12ab"),
            ["it", "'s", " ", "1", "2", "ab"]
        );
    }

    /// Expected splits are `tokenizers` 0.23.3's for Qwen2's
    /// `Split(QWEN2_PATTERN, Isolated)`.
    #[test]
    fn qwen2_split_matches_hf() {
        let q = PreTokenizer::Qwen2;
        assert_eq!(words(q, "a   b"), ["a", "  ", " b"]);
        assert_eq!(words(q, "a\n\nb"), ["a", "\n\n", "b"]);
        assert_eq!(words(q, "a \tb  "), ["a", " ", "\tb", "  "]);
        assert_eq!(
            words(q, "it's 12ab!?"),
            ["it", "'s", " ", "1", "2", "ab", "!?"]
        );
        assert_eq!(words(q, "  \n  x"), ["  \n", " ", " x"]);
        assert_eq!(words(q, "hi!!\n\nthere"), ["hi", "!!\n\n", "there"]);
        assert_eq!(words(q, "a\r\n\r\n  b"), ["a", "\r\n\r\n", " ", " b"]);
        assert_eq!(words(q, "x \n\n y"), ["x", " \n\n", " y"]);
        assert_eq!(words(q, "(word) [x]"), ["(word", ")", " [", "x", "]"]);
        assert_eq!(words(q, "\u{3000}\u{3000}x"), ["\u{3000}", "\u{3000}x"]);
        assert_eq!(
            words(q, "x'\u{17f}a we'LL"),
            ["x", "'\u{17f}", "a", " we", "'LL"]
        );
        assert_eq!(words(q, "x'Sa"), ["x", "'S", "a"]);
    }

    /// Expected splits are `tokenizers` 0.21.4's for Llama 3's `Split(LLAMA3_PATTERN,
    /// Isolated)`; no NFC (a combining mark stays apart).
    #[test]
    fn llama3_split_matches_hf() {
        let l = PreTokenizer::Llama3;
        assert_eq!(
            words(l, "it's 12345ab!? 7"),
            ["it", "'s", " ", "123", "45", "ab", "!?", " ", "7"]
        );
        assert_eq!(words(l, "a   b"), ["a", "  ", " b"]);
        assert_eq!(words(l, "x \n\n y"), ["x", " \n\n", " y"]);
        let text = l.normalize("e\u{301} 1234567");
        assert_eq!(words(l, &text), ["e", "\u{301}", " ", "123", "456", "7"]);
    }

    #[test]
    fn qwen2_normalizes_to_nfc() {
        let q = PreTokenizer::Qwen2;
        assert!(matches!(q.normalize("pick up"), Cow::Borrowed(_)));
        assert_eq!(
            q.normalize("e\u{301} \u{212b} >\u{338}"),
            "\u{e9} \u{c5} \u{226f}"
        );
        assert_eq!(PreTokenizer::Gpt2.normalize("e\u{301}"), "e\u{301}");
    }
}
