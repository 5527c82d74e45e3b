//! The tokenizer against Hugging Face `tokenizers`: tests/fixtures/tokenizer/ holds a
//! byte-level BPE trained with SmolLM2's pipeline (and one with GPT-2's) and the ids
//! `tokenizers` gives for ~50 inputs (made by tools/golden/tokenizer.py), and a Gemma-style
//! SentencePiece BPE converted by transformers with its ids (tools/golden/tokenizer_spm.py).
//! Encoding must match exactly, from the tokenizer.json and after a round trip through GGUF
//! metadata; for SentencePiece also from the metadata llama.cpp's converter writes (scores,
//! no merges). The Qwen2 family's (NFC, Qwen2's split) is in tokenizer/qwen2.rs, T5's
//! Unigram in tokenizer/t5.rs, BERT's WordPiece in tokenizer/wordpiece.rs.

use serde_json::Value;
use vla::gguf::{GgufFile, GgufWriter, Value as Meta, ValueType};
use vla::tokenizer::{Model, PreTokenizer, SpecialTokens, Tokenizer};
use vla::Error;

// A submodule, not a test target of its own: it shares this file's helpers.
#[path = "tokenizer/qwen2.rs"]
mod qwen2;
#[path = "tokenizer/t5.rs"]
mod t5;
#[path = "tokenizer/wordpiece.rs"]
mod wordpiece;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tokenizer");

