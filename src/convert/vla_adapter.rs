//! VLA-Adapter checkpoint -> `vla_adapter` GGUF (schema: docs/GGUF.md).
//!
//! Reads the folder the reference's LIBERO evaluation loads: `config.json` (`OpenVLAConfig`:
//! `text_config` is the Qwen2.5 language model), `model.safetensors` (Prismatic's towers under
//! `vision_backbone.{featurizer,fused_featurizer}.`, the projector, the language model, the
//! action queries), `action_head--*checkpoint.pt` and `proprio_projector--*checkpoint.pt`
//! (`torch.save`d state dicts, [`super::torch_pt`]), `dataset_statistics.json` (every suite's
//! BOUNDS_Q99 statistics, selected at load with `--embodiment`) and the tokenizer files. The
//! towers' sizes come from the weights; only the blocks the reference reads (all but the last)
//! are written; the fused `qkv` is split.

use super::torch_pt::TorchState;
use super::{ckpt_err, count_layers, Json, JsonFile, Safetensors};
use crate::config;
use crate::gguf::{GgmlType, GgufWriter};
use crate::models::vla_adapter::{HeadConfig, LmDims, VlaAdapterConfig, ARCH};
use crate::modules::prismatic::{PrismaticConfig, TowerDims};
use crate::tokenizer::Tokenizer;
use crate::Result;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const VB: &str = "vision_backbone.";
const LM: &str = "language_model.model.";

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Type of the matrices; embeddings, norms and statistics stay f32.
    pub dtype: Option<GgmlType>,
    /// Cameras (the evaluation's `num_images_in_input`; absent: 2, LIBERO's third-person and
    /// wrist views). The checkpoint does not record it.
    pub num_images: Option<usize>,
    /// The chunk (`NUM_ACTIONS_CHUNK`, a constant of the reference's code; absent: its
    /// platform's, from the action and state widths: LIBERO / CALVIN 8, BRIDGE 5, ALOHA 25).
    pub chunk: Option<usize>,
}

pub struct Converted {
    pub config: VlaAdapterConfig,
    pub writer: GgufWriter<'static>,
    pub notes: Vec<String>,
}

/// The reference's constants, which its code fixes rather than its config: the head's heads,
/// rotary base and LayerNorm epsilon, the towers' epsilon and head count (timm's ViT-L and
/// so400m), the stop token, the task rows (`num_task_tokens`).
const HEAD_HEADS: usize = 8;
const HEAD_ROPE_BASE: f32 = 1e4;
const HEAD_LN_EPS: f32 = 1e-5;
const TOWER_LN_EPS: f32 = 1e-6;
/// `STOP_INDEX` of prismatic/vla/constants.py.
const STOP_ID: usize = 2;
const TOWER_HEADS: usize = 16;
const TASK_ROWS: usize = 512;

