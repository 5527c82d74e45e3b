//! BERT's WordPiece (TurboVLA's text encoder is bert-base-uncased): a vocabulary laid out as
//! bert-base-uncased's (`[PAD]`, `[unused*]`, `[UNK]` 100, `[CLS]` 101, `[SEP]` 102,
//! `[MASK]` 103, single characters, their `##` forms, learned pieces) and the tokenizer.json
//! transformers' `BertTokenizerFast` writes for it
//! (tests/fixtures/tokenizer/bert-wordpiece/), with the ids `tokenizers` gives for ~450
//! texts, with and without `[CLS]`/`[SEP]`, also with other `BertNormalizer` options
//! (golden.json). All made by tools/golden/tokenizer_wordpiece.py. Encoding must match
//! exactly, from the tokenizer.json, from the bare vocab.txt, and after a round trip
//! through GGUF metadata (llama.cpp's `bert` model).

use super::{check, get, load_meta, meta_of, set, want};
use serde_json::Value;
use vla::gguf::{Value as Meta, ValueType};
use vla::tokenizer::{BertNormalizer, Model, SpecialTokens, Tokenizer, MAX_TEXT_BYTES};

const WP_DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/tokenizer/bert-wordpiece"
);

fn golden() -> Value {
    let text = std::fs::read_to_string(format!("{WP_DIR}/golden.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn json() -> Value {
    let text = std::fs::read_to_string(format!("{WP_DIR}/tokenizer.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn tok() -> Tokenizer {
    Tokenizer::from_hf_path(WP_DIR).unwrap()
}

/// `tok` without `[CLS]` and `[SEP]` (`add_special_tokens=False`).
fn plain(tok: Tokenizer) -> Tokenizer {
    let special = SpecialTokens {
        add_bos: false,
        add_eos: false,
        ..tok.special()
    };
    tok.with_special(special).unwrap()
}

/// Both golden sets: with `[CLS]`/`[SEP]` and without.
fn check_both(tok: Tokenizer, g: &Value) {
    check(&tok, g, &want(g, "ids", None));
    check(&plain(tok), g, &want(g, "ids_plain", None));
}

#[test]
fn wordpiece_encodes_as_hf_tokenizers() {
    let g = golden();
    let tok = tok();
    assert_eq!(tok.model(), Model::WordPiece);
    assert_eq!(tok.pre_tokenizer(), None);
    let s = tok.special();
    assert_eq!(
        (s.bos, s.eos, s.unk, s.pad),
        (Some(101), Some(102), Some(100), Some(0))
    );
    assert!(s.add_bos && s.add_eos);
    let o = tok.wordpiece_options().unwrap();
    assert_eq!(o.normalizer, BertNormalizer::UNCASED);
    assert_eq!((o.max_input_chars_per_word, o.mask), (100, Some(103)));
    assert_eq!(tok.token(103), Some("[MASK]"));
    assert!((0..tok.len() as u32).any(|i| tok.token(i).unwrap().starts_with("##")));
    check_both(tok.clone(), &g);
    // The texts reach the unknown token (long words, characters outside the vocabulary),
    // and the special tokens written in the text.
    let all = want(&g, "ids_plain", None);
    assert!(all.iter().filter(|i| i.contains(&100)).count() >= 20);
    assert!(all.iter().filter(|i| i.contains(&103)).count() >= 3);
    assert_eq!(tok.encode("").unwrap(), [101, 102]);
    assert!(g["texts"].as_array().unwrap().len() >= 400);
}

#[test]
fn wordpiece_normalizes_as_hf_tokenizers() {
    let g = golden();
    let texts = g["texts"].as_array().unwrap();
    let pairs = g["normalized"].as_array().unwrap();
    assert!(pairs.len() >= 100);
    for p in pairs {
        let text = texts[p[0].as_u64().unwrap() as usize].as_str().unwrap();
        let want = p[1].as_str().unwrap();
        assert_eq!(BertNormalizer::UNCASED.normalize(text), want, "{text:?}");
    }
}

/// The tokenizer.json with the golden variant `name`'s normalizer.
fn variant_json(g: &Value, name: &str) -> Value {
    let mut j = json();
    j["normalizer"] = g[format!("variant_{name}")].clone();
    j
}

const VARIANTS: [&str; 5] = [
    "cased",
    "keep_accents",
    "strip_cased",
    "no_chinese",
    "no_clean",
];

#[test]
fn wordpiece_normalizer_variants_encode_as_hf_tokenizers() {
    let g = golden();
    for name in VARIANTS {
        let changed = &g[format!("variant_{name}_ids")];
        assert!(!changed.as_array().unwrap().is_empty(), "{name}");
        let tok = Tokenizer::from_hf_json(&variant_json(&g, name).to_string())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = want(&g, "ids_plain", Some(changed));
        let tok = plain(tok);
        check(&tok, &g, &want);
        let back = load_meta(meta_of(&tok)).unwrap();
        assert_eq!(back.wordpiece_options(), tok.wordpiece_options(), "{name}");
        check(&back, &g, &want);
    }
}

#[test]
fn wordpiece_gguf_round_trip_encodes_the_same() {
    let g = golden();
    let tok = tok();
    let meta = meta_of(&tok);
    let str_of = |k: &str| get(&meta, k).and_then(Meta::as_str).map(str::to_owned);
    assert_eq!(str_of("tokenizer.ggml.model").as_deref(), Some("bert"));
    // llama.cpp's phantom-space spelling: "##" dropped, "▁" before a word start, control
    // tokens as they are.
    let Some(Meta::Array(ValueType::String, tokens)) = get(&meta, "tokenizer.ggml.tokens") else {
        panic!("no token strings")
    };
    let spelled = |i: usize| tokens[i].as_str().unwrap().to_owned();
    assert_eq!(spelled(0), "[PAD]");
    assert_eq!(spelled(1), "\u{2581}[unused0]");
    assert_eq!(spelled(101), "[CLS]");
    for i in 0..tok.len() {
        let t = tok.token(i as u32).unwrap();
        let want = match t.strip_prefix("##") {
            _ if (100..=103).contains(&i) || i == 0 => t.to_owned(),
            Some(rest) => rest.to_owned(),
            None => format!("\u{2581}{t}"),
        };
        assert_eq!(spelled(i), want, "token {i}");
    }
    let id = |k: &str| get(&meta, k).and_then(Meta::as_u64);
    for (key, want) in [
        ("tokenizer.ggml.bos_token_id", 101),
        ("tokenizer.ggml.cls_token_id", 101),
        ("tokenizer.ggml.eos_token_id", 102),
        ("tokenizer.ggml.seperator_token_id", 102),
        ("tokenizer.ggml.unknown_token_id", 100),
        ("tokenizer.ggml.mask_token_id", 103),
    ] {
        assert_eq!(id(key), Some(want), "{key}");
    }
    let bool_of = |k: &str| get(&meta, k).and_then(Meta::as_bool);
    assert_eq!(bool_of("tokenizer.ggml.add_bos_token"), Some(true));
    assert_eq!(bool_of("tokenizer.ggml.add_sep_token"), Some(true));
    assert_eq!(bool_of("tokenizer.ggml.normalizer.lowercase"), Some(true));
    let back = load_meta(meta.clone()).unwrap();
    assert_eq!(back.model(), Model::WordPiece);
    assert_eq!(back.special(), tok.special());
    assert_eq!(back.wordpiece_options(), tok.wordpiece_options());
    assert_eq!(back.len(), tok.len());
    for i in 0..tok.len() as u32 {
        assert_eq!(back.token(i), tok.token(i));
    }
    assert_eq!(meta_of(&back), meta);
    check_both(back, &g);

    // As llama.cpp's converter writes it: no normalizer keys, no add_sep_token (llama.cpp's
    // defaults: an uncased BERT, [SEP] appended), add_eos_token set.
    let mut m = meta;
    m.retain(|(k, _)| {
        !k.starts_with("tokenizer.ggml.normalizer.")
            && k != "tokenizer.ggml.max_input_chars_per_word"
            && k != "tokenizer.ggml.add_sep_token"
            && k != "tokenizer.ggml.cls_token_id"
    });
    m.push(("tokenizer.ggml.add_eos_token".into(), true.into()));
    set(&mut m, "tokenizer.ggml.pre", "bert-bge".into());
    check_both(load_meta(m).unwrap(), &g);
}

#[test]
fn wordpiece_from_vocab_txt_encodes_the_same() {
    let g = golden();
    // The folder as older BERT checkpoints hold it: vocab.txt and tokenizer_config.json.
    let dir = tempfile::tempdir().unwrap();
    for f in [
        "vocab.txt",
        "tokenizer_config.json",
        "special_tokens_map.json",
    ] {
        std::fs::copy(format!("{WP_DIR}/{f}"), dir.path().join(f)).unwrap();
    }
    let tok = Tokenizer::from_hf_path(dir.path()).unwrap();
    assert_eq!(tok.special(), self::tok().special());
    check_both(tok, &g);
    // A cased checkpoint says so in its config.
    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        r#"{"do_lower_case": false, "tokenizer_class": "BertTokenizer"}"#,
    )
    .unwrap();
    let cased = plain(Tokenizer::from_hf_path(dir.path()).unwrap());
    check(
        &cased,
        &g,
        &want(&g, "ids_plain", Some(&g["variant_cased_ids"])),
    );
    // Without a config: uncased, as transformers' default.
    std::fs::remove_file(dir.path().join("tokenizer_config.json")).unwrap();
    let vocab = std::fs::read_to_string(dir.path().join("vocab.txt")).unwrap();
    let tok = Tokenizer::from_wordpiece_vocab(&vocab, BertNormalizer::UNCASED).unwrap();
    check_both(tok, &g);
    check_both(Tokenizer::from_hf_path(dir.path()).unwrap(), &g);
    // Other special token names cannot be guessed from a vocab.txt.
    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        r#"{"unk_token": "<unk>"}"#,
    )
    .unwrap();
    let e = Tokenizer::from_hf_path(dir.path()).unwrap_err().to_string();
    assert!(e.contains("unk_token"), "{e}");
}

#[test]
fn wordpiece_decodes_as_hf_tokenizers() {
    let tok = tok();
    // `tokenizers`' decode(ids, skip_special_tokens=False).
    for (text, want) in [
        (
            "Pick up the black bowl, then place it on the plate!",
            "[CLS] pick up the black bowl, then place it on the plate! [SEP]",
        ),
        (
            "don't stop. unpickable ramekins?",
            "[CLS] don ' t stop. unpickable ramekins? [SEP]",
        ),
    ] {
        assert_eq!(tok.decode(&tok.encode(text).unwrap()), want);
    }
}

#[test]
fn unsupported_wordpiece_json_is_an_error() {
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit); 9] = [
        ("continuing_subword_prefix", |j| {
            j["model"]["continuing_subword_prefix"] = "@@".into()
        }),
        ("unk_token", |j| j["model"]["unk_token"] = "<unk>".into()),
        ("unk_token", |j| j["model"]["unk_token"] = 5.into()),
        ("normalizer", |j| {
            j["normalizer"] = serde_json::json!({"type": "NFC"})
        }),
        ("pre_tokenizer", |j| {
            j["pre_tokenizer"] = serde_json::json!({"type": "Whitespace"})
        }),
        ("normalized", |j| {
            j["added_tokens"][0]["normalized"] = true.into()
        }),
        ("max_input_chars_per_word", |j| {
            j["model"]["max_input_chars_per_word"] = (-1).into()
        }),
        ("max_input_chars_per_word is 0", |j| {
            j["model"]["max_input_chars_per_word"] = 0.into()
        }),
        ("not in model.vocab", |j| {
            j["model"]["vocab"] = serde_json::json!({})
        }),
    ];
    for (want, edit) in cases {
        let mut j = json();
        edit(&mut j);
        let e = Tokenizer::from_hf_json(&j.to_string())
            .err()
            .unwrap_or_else(|| panic!("{want}: accepted"))
            .to_string();
        assert!(e.contains(want), "{want}: {e}");
    }
}

