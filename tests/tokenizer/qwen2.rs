//! Qwen2-layout byte-level BPE (Qwen2/Qwen2.5/Qwen3, and so Eagle 2.5 in GR00T N1.5):
//! NFC, Qwen2's split, BPE. tests/fixtures/tokenizer/tokenizer_qwen2.json and the ids
//! `tokenizers` gives for ~70 inputs and 300 random strings (golden_qwen2.json) are made by
//! tools/golden/tokenizer.py.

use super::{check_cases, get, ids, load_meta, meta_of, through_gguf, DIR};
use serde_json::Value;
use vla::gguf::Value as Meta;
use vla::tokenizer::{byte_to_char, PreTokenizer, SpecialTokens, Tokenizer};

fn golden() -> Value {
    let text = std::fs::read_to_string(format!("{DIR}/golden_qwen2.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn path() -> String {
    format!("{DIR}/tokenizer_qwen2.json")
}

fn json() -> Value {
    serde_json::from_str(&std::fs::read_to_string(path()).unwrap()).unwrap()
}

fn tok() -> Tokenizer {
    Tokenizer::from_hf_file(path()).unwrap()
}

fn id(tok: &Tokenizer, token: &str) -> u32 {
    (0..tok.len() as u32)
        .find(|&i| tok.token(i) == Some(token))
        .unwrap()
}

#[test]
fn qwen2_encodes_as_hf_tokenizers() {
    let tok = tok();
    assert_eq!(tok.pre_tokenizer(), Some(PreTokenizer::Qwen2));
    // Qwen2 adds no BOS; its special tokens come after the vocabulary.
    assert_eq!(tok.special(), SpecialTokens::default());
    assert!(id(&tok, "<|endoftext|>") > id(&tok, "Ġthe"));
    let g = golden();
    check_cases(&tok, &g["cases"]);
    check_cases(&tok, &g["random_cases"]);
    // Eagle's image tokens are split out of the prompt.
    let prompt = "<img><IMG_CONTEXT><IMG_CONTEXT></img>";
    let ctx = id(&tok, "<IMG_CONTEXT>");
    assert_eq!(tok.encode(prompt).unwrap()[1..3], [ctx, ctx]);
    // NFC: a decomposed character encodes as the composed one.
    assert_eq!(
        tok.encode("Cafe\u{301}").unwrap(),
        tok.encode("Caf\u{e9}").unwrap()
    );
}

#[test]
fn qwen2_splits_as_hf_tokenizers() {
    // NFC and the split alone, on the whole text: exact words, not just the same ids.
    let g = golden();
    let pre = PreTokenizer::Qwen2;
    let mut bad = Vec::new();
    let all = g["cases"].as_array().unwrap().iter();
    for case in all.chain(g["random_cases"].as_array().unwrap()) {
        let text = case["text"].as_str().unwrap();
        let want: Vec<&str> = case["words"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap())
            .collect();
        let normalized = pre.normalize(text);
        let mut got = Vec::new();
        pre.split(&normalized, |w| {
            got.push(
                w.bytes()
                    .map(|b| byte_to_char()[b as usize])
                    .collect::<String>(),
            )
        });
        if got != want {
            bad.push(format!("{text:?}\n  want {want:?}\n  got  {got:?}"));
        }
    }
    assert!(bad.is_empty(), "{} differ:\n{}", bad.len(), bad.join("\n"));
}

#[test]
fn qwen2_merges_as_pairs() {
    // The fixture spells merges "a b", as Qwen2.5's file does; newer files use pairs.
    let mut json = json();
    let merges = json["model"]["merges"].as_array().unwrap();
    let pairs: Vec<Value> = merges
        .iter()
        .map(|m| {
            let (a, b) = m.as_str().unwrap().split_once(' ').unwrap();
            serde_json::json!([a, b])
        })
        .collect();
    json["model"]["merges"] = Value::Array(pairs);
    let tok = Tokenizer::from_hf_json(&json.to_string()).unwrap();
    check_cases(&tok, &golden()["cases"]);
}

#[test]
fn qwen2_gguf_round_trip_encodes_the_same() {
    let tok = tok();
    // As Qwen2.5-Instruct's configs give them.
    let special = SpecialTokens {
        eos: Some(id(&tok, "<|im_end|>")),
        pad: Some(id(&tok, "<|endoftext|>")),
        ..tok.special()
    };
    let tok = tok.with_special(special).unwrap();
    let meta = meta_of(&tok);
    assert_eq!(
        get(&meta, "tokenizer.ggml.pre").and_then(Meta::as_str),
        Some("qwen2")
    );
    assert_eq!(
        get(&meta, "tokenizer.ggml.model").and_then(Meta::as_str),
        Some("gpt2")
    );
    let back = load_meta(meta.clone()).unwrap();
    assert_eq!(back.pre_tokenizer(), Some(PreTokenizer::Qwen2));
    assert_eq!(back.special(), special);
    assert_eq!(back.len(), tok.len());
    let g = golden();
    check_cases(&back, &g["cases"]);
    check_cases(&back, &g["random_cases"]);
    assert_eq!(meta_of(&back), meta);
    check_cases(&through_gguf(&back), &g["cases"]);
}

#[test]
fn qwen2_decodes_as_hf_tokenizers() {
    let tok = tok();
    let g = golden();
    for case in g["cases"]
        .as_array()
        .unwrap()
        .iter()
        .chain(g["random_cases"].as_array().unwrap())
    {
        assert_eq!(
            tok.decode(&ids(&case["ids"])),
            case["decoded"].as_str().unwrap(),
            "{:?}",
            case["text"]
        );
    }
}

#[test]
fn unsupported_qwen2_json_is_an_error() {
    type Edit = Box<dyn Fn(&mut Value)>;
    let pre = |j: &mut Value, i: usize, key: &str, v: Value| {
        j["pre_tokenizer"]["pretokenizers"][i][key] = v;
    };
    let cases: Vec<(&str, Edit)> = vec![
        ("no NFC", Box::new(|j| j["normalizer"] = Value::Null)),
        (
            "NFKC",
            Box::new(|j| j["normalizer"] = serde_json::json!({"type": "NFKC"})),
        ),
        (
            "other pattern",
            Box::new(move |j| pre(j, 0, "pattern", serde_json::json!({"Regex": r"\s+"}))),
        ),
        (
            "string pattern",
            Box::new(move |j| pre(j, 0, "pattern", serde_json::json!({"String": " "}))),
        ),
        (
            "removed behavior",
            Box::new(move |j| pre(j, 0, "behavior", "Removed".into())),
        ),
        (
            "inverted",
            Box::new(move |j| pre(j, 0, "invert", true.into())),
        ),
        (
            "byte-level split too",
            Box::new(move |j| pre(j, 1, "use_regex", true.into())),
        ),
        (
            "prefix space",
            Box::new(move |j| pre(j, 1, "add_prefix_space", true.into())),
        ),
        (
            "split alone",
            Box::new(|j| j["pre_tokenizer"] = j["pre_tokenizer"]["pretokenizers"][0].clone()),
        ),
        (
            "GPT-2's pre-tokenizer with NFC",
            Box::new(|j| {
                j["pre_tokenizer"] = serde_json::json!({"type": "ByteLevel",
                    "add_prefix_space": false, "use_regex": true})
            }),
        ),
        (
            "subword prefix",
            Box::new(|j| j["model"]["continuing_subword_prefix"] = "##".into()),
        ),
        (
            "word suffix",
            Box::new(|j| j["model"]["end_of_word_suffix"] = "</w>".into()),
        ),
    ];
    let base = json();
    for (what, edit) in cases {
        let mut j = base.clone();
        edit(&mut j);
        let e = Tokenizer::from_hf_json(&j.to_string())
            .map(|_| ())
            .expect_err(what);
        println!("{what}: {e}");
    }
    // Absent prefix and suffix are the same as "".
    let mut j = base.clone();
    let model = j["model"].as_object_mut().unwrap();
    model.remove("continuing_subword_prefix");
    model.remove("end_of_word_suffix");
    let tok = Tokenizer::from_hf_json(&j.to_string()).unwrap();
    check_cases(&tok, &golden()["cases"]);
}

#[test]
fn long_qwen2_text_is_quick() {
    let tok = tok();
    let max = vla::tokenizer::MAX_TEXT_BYTES;
    // Every branch of the split, and NFC's slow path (a decomposed é every few words).
    let text: String = "Pick up the cube, it's 12.5 cm!\n\n  \t Cafe\u{301} 😀 <img>   x\r\n"
        .chars()
        .cycle()
        .take(max / 2)
        .collect();
    let spaces = " ".repeat(max - 1) + "x";
    for text in [&text, &spaces] {
        let t0 = std::time::Instant::now();
        let ids = tok.encode(text).unwrap();
        println!(
            "{} bytes: {} ids in {:?}",
            text.len(),
            ids.len(),
            t0.elapsed()
        );
        assert_eq!(tok.decode(&ids), text.replace("e\u{301}", "\u{e9}"));
    }
}
