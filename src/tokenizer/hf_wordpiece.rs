//! Reading BERT's WordPiece tokenizer: a `tokenizer.json` whose model is `WordPiece` (as
//! transformers' `BertTokenizerFast` writes it), or a bare vocabulary (`vocab.txt`, one token
//! a line, as older BERT checkpoints hold it with a `tokenizer_config.json`), read as
//! `BertTokenizerFast(vocab_file, do_lower_case, ...)` builds its tokenizer from it.
//!
//! Accepted in a `tokenizer.json`: normalizer `BertNormalizer` (any options) or none;
//! pre-tokenizer `BertPreTokenizer` (alone or as the one item of a `Sequence`); model
//! `WordPiece` with `continuing_subword_prefix` `##` and an `unk_token` in the vocabulary;
//! post-processor `TemplateProcessing` with at most a special token before and after `$A`
//! (BERT's `[CLS] $A [SEP]`), the older `BertProcessing` (`cls`, `sep`), or none; added
//! tokens not normalized (BERT's five special tokens are not). The pad and mask ids are those
//! of the special tokens `[PAD]` and `[MASK]` (unless `padding` names another pad id).

use super::hf::{added_token, dense, id_of, template};
use super::wordpiece::{BertNormalizer, WordPieceOptions, CONTINUATION};
use super::{err, Model, SpecialTokens, TokenType, Tokenizer};
use crate::{Error, Result};
use serde_json::Value as Json;
use std::path::Path;

/// The special tokens' texts (transformers' `BertTokenizer` defaults).
const UNK: &str = "[UNK]";
const CLS: &str = "[CLS]";
const SEP: &str = "[SEP]";
const PAD: &str = "[PAD]";
const MASK: &str = "[MASK]";

impl Tokenizer {
    /// [`Tokenizer::from_hf_json`] of a `tokenizer.json` with a WordPiece model.
    pub(super) fn from_hf_wordpiece(root: &Json) -> Result<Self> {
        let model = &root["model"];
        let prefix = model["continuing_subword_prefix"]
            .as_str()
            .unwrap_or(CONTINUATION);
        if prefix != CONTINUATION {
            return Err(err(format!(
                "model.continuing_subword_prefix {prefix:?} is not supported (only \"##\")"
            )));
        }
        let max_chars = match &model["max_input_chars_per_word"] {
            Json::Null => 100,
            v => v
                .as_u64()
                .and_then(|m| usize::try_from(m).ok())
                .ok_or_else(|| err(format!("model.max_input_chars_per_word {v} is not a count")))?,
        };
        let vocab = model["vocab"]
            .as_object()
            .ok_or_else(|| err("model.vocab is not an object"))?;
        let added = root["added_tokens"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        let mut entries = Vec::with_capacity(vocab.len() + added.len());
        for (s, id) in vocab {
            entries.push((id_of(id, s)?, s.as_str(), TokenType::Normal));
        }
        for a in added {
            entries.push(added_token(a, Model::WordPiece)?);
        }
        let (tokens, types): (Vec<String>, Vec<TokenType>) = dense(&entries)?.into_iter().unzip();
        let unk_name = model["unk_token"].as_str().ok_or_else(|| {
            err(format!(
                "model.unk_token {} is not a string",
                model["unk_token"]
            ))
        })?;
        let unk = vocab
            .get(unk_name)
            .map(|id| id_of(id, unk_name))
            .transpose()?
            .ok_or_else(|| err(format!("unk_token {unk_name:?} is not in model.vocab")))?;
        let (bos, eos) = match root["post_processor"]["type"].as_str() {
            Some("BertProcessing") => {
                let pair = |key: &str| {
                    let v = &root["post_processor"][key];
                    match v.as_array().map(Vec::as_slice) {
                        Some([Json::String(s), id]) => id_of(id, s),
                        _ => Err(err(format!("BertProcessing {key} {v} is not [token, id]"))),
                    }
                };
                (Some(pair("cls")?), Some(pair("sep")?))
            }
            _ => template(&root["post_processor"])?,
        };
        // BERT's pad token is `[PAD]` (tokenizer_config.json names it, as llama.cpp's
        // converter reads it); a `padding` section says otherwise.
        let pad = match &root["padding"]["pad_id"] {
            Json::Null => control_named(&tokens, &types, PAD),
            v => Some(id_of(v, "padding.pad_id")?),
        };
        let special = SpecialTokens {
            bos,
            eos,
            pad,
            unk: Some(unk),
            add_bos: bos.is_some(),
            add_eos: eos.is_some(),
        };
        let options = WordPieceOptions {
            normalizer: normalizer(&root["normalizer"])?,
            max_input_chars_per_word: max_chars,
            mask: control_named(&tokens, &types, MASK),
        };
        check_pre_tokenizer(&root["pre_tokenizer"])?;
        Tokenizer::new_wordpiece(tokens, types, options, special)
    }

    /// A WordPiece tokenizer from its vocabulary alone, one token per id (`vocab.txt`'s lines
    /// without their line ends), as transformers' `BertTokenizerFast` makes it: `[PAD]`,
    /// `[UNK]`, `[CLS]`, `[SEP]` and `[MASK]` are special (matched literally in the text),
    /// `[UNK]` must be there, and `[CLS] ... [SEP]` surround the ids when both are there.
    pub fn from_wordpiece_tokens(tokens: Vec<String>, normalizer: BertNormalizer) -> Result<Self> {
        if tokens.is_empty() {
            return Err(err("an empty WordPiece vocabulary"));
        }
        let mut types = vec![TokenType::Normal; tokens.len()];
        // The last of repeated lines is the token's id, as `tokenizers` reads a vocab.txt.
        let id = |name: &str| tokens.iter().rposition(|t| t == name).map(|i| i as u32);
        let [unk, cls, sep, pad, mask] = [UNK, CLS, SEP, PAD, MASK].map(id);
        for i in [unk, cls, sep, pad, mask].into_iter().flatten() {
            types[i as usize] = TokenType::Control;
        }
        if unk.is_none() {
            return Err(err(format!("the WordPiece vocabulary has no {UNK} token")));
        }
        let both = cls.is_some() && sep.is_some();
        let special = SpecialTokens {
            bos: cls,
            eos: sep,
            pad,
            unk,
            add_bos: both,
            add_eos: both,
        };
        let options = WordPieceOptions {
            normalizer,
            mask,
            ..Default::default()
        };
        Tokenizer::new_wordpiece(tokens, types, options, special)
    }

    /// [`Tokenizer::from_wordpiece_tokens`] of a `vocab.txt` file's text (each line's
    /// trailing whitespace removed, as `tokenizers` reads it).
    pub fn from_wordpiece_vocab(vocab_txt: &str, normalizer: BertNormalizer) -> Result<Self> {
        let tokens = vocab_txt.lines().map(|l| l.trim_end().to_owned()).collect();
        Self::from_wordpiece_tokens(tokens, normalizer)
    }
}

/// A folder with `vocab.txt` and maybe `tokenizer_config.json` (`do_lower_case`, default
/// true; `strip_accents`; `tokenize_chinese_chars`, default true), as transformers reads it.
pub(super) fn from_vocab_folder(dir: &Path) -> Result<Tokenizer> {
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|e| Error::Io {
            path: p.to_owned(),
            err: e,
        })
    };
    let config_path = dir.join("tokenizer_config.json");
    let config: Json = if config_path.is_file() {
        serde_json::from_str(&read(&config_path)?)
            .map_err(|e| err(format!("{}: invalid JSON: {e}", config_path.display())))?
    } else {
        Json::Null
    };
    let flag = |key: &str| match &config[key] {
        Json::Null => Ok(None),
        Json::Bool(b) => Ok(Some(*b)),
        v => Err(err(format!(
            "tokenizer_config.json: {key} {v} is not a bool"
        ))),
    };
    // Special tokens named otherwise would be plain tokens here: refuse rather than guess.
    for (key, want) in [
        ("unk_token", UNK),
        ("cls_token", CLS),
        ("sep_token", SEP),
        ("pad_token", PAD),
        ("mask_token", MASK),
    ] {
        let v = &config[key];
        let name = v.as_str().or_else(|| v["content"].as_str());
        if name.is_some_and(|n| n != want) {
            return Err(err(format!(
                "tokenizer_config.json: {key} {v} is not supported without a tokenizer.json \
                 (only {want:?})"
            )));
        }
    }
    let normalizer = BertNormalizer::bert(
        flag("do_lower_case")?.unwrap_or(true),
        flag("strip_accents")?,
        flag("tokenize_chinese_chars")?.unwrap_or(true),
    );
    Tokenizer::from_wordpiece_vocab(&read(&dir.join("vocab.txt"))?, normalizer)
}