#[test]
fn hostile_wordpiece_vocabularies_are_errors() {
    let n = BertNormalizer::UNCASED;
    assert!(Tokenizer::from_wordpiece_tokens(Vec::new(), n).is_err());
    assert!(Tokenizer::from_wordpiece_vocab("", n).is_err());
    let e = Tokenizer::from_wordpiece_vocab("[PAD]\n[CLS]\n[SEP]\na\n##b\n", n)
        .unwrap_err()
        .to_string();
    assert!(e.contains("[UNK]"), "{e}");
    // Only [UNK]: every word is unknown, no [CLS]/[SEP] around them.
    let only = Tokenizer::from_wordpiece_vocab("[UNK]", n).unwrap();
    assert_eq!(only.encode("hello, world [UNK]").unwrap(), [0, 0, 0, 0]);
    // Repeated and empty lines: the last of repeated lines is the id, as in `tokenizers`.
    let dup = Tokenizer::from_wordpiece_vocab("[UNK]\na\n\na\n##b\n\n", n).unwrap();
    assert_eq!(dup.encode("ab a").unwrap(), [3, 4, 3]);

    let tok = tok();
    // A word over max_input_chars_per_word is one [UNK], whatever its length.
    let huge = "a".repeat(MAX_TEXT_BYTES);
    assert_eq!(tok.encode(&huge).unwrap(), [101, 100, 102]);
    assert!(tok.encode(&format!("{huge}a")).is_err());
    let words = "pick up the bowl ".repeat(MAX_TEXT_BYTES / 17);
    let start = std::time::Instant::now();
    assert!(tok.encode(&words).unwrap().len() > MAX_TEXT_BYTES / 5);
    assert!(start.elapsed().as_secs() < 5);
    // Random text never panics.
    let mut x = 0x2545f4914f6cdd1du64;
    for _ in 0..300 {
        let mut s = String::new();
        for _ in 0..40 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let c = char::from_u32((x % 0x3_0000) as u32).unwrap_or('\u{fffd}');
            s.push(if x.is_multiple_of(3) { ' ' } else { c });
        }
        tok.encode(&s).unwrap();
    }
}

