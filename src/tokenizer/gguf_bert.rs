//! A WordPiece tokenizer as llama.cpp's `tokenizer.ggml.*` metadata for BERT (model `bert`),
//! as its converter (`convert_hf_to_gguf.py`, `BertModel.set_vocab`) writes it: the tokens
//! in its "phantom space" spelling (a continuation loses its `##`, any other token but the
//! control ones gains a leading `▁`), their types, the special ids under llama.cpp's names
//! (`seperator_token_id` is spelled so), `add_bos_token` (`[CLS]` first) and
//! `add_sep_token` (`[SEP]` last). llama.cpp has no key for the normalizer (its WordPiece
//! always lowercases and strips accents, as an uncased BERT) nor for the longest word, so
//! those are written under keys of our own, with llama.cpp's behaviour as the defaults when
//! they are absent: `tokenizer.ggml.normalizer.{lowercase, strip_accents, clean_text,
//! handle_chinese_chars}` (bool; other GGUF readers of BERT use the first two names) and
//! `tokenizer.ggml.max_input_chars_per_word` (u32, default 100).

use super::gguf::{
    flag, special_ids, vocab, ADD_BOS_KEY, BERT_MODEL, MODEL_KEY, PRE_KEY, SPM_PRE, TOKENS_KEY,
    TYPES_KEY,
};
use super::wordpiece::{BertNormalizer, WordPieceOptions, CONTINUATION};
use super::{err, SpecialTokens, TokenType, Tokenizer};
use crate::gguf::{GgufFile, GgufWriter, Value, ValueType};
use crate::Result;

const SEP_KEY: &str = "tokenizer.ggml.seperator_token_id";
/// Older llama.cpp's id of `[CLS]` (now `bos_token_id`); read when BOS is absent.
const CLS_KEY: &str = "tokenizer.ggml.cls_token_id";
const MASK_KEY: &str = "tokenizer.ggml.mask_token_id";
const ADD_SEP_KEY: &str = "tokenizer.ggml.add_sep_token";
const LOWERCASE_KEY: &str = "tokenizer.ggml.normalizer.lowercase";
const STRIP_ACCENTS_KEY: &str = "tokenizer.ggml.normalizer.strip_accents";
const CLEAN_TEXT_KEY: &str = "tokenizer.ggml.normalizer.clean_text";
const CHINESE_KEY: &str = "tokenizer.ggml.normalizer.handle_chinese_chars";
const MAX_CHARS_KEY: &str = "tokenizer.ggml.max_input_chars_per_word";
/// The word start marker of the phantom-space spelling.
const PHANTOM: char = '\u{2581}';

/// llama.cpp's spelling of a token of type `ty`.
fn phantom(token: &str, ty: TokenType) -> String {
    if ty == TokenType::Control {
        token.to_owned()
    } else if let Some(rest) = token.strip_prefix(CONTINUATION) {
        rest.to_owned()
    } else {
        format!("{PHANTOM}{token}")
    }
}

/// The inverse of [`phantom`].
fn unphantom(token: &str, ty: TokenType) -> String {
    if ty == TokenType::Control {
        token.to_owned()
    } else if let Some(rest) = token.strip_prefix(PHANTOM) {
        rest.to_owned()
    } else {
        format!("{CONTINUATION}{token}")
    }
}

fn optional_id(file: &GgufFile, key: &str) -> Result<Option<u32>> {
    if file.get(key).is_none() {
        return Ok(None);
    }
    let v = file.get_u64(key)?;
    u32::try_from(v)
        .map(Some)
        .map_err(|_| err(format!("{key} {v} is out of range")))
}

