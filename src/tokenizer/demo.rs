//! A tiny byte-level vocabulary for demo and test models, which have no trained one.

use super::{byte_to_char, PreTokenizer, SpecialTokens, TokenType, Tokenizer};
use crate::Result;

/// `specials` (ids 0.., literal-matched), the 256 byte tokens, then for each word in
/// `words` a left-to-right chain of merges that makes the word one token (`"Ġcube"`:
/// `Ġ c`, `Ġc u`, `Ġcu b`, `Ġcub e`). Words are in byte-level spelling; a merge already
/// made by an earlier word is not repeated. Pre-tokenized as SmolLM2 (`smollm`).
pub fn tiny_byte_level(
    specials: &[&str],
    words: &[&str],
    special: SpecialTokens,
) -> Result<Tokenizer> {
    let mut tokens: Vec<String> = specials.iter().map(|s| s.to_string()).collect();
    let mut types = vec![TokenType::Control; tokens.len()];
    tokens.extend(byte_to_char().iter().map(char::to_string));
    types.resize(tokens.len(), TokenType::Normal);
    let mut merges: Vec<(String, String)> = Vec::new();
    for word in words {
        let mut chars = word.chars();
        let Some(first) = chars.next() else { continue };
        let mut left = first.to_string();
        for c in chars {
            let right = c.to_string();
            let merged = format!("{left}{right}");
            if !tokens.contains(&merged) {
                tokens.push(merged.clone());
                types.push(TokenType::Normal);
                merges.push((left, right));
            }
            left = merged;
        }
    }
    let merges: Vec<(&str, &str)> = merges
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    Tokenizer::new(tokens, types, &merges, PreTokenizer::Gpt2Digits, special)
}

/// The SmolVLA demo model's tokenizer: SmolLM2's first three special tokens (so the demo's pad id
/// 2 is `<|im_end|>`, SmolLM2-Instruct's pad token), the 256 byte tokens, and merges that make common
/// instruction words single tokens; fewer tokens than the demo config's vocab_size.
pub fn smollm2_like() -> Result<Tokenizer> {
    const WORDS: &[&str] = &[
        "Ġthe",
        "Ġpick",
        "Ġup",
        "Ġput",
        "Ġplace",
        "Ġin",
        "Ġon",
        "Ġinto",
        "Ġand",
        "Ġto",
        "Ġred",
        "Ġblue",
        "Ġgreen",
        "Ġyellow",
        "Ġcube",
        "Ġblock",
        "Ġbowl",
        "Ġcup",
        "Ġbox",
        "Ġtray",
        "Ġdrawer",
        "Ġdoor",
        "Ġopen",
        "Ġclose",
        "Ġpush",
        "Ġmove",
        "Ġleft",
        "Ġright",
        "Ġtop",
        "Ġtable",
        "Ġgripper",
        "Ġstack",
        "pick",
        "put",
        "open",
        "close",
        "move",
        "push",
        "ĊĊ",
    ];
    let special = SpecialTokens {
        eos: Some(2),
        pad: Some(2),
        ..Default::default()
    };
    tiny_byte_level(
        &["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        WORDS,
        special,
    )
}

/// A WordPiece vocabulary of exactly `size` tokens (at least 1200) laid out as
/// bert-base-uncased's where BERT models rely on ids: `[PAD]` 0, `[unusedN]` fillers,
/// `[UNK]` 100, `[CLS]` 101, `[SEP]` 102, `[MASK]` 103, the ASCII symbols and digits from
/// `!` at 999 (so `.` is 1012 and `?` 1029), the letters and their `##` continuations,
/// `words`, then fillers up to `size`. Uncased, as bert-base-uncased.
pub fn bert_like_wordpiece(words: &[&str], size: usize) -> Result<Tokenizer> {
    let mut tokens: Vec<String> = vec!["[PAD]".into()];
    let mut unused = 0;
    let mut filler = |tokens: &mut Vec<String>, upto: usize| {
        while tokens.len() < upto {
            tokens.push(format!("[unused{unused}]"));
            unused += 1;
        }
    };
    filler(&mut tokens, 100);
    tokens.extend(["[UNK]", "[CLS]", "[SEP]", "[MASK]"].map(String::from));
    filler(&mut tokens, 999);
    let symbols = (b'!'..=b'@').chain(b'['..=b'`').chain(b'{'..=b'~');
    tokens.extend(symbols.map(|c| (c as char).to_string()));
    tokens.extend(('a'..='z').map(String::from));
    tokens.extend(
        ('a'..='z')
            .chain('0'..='9')
            .map(|c| format!("{}{c}", super::CONTINUATION)),
    );
    for w in words {
        if !tokens.iter().any(|t| t == w) {
            tokens.push((*w).to_owned());
        }
    }
    if tokens.len() > size {
        return Err(crate::Error::Tokenizer(format!(
            "a {size}-token demo vocabulary: the layout and words take {}",
            tokens.len()
        )));
    }
    filler(&mut tokens, size);
    Tokenizer::from_wordpiece_tokens(tokens, super::BertNormalizer::UNCASED)
}