#[test]
fn malformed_wordpiece_metadata_is_an_error() {
    let tok = tok();
    type Edit = Box<dyn FnOnce(&mut Vec<(String, Meta)>)>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            "unk",
            Box::new(|m| {
                m.retain(|(k, _)| k != "tokenizer.ggml.unknown_token_id");
                let t = Meta::from_strs(&["[CLS]", "a", "[SEP]"]);
                set(m, "tokenizer.ggml.tokens", t);
                let types = Meta::Array(
                    ValueType::I32,
                    vec![Meta::I32(3), Meta::I32(1), Meta::I32(3)],
                );
                set(m, "tokenizer.ggml.token_type", types);
                m.retain(|(k, _)| !k.ends_with("_token_id"));
                set(m, "tokenizer.ggml.add_bos_token", false.into());
                set(m, "tokenizer.ggml.add_sep_token", false.into());
            }),
        ),
        (
            "mask token id",
            Box::new(|m| set(m, "tokenizer.ggml.mask_token_id", Meta::U32(1 << 20))),
        ),
        (
            "outside the vocabulary",
            Box::new(|m| set(m, "tokenizer.ggml.seperator_token_id", Meta::U32(5000))),
        ),
        (
            "tokenizer.ggml.normalizer.lowercase",
            Box::new(|m| set(m, "tokenizer.ggml.normalizer.lowercase", Meta::U32(1))),
        ),
        (
            "max_input_chars_per_word",
            Box::new(|m| set(m, "tokenizer.ggml.max_input_chars_per_word", Meta::U32(0))),
        ),
        (
            "token type",
            Box::new(|m| {
                let n = self::tok().len();
                let types = Meta::Array(ValueType::I32, vec![Meta::I32(9); n]);
                set(m, "tokenizer.ggml.token_type", types)
            }),
        ),
    ];
    for (want, edit) in cases {
        let mut meta = meta_of(&tok);
        edit(&mut meta);
        let e = load_meta(meta)
            .err()
            .unwrap_or_else(|| panic!("{want}: accepted"))
            .to_string();
        assert!(e.contains(want), "{want}: {e}");
    }
}