impl Tokenizer {
    /// Model `bert` (see the module doc).
    pub(super) fn write_wordpiece(&self, o: WordPieceOptions, w: &mut GgufWriter) -> Result<()> {
        w.add_metadata(MODEL_KEY, BERT_MODEL)?;
        w.add_metadata(PRE_KEY, SPM_PRE)?;
        let tokens: Vec<String> = (self.tokens.iter().zip(&self.types))
            .map(|(t, &ty)| phantom(t, ty))
            .collect();
        w.add_metadata(TOKENS_KEY, Value::from_strs(&tokens))?;
        let types = self.types.iter().map(|&t| Value::I32(t as i32)).collect();
        w.add_metadata(TYPES_KEY, Value::Array(ValueType::I32, types))?;
        let s = self.special;
        let ids = [
            ("tokenizer.ggml.bos_token_id", s.bos),
            (CLS_KEY, s.bos),
            ("tokenizer.ggml.eos_token_id", s.eos),
            (SEP_KEY, s.eos),
            ("tokenizer.ggml.padding_token_id", s.pad),
            ("tokenizer.ggml.unknown_token_id", s.unk),
            (MASK_KEY, o.mask),
        ];
        for (key, id) in ids {
            if let Some(id) = id {
                w.add_metadata(key, id)?;
            }
        }
        w.add_metadata(ADD_BOS_KEY, s.add_bos)?;
        w.add_metadata(ADD_SEP_KEY, s.add_eos)?;
        let n = o.normalizer;
        w.add_metadata(LOWERCASE_KEY, n.lowercase)?;
        w.add_metadata(STRIP_ACCENTS_KEY, n.strip_accents)?;
        w.add_metadata(CLEAN_TEXT_KEY, n.clean_text)?;
        w.add_metadata(CHINESE_KEY, n.handle_chinese_chars)?;
        let max = u32::try_from(o.max_input_chars_per_word).unwrap_or(u32::MAX);
        w.add_metadata(MAX_CHARS_KEY, max)
    }
}

/// Reads model `bert`, with llama.cpp's defaults for absent ids (`[UNK]` 100, `[CLS]` 101,
/// `[SEP]` 102, `[PAD]` 0, `[MASK]` 103, each only where the vocabulary is that large), BOS
/// and SEP added unless said otherwise. `tokenizer.ggml.pre` is ignored, as llama.cpp does.
pub(super) fn wordpiece_from_gguf(file: &GgufFile) -> Result<Tokenizer> {
    let (tokens, types) = vocab(file)?;
    let n = tokens.len();
    let tokens = (tokens.iter().zip(&types))
        .map(|(t, &ty)| unphantom(t, ty))
        .collect();
    let [bos, eos, pad, unk] = special_ids(file)?;
    let default = |id: u32| ((id as usize) < n).then_some(id);
    let bos = match bos {
        Some(b) => Some(b),
        None => optional_id(file, CLS_KEY)?.or(default(101)),
    };
    let sep = match optional_id(file, SEP_KEY)? {
        Some(s) => Some(s),
        None => eos.or(default(102)),
    };
    let special = SpecialTokens {
        bos,
        eos: sep,
        pad: pad.or(default(0)),
        unk: unk.or(default(100)),
        add_bos: flag(file, ADD_BOS_KEY, true)?,
        add_eos: flag(file, ADD_SEP_KEY, true)?,
    };
    let lowercase = flag(file, LOWERCASE_KEY, true)?;
    let max = match file.get(MAX_CHARS_KEY) {
        None => 100,
        Some(_) => usize::try_from(file.get_u64(MAX_CHARS_KEY)?)
            .map_err(|_| err(format!("{MAX_CHARS_KEY} is out of range")))?,
    };
    let options = WordPieceOptions {
        normalizer: BertNormalizer {
            clean_text: flag(file, CLEAN_TEXT_KEY, true)?,
            handle_chinese_chars: flag(file, CHINESE_KEY, true)?,
            strip_accents: flag(file, STRIP_ACCENTS_KEY, lowercase)?,
            lowercase,
        },
        max_input_chars_per_word: max,
        mask: optional_id(file, MASK_KEY)?.or(default(103)),
    };
    Tokenizer::new_wordpiece(tokens, types, options, special)
}