fn golden() -> Value {
    let text = std::fs::read_to_string(format!("{DIR}/golden.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn hf_json() -> String {
    std::fs::read_to_string(format!("{DIR}/tokenizer.json")).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_u64().unwrap() as u32)
        .collect()
}

/// Every golden case, encoded by `tok`; panics listing all mismatches.
fn check_cases(tok: &Tokenizer, cases: &Value) {
    let cases = cases.as_array().unwrap();
    assert!(cases.len() >= 4);
    let mut bad = Vec::new();
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let want = ids(&case["ids"]);
        let got = tok.encode(text).unwrap();
        if got != want {
            bad.push(format!("{text:?}\n  want {want:?}\n  got  {got:?}"));
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {} cases differ:\n{}",
        bad.len(),
        cases.len(),
        bad.join("\n")
    );
}

/// The golden ids under `key` (one list per golden text), with those a variant changes
/// (`[index, ids]` pairs) replaced (t5.rs, wordpiece.rs).
fn want(g: &Value, key: &str, changed: Option<&Value>) -> Vec<Vec<u32>> {
    let mut all: Vec<Vec<u32>> = g[key].as_array().unwrap().iter().map(ids).collect();
    for pair in changed.and_then(Value::as_array).into_iter().flatten() {
        all[pair[0].as_u64().unwrap() as usize] = ids(&pair[1]);
    }
    all
}

/// Every golden text encoded by `tok`; panics listing all mismatches.
fn check(tok: &Tokenizer, g: &Value, want: &[Vec<u32>]) {
    let texts = g["texts"].as_array().unwrap();
    assert_eq!(texts.len(), want.len());
    let mut bad = Vec::new();
    for (t, want) in texts.iter().zip(want) {
        let text = t.as_str().unwrap();
        let got = tok.encode(text).unwrap();
        if got != *want {
            bad.push(format!("{text:?}\n  want {want:?}\n  got  {got:?}"));
        }
    }
    none_differ(&bad, texts.len());
}

/// Fails listing `bad`, the texts (of `n`) whose ids differ from the reference's.
fn none_differ(bad: &[String], n: usize) {
    assert!(
        bad.is_empty(),
        "{} of {n} texts differ:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

fn through_gguf(tok: &Tokenizer) -> Tokenizer {
    let mut w = GgufWriter::new();
    tok.write_gguf(&mut w).unwrap();
    let file = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    assert!(Tokenizer::in_gguf(&file));
    Tokenizer::from_gguf(&file).unwrap()
}

#[test]
fn encodes_as_hf_tokenizers() {
    let tok = Tokenizer::from_hf_json(&hf_json()).unwrap();
    check_cases(&tok, &golden()["cases"]);
}

#[test]
fn gguf_round_trip_encodes_the_same() {
    let tok = Tokenizer::from_hf_json(&hf_json()).unwrap();
    let special = SpecialTokens {
        eos: Some(2),
        pad: Some(2),
        ..tok.special()
    };
    let tok = tok.with_special(special).unwrap();
    let back = through_gguf(&tok);
    assert_eq!(back.special(), special);
    assert_eq!(back.len(), tok.len());
    check_cases(&back, &golden()["cases"]);
}

#[test]
fn leading_bos_post_processor() {
    let g = golden();
    let mut json: Value = serde_json::from_str(&hf_json()).unwrap();
    json["post_processor"] = g["bos_post_processor"].clone();
    let tok = Tokenizer::from_hf_json(&json.to_string()).unwrap();
    assert!(tok.special().add_bos);
    check_cases(&tok, &g["bos_cases"]);
    check_cases(&through_gguf(&tok), &g["bos_cases"]);
}

#[test]
fn gpt2_pre_tokenizer_without_digit_split() {
    // Trained without the digit split, so it has merges across digits that `smollm`'s
    // split would never reach.
    let json = std::fs::read_to_string(format!("{DIR}/tokenizer_gpt2.json")).unwrap();
    let tok = Tokenizer::from_hf_json(&json).unwrap();
    assert_eq!(tok.pre_tokenizer(), Some(PreTokenizer::Gpt2));
    check_cases(&tok, &golden()["gpt2_cases"]);
    check_cases(&through_gguf(&tok), &golden()["gpt2_cases"]);
}

#[test]
fn digit_split_with_a_vocabulary_that_merges_digits() {
    // tokenizer.json's own vocabulary has no digit merges, so only this shows the split.
    let mut json: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{DIR}/tokenizer_gpt2.json")).unwrap(),
    )
    .unwrap();
    let smollm: Value = serde_json::from_str(&hf_json()).unwrap();
    json["pre_tokenizer"] = smollm["pre_tokenizer"].clone();
    let tok = Tokenizer::from_hf_json(&json.to_string()).unwrap();
    assert_eq!(tok.pre_tokenizer(), Some(PreTokenizer::Gpt2Digits));
    check_cases(&tok, &golden()["gpt2_vocab_smollm_pre_cases"]);
    check_cases(
        &through_gguf(&tok),
        &golden()["gpt2_vocab_smollm_pre_cases"],
    );
}

#[test]
fn string_merges_read_as_pairs() {
    // Older tokenizer.json files spell merges "a b"; newer ones ["a", "b"].
    let mut json: Value = serde_json::from_str(&hf_json()).unwrap();
    let merges = json["model"]["merges"].as_array().unwrap();
    assert!(merges[0].is_array(), "fixture should use the pair form");
    let strings: Vec<Value> = merges
        .iter()
        .map(|m| {
            Value::String(format!(
                "{} {}",
                m[0].as_str().unwrap(),
                m[1].as_str().unwrap()
            ))
        })
        .collect();
    json["model"]["merges"] = Value::Array(strings);
    let tok = Tokenizer::from_hf_json(&json.to_string()).unwrap();
    check_cases(&tok, &golden()["cases"]);
}

#[test]
fn decodes_as_hf_tokenizers() {
    let tok = Tokenizer::from_hf_json(&hf_json()).unwrap();
    for case in golden()["decoded"].as_array().unwrap() {
        assert_eq!(
            tok.decode(&ids(&case["ids"])),
            case["text"].as_str().unwrap()
        );
    }
}

#[test]
fn decode_inverts_encode() {
    // Byte-level BPE loses nothing: every input comes back byte for byte.
    let tok = Tokenizer::from_hf_json(&hf_json()).unwrap();
    for case in golden()["cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        assert_eq!(tok.decode(&tok.encode(text).unwrap()), text);
    }
}

/// Writes `tok`'s metadata, lets `edit` change it, and loads the result.
fn load_edited(edit: impl FnOnce(&mut Vec<(String, Meta)>)) -> Result<Tokenizer, Error> {
    let tok = Tokenizer::from_hf_json(&hf_json()).unwrap();
    let mut w = GgufWriter::new();
    tok.write_gguf(&mut w).unwrap();
    let file = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    let mut meta = file.metadata().to_vec();
    edit(&mut meta);
    let mut w = GgufWriter::new();
    for (k, v) in meta {
        w.add_metadata(k, v).unwrap();
    }
    Tokenizer::from_gguf(&GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap())
}

fn set(meta: &mut [(String, Meta)], key: &str, value: Meta) {
    meta.iter_mut().find(|(k, _)| k == key).unwrap().1 = value;
}

#[test]
fn malformed_metadata_is_an_error() {
    type Edit = Box<dyn FnOnce(&mut Vec<(String, Meta)>)>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            "no merges",
            Box::new(|m| m.retain(|(k, _)| k != "tokenizer.ggml.merges")),
        ),
        (
            "no tokens",
            Box::new(|m| m.retain(|(k, _)| k != "tokenizer.ggml.tokens")),
        ),
        (
            "other model",
            Box::new(|m| set(m, "tokenizer.ggml.model", "rwkv".into())),
        ),
        (
            "other pre",
            Box::new(|m| set(m, "tokenizer.ggml.pre", "deepseek-llm".into())),
        ),
        (
            "bos out of range",
            Box::new(|m| m.push(("tokenizer.ggml.bos_token_id".into(), 100_000u32.into()))),
        ),
        (
            "add_bos without bos",
            Box::new(|m| set(m, "tokenizer.ggml.add_bos_token", true.into())),
        ),
        (
            "add_eos",
            Box::new(|m| m.push(("tokenizer.ggml.add_eos_token".into(), true.into()))),
        ),
        (
            "merge not two tokens",
            Box::new(|m| set(m, "tokenizer.ggml.merges", Meta::from_strs(&["Ġt"]))),
        ),
        (
            "merge of unknown tokens",
            Box::new(|m| set(m, "tokenizer.ggml.merges", Meta::from_strs(&["Ġt zz"]))),
        ),
        (
            "tokens not strings",
            Box::new(|m| {
                set(
                    m,
                    "tokenizer.ggml.tokens",
                    Meta::Array(ValueType::U32, vec![Meta::U32(1)]),
                )
            }),
        ),
        (
            "short token types",
            Box::new(|m| {
                set(
                    m,
                    "tokenizer.ggml.token_type",
                    Meta::Array(ValueType::I32, vec![Meta::I32(1)]),
                )
            }),
        ),
        (
            "bad token type",
            Box::new(|m| {
                let Meta::Array(_, types) = &mut m
                    .iter_mut()
                    .find(|(k, _)| k == "tokenizer.ggml.token_type")
                    .unwrap()
                    .1
                else {
                    panic!()
                };
                types[5] = Meta::I32(99);
            }),
        ),
        (
            "empty vocabulary",
            Box::new(|m| {
                set(m, "tokenizer.ggml.tokens", Meta::from_strs::<&str>(&[]));
                set(
                    m,
                    "tokenizer.ggml.token_type",
                    Meta::Array(ValueType::I32, vec![]),
                );
                set(m, "tokenizer.ggml.merges", Meta::from_strs::<&str>(&[]));
            }),
        ),
    ];
    for (what, edit) in cases {
        let e = load_edited(edit).map(|_| ()).expect_err(what);
        println!("{what}: {e}");
    }
    // The unedited metadata loads: the errors above come from the edits.
    assert!(load_edited(|_| {}).is_ok());
}

