//! Reading a Hugging Face `tokenizer.json`, for converters that ship the tokenizer in
//! the GGUF. Only what byte-level BPE of the GPT-2 and Qwen2 families, Gemma-style
//! SentencePiece BPE, T5's Unigram (hf_unigram.rs) and BERT's WordPiece (hf_wordpiece.rs)
//! use is accepted; any other normalizer, pre-tokenizer, model option or post-processor is
//! an error naming it, so a converted model never tokenizes differently in silence.

use super::gguf::split_merge;
use super::pretok::{LLAMA3_PATTERN, QWEN2_PATTERN};
use super::spm::SPACE;
use super::{err, Model, PreTokenizer, SpecialTokens, TokenType, Tokenizer, MAX_TOKENS};
use crate::{Error, Result};
use serde_json::Value as Json;
use std::collections::HashMap;
use std::path::Path;

impl Tokenizer {
    /// Reads a `tokenizer.json` file; see [`Tokenizer::from_hf_json`].
    pub fn from_hf_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| Error::Io {
            path: path.to_owned(),
            err: e,
        })?;
        Self::from_hf_json(&text)
    }

    /// Parses a `tokenizer.json`: `model` (BPE: `vocab`, `merges` as `"a b"` strings or
    /// `["a", "b"]` pairs, `unk_token`), `added_tokens`, `normalizer`, `pre_tokenizer` and
    /// `post_processor` (a leading BOS). No normalizer means byte-level BPE (GPT-2's
    /// `ByteLevel` pre-tokenizer), NFC byte-level BPE after Qwen2's `Split` (transformers'
    /// Qwen2 conversion, which Qwen3 keeps); `Replace(" ", "▁")`, optionally after
    /// `Prepend("▁")`, means SentencePiece BPE with byte fallback (Gemma's conversion by transformers; no
    /// pre-tokenizer, or its no-op `Split(" ")`). EOS and padding ids live in other files
    /// (`tokenizer_config.json`, the model config): set them with
    /// [`Tokenizer::with_special`].
    pub fn from_hf_json(text: &str) -> Result<Self> {
        let root: Json =
            serde_json::from_str(text).map_err(|e| err(format!("tokenizer.json: {e}")))?;
        Self::from_hf_value(&root)
    }

    /// [`Tokenizer::from_hf_json`] of a parsed `tokenizer.json`.
    pub(super) fn from_hf_value(root: &Json) -> Result<Self> {
        if root["model"]["type"] == "Unigram" {
            return Self::from_hf_unigram(root);
        }
        if root["model"]["type"] == "WordPiece" {
            return Self::from_hf_wordpiece(root);
        }
        let kind = match normalizer(&root["normalizer"])? {
            Normalizer::SentencePiece(add_space_prefix) => {
                check_split(&root["pre_tokenizer"])?;
                Model::SentencePiece { add_space_prefix }
            }
            n => Model::ByteLevel(pre_tokenizer(&root["pre_tokenizer"], n == Normalizer::Nfc)?),
        };
        let spm = matches!(kind, Model::SentencePiece { .. });
        let model = &root["model"];
        check_model(model, spm, kind == Model::ByteLevel(PreTokenizer::Llama3))?;

        let vocab = model["vocab"]
            .as_object()
            .ok_or_else(|| err("model.vocab is not an object"))?;
        let added = root["added_tokens"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        let mut entries: Vec<(u32, &str, TokenType)> =
            Vec::with_capacity(vocab.len() + added.len());
        for (s, id) in vocab {
            // SentencePiece's byte-fallback tokens, typed as llama.cpp's converter does.
            let ty = if spm && s.len() == 6 && super::spm::token_byte(s).is_some() {
                TokenType::Byte
            } else {
                TokenType::Normal
            };
            entries.push((id_of(id, s)?, s, ty));
        }
        for a in added {
            entries.push(added_token(a, kind)?);
        }
        let tokens_and_types = dense(&entries)?;
        let (tokens, mut types): (Vec<String>, Vec<TokenType>) =
            tokens_and_types.into_iter().unzip();

        let merges = merges(&model["merges"])?;
        let ids: HashMap<&str, u32> = entries.iter().map(|&(id, s, _)| (s, id)).collect();
        let unk = match &model["unk_token"] {
            Json::Null => None,
            Json::String(s) => Some(
                *ids.get(s.as_str())
                    .ok_or_else(|| err(format!("unk_token {s:?} is not a token")))?,
            ),
            v => return Err(err(format!("model.unk_token {v} is not a string"))),
        };
        if let (true, Some(unk)) = (spm, unk) {
            // As llama.cpp's converter types SentencePiece's unknown piece.
            types[unk as usize] = TokenType::Unknown;
        }
        let (bos, eos) = template(&root["post_processor"])?;
        if eos.is_some() {
            return Err(err(format!(
                "post-processor template {} is not supported (only a leading BOS)",
                root["post_processor"]["single"]
            )));
        }
        let special = SpecialTokens {
            bos,
            unk,
            add_bos: bos.is_some(),
            ..Default::default()
        };
        let merges: Vec<(&str, &str)> = merges
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        match kind {
            Model::ByteLevel(pre) => Tokenizer::new(tokens, types, &merges, pre, special),
            Model::SentencePiece { add_space_prefix } => Tokenizer::new_sentencepiece(
                tokens,
                types,
                None,
                Some(&merges),
                add_space_prefix,
                special,
            ),
            Model::Unigram | Model::WordPiece => unreachable!("read by from_hf_unigram/wordpiece"),
        }
    }
}

