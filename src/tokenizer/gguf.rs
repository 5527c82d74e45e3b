//! The tokenizer as llama.cpp's `tokenizer.ggml.*` metadata (docs/GGUF.md).

use super::charsmap::Charsmap;
use super::unigram::{Pipeline, Step};
use super::{err, Model, PreTokenizer, SpecialTokens, TokenType, Tokenizer};
use crate::gguf::{GgufFile, GgufWriter, Value, ValueType};
use crate::{Error, Result};

pub const MODEL_KEY: &str = "tokenizer.ggml.model";
pub(super) const PRE_KEY: &str = "tokenizer.ggml.pre";
pub(super) const TOKENS_KEY: &str = "tokenizer.ggml.tokens";
pub(super) const TYPES_KEY: &str = "tokenizer.ggml.token_type";
const SCORES_KEY: &str = "tokenizer.ggml.scores";
const MERGES_KEY: &str = "tokenizer.ggml.merges";
pub(super) const ADD_BOS_KEY: &str = "tokenizer.ggml.add_bos_token";
const ADD_EOS_KEY: &str = "tokenizer.ggml.add_eos_token";
const ADD_PREFIX_KEY: &str = "tokenizer.ggml.add_space_prefix";
const REMOVE_WS_KEY: &str = "tokenizer.ggml.remove_extra_whitespaces";
const CHARSMAP_KEY: &str = "tokenizer.ggml.precompiled_charsmap";
pub(super) const ID_KEYS: [&str; 4] = [
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.unknown_token_id",
];
/// llama.cpp's name for byte-level BPE.
const BPE_MODEL: &str = "gpt2";
/// llama.cpp's name for SentencePiece (Llama, Gemma).
const SPM_MODEL: &str = "llama";
/// The `tokenizer.ggml.pre` llama.cpp's converter writes for SentencePiece and T5 (which it
/// ignores). For `t5` it names transformers' current conversion (see [`t5_pre`]).
pub(super) const SPM_PRE: &str = "default";
/// llama.cpp's name for SentencePiece Unigram (T5).
const T5_MODEL: &str = "t5";
/// llama.cpp's name for WordPiece (BERT).
pub(super) const BERT_MODEL: &str = "bert";

pub(super) fn strings<'f>(file: &'f GgufFile, key: &str) -> Result<Vec<&'f str>> {
    file.get_array(key)?
        .iter()
        .map(|v| {
            v.as_str().ok_or_else(|| Error::MetadataType {
                key: key.to_owned(),
                expected: "an array of strings",
                found: format!("an element of type {}", v.value_type().name()),
            })
        })
        .collect()
}

/// An optional bool, `default` when absent.
pub(super) fn flag(file: &GgufFile, key: &str, default: bool) -> Result<bool> {
    match file.get(key) {
        Some(_) => file.get_bool(key),
        None => Ok(default),
    }
}

fn merges(file: &GgufFile) -> Result<Vec<(&str, &str)>> {
    strings(file, MERGES_KEY)?
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            split_merge(m)
                .ok_or_else(|| err(format!("{MERGES_KEY}[{i}] {m:?} is not two tokens \"a b\"")))
        })
        .collect()
}

/// `tokenizer.ggml.tokens` and `token_type` (all normal when absent).
pub(super) fn vocab(file: &GgufFile) -> Result<(Vec<String>, Vec<TokenType>)> {
    let tokens: Vec<String> = strings(file, TOKENS_KEY)?
        .into_iter()
        .map(str::to_owned)
        .collect();
    let types = match file.get(TYPES_KEY) {
        None => vec![TokenType::Normal; tokens.len()],
        Some(_) => file
            .get_array(TYPES_KEY)?
            .iter()
            .map(|v| {
                let t = v.as_i64().and_then(|t| i32::try_from(t).ok());
                t.and_then(TokenType::from_i32)
                    .ok_or_else(|| err(format!("{TYPES_KEY}: {v} is not a token type (1..=6)")))
            })
            .collect::<Result<_>>()?,
    };
    Ok((tokens, types))
}

/// The four `tokenizer.ggml.*_token_id`s (bos, eos, pad, unk), each optional.
pub(super) fn special_ids(file: &GgufFile) -> Result<[Option<u32>; 4]> {
    let mut ids = [None; 4];
    for (slot, key) in ids.iter_mut().zip(ID_KEYS) {
        if file.get(key).is_some() {
            let v = file.get_u64(key)?;
            *slot = Some(u32::try_from(v).map_err(|_| err(format!("{key} {v} is out of range")))?);
        }
    }
    Ok(ids)
}

