//! BitVLA checkpoint -> `bitvla` GGUF (schema: docs/GGUF.md): the folder its LIBERO evaluation
//! loads (LLaVA's `config.json` with a BitLinear SigLIP `vision_config` and a BitNet
//! `text_config`, `model.safetensors` of bf16 master weights, the L1 head's and proprio
//! projector's `.pt` files, `dataset_statistics.json`, the tokenizer with the fine-tunes' chat
//! template). Every BitLinear is quantized here as the reference quantizes it on each forward
//! (absmean ternary, [`crate::ops::ternary::absmean`]) and stored packed with its step.

use super::openvla::{self, head_blocks, head_outer, pair, proprio_plan, vla, Checkpoint, Source};
use super::{ckpt_err, count_layers};
use crate::config;
use crate::models::bitvla::{is_ternary, BitvlaConfig, TowerConfig, ARCH};
use crate::models::openvla::LmDims;
use crate::models::openvla_oft::OftHead;
use crate::Result;
use std::path::Path;

pub use super::openvla::Options;
pub type Converted = openvla::Converted<BitvlaConfig>;

const VT: &str = "vision_tower.vision_model.";
const LM: &str = "language_model.model.";
/// Constants of the reference's code (`bitvla/constants.py`) and defaults of its config
/// classes (`BitNetConfig`, `SiglipVisionConfig`, `LlavaConfig`) for fields a saved config
/// leaves out (transformers writes the difference from the defaults).
const IMAGE_ID: usize = 128_010;
const PROPRIO_ID: usize = 128_011;
const STOP_ID: usize = 128_001;
const HEAD_LN_EPS: f32 = 1e-5;
/// The chat template `openvla-oft/convert_ckpt.py` gives the fine-tunes, which the prompt
/// ([`BitvlaConfig::prompt`]) follows.
const CHAT_TEMPLATE: &str = "System: A chat between a curious human and an artificial intelligence assistant. The assistant gives helpful, detailed, and polite answers to the human's questions.<|eot_id|>{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = message['role'] | capitalize + ': '+ message['content'] | trim + '<|eot_id|>' %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ 'Assistant: ' }}{% endif %}";

