//! Configs in each arch's shape for demos, tests and benchmarks (small ones, and the
//! released sizes), and GGUFs of them with random weights: SmolVLA and pi0 here, the GR00T
//! family and VLA-JEPA in [`gr00t`], Evo-1 in [`evo1`].

mod act;
mod evo1;
mod gr00t;
mod gr00t16;
mod octo;
mod openvla;
mod turbovla;

pub use act::{act_full_config, act_small_config};
pub use evo1::{evo1_full_config, evo1_small_config};
pub use gr00t::{
    gr00t_full_config, gr00t_n1_7_full_config, gr00t_n1_7_small_config, gr00t_small_config,
    vla_jepa_full_config, vla_jepa_small_config,
};
pub use gr00t16::{gr00t_n1_6_full_config, gr00t_n1_6_small_config};
pub use octo::{octo_full_config, octo_small_config};
pub use openvla::{
    bitvla_full_config, bitvla_small_config, openvla_oft_full_config, openvla_oft_small_config,
    vla_adapter_full_config, vla_adapter_small_config,
};
pub use turbovla::{turbovla_full_config, turbovla_small_config};

use super::common::{add_random_tensors, ActionIo};
use super::flow::FlowArch;
use super::pi0::{Pi0Config, Variant};
use super::smolvla::SmolVlaConfig;
use crate::gguf::{GgmlType, GgufWriter};
use crate::layers::GatedActivation;
use crate::modules::decoder::{DecoderConfig, ExpertConfig, LmConfig};
use crate::modules::flow::TimeEmbedding;
use crate::modules::vision::VisionConfig;
use crate::tokenizer::Tokenizer;
use crate::Result;

/// A GGUF writer holding `cfg`'s metadata, `tokenizer` if given, and random tensors of
/// every declared weight and statistic drawn from `seed` (see [`add_random_tensors`]);
/// float matrices are stored as `ty` except the state, action and time projections, which
/// stay f32 as the converters keep them.
pub fn random_writer<A: FlowArch>(
    cfg: &A,
    seed: u64,
    ty: GgmlType,
    tokenizer: Option<&Tokenizer>,
) -> Result<GgufWriter<'static>> {
    let mut w = GgufWriter::new();
    cfg.write(&mut w)?;
    w.add_metadata(
        "general.name",
        format!("{} random-weight model", cfg.arch()),
    )?;
    if let Some(t) = tokenizer {
        t.write_gguf(&mut w)?;
    }
    let mut shapes = cfg.tensor_shapes()?;
    shapes.extend(cfg.statistics());
    let is_float_matrix = |name: &str| {
        !name.starts_with("state_") && !name.starts_with("action_") && !name.contains("time_mlp")
    };
    add_random_tensors(&mut w, &shapes, seed, ty, is_float_matrix)?;
    Ok(w)
}

/// A small SmolVLA-shaped config for the demo model and fast tests.
pub fn demo_config() -> SmolVlaConfig {
    SmolVlaConfig {
        vision: siglip([64, 2, 4, 128, 64, 8]),
        scale_factor: 2,
        lm: lm_sizes([96, 4, 256, 512]),
        attn: DecoderConfig {
            q_heads: 6,
            kv_heads: 2,
            head_dim: 16,
            rope_theta: 10000.0,
            norm_eps: 1e-5,
            ffn: GatedActivation::Silu,
            ..Default::default()
        },
        expert: ExpertConfig {
            hidden: 72,
            inter: 256,
        },
        self_attn_every_n_layers: 2,
        io: io(16, 2, 50),
        time: lerobot_time(),
    }
}

/// smolvla_base's sizes (SmolVLM2-500M's SigLIP at 512 with pixel shuffle 4, its language
/// model cut to 16 layers, the 720-wide expert), two cameras, 48 instruction tokens: for
/// benchmarks of a full-size random-weight SmolVLA (what `vla-convert smolvla` reads from
/// the released checkpoint's config).
pub fn smolvla_base_config() -> SmolVlaConfig {
    // the demo's RoPE base, epsilon, SiLU, self-attention every 2nd layer and time periods
    // are SmolVLA's own; only the sizes differ
    let demo = demo_config();
    SmolVlaConfig {
        vision: siglip([768, 12, 12, 3072, 512, 16]),
        scale_factor: 4,
        lm: lm_sizes([960, 16, 2560, 49280]),
        attn: DecoderConfig {
            q_heads: 15,
            kv_heads: 5,
            head_dim: 64,
            ..demo.attn
        },
        expert: ExpertConfig {
            hidden: 720,
            inter: 2048,
        },
        io: io(48, 0, 50),
        ..demo
    }
}

