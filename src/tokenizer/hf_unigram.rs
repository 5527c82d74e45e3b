//! Reading a `tokenizer.json` whose model is `Unigram`: T5's, as transformers converts a
//! SentencePiece Unigram model (`T5Converter`). Three generations of that conversion are in
//! use, all accepted (files on the hub as old as t5-base's may hold the first):
//!
//! - normalizer `Precompiled`; pre-tokenizer `Sequence[WhitespaceSplit, Metaspace]`;
//! - normalizer `Sequence[Precompiled, Replace(" {2,}", " ")]`; pre-tokenizer `Metaspace`;
//! - normalizer `Sequence[Precompiled, Strip(right), Replace(" {2,}", "▁")]`; `Metaspace`.
//!
//! More generally: an optional `Precompiled` first, then any `Strip` and `Replace(" {2,}",
//! " " or "▁")`; `Metaspace` with replacement `▁`, prepend scheme `always` or `never`
//! (`first`, transformers' non-legacy T5, is refused), optionally after `WhitespaceSplit`.
//! The post-processor may add a special token before and after the text (T5: `$A </s>`).
//! Every added token must be a piece of the vocabulary with the same id (T5's `<pad>`,
//! `</s>`, `<unk>` and `<extra_id_N>` are) and not normalized.

use super::charsmap::Charsmap;
use super::hf::{added_token, template};
use super::spm::SPACE;
use super::unigram::{Pipeline, Step};
use super::{err, Model, SpecialTokens, TokenType, Tokenizer, MAX_TOKENS};
use crate::Result;
use serde_json::Value as Json;

impl Tokenizer {
    /// [`Tokenizer::from_hf_json`] of a `tokenizer.json` with a Unigram model.
    pub(super) fn from_hf_unigram(root: &Json) -> Result<Self> {
        let model = &root["model"];
        if model["byte_fallback"].as_bool() == Some(true) {
            return Err(err("model.byte_fallback is not supported for Unigram"));
        }
        let vocab = model["vocab"]
            .as_array()
            .ok_or_else(|| err("model.vocab is not an array of [piece, score]"))?;
        if vocab.is_empty() || vocab.len() > MAX_TOKENS {
            return Err(err(format!(
                "{} pieces: expected 1..={MAX_TOKENS}",
                vocab.len()
            )));
        }
        let mut tokens = Vec::with_capacity(vocab.len());
        let mut scores = Vec::with_capacity(vocab.len());
        for (i, p) in vocab.iter().enumerate() {
            match p.as_array().map(Vec::as_slice) {
                Some([Json::String(t), s]) if s.is_number() => {
                    tokens.push(t.clone());
                    scores.push(s.as_f64().unwrap_or(f64::NAN));
                }
                _ => return Err(err(format!("model.vocab[{i}] {p} is not [piece, score]"))),
            }
        }
        let n = tokens.len();
        let mut types = vec![TokenType::Normal; n];
        let added = root["added_tokens"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        for a in added {
            let (id, content, ty) = added_token(a, Model::Unigram)?;
            if tokens.get(id as usize).map(String::as_str) != Some(content) {
                return Err(err(format!(
                    "added token {content:?} (id {id}) is not that piece of the Unigram vocabulary"
                )));
            }
            types[id as usize] = ty;
        }
        let unk = match &model["unk_id"] {
            Json::Null => None,
            v => Some(
                v.as_u64()
                    .filter(|&id| id < n as u64)
                    .ok_or_else(|| err(format!("model.unk_id {v} is not a piece id")))?
                    as u32,
            ),
        };
        if let Some(unk) = unk.filter(|&u| types[u as usize] == TokenType::Control) {
            // As llama.cpp's converter types SentencePiece's unknown piece.
            types[unk as usize] = TokenType::Unknown;
        }
        let (bos, eos) = template(&root["post_processor"])?;
        let special = SpecialTokens {
            bos,
            eos,
            unk,
            add_bos: bos.is_some(),
            add_eos: eos.is_some(),
            ..Default::default()
        };
        let pipeline = pipeline(&root["normalizer"], &root["pre_tokenizer"])?;
        Tokenizer::new_unigram(tokens, types, scores, pipeline, special)
    }
}

/// The normalizer and pre-tokenizer as a [`Pipeline`] (see the module doc).
pub(super) fn pipeline(normalizer: &Json, pre: &Json) -> Result<Pipeline> {
    let list = match normalizer["type"].as_str() {
        None if normalizer.is_null() => &[][..],
        Some("Sequence") => normalizer["normalizers"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default(),
        _ => std::slice::from_ref(normalizer),
    };
    let mut charsmap = None;
    let mut steps = Vec::new();
    for (i, n) in list.iter().enumerate() {
        let step = match n["type"].as_str() {
            Some("Precompiled") if i > 0 => {
                return Err(err("a Precompiled normalizer is supported only first"));
            }
            Some("Precompiled") => {
                let blob = n["precompiled_charsmap"]
                    .as_str()
                    .ok_or_else(|| err("Precompiled normalizer without a charsmap"))?;
                charsmap = Some(Charsmap::from_base64(blob)?);
                continue;
            }
            Some("Strip") => match (n["strip_left"] == true, n["strip_right"] == true) {
                (false, false) => continue,
                (left, right) => Step::Strip { left, right },
            },
            Some("Replace") if n["pattern"]["Regex"] == " {2,}" => {
                match n["content"].as_str().map(|c| c.chars().collect::<Vec<_>>()) {
                    Some(c) if c == [' '] || c == [SPACE] => Step::Collapse(c[0]),
                    _ => return Err(unsupported_normalizer(n)),
                }
            }
            _ => return Err(unsupported_normalizer(n)),
        };
        steps.push(step);
    }
    let (whitespace_split, metaspace) = match pre["pretokenizers"].as_array().map(Vec::as_slice) {
        Some([w, m]) if pre["type"] == "Sequence" && w["type"] == "WhitespaceSplit" => (true, m),
        Some([m]) if pre["type"] == "Sequence" => (false, m),
        _ => (false, pre),
    };
    let (prepend, split) = metaspace_options(metaspace).ok_or_else(|| {
        err(format!(
            "pre_tokenizer {pre} is not supported with a Unigram model (Metaspace with \
                 replacement \"▁\" and prepend scheme always or never, optionally after \
                 WhitespaceSplit)"
        ))
    })?;
    Ok(Pipeline {
        charsmap,
        steps,
        whitespace_split,
        prepend,
        split,
    })
}

fn unsupported_normalizer(n: &Json) -> crate::Error {
    err(format!(
        "normalizer {n} is not supported with a Unigram model (Precompiled first, then \
         Strip and Replace(Regex(\" {{2,}}\"), \" \" or \"▁\"))"
    ))
}

/// `Metaspace`'s (prepend, split), read as `tokenizers` reads it: `prepend_scheme` defaults
/// to `always`; the older `add_prefix_space: false` must go with `never`; `split` defaults
/// to true.
fn metaspace_options(m: &Json) -> Option<(bool, bool)> {
    if m["type"] != "Metaspace" || m["replacement"] != SPACE.to_string().as_str() {
        return None;
    }
    let prepend = match m["prepend_scheme"].as_str() {
        None if m.get("prepend_scheme").is_none() => true,
        Some("always") => true,
        Some("never") => false,
        _ => return None,
    };
    if m["add_prefix_space"] == false && prepend {
        return None;
    }
    let split = match &m["split"] {
        Json::Null => true,
        v => v.as_bool()?,
    };
    Some((prepend, split))
}
