//! VLA-Adapter checkpoint -> `vla_adapter` GGUF (schema: docs/GGUF.md): the folder its LIBERO
//! evaluation loads ([`super::openvla`]), plus the action queries and the bridge-attention
//! head (`L1RegressionActionHead(use_pro_version=True)`; its FiLM generator, which the
//! reference keeps but never runs, is left out).

use super::ckpt_err;
use super::openvla::{self, head, pair, Checkpoint, Source};
use crate::config;
use crate::models::vla_adapter::{HeadConfig, VlaAdapterConfig, ARCH};
use crate::Result;
use std::path::Path;

pub use super::openvla::Options;
pub type Converted = openvla::Converted<VlaAdapterConfig>;

/// The head's constants, which the reference's code fixes rather than its config: heads,
/// rotary base, LayerNorm epsilon, and the task rows (`num_task_tokens`).
const HEAD_HEADS: usize = 8;
const HEAD_ROPE_BASE: f32 = 1e4;
const HEAD_LN_EPS: f32 = 1e-5;
const TASK_ROWS: usize = 512;

/// Converts the VLA-Adapter checkpoint folder `ckpt`.
pub fn convert(
    ckpt: &Path,
    opts: &Options,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Converted> {
    let dtype = super::float_dtype(opts.dtype)?;
    let c = Checkpoint::open(ckpt, super::Kind::VlaAdapter)?;
    let lm = c.lm(1e6)?;
    let io = c.io(opts)?;
    let blocks = c.head_blocks(&io, &lm)?;
    let config = VlaAdapterConfig {
        vision: c.vision(opts)?,
        action: HeadConfig {
            num_tokens: c.shape("action_queries.weight")?[0],
            head_blocks: blocks,
            head_heads: HEAD_HEADS,
            head_rope_base: HEAD_ROPE_BASE,
            ln_eps: HEAD_LN_EPS,
        },
        lm,
        io,
    };
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
    let v = &config.vision;
    let notes = vec![openvla::sizes_note(v, "Qwen2.5", &config.lm)];
    let mut plan = openvla::shared_plan(v, config.lm.layers, true);
    plan.push((
        "action_queries.weight".into(),
        Source::Vla("action_queries.weight".into(), None),
    ));
    plan.extend(head_plan(&config));
    let plan = openvla::Plan {
        ignored: openvla::ignored(&config.vision),
        ternary: Vec::new(),
        float_extra: Vec::new(),
        tensors: plan,
        head_unused: "film_gen.",
    };
    openvla::write(ckpt, &c, config, plan, dtype, notes, progress)
}

/// The bridge-attention head's blocks (`model.` in its `.pt`).
fn head_plan(cfg: &VlaAdapterConfig) -> Vec<(String, Source)> {
    let mut v = Vec::new();
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
            pair(&mut v, &format!("{o}.{n}"), &format!("{b}.{n}"), head);
        }
        pair(&mut v, &format!("{o}.ffn_ln"), &format!("{b}.ffn.0"), head);
        pair(&mut v, &format!("{o}.ffn_lin"), &format!("{b}.ffn.1"), head);
        v.push((
            format!("{o}.gating.weight"),
            head(format!("{b}.gating_factor")),
        ));
    }
    v
}
