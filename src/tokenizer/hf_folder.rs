//! A Hugging Face tokenizer as a model folder holds it. A `tokenizer.json` is read as it
//! is; a folder with only Qwen2's slow-tokenizer files (`vocab.json`, `merges.txt`,
//! `tokenizer_config.json` and maybe `added_tokens.json`, as lerobot's Eagle-2.5 folder for
//! GR00T N1.5 holds them) is read as transformers' conversion to the fast tokenizer reads
//! it: NFC, Qwen2's `Split` then `ByteLevel`, BPE over `vocab.json` and `merges.txt`, the
//! added tokens of `tokenizer_config.json`'s `added_tokens_decoder` (else `added_tokens.json`).
//! A folder with only BERT's `vocab.txt` (and `tokenizer_config.json`) is read as
//! transformers' `BertTokenizerFast` reads it (hf_wordpiece.rs).

use super::pretok::QWEN2_PATTERN;
use super::{err, Tokenizer};
use crate::{Error, Result};
use serde_json::{json, Value as Json};
use std::path::Path;

/// The slow-tokenizer classes whose files are read (Qwen2's; Qwen3 and InternVL3 use it).
const QWEN2_CLASSES: [&str; 2] = ["Qwen2Tokenizer", "Qwen2TokenizerFast"];

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::Io {
        path: path.to_owned(),
        err: e,
    })
}

fn read_json(path: &Path) -> Result<Json> {
    serde_json::from_str(&read(path)?)
        .map_err(|e| err(format!("{}: invalid JSON: {e}", path.display())))
}

/// Whether `dir` holds a tokenizer [`Tokenizer::from_hf_path`] reads.
pub fn hf_tokenizer_in(dir: &Path) -> bool {
    dir.join("tokenizer.json").is_file()
        || (dir.join("vocab.json").is_file() && dir.join("merges.txt").is_file())
}

impl Tokenizer {
    /// A `tokenizer.json` file, or a folder holding one, or a folder holding Qwen2's
    /// `vocab.json` + `merges.txt` + `tokenizer_config.json`, or BERT's `vocab.txt` (see the
    /// module docs).
    pub fn from_hf_path(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        if !path.is_dir() {
            return Self::from_hf_file(path);
        }
        let json = path.join("tokenizer.json");
        if json.is_file() {
            return Self::from_hf_file(json);
        }
        if !hf_tokenizer_in(path) && !path.join("vocab.txt").is_file() {
            return Err(err(format!(
                "{}: no tokenizer.json, nor vocab.json + merges.txt, nor vocab.txt",
                path.display()
            )));
        }
        if !(path.join("vocab.json").is_file() && path.join("merges.txt").is_file()) {
            return super::hf_wordpiece::from_vocab_folder(path);
        }
        Self::from_hf_value(&slow_files_as_json(path)?)
    }
}

/// What transformers' Qwen2 conversion would write as `tokenizer.json` for `dir`.
fn slow_files_as_json(dir: &Path) -> Result<Json> {
    let config_path = dir.join("tokenizer_config.json");
    let config = if config_path.is_file() {
        read_json(&config_path)?
    } else {
        Json::Null
    };
    let class = config["tokenizer_class"].as_str().unwrap_or("(none)");
    if !QWEN2_CLASSES.contains(&class) {
        return Err(err(format!(
            "{}: tokenizer_class {class}: only Qwen2's vocab.json + merges.txt are read \
             without a tokenizer.json; write one with transformers: \
             `AutoTokenizer.from_pretrained(DIR).save_pretrained(DIR)`",
            dir.display()
        )));
    }
    let vocab = read_json(&dir.join("vocab.json"))?;
    if !vocab.is_object() {
        return Err(err(format!(
            "{}: not an object of token -> id",
            dir.join("vocab.json").display()
        )));
    }
    let merges: Vec<Json> = read(&dir.join("merges.txt"))?
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with("#version"))
        .map(|l| Json::String(l.to_owned()))
        .collect();
    let added = added_tokens(dir, &config)?;
    Ok(json!({
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_PATTERN}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
        ]},
        "post_processor": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": vocab, "merges": merges, "unk_token": null},
        "added_tokens": added,
    }))
}