/// The control token spelled `name`, if any.
fn control_named(tokens: &[String], types: &[TokenType], name: &str) -> Option<u32> {
    (0..tokens.len())
        .find(|&i| tokens[i] == name && types[i] == TokenType::Control)
        .map(|i| i as u32)
}

/// `BertNormalizer`'s options (none: every step off).
fn normalizer(v: &Json) -> Result<BertNormalizer> {
    let v = match v["normalizers"].as_array().map(Vec::as_slice) {
        Some([one]) if v["type"] == "Sequence" => one,
        _ => v,
    };
    if v.is_null() {
        return Ok(BertNormalizer {
            clean_text: false,
            handle_chinese_chars: false,
            strip_accents: false,
            lowercase: false,
        });
    }
    if v["type"] != "BertNormalizer" {
        return Err(err(format!(
            "normalizer {v} is not supported with a WordPiece model (only BertNormalizer)"
        )));
    }
    // `tokenizers`' defaults for absent fields: all true, strip_accents following lowercase.
    let get = |key: &str| match &v[key] {
        Json::Null => Ok(None),
        Json::Bool(b) => Ok(Some(*b)),
        x => Err(err(format!("BertNormalizer {key} {x} is not a bool"))),
    };
    let lowercase = get("lowercase")?.unwrap_or(true);
    Ok(BertNormalizer {
        clean_text: get("clean_text")?.unwrap_or(true),
        handle_chinese_chars: get("handle_chinese_chars")?.unwrap_or(true),
        strip_accents: get("strip_accents")?.unwrap_or(lowercase),
        lowercase,
    })
}

fn check_pre_tokenizer(v: &Json) -> Result<()> {
    let v = match v["pretokenizers"].as_array().map(Vec::as_slice) {
        Some([one]) if v["type"] == "Sequence" => one,
        _ => v,
    };
    if v["type"] == "BertPreTokenizer" {
        Ok(())
    } else {
        Err(err(format!(
            "pre_tokenizer {v} is not supported with a WordPiece model (only BertPreTokenizer)"
        )))
    }
}