/// Converts the VLA-Adapter checkpoint folder `ckpt`.
pub fn convert(
    ckpt: &Path,
    opts: &Options,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Converted> {
    super::detect::expect(ckpt, super::Kind::VlaAdapter)?;
    let dtype = super::float_dtype(opts.dtype)?;
    let cfg_json = JsonFile::read(ckpt.join("config.json"))?;
    let st = Safetensors::open_dir(ckpt)?;
    let head = TorchState::open(&component(ckpt, "action_head")?)?;
    let proprio = TorchState::open(&component(ckpt, "proprio_projector")?)?;
    let tokenizer = Tokenizer::from_hf_path(ckpt)?;
    let config = read_config(&cfg_json.json(), &st, &head, &proprio, opts)?;
    config::check(&config, ARCH)?;
    if config.task_rows() != TASK_ROWS {
        return Err(ckpt_err(
            ckpt,
            format!(
                "{} cameras of {} patches make {} task rows; the reference's head reads {TASK_ROWS} (num_task_tokens): pass --num-images 2",
                config.vision.num_images,
                config.vision.n_patches(),
                config.task_rows()
            ),
        ));
    }
    let mut notes = vec![format!(
        "DINOv2 {} x {} blocks ({} registers), SigLIP {} x {} blocks (the reference's penultimate), {} cameras; Qwen2.5 {} x {} layers",
        config.vision.dino.hidden,
        config.vision.dino.layers,
        config.vision.registers,
        config.vision.sig.hidden,
        config.vision.sig.layers,
        config.vision.num_images,
        config.lm.hidden,
        config.lm.layers
    )];
    let stats = read_stats(ckpt, &config, &mut notes)?;

    let mut w = GgufWriter::new();
    config.write(&mut w)?;
    let name = ckpt
        .file_name()
        .map_or(ARCH.into(), |n| n.to_string_lossy().into_owned());
    w.add_metadata("general.name", name)?;
    w.add_metadata("general.source", "VLA-Adapter checkpoint (vla-convert)")?;
    super::ship_tokenizer(&mut w, &tokenizer, ckpt, config.lm.vocab, &mut notes)?;
    let plan = plan(&config);
    let shapes: BTreeMap<String, Vec<usize>> = config.tensor_shapes()?.into_iter().collect();
    let used: Vec<(String, String)> = plan
        .iter()
        .filter(|(_, s)| matches!(s, Source::Vla(..)))
        .map(|(o, s)| (o.clone(), s.name().to_owned()))
        .collect();
    let last = [
        format!("{VB}featurizer.blocks.{}.", config.vision.dino.layers),
        format!("{VB}fused_featurizer.blocks.{}.", config.vision.sig.layers),
    ];
    let ignored: Vec<&str> = IGNORED
        .iter()
        .copied()
        .chain(last.iter().map(String::as_str))
        .collect();
    super::check_coverage(&st, &used, &[], &ignored)?;
    check_component(&head, &plan, |s| matches!(s, Source::Head(_)), "film_gen.")?;
    check_component(&proprio, &plan, |s| matches!(s, Source::Proprio(_)), "")?;
    let total = plan.len() + stats.len();
    for (done, (ours, src)) in plan.iter().enumerate() {
        let shape = shapes
            .get(ours)
            .ok_or_else(|| ckpt_err(ckpt, format!("converter: {ours} is not a model tensor")))?;
        let vals = src.values(&st, &head, &proprio, shape)?;
        let ty = match super::takes_float_dtype(ours, shape) && ours != "action_queries.weight" {
            true => dtype,
            false => GgmlType::F32,
        };
        w.add_f32(ours.clone(), ty, &super::ggml_dims(shape), &vals)?;
        progress(done + 1, total, ours);
    }
    for (k, (name, vals)) in stats.into_iter().enumerate() {
        w.add_f32(name.clone(), GgmlType::F32, &[vals.len() as u64], &vals)?;
        progress(plan.len() + k + 1, total, &name);
    }
    Ok(Converted {
        config,
        writer: w,
        notes,
    })
}

/// The one `<what>--*checkpoint.pt` file in `ckpt`.
fn component(ckpt: &Path, what: &str) -> Result<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(ckpt)
        .map_err(|e| ckpt_err(ckpt, e.to_string()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                n.starts_with(&format!("{what}--")) && n.ends_with("checkpoint.pt")
            })
        })
        .collect();
    found.sort();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(ckpt_err(
            ckpt,
            format!("no {what}--*checkpoint.pt: the head's weights are missing"),
        )),
        _ => Err(ckpt_err(
            ckpt,
            format!("several {what}--*checkpoint.pt files: keep the one to convert"),
        )),
    }
}

/// Checkpoint tensors inference never reads: each tower's last block and final norm (the
/// reference reads the penultimate block), SigLIP's attention pool, a tied LM head.
const IGNORED: [&str; 5] = [
    "vision_backbone.featurizer.norm.",
    "vision_backbone.fused_featurizer.norm.",
    "vision_backbone.fused_featurizer.attn_pool.",
    "language_model.lm_head.",
    "vision_backbone.featurizer.head",
];