#[test]
fn unsupported_tokenizer_json_is_an_error() {
    type Edit = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            "normalizer",
            Box::new(|j| j["normalizer"] = serde_json::json!({"type": "NFC"})),
        ),
        (
            "metaspace",
            Box::new(|j| j["pre_tokenizer"] = serde_json::json!({"type": "Metaspace"})),
        ),
        (
            "prefix space",
            Box::new(|j| j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true.into()),
        ),
        (
            "no regex",
            Box::new(|j| j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = false.into()),
        ),
        (
            "grouped digits",
            Box::new(|j| {
                j["pre_tokenizer"]["pretokenizers"][0]["individual_digits"] = false.into()
            }),
        ),
        (
            "wordpiece",
            Box::new(|j| j["model"]["type"] = "WordPiece".into()),
        ),
        (
            "byte fallback",
            Box::new(|j| j["model"]["byte_fallback"] = true.into()),
        ),
        (
            "lstrip",
            Box::new(|j| j["added_tokens"][0]["lstrip"] = true.into()),
        ),
        (
            "id clash",
            Box::new(|j| j["added_tokens"][3]["id"] = 5.into()),
        ),
        (
            "huge id",
            Box::new(|j| j["added_tokens"][3]["id"] = 4_000_000_000u64.into()),
        ),
        (
            "bad merge",
            Box::new(|j| j["model"]["merges"][0] = serde_json::json!(["Ġ", "t", "x"])),
        ),
        (
            "no merges",
            Box::new(|j| {
                j["model"]
                    .as_object_mut()
                    .unwrap()
                    .retain(|k, _| k != "merges")
            }),
        ),
        (
            "eos template",
            Box::new(|j| {
                j["post_processor"] = serde_json::json!({"type": "TemplateProcessing",
                "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<|im_end|>", "type_id": 0}}]})
            }),
        ),
        ("not json", Box::new(|j| *j = Value::String("{".into()))),
    ];
    let base: Value = serde_json::from_str(&hf_json()).unwrap();
    for (what, edit) in cases {
        let mut j = base.clone();
        edit(&mut j);
        let text = if let Value::String(s) = &j {
            s.clone()
        } else {
            j.to_string()
        };
        let e = Tokenizer::from_hf_json(&text).map(|_| ()).expect_err(what);
        println!("{what}: {e}");
    }
    assert!(Tokenizer::from_hf_json(&base.to_string()).is_ok());
}