/// A small config of `variant`'s shape for tests and demos (the real sizes come from the
/// converter: SigLIP So400m/14 at 224, Gemma 2B, Gemma 300M expert).
pub fn small_config(variant: Variant) -> Pi0Config {
    let vision = [48, 2, 4, 96, 32, 8];
    sized(
        variant,
        vision,
        [64, 3, 160, 512],
        [4, 1, 16],
        [40, 96],
        [24, 10],
    )
}

/// openpi's sizes (SigLIP So400m/14 at 224, Gemma 2B, Gemma 300M expert), two cameras,
/// lerobot's defaults otherwise: for benchmarks of full-size random-weight models.
pub fn full_config(variant: Variant) -> Pi0Config {
    let tokens = match variant {
        Variant::Pi0 => 48,
        Variant::Pi05 => 200,
    };
    let vision = [1152, 27, 16, 4304, 224, 14];
    let lm = [2048, 18, 16384, 257152];
    sized(variant, vision, lm, [8, 1, 256], [1024, 4096], [tokens, 50])
}

/// A config from `vision` `[hidden, layers, heads, inter, image, patch]`, `lm` `[hidden,
/// layers, inter, vocab]`, `heads` `[q, kv, head_dim]`, `expert` `[hidden, inter]` and
/// `io` `[tokenizer_max_length, chunk]`; two cameras, 10 steps, 32-wide padded state and
/// action of 6 real dimensions, openpi's epsilons, RoPE base and time periods.
fn sized(
    variant: Variant,
    vision: [usize; 6],
    lm: [usize; 4],
    heads: [usize; 3],
    expert: [usize; 2],
    io: [usize; 2],
) -> Pi0Config {
    Pi0Config {
        variant,
        vision: siglip(vision),
        lm: lm_sizes(lm),
        attn: DecoderConfig {
            q_heads: heads[0],
            kv_heads: heads[1],
            head_dim: heads[2],
            rope_theta: 10000.0,
            norm_eps: 1e-6,
            ffn: GatedActivation::GeluTanh,
            ..Default::default()
        },
        expert: ExpertConfig {
            hidden: expert[0],
            inter: expert[1],
        },
        io: self::io(io[0], 0, io[1]),
        time: lerobot_time(),
    }
}

/// A SigLIP tower of `[hidden, layers, heads, inter, image, patch]`, LayerNorm eps 1e-6.
fn siglip([hidden, layers, heads, inter, image_size, patch_size]: [usize; 6]) -> VisionConfig {
    VisionConfig {
        hidden,
        layers,
        heads,
        inter,
        image_size,
        patch_size,
        ln_eps: 1e-6,
        ..Default::default()
    }
}

/// A language model of `[hidden, layers, inter, vocab]`.
fn lm_sizes([hidden, n_layers, inter, vocab_size]: [usize; 4]) -> LmConfig {
    LmConfig {
        hidden,
        n_layers,
        inter,
        vocab_size,
    }
}

/// Two cameras, 10 steps, 32-wide padded state and action of 6 real dimensions.
fn io(tokenizer_max_length: usize, pad_token_id: u32, chunk_size: usize) -> ActionIo {
    ActionIo {
        n_images: 2,
        tokenizer_max_length,
        pad_token_id,
        chunk_size,
        num_steps: 10,
        max_state_dim: 32,
        max_action_dim: 32,
        state_dim: 6,
        action_dim: 6,
    }
}

/// lerobot's (and openpi's) time-embedding periods.
fn lerobot_time() -> TimeEmbedding {
    TimeEmbedding {
        min_period: 4e-3,
        max_period: 4.0,
    }
}
