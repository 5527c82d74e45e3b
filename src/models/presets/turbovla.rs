//! TurboVLA's sizes: the released LIBERO model (DINOv3 ViT-B/16 at 256, BERT-base, a
//! 256-wide interaction) and a small one (the golden fixture's sizes).

use crate::models::turbovla::{SpecialIds, TurboConfig};
use crate::modules::bert::BertConfig;
use crate::modules::dinov3::Dinov3Config;

/// The released LIBERO model: two views at 256, DINOv3 ViT-B/16 (4 registers, rope theta
/// 100), bert-base-uncased, six fusion layers (4 heads over 1024), a 3-layer decoder (8
/// heads, FFN 2048), 12 actions of 7 from an 8-dim state, instructions padded to 21 ids.
pub fn turbovla_full_config() -> TurboConfig {
    TurboConfig {
        hidden: 256,
        vit: Dinov3Config {
            hidden: 768,
            layers: 12,
            heads: 12,
            inter: 3072,
            image_size: 256,
            patch_size: 16,
            registers: 4,
            rope_theta: 100.0,
        },
        bert: BertConfig {
            hidden: 768,
            layers: 12,
            heads: 12,
            inter: 3072,
            vocab: 30522,
            max_positions: 512,
            token_types: 2,
        },
        fusion_layers: 6,
        fusion_heads: 4,
        fusion_dim: 1024,
        enhancer_layers: 6,
        enhancer_heads: 4,
        enhancer_ffn: 1024,
        action_heads: 8,
        decoder_layers: 3,
        decoder_ffn: 2048,
        action_dim: 7,
        state_dim: 8,
        state_tokens: 2,
        horizon: 12,
        num_views: 2,
        proj_hidden: 1024,
        state_hidden: 256,
        action_hidden: 512,
        text_len: 21,
        pad_to_longest: false,
        special: SpecialIds::default(),
        groups: vec![],
        flat_views: false,
    }
}

/// A small TurboVLA-shaped config for tests and demos (the golden fixtures' sizes): DINOv3
/// 64 wide (2 layers, 4 heads) on 64 x 64 views, BERT 48 wide (2 layers, 12 heads as
/// bert-base, which vla.cpp assumes) over 1200 tokens (bert-base-uncased's special ids), a
/// 32-wide interaction (2 fusion layers of 2 heads over 48), a 2-layer decoder (4 heads), 5
/// actions of 7 from an 8-dim state.
pub fn turbovla_small_config() -> TurboConfig {
    TurboConfig {
        hidden: 32,
        vit: Dinov3Config {
            hidden: 64,
            layers: 2,
            heads: 4,
            inter: 128,
            image_size: 64,
            patch_size: 16,
            registers: 4,
            rope_theta: 100.0,
        },
        bert: BertConfig {
            hidden: 48,
            layers: 2,
            heads: 12,
            inter: 96,
            vocab: 1200,
            max_positions: 64,
            token_types: 2,
        },
        fusion_layers: 2,
        fusion_heads: 2,
        fusion_dim: 48,
        enhancer_layers: 2,
        enhancer_heads: 2,
        enhancer_ffn: 48,
        action_heads: 4,
        decoder_layers: 2,
        decoder_ffn: 64,
        horizon: 5,
        proj_hidden: 128,
        state_hidden: 24,
        action_hidden: 40,
        ..turbovla_full_config()
    }
}
