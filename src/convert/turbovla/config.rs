//! The model_config's sections, the variant checks, and what DINOv3's and BERT's folders
//! give: head counts, rotary theta, registers, the tokenizer's special ids and the training
//! instructions' groups.

use crate::convert::{ckpt_err, has_config, named_folder, read_json};
use crate::models::turbovla::{SpecialIds, TextGroup};
use crate::tokenizer::{Model, Tokenizer};
use crate::{Error, Result};
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The values vla.cpp uses for `facebook/dinov3-vitb16-pretrain-lvd1689m` (a gated
/// repository; the fine-tuned weights are in the checkpoint): rope theta, registers, heads.
const DINOV3_VITB16: (f32, usize, usize) = (100.0, 4, 12);

/// The runtime's epsilons (modules::bert, modules::dinov3): other values are refused.
const BERT_EPS: f64 = 1e-12;
const DINOV3_EPS: f64 = 1e-5;

/// A model_config section's values, with the reference's dataclass defaults for missing keys.
pub(super) struct Section<'a> {
    path: &'a Path,
    name: &'static str,
    value: Option<&'a Json>,
}

impl<'a> Section<'a> {
    pub(super) fn new(path: &'a Path, config: &'a Json, name: &'static str) -> Result<Self> {
        let value = config.get(name);
        if value.is_some_and(|v| !v.is_object() && !v.is_null()) {
            return Err(ckpt_err(
                path,
                format!("model_config.{name} is not an object"),
            ));
        }
        Ok(Section {
            path,
            name,
            value: value.filter(|v| v.is_object()),
        })
    }

    pub(super) fn get(&self, key: &str) -> Option<&'a Json> {
        self.value?.get(key).filter(|v| !v.is_null())
    }

    pub(super) fn bad(&self, key: &str, want: &str) -> Error {
        ckpt_err(
            self.path,
            format!(
                "model_config.{}.{key} = {}: expected {want}",
                self.name,
                self.get(key).map_or("null".into(), Json::to_string)
            ),
        )
    }

    pub(super) fn usize_or(&self, key: &str, default: usize) -> Result<usize> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_u64()
                .and_then(|x| usize::try_from(x).ok())
                .ok_or_else(|| self.bad(key, "a non-negative integer")),
        }
    }

    pub(super) fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        self.get(key).map(|_| self.usize_or(key, 0)).transpose()
    }

    pub(super) fn str_or(&self, key: &str, default: &'a str) -> Result<&'a str> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.as_str().ok_or_else(|| self.bad(key, "a string")),
        }
    }

    fn bool_or(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.as_bool().ok_or_else(|| self.bad(key, "true or false")),
        }
    }
}

/// Refuses what the runtime does not compute (vla.cpp's refusals, and the vision variants
/// it would convert wrongly); notes what it computes another way with the same result.
pub(super) fn check_variant(path: &Path, config: &Json, notes: &mut Vec<String>) -> Result<()> {
    if let Some(name) = config.get("name").and_then(Json::as_str) {
        if name != "TurboVLA" {
            return Err(ckpt_err(
                path,
                format!("model_config.name {name:?}: not a TurboVLA config"),
            ));
        }
    }
    let text = Section::new(path, config, "text")?;
    let vision = Section::new(path, config, "vision")?;
    let inter = Section::new(path, config, "interaction")?;
    let refusals = [
        (
            inter.str_or("residual_style", "normalized")? != "normalized",
            "interaction.residual_style",
            "normalized",
        ),
        (
            inter.str_or("padding_strategy", "key_padding_mask")? != "key_padding_mask",
            "interaction.padding_strategy",
            "key_padding_mask",
        ),
        (
            text.bool_or("zero_padded_tokens", false)?,
            "text.zero_padded_tokens",
            "false",
        ),
        (
            !text.bool_or("sub_sentence_present", true)?,
            "text.sub_sentence_present",
            "true",
        ),
        (
            vision.str_or("position_embedding", "view")? != "view",
            "vision.position_embedding",
            "\"view\"",
        ),
    ];
    for (refused, key, supported) in refusals {
        if refused {
            let (section, k) = key.split_once('.').unwrap_or(("", key));
            let got = config
                .get(section)
                .and_then(|s| s.get(k))
                .map_or("?".into(), Json::to_string);
            return Err(ckpt_err(
                path,
                format!(
                    "unsupported TurboVLA variant: model_config.{key} = {got}; the runtime \
                     implements {key} = {supported} only (as vla.cpp)"
                ),
            ));
        }
    }
    if !vision.bool_or("encode_views_separately", true)? {
        notes.push(
            "vision.encode_views_separately = false: the reference encodes the views as one \
             batch, which gives each view the same tokens as encoding it alone"
                .into(),
        );
    }
    let groups = text.get("padding_length_by_instruction");
    let has_groups = groups
        .and_then(Json::as_object)
        .is_some_and(|g| !g.is_empty());
    if has_groups && text.get("padding_length").is_none() {
        return Err(ckpt_err(
            path,
            "model_config.text.padding_length_by_instruction without text.padding_length: the \
             reference refuses it (\"text.padding_length is required when instruction-specific \
             lengths are configured\")",
        ));
    }
    Ok(())
}