pub(super) fn id_of(v: &Json, token: &str) -> Result<u32> {
    v.as_u64()
        .and_then(|id| u32::try_from(id).ok())
        .filter(|&id| (id as usize) < MAX_TOKENS)
        .ok_or_else(|| {
            err(format!(
                "token {token:?} has id {v} (expected 0..{MAX_TOKENS})"
            ))
        })
}

pub(super) fn added_token(a: &Json, kind: Model) -> Result<(u32, &str, TokenType)> {
    let content = a["content"]
        .as_str()
        .ok_or_else(|| err(format!("added token {a} has no content")))?;
    for flag in ["lstrip", "rstrip", "single_word"] {
        if a[flag].as_bool() == Some(true) {
            return Err(err(format!(
                "added token {content:?} sets {flag}, which is not supported"
            )));
        }
    }
    // A normalized added token is matched in the normalized text; we match all in the
    // original text, which is the same only where the normalizer changes nothing: for
    // Replace(" ", "▁") alone, a token without spaces or "▁"; never for Unigram's or BERT's.
    // `tokenizers`' default: special tokens are not normalized, others are.
    let normalized = a["normalized"]
        .as_bool()
        .unwrap_or(a["special"].as_bool() != Some(true));
    if normalized && matches!(kind, Model::Unigram | Model::WordPiece) {
        return Err(err(format!(
            "added token {content:?} is normalized, which is not supported for {kind:?}"
        )));
    }
    if let Model::SentencePiece { add_space_prefix } = kind {
        if normalized && (add_space_prefix || content.contains([' ', SPACE])) {
            return Err(err(format!(
                "added token {content:?} is normalized, which is not supported with this normalizer"
            )));
        }
    }
    let ty = if a["special"].as_bool() == Some(true) {
        TokenType::Control
    } else {
        TokenType::UserDefined
    };
    Ok((id_of(&a["id"], content)?, content, ty))
}

/// One token per id from 0 to the largest; an id given twice must name the same string
/// (special tokens are usually in both `vocab` and `added_tokens`). Unused ids become
/// `[PAD<id>]` placeholders, as llama.cpp's converter writes them.
pub(super) fn dense(entries: &[(u32, &str, TokenType)]) -> Result<Vec<(String, TokenType)>> {
    let n = entries
        .iter()
        .map(|&(id, ..)| id as usize + 1)
        .max()
        .unwrap_or(0);
    let mut out: Vec<Option<(String, TokenType)>> = vec![None; n];
    for &(id, s, ty) in entries {
        match &mut out[id as usize] {
            slot @ None => *slot = Some((s.to_owned(), ty)),
            Some((prev, prev_ty)) if prev == s => {
                // The added-token entry decides the type.
                if ty != TokenType::Normal {
                    *prev_ty = ty;
                }
            }
            Some((prev, _)) => return Err(err(format!("id {id} is both {prev:?} and {s:?}"))),
        }
    }
    Ok(out
        .into_iter()
        .enumerate()
        .map(|(id, t)| t.unwrap_or_else(|| (format!("[PAD{id}]"), TokenType::Unused)))
        .collect())
}

