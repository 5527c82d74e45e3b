//! T5's SentencePiece Unigram (Octo's language encoder is T5-base): a small Unigram model
//! trained with a subset of SentencePiece's `nmt_nfkc` rules and converted by transformers'
//! T5 converter (tests/fixtures/tokenizer/t5-unigram/tokenizer.json), and the ids
//! `tokenizers` gives for ~370 texts, also with the normalizer / pre-tokenizer variants of
//! older conversions (golden.json). Both made by tools/golden/tokenizer_t5.py. Encoding
//! must match exactly, from the tokenizer.json and after a round trip through GGUF metadata.

use super::{get, load_meta, meta_of, set};
use serde_json::Value;
use vla::gguf::{Value as Meta, ValueType};
use vla::tokenizer::{Model, SpecialTokens, Tokenizer, MAX_TEXT_BYTES};

const T5_DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/tokenizer/t5-unigram"
);

fn golden() -> Value {
    let text = std::fs::read_to_string(format!("{T5_DIR}/golden.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn json() -> Value {
    let text = std::fs::read_to_string(format!("{T5_DIR}/tokenizer.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn tok() -> Tokenizer {
    let tok = Tokenizer::from_hf_path(T5_DIR).unwrap();
    // T5's pad id (tokenizer_config.json and the model config give it).
    let special = SpecialTokens {
        pad: Some(0),
        ..tok.special()
    };
    tok.with_special(special).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    (v.as_array().unwrap().iter())
        .map(|i| i.as_u64().unwrap() as u32)
        .collect()
}

/// The golden ids, with those a variant changes (`[index, ids]` pairs) replaced.
fn want(g: &Value, changed: Option<&Value>) -> Vec<Vec<u32>> {
    let mut all: Vec<Vec<u32>> = g["ids"].as_array().unwrap().iter().map(ids).collect();
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
    assert!(
        bad.is_empty(),
        "{} of {} texts differ:\n{}",
        bad.len(),
        texts.len(),
        bad.join("\n")
    );
}

#[test]
fn t5_encodes_as_hf_tokenizers() {
    let g = golden();
    let tok = Tokenizer::from_hf_path(T5_DIR).unwrap();
    assert_eq!(tok.model(), Model::Unigram);
    assert_eq!(tok.pre_tokenizer(), None);
    let s = tok.special();
    assert_eq!((s.eos, s.unk, s.bos), (Some(1), Some(2), None));
    assert!(s.add_eos && !s.add_bos);
    check(&tok, &g, &want(&g, None));
    // The golden texts reach the unknown token, fused runs of it, and the added tokens.
    let all = want(&g, None);
    assert!(all.iter().filter(|i| i.contains(&2)).count() >= 20);
    let extra0 = (0..tok.len() as u32)
        .find(|&i| tok.token(i) == Some("<extra_id_0>"))
        .unwrap();
    assert!(all.iter().filter(|i| i.contains(&extra0)).count() >= 5);
    assert_eq!(tok.encode("").unwrap(), [1]);
}

#[test]
fn t5_gguf_round_trip_encodes_the_same() {
    let g = golden();
    let tok = tok();
    let meta = meta_of(&tok);
    let str_of = |k: &str| get(&meta, k).and_then(Meta::as_str).map(str::to_owned);
    let bool_of = |k: &str| get(&meta, k).and_then(Meta::as_bool);
    assert_eq!(str_of("tokenizer.ggml.model").as_deref(), Some("t5"));
    assert_eq!(str_of("tokenizer.ggml.pre").as_deref(), Some("default"));
    assert_eq!(bool_of("tokenizer.ggml.add_eos_token"), Some(true));
    assert_eq!(bool_of("tokenizer.ggml.add_bos_token"), Some(false));
    assert_eq!(bool_of("tokenizer.ggml.add_space_prefix"), Some(true));
    assert_eq!(
        bool_of("tokenizer.ggml.remove_extra_whitespaces"),
        Some(true)
    );
    let Some(Meta::Array(ValueType::U8, charsmap)) =
        get(&meta, "tokenizer.ggml.precompiled_charsmap")
    else {
        panic!("no u8 charsmap")
    };
    assert!(charsmap.len() > 1000);
    let back = load_meta(meta.clone()).unwrap();
    assert_eq!(back.model(), Model::Unigram);
    assert_eq!(back.special(), tok.special());
    assert_eq!(back.len(), tok.len());
    check(&back, &g, &want(&g, None));
    assert_eq!(meta_of(&back), meta);

    // llama.cpp's defaults for t5: EOS added, no BOS, a dummy prefix; the charsmap may be i8.
    let mut defaults = meta.clone();
    defaults.retain(|(k, _)| {
        !k.ends_with("add_eos_token")
            && !k.ends_with("add_bos_token")
            && !k.ends_with("add_space_prefix")
            && !k.ends_with(".pre")
    });
    let i8s = charsmap
        .iter()
        .map(|v| Meta::I8(v.as_u64().unwrap() as u8 as i8));
    set(
        &mut defaults,
        "tokenizer.ggml.precompiled_charsmap",
        Meta::Array(ValueType::I8, i8s.collect()),
    );
    check(&load_meta(defaults).unwrap(), &g, &want(&g, None));
}

/// The golden variant `name` as a tokenizer.json: its normalizer (with the fixture's
/// charsmap put back into `Precompiled`), pre-tokenizer and extra pieces.
fn variant_json(g: &Value, name: &str) -> Value {
    let mut j = json();
    let charsmap = j["normalizer"]["normalizers"][0]["precompiled_charsmap"].clone();
    let v = &g[format!("variant_{name}")];
    let mut n = v["normalizer"].clone();
    let fill = |n: &mut Value| {
        if n["type"] == "Precompiled" {
            n["precompiled_charsmap"] = charsmap.clone();
        }
    };
    fill(&mut n);
    for m in n["normalizers"].as_array_mut().into_iter().flatten() {
        fill(m);
    }
    j["normalizer"] = n;
    j["pre_tokenizer"] = v["pre_tokenizer"].clone();
    let vocab = j["model"]["vocab"].as_array_mut().unwrap();
    vocab.extend(v["extra_pieces"].as_array().into_iter().flatten().cloned());
    j
}

#[test]
fn t5_conversion_variants_encode_as_hf_tokenizers() {
    // The oldest conversions (WhitespaceSplit), transformers 4's older one (spaces
    // collapsed to a space, no Strip), no dummy prefix, no split at "▁" (with pieces that
    // hold a "▁" inside), no charsmap.
    let g = golden();
    for (name, pre) in [
        ("whitespace_split", "whitespace-split"),
        ("collapse_space", "collapse-space"),
        ("never", "default"),
        ("no_split", "strip-right+collapse-meta+no-split"),
        ("no_charsmap", "default"),
    ] {
        let tok = Tokenizer::from_hf_json(&variant_json(&g, name).to_string())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = want(&g, Some(&g[format!("variant_{name}_ids")]));
        check(&tok, &g, &want);
        let meta = meta_of(&tok);
        assert_eq!(
            get(&meta, "tokenizer.ggml.pre").and_then(Meta::as_str),
            Some(pre),
            "{name}"
        );
        let back = load_meta(meta).unwrap();
        check(&back, &g, &want);
        assert_eq!(meta_of(&back), meta_of(&tok), "{name}");
    }
    // Each variant encodes some texts differently from the converted tokenizer.
    for name in [
        "whitespace_split",
        "collapse_space",
        "never",
        "no_split",
        "no_charsmap",
    ] {
        assert!(!g[format!("variant_{name}_ids")]
            .as_array()
            .unwrap()
            .is_empty());
    }
}

#[test]
fn t5_decodes_pieces() {
    let tok = tok();
    let ids = tok.encode("pick up the red cube").unwrap();
    assert_eq!(tok.decode(&ids), " pick up the red cube</s>");
}

#[test]
fn unsupported_t5_json_is_an_error() {
    type Edit = Box<dyn Fn(&mut Value)>;
    fn metaspace(j: &mut Value) -> &mut Value {
        &mut j["pre_tokenizer"]
    }
    let cases: Vec<(&str, Edit)> = vec![
        (
            "prepend first",
            Box::new(|j| metaspace(j)["prepend_scheme"] = "first".into()),
        ),
        (
            "add_prefix_space false with always",
            Box::new(|j| metaspace(j)["add_prefix_space"] = false.into()),
        ),
        (
            "other replacement",
            Box::new(|j| metaspace(j)["replacement"] = "_".into()),
        ),
        (
            "byte-level pre-tokenizer",
            Box::new(|j| {
                j["pre_tokenizer"] = serde_json::json!({"type": "ByteLevel",
                    "add_prefix_space": false, "use_regex": true})
            }),
        ),
        (
            "byte fallback",
            Box::new(|j| j["model"]["byte_fallback"] = true.into()),
        ),
        (
            "NFKC normalizer",
            Box::new(|j| j["normalizer"]["normalizers"][0] = serde_json::json!({"type": "NFKC"})),
        ),
        (
            "Precompiled not first",
            Box::new(|j| {
                j["normalizer"]["normalizers"]
                    .as_array_mut()
                    .unwrap()
                    .swap(0, 1)
            }),
        ),
        (
            "other Replace",
            Box::new(|j| j["normalizer"]["normalizers"][2]["pattern"]["Regex"] = " +".into()),
        ),
        (
            "charsmap not base64",
            Box::new(|j| {
                j["normalizer"]["normalizers"][0]["precompiled_charsmap"] = "not base64!".into()
            }),
        ),
        (
            "charsmap too short",
            Box::new(|j| j["normalizer"]["normalizers"][0]["precompiled_charsmap"] = "AAAA".into()),
        ),
        (
            "normalized added token",
            Box::new(|j| j["added_tokens"][3]["normalized"] = true.into()),
        ),
        (
            "added token outside the vocabulary",
            Box::new(|j| {
                let a = j["added_tokens"].as_array_mut().unwrap();
                a.push(
                    serde_json::json!({"id": 5000, "content": "<new>", "single_word": false,
                    "lstrip": false, "rstrip": false, "normalized": false, "special": true}),
                );
            }),
        ),
        (
            "unk outside",
            Box::new(|j| j["model"]["unk_id"] = 100_000.into()),
        ),
        (
            "score not a number",
            Box::new(|j| j["model"]["vocab"][5][1] = "x".into()),
        ),
        (
            "piece too long",
            Box::new(|j| {
                j["model"]["vocab"][5][0] = "a".repeat(vla::tokenizer::MAX_PIECE_BYTES + 1).into()
            }),
        ),
        (
            "a token before and after the text twice",
            Box::new(|j| {
                let single = j["post_processor"]["single"].as_array_mut().unwrap();
                let eos = single[1].clone();
                single.push(eos);
            }),
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
    assert!(Tokenizer::from_hf_json(&base.to_string()).is_ok());
}

#[test]
fn malformed_t5_metadata_is_an_error() {
    let tok = tok();
    type Edit = Box<dyn FnOnce(&mut Vec<(String, Meta)>)>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            "other pre",
            Box::new(|m| set(m, "tokenizer.ggml.pre", "strip-right+unknown".into())),
        ),
        (
            "no scores",
            Box::new(|m| m.retain(|(k, _)| k != "tokenizer.ggml.scores")),
        ),
        (
            "NaN score",
            Box::new(|m| {
                let n = get(m, "tokenizer.ggml.tokens")
                    .unwrap()
                    .as_array()
                    .unwrap()
                    .len();
                let mut s = vec![-1.0f32; n];
                s[7] = f32::NAN;
                set(m, "tokenizer.ggml.scores", Meta::from_f32s(&s))
            }),
        ),
        (
            "add_eos without eos",
            Box::new(|m| m.retain(|(k, _)| k != "tokenizer.ggml.eos_token_id")),
        ),
        (
            "charsmap not bytes",
            Box::new(|m| {
                set(
                    m,
                    "tokenizer.ggml.precompiled_charsmap",
                    Meta::from_strs(&["a"]),
                )
            }),
        ),
        (
            "charsmap cut",
            Box::new(|m| {
                let Some(Meta::Array(_, b)) = m
                    .iter_mut()
                    .find(|(k, _)| k == "tokenizer.ggml.precompiled_charsmap")
                    .map(|(_, v)| v)
                else {
                    panic!()
                };
                b.truncate(100);
            }),
        ),
    ];
    let base = meta_of(&tok);
    for (what, edit) in cases {
        let mut meta = base.clone();
        edit(&mut meta);
        let e = load_meta(meta).map(|_| ()).expect_err(what);
        println!("{what}: {e}");
    }
    assert!(load_meta(base).is_ok());
}

#[test]
fn hostile_charsmaps_do_not_panic() {
    // Trie units scrambled: each text either encodes or is an error.
    let tok = tok();
    let base = meta_of(&tok);
    let Some(Meta::Array(_, bytes)) = get(&base, "tokenizer.ggml.precompiled_charsmap") else {
        panic!()
    };
    let n = bytes.len();
    let mut seed = 0x9e3779b9u32;
    for round in 0..8 {
        let mut b: Vec<Meta> = bytes.clone();
        for _ in 0..(1 << round) * 64 {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            let i = 4 + (seed as usize % (n - 4));
            b[i] = Meta::U8((seed >> 24) as u8);
        }
        let mut meta = base.clone();
        set(
            &mut meta,
            "tokenizer.ggml.precompiled_charsmap",
            Meta::Array(ValueType::U8, b),
        );
        if let Ok(t) = load_meta(meta) {
            for text in [
                "pick up the ｒｅｄ cube ①",
                "Café e\u{301} \r\n ﬁ",
                "\u{3000}x\u{1}",
            ] {
                let _ = t.encode(text);
            }
        }
    }
}

#[test]
fn long_t5_text_is_quick() {
    let tok = tok();
    let words: String = "Pick up the red cube, put it in the ｂｏｗｌ; then wipe  the table.\n"
        .chars()
        .cycle()
        .take(MAX_TEXT_BYTES / 2)
        .collect();
    // One word of the longest length, and characters outside the vocabulary (one <unk>).
    let word: String = "pickupthereddrawerandcloseit"
        .chars()
        .cycle()
        .take(MAX_TEXT_BYTES)
        .collect();
    let unknown: String = "🦾🫙🧽".chars().cycle().take(MAX_TEXT_BYTES / 4).collect();
    for text in [&words, &word, &unknown] {
        let t0 = std::time::Instant::now();
        let ids = tok.encode(text).unwrap();
        println!(
            "{} bytes: {} ids in {:?}",
            text.len(),
            ids.len(),
            t0.elapsed()
        );
        assert!(t0.elapsed().as_secs() < 5);
    }
    let meta = (0..tok.len() as u32)
        .find(|&i| tok.token(i) == Some("▁"))
        .unwrap();
    assert_eq!(tok.encode(&unknown).unwrap(), [meta, 2, 1]);
    assert!(tok.encode(&"a".repeat(MAX_TEXT_BYTES + 1)).is_err());
}