/// Where one of our tensors comes from.
#[derive(Clone, Debug)]
enum Source {
    /// `model.safetensors`: a tensor, or the `part`-th third of a fused `qkv`.
    Vla(String, Option<usize>),
    /// The action head's `.pt`.
    Head(String),
    /// The proprio projector's `.pt`.
    Proprio(String),
}

impl Source {
    fn name(&self) -> &str {
        match self {
            Source::Vla(n, _) | Source::Head(n) | Source::Proprio(n) => n,
        }
    }

    fn values(
        &self,
        st: &Safetensors,
        head: &TorchState,
        proprio: &TorchState,
        shape: &[usize],
    ) -> Result<Vec<f32>> {
        let (vals, path) = match self {
            Source::Vla(n, None) => (st.f32(n)?, st.path()),
            Source::Vla(n, Some(part)) => (super::in_proj_part(&st.f32(n)?, *part), st.path()),
            Source::Head(n) => (head.f32(n)?, head.path()),
            Source::Proprio(n) => (proprio.f32(n)?, proprio.path()),
        };
        let want: usize = shape.iter().product();
        if vals.len() != want {
            return Err(ckpt_err(
                path,
                format!(
                    "{}: {} values, the config implies {shape:?}",
                    self.name(),
                    vals.len()
                ),
            ));
        }
        Ok(vals)
    }
}

