//! Where each tensor of an OpenVLA-family GGUF comes from: the towers' and the language model's
//! maps (only the blocks the references read; the fused `qkv` split), what a checkpoint holds
//! that inference never reads, and the coverage check of the heads' `.pt` files.

use super::{Checkpoint, LM, VB};
use crate::convert::ckpt_err;
use crate::convert::torch_pt::TorchState;
use crate::modules::prismatic::PrismaticConfig;
use crate::Result;
use std::collections::BTreeSet;

/// Where one of our tensors comes from.
#[derive(Clone, Debug)]
pub(crate) enum Source {
    /// `model.safetensors`: a tensor, or the `part`-th third of a fused `qkv`.
    Vla(String, Option<usize>),
    /// The action head's `.pt`.
    Head(String),
    /// The proprio projector's `.pt`.
    Proprio(String),
}

impl Source {
    pub(super) fn name(&self) -> &str {
        match self {
            Source::Vla(n, _) | Source::Head(n) | Source::Proprio(n) => n,
        }
    }

    pub(super) fn values(&self, c: &Checkpoint, shape: &[usize]) -> Result<Vec<f32>> {
        let (vals, path) = match self {
            Source::Vla(n, None) => (c.st.f32(n)?, c.st.path()),
            Source::Vla(n, Some(part)) => (
                crate::convert::in_proj_part(&c.st.f32(n)?, *part),
                c.st.path(),
            ),
            Source::Head(n) => (c.head.f32(n)?, c.head.path()),
            Source::Proprio(n) => (c.proprio.f32(n)?, c.proprio.path()),
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

/// What both archs' files share: the towers, projectors and language model ([`vision_plan`],
/// [`lm_plan`]) and the L1 head's outer layers (`aex.head.{ln1,fc1,ln2,fc2}`); the head's
/// blocks are each arch's.
pub(crate) fn shared_plan(
    v: &PrismaticConfig,
    lm_layers: usize,
    qkv_bias: bool,
) -> Vec<(String, Source)> {
    let mut plan = vision_plan(v);
    plan.extend(lm_plan(lm_layers, qkv_bias));
    plan.extend(head_outer());
    plan
}

/// The L1 head's outer layers (`aex.head.{ln1,fc1,ln2,fc2}`).
pub(crate) fn head_outer() -> Vec<(String, Source)> {
    let mut plan = Vec::new();
    for (a, c) in [
        ("ln1", "layer_norm1"),
        ("fc1", "fc1"),
        ("ln2", "layer_norm2"),
        ("fc2", "fc2"),
    ] {
        pair(&mut plan, &format!("aex.head.{a}"), c, head);
    }
    plan
}

/// The L1 head's residual blocks (`aex.head.blk.{i}.{ln,lin}` from `mlp_resnet_blocks`).
pub(crate) fn head_blocks(blocks: usize) -> Vec<(String, Source)> {
    let mut v = Vec::new();
    for i in 0..blocks {
        let (o, b) = (
            format!("aex.head.blk.{i}"),
            format!("mlp_resnet_blocks.{i}"),
        );
        pair(&mut v, &format!("{o}.ln"), &format!("{b}.ffn.0"), head);
        pair(&mut v, &format!("{o}.lin"), &format!("{b}.ffn.1"), head);
    }
    v
}

/// A head tensor (`model.` in its `.pt`).
pub(crate) fn head(n: String) -> Source {
    Source::Head(format!("model.{n}"))
}

/// Our tensor `ours` with its `weight` and `bias` from `theirs`'s, made by `src`.
pub(crate) fn pair(
    v: &mut Vec<(String, Source)>,
    ours: &str,
    theirs: &str,
    src: fn(String) -> Source,
) {
    for x in ["weight", "bias"] {
        v.push((format!("{ours}.{x}"), src(format!("{theirs}.{x}"))));
    }
}

pub(crate) fn vla(n: String) -> Source {
    Source::Vla(n, None)
}

/// The towers, the projector and the proprio projector.
pub(crate) fn vision_plan(cfg: &PrismaticConfig) -> Vec<(String, Source)> {
    let mut v: Vec<(String, Source)> = Vec::new();
    for (ours, theirs, t, dino) in [
        ("vis.d", "featurizer", cfg.dino, true),
        ("vis.s", "fused_featurizer", cfg.sig, false),
    ] {
        let p = format!("{VB}{theirs}.");
        pair(
            &mut v,
            &format!("{ours}.patch_embd"),
            &format!("{p}patch_embed.proj"),
            vla,
        );
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
                pair(&mut v, &format!("{o}.{a}"), &format!("{b}.{c}"), vla);
            }
            for (part, a) in ["attn_q", "attn_k", "attn_v"].iter().enumerate() {
                for x in ["weight", "bias"] {
                    let qkv = Source::Vla(format!("{b}.attn.qkv.{x}"), Some(part));
                    v.push((format!("{o}.{a}.{x}"), qkv));
                }
            }
            if dino {
                for ls in ["ls1", "ls2"] {
                    let gain = vla(format!("{b}.{ls}.scale_factor"));
                    v.push((format!("{o}.{ls}.weight"), gain));
                }
            }
        }
    }
    for f in ["fc1", "fc2", "fc3"] {
        pair(
            &mut v,
            &format!("vis.proj.{f}"),
            &format!("projector.{f}"),
            vla,
        );
    }
    v.extend(proprio_plan());
    v
}

/// The proprio projector (`aex.proprio.fc{1,2}`).
pub(crate) fn proprio_plan() -> Vec<(String, Source)> {
    let mut v = Vec::new();
    for f in ["fc1", "fc2"] {
        pair(&mut v, &format!("aex.proprio.{f}"), f, Source::Proprio);
    }
    v
}

/// The language model (Llama or Qwen2 names; q/k/v biases where `qkv_bias`).
pub(crate) fn lm_plan(layers: usize, qkv_bias: bool) -> Vec<(String, Source)> {
    let mut v: Vec<(String, Source)> = Vec::new();
    v.push((
        "token_embd.weight".into(),
        vla(format!("{LM}embed_tokens.weight")),
    ));
    for i in 0..layers {
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
            if qkv_bias {
                map(&format!("{a}.bias"), &format!("self_attn.{c}.bias"));
            }
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
    v
}

/// Checkpoint tensors inference never reads: each tower's last block and final norm (the
/// references read the penultimate block), SigLIP's attention pool, the LM head.
pub(crate) fn ignored(cfg: &PrismaticConfig) -> Vec<String> {
    let mut v: Vec<String> = [
        "vision_backbone.featurizer.norm.",
        "vision_backbone.fused_featurizer.norm.",
        "vision_backbone.fused_featurizer.attn_pool.",
        "vision_backbone.featurizer.head",
        "language_model.lm_head.",
    ]
    .map(String::from)
    .into();
    v.push(format!("{VB}featurizer.blocks.{}.", cfg.dino.layers));
    v.push(format!("{VB}fused_featurizer.blocks.{}.", cfg.sig.layers));
    v
}

/// Every tensor of a `.pt` component is mapped or known to be unused (`ignored`: a name part).
pub(super) fn check_component(
    t: &TorchState,
    plan: &[(String, Source)],
    mine: impl Fn(&Source) -> bool,
    ignored: &str,
) -> Result<()> {
    let used: BTreeSet<&str> = plan
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