#[test]
fn long_text_is_an_error() {
    let tok = Tokenizer::from_hf_json(&hf_json()).unwrap();
    let text = "a".repeat(vla::tokenizer::MAX_TEXT_BYTES + 1);
    assert!(tok.encode(&text).is_err());
    assert!(tok.encode(&text[1..]).is_ok());
    // One word as long as allowed, through many different merges: BPE stays quick.
    let word: String = "pickupthereddrawerandcloseit"
        .chars()
        .cycle()
        .take(vla::tokenizer::MAX_TEXT_BYTES)
        .collect();
    let t0 = std::time::Instant::now();
    let ids = tok.encode(&word).unwrap();
    println!(
        "{} bytes in one word: {} ids in {:?}",
        word.len(),
        ids.len(),
        t0.elapsed()
    );
    assert_eq!(tok.decode(&ids), word);
}

// Gemma-style SentencePiece BPE (PaliGemma's kind, which pi0 and pi0.5 use).

fn spm_golden() -> Value {
    let text = std::fs::read_to_string(format!("{DIR}/golden_spm.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn spm_json() -> String {
    std::fs::read_to_string(format!("{DIR}/tokenizer_spm.json")).unwrap()
}

fn spm_tok() -> Tokenizer {
    let tok = Tokenizer::from_hf_json(&spm_json()).unwrap();
    // As PaliGemma's tokenizer_config.json and the model config give them.
    let special = SpecialTokens {
        eos: Some(1),
        pad: Some(0),
        ..tok.special()
    };
    tok.with_special(special).unwrap()
}

fn meta_of(tok: &Tokenizer) -> Vec<(String, Meta)> {
    let mut w = GgufWriter::new();
    tok.write_gguf(&mut w).unwrap();
    let file = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    file.metadata().to_vec()
}

fn load_meta(meta: Vec<(String, Meta)>) -> Result<Tokenizer, Error> {
    let mut w = GgufWriter::new();
    for (k, v) in meta {
        w.add_metadata(k, v).unwrap();
    }
    Tokenizer::from_gguf(&GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap())
}

fn get<'m>(meta: &'m [(String, Meta)], key: &str) -> Option<&'m Meta> {
    meta.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// The metadata llama.cpp's converter writes for a Gemma (`_set_vocab_sentencepiece`, then
/// `add_space_prefix = false`): tokens, SentencePiece's own scores and piece types, the
/// special ids, no merges.
fn llama_cpp_meta(tok: &Tokenizer, g: &Value) -> Vec<(String, Meta)> {
    let tokens: Vec<&str> = (0..tok.len() as u32)
        .map(|i| tok.token(i).unwrap())
        .collect();
    let scores: Vec<f32> = g["spm_scores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();
    let types = g["spm_types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| Meta::I32(v.as_i64().unwrap() as i32))
        .collect();
    vec![
        ("tokenizer.ggml.model".into(), "llama".into()),
        ("tokenizer.ggml.pre".into(), "default".into()),
        ("tokenizer.ggml.tokens".into(), Meta::from_strs(&tokens)),
        ("tokenizer.ggml.scores".into(), Meta::from_f32s(&scores)),
        (
            "tokenizer.ggml.token_type".into(),
            Meta::Array(ValueType::I32, types),
        ),
        ("tokenizer.ggml.bos_token_id".into(), 2u32.into()),
        ("tokenizer.ggml.eos_token_id".into(), 1u32.into()),
        ("tokenizer.ggml.unknown_token_id".into(), 3u32.into()),
        ("tokenizer.ggml.padding_token_id".into(), 0u32.into()),
        ("tokenizer.ggml.add_bos_token".into(), true.into()),
        ("tokenizer.ggml.add_eos_token".into(), false.into()),
        ("tokenizer.ggml.add_space_prefix".into(), false.into()),
    ]
}

#[test]
fn sentencepiece_encodes_as_hf_tokenizers() {
    let tok = Tokenizer::from_hf_json(&spm_json()).unwrap();
    assert_eq!(
        tok.model(),
        Model::SentencePiece {
            add_space_prefix: false
        }
    );
    assert_eq!(tok.pre_tokenizer(), None);
    let s = tok.special();
    assert_eq!((s.bos, s.unk, s.add_bos), (Some(2), Some(3), true));
    assert!(tok.merges_by_rank());
    let g = spm_golden();
    check_cases(&tok, &g["cases"]);
    check_cases(&tok, &g["random_cases"]);
    // Byte fallback fires in the golden inputs: characters outside the vocabulary.
    let bytes: Vec<u32> = (0..tok.len() as u32)
        .filter(|&i| tok.token(i).unwrap().starts_with("<0x"))
        .collect();
    assert_eq!(bytes.len(), 256);
    let fallbacks = g["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| ids(&c["ids"]).iter().any(|i| bytes.contains(i)))
        .count();
    assert!(fallbacks >= 5, "{fallbacks} cases use byte tokens");
}

#[test]
fn sentencepiece_gguf_round_trip_encodes_the_same() {
    let tok = spm_tok();
    // Gemma-style merges are exactly those its scores generate: llama.cpp's layout, scores
    // and no merges, is enough.
    assert!(tok.scores_reproduce_merges());
    let meta = meta_of(&tok);
    assert_eq!(
        get(&meta, "tokenizer.ggml.model").and_then(Meta::as_str),
        Some("llama")
    );
    assert!(get(&meta, "tokenizer.ggml.merges").is_none());
    assert!(get(&meta, "tokenizer.ggml.scores").is_some());
    assert_eq!(
        get(&meta, "tokenizer.ggml.add_space_prefix").and_then(Meta::as_bool),
        Some(false)
    );
    let back = load_meta(meta).unwrap();
    assert!(!back.merges_by_rank());
    assert_eq!(back.model(), tok.model());
    assert_eq!(back.special(), tok.special());
    assert_eq!(back.len(), tok.len());
    let g = spm_golden();
    check_cases(&back, &g["cases"]);
    check_cases(&back, &g["random_cases"]);
    // Written again, the same metadata.
    assert_eq!(meta_of(&back), meta_of(&tok));
}

#[test]
fn sentencepiece_gguf_as_llama_cpp_writes_it() {
    // SentencePiece's own scores: the user-defined pieces and the first merge all score 0,
    // so the tie order matters.
    let g = spm_golden();
    let tok = spm_tok();
    let meta = llama_cpp_meta(&tok, &g);
    let back = load_meta(meta.clone()).unwrap();
    assert!(!back.merges_by_rank());
    assert_eq!(back.special(), tok.special());
    check_cases(&back, &g["cases"]);
    check_cases(&back, &g["random_cases"]);
    // llama.cpp's defaults for SentencePiece: BOS added, a dummy prefix.
    let mut defaults = meta;
    defaults.retain(|(k, _)| {
        k != "tokenizer.ggml.add_bos_token" && k != "tokenizer.ggml.add_space_prefix"
    });
    let back = load_meta(defaults).unwrap();
    assert!(back.special().add_bos);
    assert_eq!(
        back.model(),
        Model::SentencePiece {
            add_space_prefix: true
        }
    );
    check_cases(&back, &g["prefix_cases"]);
    check_cases(&back, &g["random_prefix_cases"]);
}

#[test]
fn sentencepiece_dummy_prefix() {
    // Llama's normalizer: Prepend("▁") before Replace(" ", "▁"), on the same vocabulary.
    let g = spm_golden();
    let mut json: Value = serde_json::from_str(&spm_json()).unwrap();
    json["normalizer"] = g["prefix_normalizer"].clone();
    let tok = Tokenizer::from_hf_json(&json.to_string()).unwrap();
    assert_eq!(
        tok.model(),
        Model::SentencePiece {
            add_space_prefix: true
        }
    );
    let back = through_gguf(&tok);
    for cases in ["prefix_cases", "random_prefix_cases"] {
        check_cases(&tok, &g[cases]);
        check_cases(&back, &g[cases]);
    }
}

#[test]
fn sentencepiece_merges_that_scores_cannot_express_are_written() {
    // Swap two merges of different tokens: no scores give that order any more, so the GGUF
    // keeps the merges, and the round trip still encodes as the tokenizer.json does.
    let mut json: Value = serde_json::from_str(&spm_json()).unwrap();
    let merges = json["model"]["merges"].as_array_mut().unwrap();
    merges.swap(20, 40);
    let tok = Tokenizer::from_hf_json(&json.to_string()).unwrap();
    assert!(!tok.scores_reproduce_merges());
    let meta = meta_of(&tok);
    assert!(get(&meta, "tokenizer.ggml.merges").is_some());
    let back = load_meta(meta).unwrap();
    assert!(back.merges_by_rank());
    let g = spm_golden();
    let all = [
        g["cases"].as_array().unwrap(),
        g["random_cases"].as_array().unwrap(),
    ];
    let mut inputs: Vec<&str> = all
        .into_iter()
        .flatten()
        .map(|c| c["text"].as_str().unwrap())
        .collect();
    inputs.push("and the and it and to");
    for text in inputs {
        assert_eq!(
            back.encode(text).unwrap(),
            tok.encode(text).unwrap(),
            "{text:?}"
        );
    }
}

#[test]
fn sentencepiece_decodes_as_hf_tokenizers() {
    let tok = Tokenizer::from_hf_json(&spm_json()).unwrap();
    for case in spm_golden()["decoded"].as_array().unwrap() {
        assert_eq!(
            tok.decode(&ids(&case["ids"])),
            case["text"].as_str().unwrap()
        );
    }
}

#[test]
fn unsupported_sentencepiece_json_is_an_error() {
    type Edit = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            "no byte fallback",
            Box::new(|j| j["model"]["byte_fallback"] = false.into()),
        ),
        (
            "no fused unk",
            Box::new(|j| j["model"]["fuse_unk"] = false.into()),
        ),
        (
            "prepend alone",
            Box::new(|j| j["normalizer"] = serde_json::json!({"type": "Prepend", "prepend": "▁"})),
        ),
        (
            "replace with something else",
            Box::new(|j| j["normalizer"]["content"] = "_".into()),
        ),
        (
            "metaspace",
            Box::new(|j| {
                j["pre_tokenizer"] = serde_json::json!({"type": "Metaspace", "replacement": "▁",
                    "prepend_scheme": "first", "split": true})
            }),
        ),
        (
            "inverted split",
            Box::new(|j| j["pre_tokenizer"]["invert"] = true.into()),
        ),
        (
            "normalized added token with a space",
            Box::new(|j| {
                let a = j["added_tokens"].as_array_mut().unwrap();
                a.push(
                    serde_json::json!({"id": 1000, "content": "pick up", "single_word": false,
                    "lstrip": false, "rstrip": false, "normalized": true, "special": false}),
                );
            }),
        ),
        (
            "byte-level pre-tokenizer",
            Box::new(|j| {
                j["pre_tokenizer"] = serde_json::json!({"type": "ByteLevel",
                    "add_prefix_space": false, "use_regex": true})
            }),
        ),
    ];
    let base: Value = serde_json::from_str(&spm_json()).unwrap();
    for (what, edit) in cases {
        let mut j = base.clone();
        edit(&mut j);
        let e = Tokenizer::from_hf_json(&j.to_string())
            .map(|_| ())
            .expect_err(what);
        println!("{what}: {e}");
    }
    // Without the pre-tokenizer (older conversions), and with a normalized added token that
    // the normalizer cannot change: accepted.
    let mut j = base.clone();
    j["pre_tokenizer"] = Value::Null;
    j["added_tokens"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"id": 1000,
        "content": "<loc0000>", "single_word": false, "lstrip": false, "rstrip": false,
        "normalized": true, "special": false}));
    let tok = Tokenizer::from_hf_json(&j.to_string()).unwrap();
    assert_eq!(tok.encode("a<loc0000>").unwrap()[2], 1000);
    check_cases(&tok, &spm_golden()["cases"]);
}