#[test]
fn bert_normalizer_and_splits() {
    let n = BertNormalizer::UNCASED;
    assert_eq!(n.normalize("Café\tDÉJÀ\u{0}\u{200b}vu"), "cafe dejavu");
    assert_eq!(n.normalize("机器A"), " 机  器 a");
    // Per character: no final sigma; İ loses its dot with the accents.
    assert_eq!(n.normalize("ΣΑΣ İ"), "σασ i");
    assert_eq!(BertNormalizer::CASED.normalize("Café"), "Café");
    // `tokenizers`' Unicode tables are old: U+0890 became a format character (dropped) only
    // in Unicode 14, U+0378 is unassigned (kept).
    assert_eq!(n.normalize("a\u{890}\u{378}"), "a\u{890}\u{378}");
    // Whitespace splits and is dropped; each punctuation character is a word; `$` and `§`
    // are punctuation, `€` is not.
    let tok = |vocab: &str| Tokenizer::from_wordpiece_vocab(vocab, n).unwrap();
    let t = tok("[UNK]\na\nb\n.\n!\n?\n$\n§\nc€\n##€");
    assert_eq!(t.encode(" a.b  a!? ").unwrap(), [1, 3, 2, 1, 4, 5]);
    assert_eq!(t.encode("a$b§c€").unwrap(), [1, 6, 2, 7, 8]);
    assert!(t.encode(" \t\n ").unwrap().is_empty());
}

#[test]
fn wordpiece_longest_match_first() {
    let vocab = "[UNK]\nba\n##na\n##n\n##a\nun\n##aff\n##able";
    let tok = Tokenizer::from_wordpiece_vocab(vocab, BertNormalizer::UNCASED).unwrap();
    assert_eq!(tok.encode("banana").unwrap(), [1, 2, 2]);
    assert_eq!(tok.encode("unaffable ban").unwrap(), [5, 6, 7, 1, 3]);
    // No entry for the rest ("##bl"): the whole word is unknown; "na" cannot start one.
    assert_eq!(tok.encode("unaffabl nana").unwrap(), [0, 0]);
    assert_eq!(tok.decode(&[1, 2, 2, 5]), "banana un");
}