/// Every tensor of the GGUF (statistics apart) and where it comes from.
fn plan(cfg: &VlaAdapterConfig) -> Vec<(String, Source)> {
    let mut v: Vec<(String, Source)> = Vec::new();
    let vla = |n: String| Source::Vla(n, None);
    for (ours, theirs, t, dino) in [
        ("vis.d", "featurizer", cfg.vision.dino, true),
        ("vis.s", "fused_featurizer", cfg.vision.sig, false),
    ] {
        let p = format!("{VB}{theirs}.");
        v.push((
            format!("{ours}.patch_embd.weight"),
            vla(format!("{p}patch_embed.proj.weight")),
        ));
        v.push((
            format!("{ours}.patch_embd.bias"),
            vla(format!("{p}patch_embed.proj.bias")),
        ));
        v.push((
            format!("{ours}.pos_embd.weight"),
            vla(format!("{p}pos_embed")),
        ));
        if dino {
            v.push((
                format!("{ours}.class_embd.weight"),
                vla(format!("{p}cls_token")),
            ));
            v.push((
                format!("{ours}.reg_embd.weight"),
                vla(format!("{p}reg_token")),
            ));
        }
        for i in 0..t.layers {
            let (o, b) = (format!("{ours}.blk.{i}"), format!("{p}blocks.{i}"));
            for (a, c) in [
                ("ln1", "norm1"),
                ("ln2", "norm2"),
                ("attn_o", "attn.proj"),
                ("fc1", "mlp.fc1"),
                ("fc2", "mlp.fc2"),
            ] {
                for x in ["weight", "bias"] {
                    v.push((format!("{o}.{a}.{x}"), vla(format!("{b}.{c}.{x}"))));
                }
            }
            for (part, a) in ["attn_q", "attn_k", "attn_v"].iter().enumerate() {
                for x in ["weight", "bias"] {
                    v.push((
                        format!("{o}.{a}.{x}"),
                        Source::Vla(format!("{b}.attn.qkv.{x}"), Some(part)),
                    ));
                }
            }
            if dino {
                for ls in ["ls1", "ls2"] {
                    v.push((
                        format!("{o}.{ls}.weight"),
                        vla(format!("{b}.{ls}.scale_factor")),
                    ));
                }
            }
        }
    }
    for f in ["fc1", "fc2", "fc3"] {
        for x in ["weight", "bias"] {
            v.push((
                format!("vis.proj.{f}.{x}"),
                vla(format!("projector.{f}.{x}")),
            ));
        }
    }
    v.push((
        "token_embd.weight".into(),
        vla(format!("{LM}embed_tokens.weight")),
    ));
    v.push((
        "action_queries.weight".into(),
        vla("action_queries.weight".into()),
    ));
    for i in 0..cfg.lm.layers {
        let (o, b) = (format!("lm.blk.{i}"), format!("{LM}layers.{i}"));
        let mut map = |a: &str, c: &str| v.push((format!("{o}.{a}"), vla(format!("{b}.{c}"))));
        map("attn_norm.weight", "input_layernorm.weight");
        map("ffn_norm.weight", "post_attention_layernorm.weight");
        for (a, c) in [
            ("attn_q", "q_proj"),
            ("attn_k", "k_proj"),
            ("attn_v", "v_proj"),
        ] {
            map(&format!("{a}.weight"), &format!("self_attn.{c}.weight"));
            map(&format!("{a}.bias"), &format!("self_attn.{c}.bias"));
        }
        map("attn_o.weight", "self_attn.o_proj.weight");
        for (a, c) in [
            ("ffn_gate", "gate_proj"),
            ("ffn_up", "up_proj"),
            ("ffn_down", "down_proj"),
        ] {
            map(&format!("{a}.weight"), &format!("mlp.{c}.weight"));
        }
    }
    v.push((
        "lm.output_norm.weight".into(),
        vla(format!("{LM}norm.weight")),
    ));
    let head = |n: &str| Source::Head(format!("model.{n}"));
    for (a, c) in [
        ("ln1", "layer_norm1"),
        ("fc1", "fc1"),
        ("ln2", "layer_norm2"),
        ("fc2", "fc2"),
    ] {
        for x in ["weight", "bias"] {
            v.push((format!("aex.head.{a}.{x}"), head(&format!("{c}.{x}"))));
        }
    }
    for i in 0..cfg.action.head_blocks {
        let (o, b) = (
            format!("aex.head.blk.{i}"),
            format!("mlp_resnet_blocks.{i}"),
        );
        for n in [
            "q_proj",
            "k_self",
            "v_self",
            "k_adapter",
            "v_adapter",
            "k_task",
            "v_task",
            "o_proj",
        ] {
            for x in ["weight", "bias"] {
                v.push((format!("{o}.{n}.{x}"), head(&format!("{b}.{n}.{x}"))));
            }
        }
        for (a, c) in [("ffn_ln", "ffn.0"), ("ffn_lin", "ffn.1")] {
            for x in ["weight", "bias"] {
                v.push((format!("{o}.{a}.{x}"), head(&format!("{b}.{c}.{x}"))));
            }
        }
        v.push((
            format!("{o}.gating.weight"),
            head(&format!("{b}.gating_factor")),
        ));
    }
    for f in ["fc1", "fc2"] {
        for x in ["weight", "bias"] {
            v.push((
                format!("aex.proprio.{f}.{x}"),
                Source::Proprio(format!("{f}.{x}")),
            ));
        }
    }
    v
}

/// Every tensor of a `.pt` component is mapped or known to be unused (`ignored`: a name part,
/// the FiLM generator the reference keeps but never runs).
fn check_component(
    t: &TorchState,
    plan: &[(String, Source)],
    mine: impl Fn(&Source) -> bool,
    ignored: &str,
) -> Result<()> {
    let used: std::collections::BTreeSet<&str> = plan
        .iter()
        .filter(|(_, s)| mine(s))
        .map(|(_, s)| s.name())
        .collect();
    let unknown: Vec<&str> = t
        .names()
        .filter(|n| !used.contains(n) && (ignored.is_empty() || !n.contains(ignored)))
        .collect();
    match unknown.first() {
        None => Ok(()),
        Some(_) => Err(ckpt_err(
            t.path(),
            format!(
                "{} tensors this converter does not map, e.g. {:?}",
                unknown.len(),
                &unknown[..unknown.len().min(8)]
            ),
        )),
    }
}

