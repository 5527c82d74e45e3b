//! The tokenizer against Hugging Face `tokenizers`: tests/fixtures/tokenizer/ holds a
//! byte-level BPE trained with SmolLM2's pipeline (and one with GPT-2's) and the ids
//! `tokenizers` gives for ~50 inputs (made by tools/golden/tokenizer.py). Encoding must match exactly, from the
//! tokenizer.json and after a round trip through GGUF metadata.

use serde_json::Value;
use vla::gguf::{GgufFile, GgufWriter, Value as Meta, ValueType};
use vla::tokenizer::{PreTokenizer, SpecialTokens, Tokenizer};
use vla::Error;

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
    assert_eq!(tok.pre_tokenizer(), PreTokenizer::Gpt2);
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
    assert_eq!(tok.pre_tokenizer(), PreTokenizer::Gpt2Digits);
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
            Box::new(|m| set(m, "tokenizer.ggml.model", "llama".into())),
        ),
        (
            "other pre",
            Box::new(|m| set(m, "tokenizer.ggml.pre", "qwen2".into())),
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