/// `tokenizer.ggml.scores`: f32 (or i32, which llama.cpp also reads), one per token.
fn scores(file: &GgufFile) -> Result<Vec<f32>> {
    file.get_array(SCORES_KEY)?
        .iter()
        .map(|v| match v {
            Value::F32(x) => Ok(*x),
            Value::I32(x) => Ok(*x as f32),
            _ => Err(err(format!("{SCORES_KEY}: {v} is not an f32"))),
        })
        .collect()
}

impl Tokenizer {
    /// Whether `file` carries tokenizer metadata at all.
    pub fn in_gguf(file: &GgufFile) -> bool {
        file.get(MODEL_KEY).is_some()
    }

    /// Reads `tokenizer.ggml.*`: model `gpt2` (byte-level BPE), `llama` (SentencePiece
    /// BPE) or `t5` (SentencePiece Unigram), with llama.cpp's defaults for absent keys (see
    /// docs/GGUF.md).
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let model = file.get_str(MODEL_KEY)?;
        if model == T5_MODEL {
            return unigram_from_gguf(file);
        }
        if model == BERT_MODEL {
            return super::gguf_bert::wordpiece_from_gguf(file);
        }
        if model != BPE_MODEL && model != SPM_MODEL {
            return Err(err(format!(
                "{MODEL_KEY} {model:?} is not supported (only {BPE_MODEL:?}, byte-level BPE, \
                 {SPM_MODEL:?}, SentencePiece BPE, {T5_MODEL:?}, Unigram, and {BERT_MODEL:?}, \
                 WordPiece)"
            )));
        }
        let spm = model == SPM_MODEL;
        // Options that would change the ids and that neither kind implements.
        if flag(file, ADD_EOS_KEY, false)? {
            return Err(err(format!("{ADD_EOS_KEY} is set, which is not supported")));
        }
        if flag(file, REMOVE_WS_KEY, false)? {
            return Err(err(format!(
                "{REMOVE_WS_KEY} is set, which is not supported"
            )));
        }
        let (tokens, types) = vocab(file)?;
        let ids = special_ids(file)?;
        // llama.cpp adds BOS by default for SentencePiece, not for byte-level BPE.
        let add_bos = flag(file, ADD_BOS_KEY, spm)?;
        let [bos, eos, pad, unk] = ids;
        let special = SpecialTokens {
            bos,
            eos,
            pad,
            unk,
            add_bos,
            add_eos: false,
        };
        if spm {
            // llama.cpp's default is a dummy prefix (Llama); Gemma's files say false.
            let add_space_prefix = flag(file, ADD_PREFIX_KEY, true)?;
            let merges = match file.get(MERGES_KEY) {
                Some(_) => Some(merges(file)?),
                None => None,
            };
            let scores = match (file.get(SCORES_KEY), &merges) {
                (Some(_), _) => Some(scores(file)?),
                (None, Some(_)) => None,
                (None, None) => {
                    return Err(err(format!(
                        "{SCORES_KEY} is missing: SentencePiece BPE merges by score"
                    )))
                }
            };
            return Tokenizer::new_sentencepiece(
                tokens,
                types,
                scores,
                merges.as_deref(),
                add_space_prefix,
                special,
            );
        }
        let pre_name = file.get_str(PRE_KEY)?;
        let pre = PreTokenizer::from_gguf_name(pre_name).ok_or_else(|| {
            err(format!(
                "{PRE_KEY} {pre_name:?} is not supported (gpt2, smollm, qwen2, llama-bpe)"
            ))
        })?;
        Tokenizer::new(tokens, types, &merges(file)?, pre, special)
    }

    /// Adds the `tokenizer.ggml.*` metadata that [`Tokenizer::from_gguf`] reads. A
    /// SentencePiece tokenizer is written as llama.cpp's converter writes Gemma's (model
    /// `llama`, scores, no merges), plus its merges when the scores alone would merge
    /// differently ([`Tokenizer::scores_reproduce_merges`]); llama.cpp ignores them. A
    /// Unigram tokenizer is written as llama.cpp's converter writes T5's (model `t5`,
    /// scores, the charsmap), with the `tokenizer.json`'s whitespace handling named in
    /// `tokenizer.ggml.pre` ([`t5_pre`]).
    pub fn write_gguf(&self, w: &mut GgufWriter) -> Result<()> {
        if let Some(u) = &self.unigram {
            return self.write_unigram(u, w);
        }
        if let Some(wp) = self.wordpiece_options() {
            return self.write_wordpiece(wp, w);
        }
        let (model, pre) = match self.model {
            Model::ByteLevel(pre) => (BPE_MODEL, pre.gguf_name()),
            Model::SentencePiece { .. } | Model::Unigram | Model::WordPiece => (SPM_MODEL, SPM_PRE),
        };
        w.add_metadata(MODEL_KEY, model)?;
        w.add_metadata(PRE_KEY, pre)?;
        w.add_metadata(TOKENS_KEY, Value::from_strs(&self.tokens))?;
        if let Some(scores) = self.scores() {
            w.add_metadata(SCORES_KEY, Value::from_f32s(scores))?;
        }
        let types = self.types.iter().map(|&t| Value::I32(t as i32)).collect();
        w.add_metadata(TYPES_KEY, Value::Array(ValueType::I32, types))?;
        let with_merges = match self.model {
            Model::ByteLevel(_) => true,
            Model::SentencePiece { .. } | Model::Unigram | Model::WordPiece => {
                !self.scores_reproduce_merges()
            }
        };
        if with_merges {
            let merges: Vec<String> = self
                .merges
                .iter()
                .map(|&(a, b)| format!("{} {}", self.tokens[a as usize], self.tokens[b as usize]))
                .collect();
            w.add_metadata(MERGES_KEY, Value::from_strs(&merges))?;
        }
        self.write_special(w)?;
        if let Model::SentencePiece { add_space_prefix } = self.model {
            w.add_metadata(ADD_PREFIX_KEY, add_space_prefix)?;
        }
        Ok(())
    }

    /// The special ids and `add_bos_token`.
    fn write_special(&self, w: &mut GgufWriter) -> Result<()> {
        let s = self.special;
        for (key, id) in ID_KEYS.into_iter().zip([s.bos, s.eos, s.pad, s.unk]) {
            if let Some(id) = id {
                w.add_metadata(key, id)?;
            }
        }
        w.add_metadata(ADD_BOS_KEY, s.add_bos)
    }

    /// Model `t5`. The scores as f32, as llama.cpp reads them: exact for a SentencePiece
    /// model's (f32 in its protobuf, and so in any converted `tokenizer.json`).
    fn write_unigram(&self, u: &super::unigram::Unigram, w: &mut GgufWriter) -> Result<()> {
        let p = &u.pipeline;
        let (pre, remove_ws) = t5_pre(p);
        w.add_metadata(MODEL_KEY, T5_MODEL)?;
        w.add_metadata(PRE_KEY, pre)?;
        w.add_metadata(TOKENS_KEY, Value::from_strs(&self.tokens))?;
        let scores: Vec<f32> = u.scores.iter().map(|&s| s as f32).collect();
        w.add_metadata(SCORES_KEY, Value::from_f32s(&scores))?;
        let types = self.types.iter().map(|&t| Value::I32(t as i32)).collect();
        w.add_metadata(TYPES_KEY, Value::Array(ValueType::I32, types))?;
        self.write_special(w)?;
        w.add_metadata(ADD_EOS_KEY, self.special.add_eos)?;
        w.add_metadata(ADD_PREFIX_KEY, p.prepend)?;
        w.add_metadata(REMOVE_WS_KEY, remove_ws)?;
        if let Some(m) = &p.charsmap {
            let bytes = m.blob().iter().map(|&b| Value::U8(b)).collect();
            w.add_metadata(CHARSMAP_KEY, Value::Array(ValueType::U8, bytes))?;
        }
        Ok(())
    }
}