/// The sizes from `config.json` and the weights' shapes.
fn read_config(
    p: &Json,
    st: &Safetensors,
    head: &TorchState,
    proprio: &TorchState,
    opts: &Options,
) -> Result<VlaAdapterConfig> {
    let bad = |why: String| ckpt_err(st.path(), why);
    let vision_id = p.str("vision_backbone_id")?;
    if vision_id != "dinosiglip-vit-so-224px" {
        return Err(bad(format!(
            "vision_backbone_id {vision_id:?}: vla-rs reads Prismatic's fused DINOv2 + SigLIP at 224 (dinosiglip-vit-so-224px)"
        )));
    }
    let shape = |n: &str| -> Result<Vec<usize>> { Ok(st.require_shape(n)?.to_vec()) };
    let tower = |name: &str, blocks: usize| -> Result<TowerDims> {
        let p = format!("{VB}{name}.");
        let w = shape(&format!("{p}patch_embed.proj.weight"))?;
        let fc1 = shape(&format!("{p}blocks.0.mlp.fc1.weight"))?;
        Ok(TowerDims {
            hidden: w[0],
            layers: blocks.saturating_sub(1),
            heads: TOWER_HEADS,
            inter: fc1[0],
        })
    };
    let dino_blocks = count_layers(st, &format!("{VB}featurizer.blocks."), ".norm1.weight");
    let sig_blocks = count_layers(
        st,
        &format!("{VB}fused_featurizer.blocks."),
        ".norm1.weight",
    );
    let dino = tower("featurizer", dino_blocks)?;
    let sig = tower("fused_featurizer", sig_blocks)?;
    let patch = shape(&format!("{VB}featurizer.patch_embed.proj.weight"))?;
    let pos = shape(&format!("{VB}featurizer.pos_embed"))?;
    let reg = shape(&format!("{VB}featurizer.reg_token"))?;
    let n_patches = pos[pos.len() - 2];
    let side = (n_patches as f64).sqrt() as usize;
    let text = p.obj("text_config")?;
    let hidden = text.usize("hidden_size")?;
    let q_heads = text.usize("num_attention_heads")?;
    let fc1 = shape("projector.fc1.weight")?;
    let queries = shape("action_queries.weight")?;
    let blocks = head
        .names()
        .filter_map(|n| {
            n.strip_prefix("model.mlp_resnet_blocks.")?
                .split('.')
                .next()?
                .parse::<usize>()
                .ok()
        })
        .max()
        .map_or(0, |m| m + 1);
    let head_fc2 = head
        .shape("model.fc2.weight")
        .ok_or_else(|| ckpt_err(head.path(), "no model.fc2.weight".to_string()))?;
    let head_ln1 = head
        .shape("model.layer_norm1.weight")
        .ok_or_else(|| ckpt_err(head.path(), "no model.layer_norm1.weight".to_string()))?;
    let proprio_fc1 = proprio
        .shape("fc1.weight")
        .ok_or_else(|| ckpt_err(proprio.path(), "no fc1.weight".to_string()))?;
    let action_dim = head_fc2[0];
    let proprio_dim = proprio_fc1[1];
    if head_ln1[0] != action_dim * hidden {
        return Err(ckpt_err(
            head.path(),
            format!(
                "model.layer_norm1 has {} features, not action_dim {action_dim} x hidden {hidden}",
                head_ln1[0]
            ),
        ));
    }
    // prismatic/vla/constants.py's platforms
    let chunk = match (opts.chunk, action_dim, proprio_dim) {
        (Some(c), ..) => c,
        (None, 7, 8) => 8,
        (None, 7, 7) => 5,
        (None, 14, 14) => 25,
        (None, a, s) => {
            return Err(ckpt_err(
                head.path(),
                format!("action {a}, state {s}: no platform of the reference's has these widths; pass --chunk"),
            ))
        }
    };
    Ok(VlaAdapterConfig {
        vision: PrismaticConfig {
            dino,
            sig,
            registers: reg[reg.len() - 2],
            image_size: side * patch[2],
            patch_size: patch[2],
            ln_eps: TOWER_LN_EPS,
            proj_mid: fc1[0],
            num_images: opts.num_images.unwrap_or(2),
        },
        lm: LmDims {
            hidden,
            layers: text.usize("num_hidden_layers")?,
            q_heads,
            kv_heads: text.usize("num_key_value_heads")?,
            head_dim: match text.get("head_dim") {
                Some(_) => text.usize("head_dim")?,
                None => hidden / q_heads.max(1),
            },
            inter: text.usize("intermediate_size")?,
            vocab: shape(&format!("{LM}embed_tokens.weight"))?[0],
            rope_theta: text.rope_theta()? as f32,
            rms_eps: text.f64("rms_norm_eps")? as f32,
        },
        action: HeadConfig {
            chunk,
            action_dim,
            proprio_dim,
            num_tokens: queries[0],
            head_blocks: blocks,
            head_heads: HEAD_HEADS,
            head_rope_base: HEAD_ROPE_BASE,
            ln_eps: HEAD_LN_EPS,
        },
        stop_id: STOP_ID,
    })
}