/// Checks the BPE model's options: each that changes tokenization must be off, except
/// `byte_fallback`, which SentencePiece BPE needs (and byte-level BPE must not have), and
/// `ignore_merges`, which goes with Llama 3's split (`llama3`) and only with it.
fn check_model(model: &Json, spm: bool, llama3: bool) -> Result<()> {
    if model["type"].as_str() != Some("BPE") {
        return Err(err(format!(
            "model type {} is not supported (only BPE)",
            model["type"]
        )));
    }
    // Qwen2's conversion writes "" for the prefix and suffix, the same as none.
    for key in ["dropout", "continuing_subword_prefix", "end_of_word_suffix"] {
        if !model[key].is_null() && model[key] != "" {
            return Err(err(format!("model.{key} {} is not supported", model[key])));
        }
    }
    if (model["ignore_merges"].as_bool() == Some(true)) != llama3 {
        return Err(err(
            "model.ignore_merges is supported with Llama 3's pre-tokenizer, which needs it",
        ));
    }
    let byte_fallback = model["byte_fallback"].as_bool() == Some(true);
    match (spm, byte_fallback) {
        (false, true) => Err(err(
            "model.byte_fallback is not supported without the SentencePiece normalizer",
        )),
        (true, false) => Err(err(
            "the SentencePiece normalizer needs model.byte_fallback (as Gemma's has)",
        )),
        // Consecutive unknown characters always make one <unk> (Gemma's `fuse_unk`).
        (true, true) if model["fuse_unk"].as_bool() != Some(true) => {
            Err(err("model.fuse_unk false is not supported"))
        }
        _ => Ok(()),
    }
}

/// The normalizers we implement.
#[derive(PartialEq)]
enum Normalizer {
    /// Byte-level BPE of the GPT-2 family.
    None,
    /// Byte-level BPE of the Qwen2 family.
    Nfc,
    /// SentencePiece's, with whether it has the dummy prefix: `Replace(" ", "▁")` (Gemma)
    /// is `false`, `Sequence[Prepend("▁"), Replace(" ", "▁")]` (Llama) `true`.
    SentencePiece(bool),
}

fn normalizer(v: &Json) -> Result<Normalizer> {
    use Normalizer::*;
    if v.is_null() {
        return Ok(None);
    }
    if v["type"] == "NFC" {
        return Ok(Nfc);
    }
    let space = SPACE.to_string();
    let replace = |p: &Json| {
        p["type"] == "Replace" && p["pattern"]["String"] == " " && p["content"] == space.as_str()
    };
    let prepend = |p: &Json| p["type"] == "Prepend" && p["prepend"] == space.as_str();
    if replace(v) {
        return Ok(SentencePiece(false));
    }
    if v["type"] == "Sequence" {
        match v["normalizers"].as_array().map(Vec::as_slice) {
            Some([r]) if replace(r) => return Ok(SentencePiece(false)),
            Some([p, r]) if prepend(p) && replace(r) => return Ok(SentencePiece(true)),
            _ => {}
        }
    }
    Err(err(format!(
        "normalizer {v} is not supported (none, NFC, Replace(\" \", \"▁\"), or that after Prepend(\"▁\"))"
    )))
}

/// SentencePiece BPE has no pre-tokenizer; transformers' Gemma conversion writes
/// `Split(" ", MergedWithPrevious)`, which finds nothing once the normalizer has replaced
/// every space.
fn check_split(v: &Json) -> Result<()> {
    let noop = v.is_null()
        || (v["type"] == "Split" && v["pattern"]["String"] == " " && v["invert"] != true);
    if noop {
        Ok(())
    } else {
        Err(err(format!(
            "pre_tokenizer {v} is not supported with the SentencePiece normalizer (none, or Split(\" \"))"
        )))
    }
}

fn merges(v: &Json) -> Result<Vec<(String, String)>> {
    let list = v
        .as_array()
        .ok_or_else(|| err("model.merges is missing or not an array"))?;
    list.iter()
        .enumerate()
        .map(|(i, m)| {
            let pair = match m {
                Json::String(s) => split_merge(s),
                Json::Array(p) if p.len() == 2 => p[0].as_str().zip(p[1].as_str()),
                _ => None,
            };
            pair.map(|(a, b)| (a.to_owned(), b.to_owned()))
                .ok_or_else(|| err(format!("merges[{i}] {m} is not \"a b\" or [\"a\", \"b\"]")))
        })
        .collect()
}

