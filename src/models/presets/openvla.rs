//! VLA-Adapter, OpenVLA-OFT and BitVLA presets.

use crate::models::bitvla::{self, BitvlaConfig};
use crate::models::openvla::{ActionIo, LmDims};
use crate::models::openvla_oft::{OftHead, OpenVlaOftConfig};
use crate::models::vla_adapter::{HeadConfig, VlaAdapterConfig};
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
        io: ActionIo {
            chunk: 8,
            action_dim: 7,
            proprio_dim: 8,
            stop_id: 2,
        },
        action: HeadConfig {
            num_tokens: 64,
            head_blocks: 24,
            head_heads: 8,
            head_rope_base: 1e4,
            ln_eps: 1e-5,
        },
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
        io: ActionIo {
            chunk: 8,
            action_dim: 7,
            proprio_dim: 8,
            stop_id: 2,
        },
        action: HeadConfig {
            num_tokens: 64,
            head_blocks: 24,
            head_heads: 8,
            head_rope_base: 1e4,
            ln_eps: 1e-5,
        },
    }
}

/// A small OpenVLA-OFT-shaped config for tests and demos (the golden fixture's sizes): the
/// towers of [`vla_adapter_small_config`], a 4-layer Llama 32 wide (4 heads of 8, MLP 86)
/// with the released vocabulary (32064: the empty token 29871 is in it), an L1 head 32 wide
/// with 2 blocks, chunk 8, action 7, state 8.
pub fn openvla_oft_small_config() -> OpenVlaOftConfig {
    let va = vla_adapter_small_config();
    OpenVlaOftConfig {
        vision: va.vision,
        lm: LmDims {
            hidden: 32,
            layers: 4,
            q_heads: 4,
            kv_heads: 4,
            head_dim: 8,
            inter: 86,
            vocab: 32_064,
            rope_theta: 1e4,
            rms_eps: 1e-6,
        },
        io: va.io,
        head: OftHead {
            head_hidden: 32,
            head_blocks: 2,
            head_ln_eps: 1e-5,
        },
        empty_id: 29_871,
    }
}

/// The released LIBERO model's sizes: the towers of [`vla_adapter_full_config`] with the
/// projector 2176 -> 8704 -> 4096 -> 4096, Llama 2 7B (32 layers, 4096 wide, 32 heads of
/// 128, MLP 11008, vocabulary 32064, rope 1e4, RMS epsilon 1e-6), the L1 head 4096 wide with
/// 2 blocks, chunk 8, action 7, state 8.
pub fn openvla_oft_full_config() -> OpenVlaOftConfig {
    let va = vla_adapter_full_config();
    OpenVlaOftConfig {
        vision: va.vision,
        lm: LmDims {
            hidden: 4096,
            layers: 32,
            q_heads: 32,
            kv_heads: 32,
            head_dim: 128,
            inter: 11_008,
            vocab: 32_064,
            rope_theta: 1e4,
            rms_eps: 1e-6,
        },
        io: va.io,
        head: OftHead {
            head_hidden: 4096,
            head_blocks: 2,
            head_ln_eps: 1e-5,
        },
        empty_id: 29_871,
    }
}

/// A small BitVLA-shaped config for tests and demos (the golden fixture's sizes): a SigLIP
/// tower 48 wide, 3 layers of 16 heads, MLP 176, at the released 224 x 224 (patch 14: 256
/// patches) on two cameras; BitNet 32 wide, 4 layers, 4 query / 1 key-value heads of 8, MLP
/// 96, the released vocabulary (Llama 3's with BitVLA's tokens, 128264) and special ids; the
/// L1 head 32 wide with 2 blocks; chunk 8, action 7, state 8.
pub fn bitvla_small_config() -> BitvlaConfig {
    let full = bitvla_full_config();
    BitvlaConfig {
        vision: bitvla::TowerConfig {
            hidden: 48,
            layers: 3,
            heads: 16,
            inter: 176,
            ..full.vision
        },
        lm: LmDims {
            hidden: 32,
            layers: 4,
            q_heads: 4,
            kv_heads: 1,
            head_dim: 8,
            inter: 96,
            ..full.lm
        },
        head: OftHead {
            head_hidden: 32,
            ..full.head
        },
        ..full
    }
}

/// The released LIBERO models' sizes: SigLIP so400m/14 at 224 (26 of 27 layers, 1152 wide, 16
/// heads, MLP 4304) on two cameras, BitNet b1.58-2B (30 layers, 2560 wide, 20 / 5 heads of 128,
/// MLP 6912, rope 5e5, RMS epsilon 1e-5, vocabulary 128264), the L1 head 2560 wide with 2
/// blocks, chunk 8, action 7, state 8; image placeholder 128010, proprio 128011, stop 128001.
pub fn bitvla_full_config() -> BitvlaConfig {
    BitvlaConfig {
        vision: bitvla::TowerConfig {
            hidden: 1152,
            layers: 26,
            heads: 16,
            inter: 4304,
            image_size: 224,
            patch_size: 14,
            ln_eps: 1e-6,
            num_images: 2,
        },
        lm: LmDims {
            hidden: 2560,
            layers: 30,
            q_heads: 20,
            kv_heads: 5,
            head_dim: 128,
            inter: 6912,
            vocab: 128_264,
            rope_theta: 5e5,
            rms_eps: 1e-5,
        },
        io: ActionIo {
            chunk: 8,
            action_dim: 7,
            proprio_dim: 8,
            stop_id: 128_001,
        },
        head: OftHead {
            head_hidden: 2560,
            head_blocks: 2,
            head_ln_eps: 1e-5,
        },
        image_id: 128_010,
        proprio_id: 128_011,
    }
}
