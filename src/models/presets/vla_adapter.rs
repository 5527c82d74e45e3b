//! VLA-Adapter presets.

use crate::models::vla_adapter::{HeadConfig, LmDims, VlaAdapterConfig};
use crate::modules::prismatic::{PrismaticConfig, TowerDims};

/// A small VLA-Adapter-shaped config for tests and demos (the golden fixture's sizes): both
/// towers 2 blocks deep at the released 224 x 224 (patch 14: 256 patches), 16 heads each,
/// DINOv2 64 wide with 4 registers, SigLIP 48 wide, two cameras, a Qwen2 of width 32 (4
/// query / 2 key-value heads of 8) as
/// deep as the released one (the reference's head has 24 blocks, one per layer), the released
/// 64 action queries, chunk 8, action 7 and state 8 (the reference's LIBERO constants).
pub fn vla_adapter_small_config() -> VlaAdapterConfig {
    VlaAdapterConfig {
        vision: PrismaticConfig {
            dino: TowerDims {
                hidden: 64,
                layers: 2,
                heads: 16,
                inter: 128,
            },
            sig: TowerDims {
                hidden: 48,
                layers: 2,
                heads: 16,
                inter: 72,
            },
            registers: 4,
            image_size: 224,
            patch_size: 14,
            ln_eps: 1e-6,
            proj_mid: 4 * 112,
            num_images: 2,
        },
        lm: LmDims {
            hidden: 32,
            layers: 24,
            q_heads: 4,
            kv_heads: 2,
            head_dim: 8,
            inter: 48,
            vocab: 512,
            rope_theta: 1e6,
            rms_eps: 1e-6,
        },
        action: HeadConfig {
            chunk: 8,
            action_dim: 7,
            proprio_dim: 8,
            num_tokens: 64,
            head_blocks: 24,
            head_heads: 8,
            head_rope_base: 1e4,
            ln_eps: 1e-5,
        },
        stop_id: 2,
    }
}

/// The released LIBERO model's sizes: DINOv2 ViT-L/14 (23 of 24 blocks, 4 registers) and
/// SigLIP so400m/14 (26 of 27) at 224 on two cameras, projector 2176 -> 8704 -> 896 -> 896,
/// Qwen2.5-0.5B (24 layers, 896 wide, 14 / 2 heads of 64), 64 action queries, chunk 8,
/// action 7, state 8.
pub fn vla_adapter_full_config() -> VlaAdapterConfig {
    VlaAdapterConfig {
        vision: PrismaticConfig {
            dino: TowerDims {
                hidden: 1024,
                layers: 23,
                heads: 16,
                inter: 4096,
            },
            sig: TowerDims {
                hidden: 1152,
                layers: 26,
                heads: 16,
                inter: 4304,
            },
            registers: 4,
            image_size: 224,
            patch_size: 14,
            ln_eps: 1e-6,
            proj_mid: 8704,
            num_images: 2,
        },
        lm: LmDims {
            hidden: 896,
            layers: 24,
            q_heads: 14,
            kv_heads: 2,
            head_dim: 64,
            inter: 4864,
            vocab: 151_936,
            rope_theta: 1e6,
            rms_eps: 1e-6,
        },
        action: HeadConfig {
            chunk: 8,
            action_dim: 7,
            proprio_dim: 8,
            num_tokens: 64,
            head_blocks: 24,
            head_heads: 8,
            head_rope_base: 1e4,
            ln_eps: 1e-5,
        },
        stop_id: 2,
    }
}
