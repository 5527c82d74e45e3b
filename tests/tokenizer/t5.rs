//! T5's SentencePiece Unigram (Octo's language encoder is T5-base): a small Unigram model
//! trained with a subset of SentencePiece's `nmt_nfkc` rules and converted by transformers'
//! T5 converter (tests/fixtures/tokenizer/t5-unigram/tokenizer.json), and the ids
//! `tokenizers` gives for ~370 texts, also with the normalizer / pre-tokenizer variants of
//! older conversions (golden.json). Both made by tools/golden/tokenizer_t5.py. Encoding
//! must match exactly, from the tokenizer.json and after a round trip through GGUF metadata.

use super::{check, get, load_meta, meta_of, none_differ, set, want};
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

#[test]
fn t5_encodes_as_hf_tokenizers() {
    let g = golden();
    let tok = Tokenizer::from_hf_path(T5_DIR).unwrap();
    assert_eq!(tok.model(), Model::Unigram);
    assert_eq!(tok.pre_tokenizer(), None);
    let s = tok.special();
    assert_eq!((s.eos, s.unk, s.bos), (Some(1), Some(2), None));
    assert!(s.add_eos && !s.add_bos);
    check(&tok, &g, &want(&g, "ids", None));
    // The golden texts reach the unknown token, fused runs of it, and the added tokens.
    let all = want(&g, "ids", None);
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
    check(&back, &g, &want(&g, "ids", None));
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
    check(&load_meta(defaults).unwrap(), &g, &want(&g, "ids", None));
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
        let want = want(&g, "ids", Some(&g[format!("variant_{name}_ids")]));
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

/// The T5 tokenizer of the Octo fixture: SentencePiece's own model and transformers'
/// conversion of it (the same 300 pieces, then T5's 100 `<extra_id_N>`).
const OCTO_T5_DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/octo-tiny/t5-tiny"
);

fn spiece() -> Vec<u8> {
    std::fs::read(format!("{OCTO_T5_DIR}/spiece.model")).unwrap()
}

/// `texts` encoded by both; they must agree except where transformers' ids hold an
/// `<extra_id_N>` (ids from `pieces` on), which spiece.model does not have. Returns how many
/// texts agree.
fn agree(spm: &Tokenizer, hf: &Tokenizer, texts: &[String], pieces: u32) -> usize {
    let mut bad = Vec::new();
    let mut same = 0;
    for text in texts {
        let want = hf.encode(text).unwrap();
        let got = spm.encode(text).unwrap();
        if got == want {
            same += 1;
        } else if !want.iter().any(|&i| i >= pieces) {
            bad.push(format!("{text:?}\n  want {want:?}\n  got  {got:?}"));
        }
    }
    none_differ(&bad, texts.len());
    same
}

#[test]
fn spm_model_encodes_as_its_conversion() {
    let spm = Tokenizer::from_spm_model(&spiece()).unwrap();
    let json = std::fs::read_to_string(format!("{OCTO_T5_DIR}/tokenizer.json")).unwrap();
    let hf = Tokenizer::from_hf_json(&json).unwrap();
    assert_eq!(spm.model(), Model::Unigram);
    assert_eq!((spm.len(), hf.len()), (300, 400));
    for id in 0..300 {
        assert_eq!(spm.token(id), hf.token(id), "{id}");
    }
    let s = spm.special();
    assert_eq!(
        (s.bos, s.eos, s.pad, s.unk, s.add_bos, s.add_eos),
        (None, Some(1), Some(0), Some(2), false, true)
    );
    assert_eq!(spm.encode("").unwrap(), [1]);

    // The golden texts of the other T5 fixture (its own vocabulary, so these ids are not
    // golden.json's): all but those with `<extra_id_N>` agree.
    let g = golden();
    let texts: Vec<String> = (g["texts"].as_array().unwrap().iter())
        .map(|t| t.as_str().unwrap().to_owned())
        .collect();
    let same = agree(&spm, &hf, &texts, 300);
    assert!(same + 20 >= texts.len(), "{same} of {}", texts.len());

    // Random strings of pieces, whitespace, characters the charsmap rewrites, characters
    // outside the vocabulary and the special tokens.
    let mut frags: Vec<String> = (3..300)
        .map(|i| spm.token(i).unwrap().replace('▁', " "))
        .collect();
    for f in [
        " ",
        "  ",
        "\t",
        "\n",
        "\r\n",
        "\u{3000}",
        "ｅ\u{301}",
        "e\u{301}",
        "①",
        "Ⅻ",
        "ﬁ",
        "㎏",
        "™",
        "Ｆｕｌｌ",
        "１２",
        "é",
        "ß",
        "🦾",
        "中",
        "\u{1}",
        "<pad>",
        "</s>",
        "<unk>",
        "<",
        ">",
        "▁",
        "x",
        "Q",
        ".",
        ",",
    ] {
        frags.push(f.to_owned());
    }
    let mut seed = 0x2545f491u32;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        seed as usize
    };
    let texts: Vec<String> = (0..400)
        .map(|_| {
            let n = 1 + next() % 12;
            (0..n)
                .map(|_| frags[next() % frags.len()].as_str())
                .collect()
        })
        .collect();
    assert_eq!(agree(&spm, &hf, &texts, 300), texts.len());
}

/// Appends a protobuf varint.
fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A length-delimited field.
fn bytes_field(number: u64, bytes: &[u8], out: &mut Vec<u8>) {
    varint((number << 3) | 2, out);
    varint(bytes.len() as u64, out);
    out.extend(bytes);
}