/// The byte-level pre-tokenizer, which must go with the normalizer: none for GPT-2's
/// (`ByteLevel`, optionally after `Digits(individual_digits)`), NFC for Qwen2's
/// (`Split(QWEN2_PATTERN, Isolated)`, then `ByteLevel` without its own split).
fn pre_tokenizer(v: &Json, nfc: bool) -> Result<PreTokenizer> {
    // `tokenizers` requires add_prefix_space and defaults use_regex to true.
    let byte_level = |p: &Json, regex: bool| {
        p["type"] == "ByteLevel"
            && p["add_prefix_space"] == false
            && p["use_regex"].as_bool().unwrap_or(true) == regex
    };
    let split = |p: &Json, pattern: &str| {
        p["type"] == "Split"
            && p["pattern"]["Regex"] == pattern
            && p["behavior"] == "Isolated"
            && p["invert"] == false
    };
    let digits = |p: &Json| p["type"] == "Digits" && p["individual_digits"] == true;
    let pre = match v["pretokenizers"].as_array().map(Vec::as_slice) {
        _ if byte_level(v, true) => Some(PreTokenizer::Gpt2),
        Some([first, bl]) if v["type"] == "Sequence" => {
            if digits(first) && byte_level(bl, true) {
                Some(PreTokenizer::Gpt2Digits)
            } else if split(first, QWEN2_PATTERN) && byte_level(bl, false) {
                Some(PreTokenizer::Qwen2)
            } else if split(first, LLAMA3_PATTERN) && byte_level(bl, false) {
                Some(PreTokenizer::Llama3)
            } else {
                None
            }
        }
        _ => None,
    };
    let pre = pre.ok_or_else(|| {
        err(format!(
            "pre_tokenizer {v} is not supported (ByteLevel, optionally after \
             Digits(individual_digits), or Qwen2's or Llama 3's Split then ByteLevel)"
        ))
    })?;
    if nfc != (pre == PreTokenizer::Qwen2) {
        return Err(err(format!(
            "pre-tokenizer {} with {} normalizer is not supported (Qwen2's goes with NFC, \
             the others with none)",
            pre.gguf_name(),
            if nfc { "the NFC" } else { "no" }
        )));
    }
    Ok(pre)
}

/// The ids a post-processor puts before and after the text (BOS, EOS), if any. `ByteLevel`
/// only adjusts offsets; `TemplateProcessing`'s single-sequence template may hold a special
/// token before and one after `$A`, and nothing else.
pub(super) fn template(v: &Json) -> Result<(Option<u32>, Option<u32>)> {
    match v["type"].as_str() {
        None if v.is_null() => Ok((None, None)),
        Some("ByteLevel") => Ok((None, None)),
        Some("Sequence") => {
            let (mut bos, mut eos) = (None, None);
            for p in v["processors"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
            {
                let (b, e) = template(p)?;
                (bos, eos) = (b.or(bos), e.or(eos));
            }
            Ok((bos, eos))
        }
        Some("TemplateProcessing") => {
            let single = v["single"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default();
            let special = |s: &Json| {
                let name = s["SpecialToken"]["id"]
                    .as_str()
                    .ok_or_else(|| err(format!("template item {s} is not a special token")))?;
                match v["special_tokens"][name]["ids"]
                    .as_array()
                    .map(Vec::as_slice)
                {
                    Some([id]) => id_of(id, name),
                    _ => Err(err(format!(
                        "template special token {name:?} is not one id"
                    ))),
                }
            };
            let Some(a) = single.iter().position(|p| p["Sequence"]["id"] == "A") else {
                return Err(err(format!(
                    "post-processor template {} has no $A",
                    v["single"]
                )));
            };
            match (&single[..a], &single[a + 1..]) {
                ([], []) => Ok((None, None)),
                ([b], []) => Ok((Some(special(b)?), None)),
                ([], [e]) => Ok((None, Some(special(e)?))),
                ([b], [e]) => Ok((Some(special(b)?), Some(special(e)?))),
                _ => Err(err(format!(
                    "post-processor template {} is not supported (at most a special token \
                     before and one after the text)",
                    v["single"]
                ))),
            }
        }
        _ => Err(err(format!("post_processor {v} is not supported"))),
    }
}