/// `tokenizer.json`'s `added_tokens` from `added_tokens_decoder` (id -> token options), else
/// from `added_tokens.json` (content -> id; special when `special_tokens_map.json` names it).
fn added_tokens(dir: &Path, config: &Json) -> Result<Vec<Json>> {
    if let Some(decoder) = config["added_tokens_decoder"].as_object() {
        return decoder
            .iter()
            .map(|(id, t)| {
                let id: u64 = id
                    .parse()
                    .map_err(|_| err(format!("added_tokens_decoder key {id:?} is not an id")))?;
                let mut t = t.clone();
                t["id"] = id.into();
                Ok(t)
            })
            .collect();
    }
    let path = dir.join("added_tokens.json");
    if !path.is_file() {
        return Ok(Vec::new());
    }
    let map_path = dir.join("special_tokens_map.json");
    let specials = if map_path.is_file() {
        read_json(&map_path)?.to_string()
    } else {
        String::new()
    };
    let tokens = read_json(&path)?;
    let tokens = tokens
        .as_object()
        .ok_or_else(|| err(format!("{}: not an object", path.display())))?;
    Ok(tokens
        .iter()
        .map(|(content, id)| {
            let special = specials.contains(&Json::String(content.clone()).to_string());
            json!({"id": id, "content": content, "special": special, "normalized": !special})
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Copies the GR00T fixture's tokenizer folder without its tokenizer.json.
    fn slow_only(without: &[&str]) -> tempfile::TempDir {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/groot-tiny/tokenizer");
        let dir = tempfile::tempdir().unwrap();
        for e in std::fs::read_dir(&src).unwrap() {
            let e = e.unwrap();
            let name = e.file_name();
            if name != "tokenizer.json" && !without.iter().any(|w| name == *w) {
                std::fs::copy(e.path(), dir.path().join(&name)).unwrap();
            }
        }
        dir
    }

    #[test]
    fn slow_files_tokenize_as_the_tokenizer_json_transformers_wrote() {
        let fixture =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/groot-tiny/tokenizer");
        let fast = Tokenizer::from_hf_file(fixture.join("tokenizer.json")).unwrap();
        let texts = [
            "pick up the red block and place it in the bowl",
            "<|im_start|>user\n<img><IMG_CONTEXT></img>Stack them<|im_end|>\n",
            "  Ünïcode café, 12 345 e\u{301}tapes!\r\n\tend <think></think>",
        ];
        // added_tokens_decoder, and the older added_tokens.json alone.
        for without in [&[][..], &["tokenizer_config.json"][..]] {
            let dir = slow_only(without);
            if !without.is_empty() {
                // A config with the class but no added_tokens_decoder.
                std::fs::write(
                    dir.path().join("tokenizer_config.json"),
                    r#"{"tokenizer_class": "Qwen2Tokenizer"}"#,
                )
                .unwrap();
            }
            let slow = Tokenizer::from_hf_path(dir.path()).unwrap();
            assert_eq!(slow.len(), fast.len());
            for t in texts {
                assert_eq!(slow.encode(t).unwrap(), fast.encode(t).unwrap(), "{t:?}");
            }
        }
    }

    #[test]
    fn other_classes_and_empty_folders_are_refused() {
        let dir = slow_only(&[]);
        std::fs::write(
            dir.path().join("tokenizer_config.json"),
            r#"{"tokenizer_class": "LlamaTokenizer"}"#,
        )
        .unwrap();
        let e = Tokenizer::from_hf_path(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("LlamaTokenizer") && e.contains("save_pretrained"),
            "{e}"
        );
        let empty = tempfile::tempdir().unwrap();
        let e = Tokenizer::from_hf_path(empty.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("no tokenizer.json"), "{e}");
    }
}