#[test]
fn small_spm_model_reads_as_protobuf_says() {
    // `<pad>`, `</s>`, `<unk>` and four pieces (types and scores as SentencePiece writes
    // them; a NORMAL piece's type left out), then T5's trainer ids with bos_id -1 as the
    // 10-byte varint protobuf writes, and no normalizer_spec (its defaults: a dummy prefix,
    // extra whitespace removed, no charsmap).
    let mut m = Vec::new();
    for (text, score, ty) in [
        ("<pad>", 0.0f32, 3),
        ("</s>", 0.0, 3),
        ("<unk>", 0.0, 2),
        ("▁", -2.0, 1),
        ("a", -3.0, 1),
        ("b", -3.0, 1),
        ("▁ab", -1.0, 1),
    ] {
        let mut p = Vec::new();
        bytes_field(1, text.as_bytes(), &mut p);
        p.push(0x15); // field 2, fixed32
        p.extend(score.to_le_bytes());
        if ty != 1 {
            p.push(0x18); // field 3, varint
            varint(ty, &mut p);
        }
        bytes_field(1, &p, &mut m);
    }
    let mut t = Vec::new();
    for (number, v) in [(3u64, 1u64), (40, 2), (41, u64::MAX), (42, 1), (43, 0)] {
        varint(number << 3, &mut t);
        varint(v, &mut t);
    }
    bytes_field(2, &t, &mut m);
    let tok = Tokenizer::from_spm_model(&m).unwrap();
    let s = tok.special();
    assert_eq!(
        (s.bos, s.eos, s.pad, s.unk, s.add_bos, s.add_eos),
        (None, Some(1), Some(0), Some(2), false, true)
    );
    // "▁ab" beats "▁" "a" "b"; two spaces collapse to one "▁"; "x" is unknown; "</s>" and
    // "<unk>" are matched literally.
    assert_eq!(tok.encode("ab  b x ").unwrap(), [6, 3, 5, 3, 2, 1]);
    assert_eq!(tok.encode("a</s><unk>").unwrap(), [3, 4, 1, 2, 1]);
}

#[test]
fn hostile_spm_models_are_errors() {
    let good = spiece();
    let n = good.len();
    assert!(Tokenizer::from_spm_model(&good).is_ok());
    // Cut anywhere: an error or (at a field's end) fewer pieces; never a panic. Cut inside
    // the charsmap, the last field: an error.
    for cut in (0..n).step_by(n / 400 + 1) {
        let _ = Tokenizer::from_spm_model(&good[..cut]);
    }
    for cut in [0, n - 1, n - 1000, n / 2] {
        let e = Tokenizer::from_spm_model(&good[..cut]).expect_err("cut");
        println!("cut at {cut}: {e}");
    }
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    // Field 1 (a piece) claiming 2^63 bytes, and 2^32 + 5.
    for len in [1u64 << 63, (1 << 32) + 5] {
        let mut b = good.clone();
        b.push(0x0a);
        varint(len, &mut b);
        b.extend([0; 8]);
        cases.push(("huge length", b));
    }
    let mut b = good.clone();
    b.push(0x08);
    b.extend([0xff; 11]);
    cases.push(("varint of 11 bytes", b));
    // Known fields with the wrong wire type: pieces as a varint, trainer_spec as a fixed32,
    // normalizer_spec as a fixed64, a group.
    for tail in [
        &[0x08, 0x01][..],
        &[0x15, 0, 0, 0, 0],
        &[0x19, 0, 0, 0, 0, 0, 0, 0, 0],
        &[0x0b, 0x0c],
    ] {
        let mut b = good.clone();
        b.extend(tail);
        cases.push(("wrong wire type", b));
    }
    // A piece's score as a varint, its type 7; a field numbered 0.
    for piece in [
        &[0x0a, 0x01, b'x', 0x10, 0x00][..],
        &[0x0a, 0x01, b'x', 0x18, 0x07],
    ] {
        let mut b = good.clone();
        b.push(0x0a);
        varint(piece.len() as u64, &mut b);
        b.extend(piece);
        cases.push(("bad piece", b));
    }
    let mut b = good.clone();
    b.extend([0x00, 0x00]);
    cases.push(("field 0", b));
    // A BPE model; byte fallback; unk_id outside; a repeated piece.
    for spec in [
        &[0x18, 0x02][..],
        &[0x98, 0x02, 0x01],
        &[0xc0, 0x02, 0xe8, 0x07],
    ] {
        let mut b = good.clone();
        b.push(0x12);
        varint(spec.len() as u64, &mut b);
        b.extend(spec);
        cases.push(("trainer_spec", b));
    }
    let mut b = good.clone();
    b.extend([0x0a, 0x07, 0x0a, 0x05, b'<', b'p', b'a', b'd', b'>']);
    cases.push(("repeated piece", b));
    for (what, bytes) in cases {
        let e = Tokenizer::from_spm_model(&bytes)
            .map(|_| ())
            .expect_err(what);
        println!("{what}: {e}");
    }
    // Random bytes flipped: each model either loads and encodes, or is an error.
    let mut seed = 0x9e3779b9u32;
    for round in 0..40 {
        let mut b = good.clone();
        for _ in 0..1 + round {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            // Mostly the pieces and specs, before the charsmap's bulk.
            let i = seed as usize % 6000.min(n);
            b[i] = (seed >> 24) as u8;
        }
        if let Ok(t) = Tokenizer::from_spm_model(&b) {
            let _ = t.encode("pick up the ｒｅｄ cube ① </s>");
        }
    }
}