/// Converts the BitVLA checkpoint folder `ckpt`.
pub fn convert(
    ckpt: &Path,
    opts: &Options,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Converted> {
    let dtype = super::float_dtype(opts.dtype)?;
    let c = Checkpoint::open(ckpt, super::Kind::Bitvla)?;
    check_template(ckpt)?;
    let (vision, vit_ternary) = tower(&c, opts)?;
    let lm = bitnet(&c)?;
    let mut io = c.io(opts)?;
    io.stop_id = STOP_ID;
    let blocks = c.head_blocks(&io, &lm)?;
    let config = BitvlaConfig {
        vision,
        head: OftHead {
            head_hidden: c.head_shape("model.fc1.weight")?[0],
            head_blocks: blocks,
            head_ln_eps: HEAD_LN_EPS,
        },
        lm,
        io,
        image_id: IMAGE_ID,
        proprio_id: PROPRIO_ID,
    };
    config::check(&config, ARCH)?;
    let (v, l) = (&config.vision, &config.lm);
    let notes = vec![format!(
        "SigLIP {} x {} layers ({}), {} cameras; BitNet b1.58 {} x {} layers (ternary); the matrices quantized as the reference's forward does",
        v.hidden,
        v.layers,
        if vit_ternary { "ternary" } else { "float" },
        v.num_images,
        l.hidden,
        l.layers
    )];
    let mut tensors = plan(&config);
    tensors.extend(head_outer());
    tensors.extend(head_blocks(blocks));
    let ternary = tensors
        .iter()
        .map(|(o, _)| o.clone())
        .filter(|o| is_ternary(o) && (vit_ternary || o.starts_with("lm.")))
        .collect();
    let count = count_layers(
        &c.st,
        &format!("{VT}encoder.layers."),
        ".layer_norm1.weight",
    );
    let mut ignored = vec![
        format!("{VT}post_layernorm."),
        format!("{VT}head."),
        "language_model.lm_head.".into(),
    ];
    ignored.extend((v.layers..count).map(|i| format!("{VT}encoder.layers.{i}.")));
    let plan = openvla::Plan {
        tensors,
        head_unused: "",
        ignored,
        ternary,
        // bf16 in the checkpoint: `--dtype bf16` keeps it exactly, at half the memory
        float_extra: vec!["token_embd.weight".into()],
    };
    openvla::write(ckpt, &c, config, plan, dtype, notes, progress)
}

/// The fine-tunes' chat template, which our prompt reproduces: another one is refused
/// (the prompt would silently differ from the reference's).
fn check_template(ckpt: &Path) -> Result<()> {
    let path = ckpt.join("tokenizer_config.json");
    let json = crate::checkpoint::read_json(&path)?;
    match json.get("chat_template").and_then(|t| t.as_str()) {
        Some(CHAT_TEMPLATE) => Ok(()),
        Some(_) => Err(ckpt_err(
            &path,
            "a chat template other than BitVLA's (openvla-oft/convert_ckpt.py): vla-rs builds BitVLA's prompt",
        )),
        None => Err(ckpt_err(
            &path,
            "no chat_template: BitVLA's prompt is its chat template's",
        )),
    }
}

/// The SigLIP tower: sizes from the weights (heads from `vision_config`), the layers LLaVA's
/// `vision_feature_layer` reads, and whether its linears are BitLinear W1.58-A8.
fn tower(c: &Checkpoint, opts: &Options) -> Result<(TowerConfig, bool)> {
    let p = c.config.json();
    let path = &c.config.path;
    let vc = p.obj("vision_config")?;
    let or = |key: &str, v: f64| -> Result<f64> {
        match vc.get(key) {
            Some(_) => vc.f64(key),
            None => Ok(v),
        }
    };
    let bits = (or("vit_weight_bits", 32.0)?, or("vit_act_bits", 32.0)?);
    let ternary = match bits {
        (1.0, 8.0) => true,
        (32.0, 32.0) => false,
        (w, a) => {
            return Err(ckpt_err(
                path,
                format!("vision_config: vit_weight_bits {w}, vit_act_bits {a}: vla-rs serves BitLinear's 1 and 8, or a float tower (32 and 32)"),
            ))
        }
    };
    let act = vc
        .get("hidden_act")
        .and_then(|a| a.as_str())
        .unwrap_or("gelu_pytorch_tanh");
    let strategy = p
        .get("vision_feature_select_strategy")
        .and_then(|s| s.as_str());
    let projector = p
        .get("projector_hidden_act")
        .and_then(|s| s.as_str())
        .unwrap_or("gelu");
    if act != "gelu_pytorch_tanh" || projector != "gelu" || strategy != Some("full") {
        return Err(ckpt_err(
            path,
            format!("vision hidden_act {act:?}, projector {projector:?}, feature strategy {strategy:?}: vla-rs serves BitVLA's gelu_pytorch_tanh, gelu and \"full\""),
        ));
    }
    let count = count_layers(
        &c.st,
        &format!("{VT}encoder.layers."),
        ".layer_norm1.weight",
    );
    // hidden_states[i]: the embeddings at 0, layer i's output after; negative from the end
    let layer = match p.get("vision_feature_layer") {
        Some(_) => p.f64("vision_feature_layer")?,
        None => -2.0,
    } as i64;
    let layers = if layer < 0 {
        count as i64 + 1 + layer
    } else {
        layer
    };
    if layers < 1 || layers > count as i64 {
        return Err(ckpt_err(
            path,
            format!("vision_feature_layer {layer} of a {count}-layer tower: vla-rs reads a layer's output"),
        ));
    }
    let patch = c.shape(&format!("{VT}embeddings.patch_embedding.weight"))?;
    let pos = c.shape(&format!("{VT}embeddings.position_embedding.weight"))?;
    let side = (pos[0] as f64).sqrt() as usize;
    let tower = TowerConfig {
        hidden: patch[0],
        layers: layers as usize,
        heads: or("num_attention_heads", 12.0)? as usize,
        inter: c.shape(&format!("{VT}encoder.layers.0.mlp.fc1.weight"))?[0],
        image_size: side * patch[2],
        patch_size: patch[2],
        ln_eps: or("layer_norm_eps", 1e-6)? as f32,
        num_images: opts.num_images.unwrap_or(2),
    };
    Ok((tower, ternary))
}

/// BitNet from `text_config` (`BitNetConfig`'s defaults where a field is left out) and the
/// weights.
fn bitnet(c: &Checkpoint) -> Result<LmDims> {
    let p = c.config.json();
    let text = p.obj("text_config")?;
    let or = |key: &str, v: f64| -> Result<f64> {
        match text.get(key) {
            Some(_) => text.f64(key),
            None => Ok(v),
        }
    };
    let embed = c.shape(&format!("{LM}embed_tokens.weight"))?;
    let hidden = embed[1];
    let q_heads = or("num_attention_heads", 20.0)? as usize;
    let head_dim = hidden / q_heads.max(1);
    let kv = c.shape(&format!("{LM}layers.0.self_attn.k_proj.weight"))?[0];
    Ok(LmDims {
        hidden,
        layers: count_layers(&c.st, &format!("{LM}layers."), ".input_layernorm.weight"),
        q_heads,
        kv_heads: kv / head_dim.max(1),
        head_dim,
        inter: c.shape(&format!("{LM}layers.0.mlp.gate_proj.weight"))?[0],
        vocab: embed[0],
        rope_theta: or("rope_theta", 5e5)? as f32,
        rms_eps: or("rms_norm_eps", 1e-5)? as f32,
    })
}

/// The tower, projectors and language model.
fn plan(cfg: &BitvlaConfig) -> Vec<(String, Source)> {
    // the tower read at its last kept layer: no final norm
    let mut v: Vec<(String, Source)> = super::siglip_name_map(VT, cfg.vision.layers)
        .into_iter()
        .filter(|(ours, _)| !ours.starts_with("vit.post_ln."))
        .map(|(ours, theirs)| (ours, vla(theirs)))
        .collect();
    for l in ["linear_1", "linear_2"] {
        pair(
            &mut v,
            &format!("mm.{l}"),
            &format!("multi_modal_projector.{l}"),
            vla,
        );
    }
    v.extend(proprio_plan());
    v.extend(openvla::lm_plan(cfg.lm.layers, false));
    for i in 0..cfg.lm.layers {
        let (o, b) = (format!("lm.blk.{i}"), format!("{LM}layers.{i}"));
        for (a, t) in [
            ("attn_sub_norm", "self_attn.attn_sub_norm"),
            ("ffn_sub_norm", "mlp.ffn_sub_norm"),
        ] {
            v.push((format!("{o}.{a}.weight"), vla(format!("{b}.{t}.weight"))));
        }
    }
    v
}