/// Reads model `t5`. As llama.cpp: no BOS and EOS added unless said otherwise, a dummy
/// prefix (`add_space_prefix`) unless said otherwise; the charsmap an array of u8 (or i8).
fn unigram_from_gguf(file: &GgufFile) -> Result<Tokenizer> {
    let (tokens, types) = vocab(file)?;
    let [bos, eos, pad, unk] = special_ids(file)?;
    let special = SpecialTokens {
        bos,
        eos,
        pad,
        unk,
        add_bos: flag(file, ADD_BOS_KEY, false)?,
        add_eos: flag(file, ADD_EOS_KEY, true)?,
    };
    let charsmap = match file.get(CHARSMAP_KEY) {
        None => None,
        Some(_) => {
            let bytes = file.get_array(CHARSMAP_KEY)?.iter().map(|v| match v {
                Value::U8(b) => Ok(*b),
                Value::I8(b) => Ok(*b as u8),
                _ => Err(err(format!("{CHARSMAP_KEY}: {v} is not a byte"))),
            });
            Some(Charsmap::parse(bytes.collect::<Result<_>>()?)?)
        }
    };
    let pre = match file.get(PRE_KEY) {
        Some(_) => file.get_str(PRE_KEY)?,
        None => SPM_PRE,
    };
    let pipeline = t5_pipeline(
        pre,
        charsmap,
        flag(file, REMOVE_WS_KEY, false)?,
        flag(file, ADD_PREFIX_KEY, true)?,
    )?;
    let scores = scores(file)?.into_iter().map(f64::from).collect();
    Tokenizer::new_unigram(tokens, types, scores, pipeline, special)
}