#[test]
fn malformed_sentencepiece_metadata_is_an_error() {
    let g = spm_golden();
    let tok = spm_tok();
    type Edit = Box<dyn FnOnce(&mut Vec<(String, Meta)>)>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            "no scores nor merges",
            Box::new(|m| m.retain(|(k, _)| k != "tokenizer.ggml.scores")),
        ),
        (
            "short scores",
            Box::new(|m| set(m, "tokenizer.ggml.scores", Meta::from_f32s(&[0.0; 10]))),
        ),
        (
            "NaN score",
            Box::new(|m| {
                let Meta::Array(_, s) = &mut m
                    .iter_mut()
                    .find(|(k, _)| k == "tokenizer.ggml.scores")
                    .unwrap()
                    .1
                else {
                    panic!()
                };
                s[300] = Meta::F32(f32::NAN);
            }),
        ),
        (
            "scores not numbers",
            Box::new(|m| {
                let n = m
                    .iter()
                    .find(|(k, _)| k == "tokenizer.ggml.tokens")
                    .and_then(|(_, v)| v.as_array())
                    .unwrap()
                    .len();
                set(m, "tokenizer.ggml.scores", Meta::from_strs(&vec!["x"; n]))
            }),
        ),
        (
            "add_eos",
            Box::new(|m| set(m, "tokenizer.ggml.add_eos_token", true.into())),
        ),
        (
            "remove extra whitespace",
            Box::new(|m| {
                m.push((
                    "tokenizer.ggml.remove_extra_whitespaces".into(),
                    true.into(),
                ))
            }),
        ),
        (
            "add_bos without bos",
            Box::new(|m| m.retain(|(k, _)| k != "tokenizer.ggml.bos_token_id")),
        ),
        (
            "add_space_prefix not a bool",
            Box::new(|m| set(m, "tokenizer.ggml.add_space_prefix", 1u32.into())),
        ),
    ];
    let base = llama_cpp_meta(&tok, &g);
    for (what, edit) in cases {
        let mut meta = base.clone();
        edit(&mut meta);
        let e = load_meta(meta).map(|_| ()).expect_err(what);
        println!("{what}: {e}");
    }
    assert!(load_meta(base).is_ok());
}

#[test]
fn long_sentencepiece_text_is_quick() {
    let g = spm_golden();
    let tok = spm_tok();
    let by_score = load_meta(llama_cpp_meta(&tok, &g)).unwrap();
    let max = vla::tokenizer::MAX_TEXT_BYTES;
    // Without pre-tokenization the whole text is one word; spaces grow to 3-byte "▁".
    let words: String = "Task: pick up the red cube, State: 12 200 3 0 128 255;\nAction: "
        .chars()
        .cycle()
        .take(max)
        .collect();
    // Characters outside the vocabulary: four byte tokens each.
    let emoji: String = "🦾🫙🧽".chars().cycle().take(max / 4).collect();
    for text in [&words, &emoji] {
        for t in [&tok, &by_score] {
            let t0 = std::time::Instant::now();
            let ids = t.encode(text).unwrap();
            println!(
                "{} bytes: {} ids in {:?}",
                text.len(),
                ids.len(),
                t0.elapsed()
            );
            assert_eq!(t.decode(&ids[1..]), *text);
        }
        assert_eq!(tok.encode(text).unwrap(), by_score.encode(text).unwrap());
    }
    assert!(tok.encode(&"a".repeat(max + 1)).is_err());
}