/// Every suite's statistics of `dataset_statistics.json` (`action` and `proprio`: q01, q99,
/// mask, all ones where absent, as the reference's default), as `state_*.<suite>` and
/// `action_*.<suite>`.
fn read_stats(
    ckpt: &Path,
    cfg: &VlaAdapterConfig,
    notes: &mut Vec<String>,
) -> Result<Vec<(String, Vec<f32>)>> {
    let path = ckpt.join("dataset_statistics.json");
    let json = crate::checkpoint::read_json(&path)?;
    let suites = json
        .as_object()
        .ok_or_else(|| ckpt_err(&path, "expected an object of suites"))?;
    let mut out = Vec::new();
    for (suite, s) in suites {
        for (what, key, dim) in [
            ("state", "proprio", cfg.action.proprio_dim),
            ("action", "action", cfg.action.action_dim),
        ] {
            let e = |why: &str| ckpt_err(&path, format!("{suite}.{key}: {why}"));
            let stats = s.get(key).ok_or_else(|| e("missing"))?;
            for stat in ["q01", "q99"] {
                let v: Vec<f32> = stats
                    .get(stat)
                    .and_then(|x| x.as_array())
                    .ok_or_else(|| e(&format!("no {stat}")))?
                    .iter()
                    .map(|x| x.as_f64().map(|f| f as f32))
                    .collect::<Option<_>>()
                    .ok_or_else(|| e(&format!("{stat}: not numbers")))?;
                if v.len() != dim {
                    return Err(e(&format!(
                        "{stat}: {} values, the model has {dim}",
                        v.len()
                    )));
                }
                out.push((format!("{what}_{stat}.{suite}"), v));
            }
            let mask: Vec<f32> = match stats.get("mask").and_then(|x| x.as_array()) {
                None => vec![1.0; dim],
                Some(m) => m
                    .iter()
                    .map(|x| x.as_bool().map(|b| f32::from(u8::from(b))))
                    .collect::<Option<_>>()
                    .ok_or_else(|| e("mask: not booleans"))?,
            };
            if mask.len() != dim {
                return Err(e(&format!(
                    "mask: {} values, the model has {dim}",
                    mask.len()
                )));
            }
            out.push((format!("{what}_mask.{suite}"), mask));
        }
    }
    notes.push(format!(
        "statistics for {}: choose one with --embodiment when there are several",
        suites.keys().cloned().collect::<Vec<_>>().join(", ")
    ));
    Ok(out)
}