/// `tokenizer.ggml.pre` for a `t5` pipeline, and `remove_extra_whitespaces`. `default`
/// (llama.cpp's) is transformers' current conversion: with `remove_extra_whitespaces`,
/// `Strip(right)` then `Replace(" {2,}", "▁")`; without, nothing. Any other pipeline is
/// named by its steps after the charsmap joined with `+`: `strip-left`, `strip-right`,
/// `strip`, `collapse-space` (`Replace(" {2,}", " ")`), `collapse-meta` (to `"▁"`), in
/// order, then `whitespace-split` (a `WhitespaceSplit` pre-tokenizer before `Metaspace`)
/// and `no-split` (`Metaspace` without splitting); e.g. `whitespace-split` for the oldest
/// conversions, `collapse-space` for transformers 4's older one. There
/// `remove_extra_whitespaces` (llama.cpp's SentencePiece option) only says whether the
/// pipeline collapses spaces.
fn t5_pre(p: &Pipeline) -> (String, bool) {
    let collapses = p.whitespace_split || p.steps.iter().any(|s| matches!(s, Step::Collapse(_)));
    let current = Pipeline::current(None).steps;
    if !p.whitespace_split && p.split && (p.steps.is_empty() || p.steps == current) {
        return (SPM_PRE.to_owned(), collapses);
    }
    let mut names = Vec::new();
    for step in &p.steps {
        names.push(match *step {
            Step::Strip {
                left: true,
                right: false,
            } => "strip-left",
            Step::Strip {
                left: false,
                right: true,
            } => "strip-right",
            Step::Strip { .. } => "strip",
            Step::Collapse(' ') => "collapse-space",
            Step::Collapse(_) => "collapse-meta",
        });
    }
    if p.whitespace_split {
        names.push("whitespace-split");
    }
    if !p.split {
        names.push("no-split");
    }
    (names.join("+"), collapses)
}

/// The pipeline [`t5_pre`] names.
fn t5_pipeline(
    pre: &str,
    charsmap: Option<Charsmap>,
    remove_ws: bool,
    prepend: bool,
) -> Result<Pipeline> {
    let mut p = Pipeline::current(charsmap);
    p.prepend = prepend;
    if pre == SPM_PRE {
        if !remove_ws {
            p.steps.clear();
        }
        return Ok(p);
    }
    p.steps.clear();
    for name in pre.split('+') {
        match name {
            "strip-left" | "strip-right" | "strip" => p.steps.push(Step::Strip {
                left: name != "strip-right",
                right: name != "strip-left",
            }),
            "collapse-space" => p.steps.push(Step::Collapse(' ')),
            "collapse-meta" => p.steps.push(Step::Collapse(super::spm::SPACE)),
            "whitespace-split" => p.whitespace_split = true,
            "no-split" => p.split = false,
            _ => {
                return Err(err(format!(
                    "{PRE_KEY} {pre:?} is not supported for {T5_MODEL} ({SPM_PRE}, or these \
                     joined with `+`: strip-left, strip-right, strip, collapse-space, \
                     collapse-meta, whitespace-split, no-split)"
                )))
            }
        }
    }
    Ok(p)
}

/// `"a b"` -> `("a", "b")`. A merge holds exactly one space: byte-level tokens spell the
/// space byte as `Ġ`, SentencePiece ones a space as `▁`, so none contains a real one.
pub(super) fn split_merge(m: &str) -> Option<(&str, &str)> {
    let (a, b) = m.split_once(' ')?;
    (!a.is_empty() && !b.is_empty() && !b.contains(' ')).then_some((a, b))
}