/// A config key the runtime implements one value of: the key, the test, the value.
type KeyCheck = (&'static str, fn(&Json) -> bool, &'static str);

const DINOV3_KEYS: [KeyCheck; 5] = [
    ("layer_norm_eps", |v| v.as_f64() == Some(DINOV3_EPS), "1e-5"),
    ("hidden_act", |v| v.as_str() == Some("gelu"), "\"gelu\""),
    ("use_gated_mlp", |v| v.as_bool() == Some(false), "false"),
    (
        "rope_normalize_coords",
        |v| v.as_str() == Some("separate"),
        "\"separate\"",
    ),
    (
        "model_type",
        |v| v.as_str().is_some_and(|t| t.starts_with("dinov3")),
        "a dinov3 model",
    ),
];

const BERT_KEYS: [KeyCheck; 3] = [
    ("layer_norm_eps", |v| v.as_f64() == Some(BERT_EPS), "1e-12"),
    ("hidden_act", |v| v.as_str() == Some("gelu"), "\"gelu\""),
    (
        "position_embedding_type",
        |v| v.as_str() == Some("absolute"),
        "\"absolute\"",
    ),
];

/// Refuses a key of `json` (the config.json at `file`) set to another value than the
/// runtime's `what` implements; an absent key is the model's default.
fn check_keys(file: &Path, json: &Json, what: &str, checks: &[KeyCheck]) -> Result<()> {
    for (key, ok, want) in checks {
        if let Some(v) = json.get(*key).filter(|v| !v.is_null() && !ok(v)) {
            return Err(ckpt_err(
                file,
                format!("{key} = {v}: the runtime's {what} implements {want} only"),
            ));
        }
    }
    Ok(())
}

/// What DINOv3's config gives: the rotary theta, the register count (checked against the
/// weights where given), the head count, and the file that says so (`None`: ViT-B/16's).
pub(super) struct Dino {
    pub(super) rope_theta: f32,
    pub(super) registers: Option<usize>,
    pub(super) heads: usize,
    pub(super) file: Option<PathBuf>,
}

