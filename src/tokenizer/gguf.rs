//! The tokenizer as llama.cpp's `tokenizer.ggml.*` metadata (docs/GGUF.md).

use super::{err, PreTokenizer, SpecialTokens, TokenType, Tokenizer};
use crate::gguf::{GgufFile, GgufWriter, Value, ValueType};
use crate::{Error, Result};

pub const MODEL_KEY: &str = "tokenizer.ggml.model";
const PRE_KEY: &str = "tokenizer.ggml.pre";
const TOKENS_KEY: &str = "tokenizer.ggml.tokens";
const TYPES_KEY: &str = "tokenizer.ggml.token_type";
const MERGES_KEY: &str = "tokenizer.ggml.merges";
const ADD_BOS_KEY: &str = "tokenizer.ggml.add_bos_token";
const ID_KEYS: [&str; 4] = [
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.unknown_token_id",
];
/// llama.cpp's name for byte-level BPE.
const BPE_MODEL: &str = "gpt2";

fn strings<'f>(file: &'f GgufFile, key: &str) -> Result<Vec<&'f str>> {
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

impl Tokenizer {
    /// Whether `file` carries tokenizer metadata at all.
    pub fn in_gguf(file: &GgufFile) -> bool {
        file.get(MODEL_KEY).is_some()
    }

    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let model = file.get_str(MODEL_KEY)?;
        if model != BPE_MODEL {
            return Err(err(format!(
                "{MODEL_KEY} {model:?} is not supported (only {BPE_MODEL:?}, byte-level BPE)"
            )));
        }
        let pre_name = file.get_str(PRE_KEY)?;
        let pre = PreTokenizer::from_gguf_name(pre_name).ok_or_else(|| {
            err(format!(
                "{PRE_KEY} {pre_name:?} is not supported (gpt2, smollm)"
            ))
        })?;
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
        let merges = strings(file, MERGES_KEY)?
            .into_iter()
            .enumerate()
            .map(|(i, m)| {
                split_merge(m).ok_or_else(|| {
                    err(format!("{MERGES_KEY}[{i}] {m:?} is not two tokens \"a b\""))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let mut ids = [None; 4];
        for (slot, key) in ids.iter_mut().zip(ID_KEYS) {
            if file.get(key).is_some() {
                let v = file.get_u64(key)?;
                *slot =
                    Some(u32::try_from(v).map_err(|_| err(format!("{key} {v} is out of range")))?);
            }
        }
        let add_bos = match file.get(ADD_BOS_KEY) {
            Some(_) => file.get_bool(ADD_BOS_KEY)?,
            None => false,
        };
        let [bos, eos, pad, unk] = ids;
        Tokenizer::new(
            tokens,
            types,
            &merges,
            pre,
            SpecialTokens {
                bos,
                eos,
                pad,
                unk,
                add_bos,
            },
        )
    }

    /// Adds the `tokenizer.ggml.*` metadata that [`Tokenizer::from_gguf`] reads.
    pub fn write_gguf(&self, w: &mut GgufWriter) -> Result<()> {
        w.add_metadata(MODEL_KEY, BPE_MODEL)?;
        w.add_metadata(PRE_KEY, self.pre.gguf_name())?;
        w.add_metadata(TOKENS_KEY, Value::from_strs(&self.tokens))?;
        let types = self.types.iter().map(|&t| Value::I32(t as i32)).collect();
        w.add_metadata(TYPES_KEY, Value::Array(ValueType::I32, types))?;
        let merges: Vec<String> = self
            .merges
            .iter()
            .map(|&(a, b)| format!("{} {}", self.tokens[a as usize], self.tokens[b as usize]))
            .collect();
        w.add_metadata(MERGES_KEY, Value::from_strs(&merges))?;
        let s = self.special;
        for (key, id) in ID_KEYS.into_iter().zip([s.bos, s.eos, s.pad, s.unk]) {
            if let Some(id) = id {
                w.add_metadata(key, id)?;
            }
        }
        w.add_metadata(ADD_BOS_KEY, s.add_bos)
    }
}

/// `"a b"` -> `("a", "b")`. A merge holds exactly one space: byte-level tokens spell the
/// space byte as `Ġ`, so none contains a real one.
pub(super) fn split_merge(m: &str) -> Option<(&str, &str)> {
    let (a, b) = m.split_once(' ')?;
    (!a.is_empty() && !b.is_empty() && !b.contains(' ')).then_some((a, b))
}