/// DINOv3's config: its config.json (given, or the folder `vision.model_name_or_path`
/// names), else ViT-B/16's values where that name says so.
pub(super) fn dinov3(
    ckpt_dir: &Path,
    config_path: &Path,
    given: Option<&Path>,
    named: &str,
    notes: &mut Vec<String>,
) -> Result<Dino> {
    let file = match given {
        Some(g) if g.is_dir() => Some(g.join("config.json")),
        Some(g) => Some(g.to_owned()),
        None => named_folder(vec![ckpt_dir.join(named)], named, has_config)
            .map(|d| d.join("config.json")),
    };
    let Some(file) = file else {
        if !named.contains("dinov3-vitb16") {
            return Err(ckpt_err(
                config_path,
                format!(
                    "unknown DINOv3 backbone {named:?} (model_config.vision.model_name_or_path): \
                     no folder with its config.json found; pass --dinov3 DIR (its config.json \
                     has num_attention_heads, rope_theta, num_register_tokens)"
                ),
            ));
        }
        let (rope_theta, registers, heads) = DINOV3_VITB16;
        notes.push(format!(
            "DINOv3: ViT-B/16's values (rope_theta {rope_theta}, {registers} registers, {heads} heads), as vla.cpp: {named:?} is not a local folder"
        ));
        return Ok(Dino {
            rope_theta,
            registers: Some(registers),
            heads,
            file: None,
        });
    };
    let json = read_json(&file)?;
    let bad = |why: String| ckpt_err(&file, why);
    let number = |key: &str| json.get(key).filter(|v| !v.is_null());
    let heads = number("num_attention_heads")
        .and_then(Json::as_u64)
        .filter(|&h| h > 0)
        .ok_or_else(|| bad("num_attention_heads missing or not a positive integer".into()))?
        as usize;
    let theta = number("rope_theta")
        .and_then(Json::as_f64)
        .ok_or_else(|| bad("rope_theta missing or not a number".into()))? as f32;
    let registers = match number("num_register_tokens") {
        None => None,
        Some(v) => Some(
            v.as_u64()
                .ok_or_else(|| bad("num_register_tokens: not a count".into()))?
                as usize,
        ),
    };
    check_keys(&file, &json, "DINOv3", &DINOV3_KEYS)?;
    if let Some(dir) = file.parent() {
        check_pixels(&dir.join("preprocessor_config.json"))?;
    }
    notes.push(format!(
        "DINOv3: {} ({heads} heads, rope_theta {theta})",
        file.display()
    ));
    Ok(Dino {
        rope_theta: theta,
        registers,
        heads,
        file: Some(file),
    })
}

/// The BERT folder's head count (its config.json, checked against the weights' sizes and the
/// runtime's BERT) and tokenizer.
pub(super) fn bert(dir: &Path, hidden: usize, layers: usize) -> Result<(usize, Tokenizer)> {
    let file = dir.join("config.json");
    let json = read_json(&file)?;
    let bad = |why: String| ckpt_err(&file, why);
    let get = |key: &str| json.get(key).filter(|v| !v.is_null());
    let heads = get("num_attention_heads")
        .and_then(Json::as_u64)
        .filter(|&h| h > 0)
        .ok_or_else(|| bad("num_attention_heads missing or not a positive integer".into()))?
        as usize;
    for (key, want) in [("hidden_size", hidden), ("num_hidden_layers", layers)] {
        if let Some(v) = get(key).filter(|v| v.as_u64() != Some(want as u64)) {
            return Err(bad(format!(
                "{key} = {v}, the checkpoint's BERT has {want}: not the BERT this checkpoint was trained from"
            )));
        }
    }
    check_keys(&file, &json, "BERT", &BERT_KEYS)?;
    let tok = Tokenizer::from_hf_path(dir)?;
    if tok.model() != Model::WordPiece {
        return Err(ckpt_err(
            dir,
            format!("the tokenizer is {:?}, not BERT's WordPiece", tok.model()),
        ));
    }
    Ok((heads, tok))
}

/// The ids of `[PAD]`, `[CLS]`, `[SEP]`, `.` and `?` in `tok`'s vocabulary (the reference
/// looks the last four up to split sub-sentences; `[CLS] ... [SEP]` must be what it adds). A
/// token on two lines of a `vocab.txt` is the later one's, as `tokenizers` reads it.
pub(super) fn special_ids(tok: &Tokenizer, dir: &Path) -> Result<SpecialIds> {
    let mut ids: BTreeMap<&str, usize> = BTreeMap::new();
    for id in 0..tok.len() as u32 {
        if let Some(t) = tok.token(id) {
            if ["[PAD]", "[CLS]", "[SEP]", ".", "?"].contains(&t) {
                ids.insert(t, id as usize);
            }
        }
    }
    let id = |t: &str| {
        ids.get(t)
            .copied()
            .ok_or_else(|| ckpt_err(dir, format!("the tokenizer has no {t:?} token")))
    };
    let special = SpecialIds {
        pad: id("[PAD]")?,
        cls: id("[CLS]")?,
        sep: id("[SEP]")?,
        period: id(".")?,
        question: id("?")?,
    };
    let s = tok.special();
    let adds = s.add_bos && s.add_eos;
    if !adds || s.bos != Some(special.cls as u32) || s.eos != Some(special.sep as u32) {
        return Err(ckpt_err(
            dir,
            "the tokenizer does not wrap the text in [CLS] ... [SEP] (BERT's post-processor), as the reference's does",
        ));
    }
    Ok(special)
}

/// The training instructions' groups: each instruction's ids (as vla.cpp's `tok(instruction,
/// truncation=True, max_length=pad_to)`, where an instruction longer than its group is
/// refused instead of cut), sorted by instruction as vla.cpp sorts.
pub(super) fn text_groups(path: &Path, text: &Section, tok: &Tokenizer) -> Result<Vec<TextGroup>> {
    let Some(groups) = text.get("padding_length_by_instruction") else {
        return Ok(vec![]);
    };
    let groups = groups.as_object().ok_or_else(|| {
        ckpt_err(
            path,
            "model_config.text.padding_length_by_instruction is not an object of instruction -> length",
        )
    })?;
    let mut sorted: Vec<(&String, &Json)> = groups.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    sorted
        .into_iter()
        .map(|(instruction, len)| {
            let pad_to = len
                .as_u64()
                .and_then(|l| usize::try_from(l).ok())
                .filter(|&l| l >= 2)
                .ok_or_else(|| {
                    ckpt_err(
                        path,
                        format!(
                            "padding_length_by_instruction[{instruction:?}] = {len}: expected a length >= 2"
                        ),
                    )
                })?;
            let tokens = tok.encode(instruction)?;
            if tokens.len() > pad_to {
                // the reference would cut it to its group's length, where a request of the
                // whole text is not that group (vla.cpp keys groups by the cut ids): refused
                return Err(ckpt_err(
                    path,
                    format!(
                        "padding_length_by_instruction[{instruction:?}] = {pad_to}: its {} tokens do not fit (a training instruction is padded, never cut)",
                        tokens.len()
                    ),
                ));
            }
            Ok(TextGroup { tokens, pad_to })
        })
        .collect()
}

/// The reference's LIBERO processor maps pixels with the DINOv3 folder's
/// `preprocessor_config.json` (`image_mean`, `image_std`, `rescale_factor`); the runtime
/// takes ImageNet's and 1/255 (as vla.cpp), so other values are refused. A folder without the
/// file gets the processor's defaults, those same values.
fn check_pixels(path: &Path) -> Result<()> {
    if !path.is_file() {
        return Ok(());
    }
    let json = read_json(path)?;
    let (mean, std) = crate::preprocess::PixelMap::IMAGENET.mean_std();
    let same = |key: &str, want: &[f32]| match json.get(key).filter(|v| !v.is_null()) {
        None => true,
        Some(v) => v.as_array().is_some_and(|a| {
            a.len() == want.len()
                && a.iter()
                    .zip(want)
                    .all(|(x, &w)| x.as_f64().map(|x| x as f32) == Some(w))
        }),
    };
    let rescale = json.get("rescale_factor").filter(|v| !v.is_null());
    let rescale_ok = rescale.is_none_or(|v| v.as_f64().map(|x| x as f32) == Some(1.0 / 255.0));
    if same("image_mean", &mean) && same("image_std", &std) && rescale_ok {
        return Ok(());
    }
    Err(ckpt_err(
        path,
        "image_mean / image_std / rescale_factor other than ImageNet's and 1/255: the runtime \
         normalises the frames with those (as vla.cpp)"
            .to_owned(),
    ))
}
