//! ACT presets.

use crate::models::act::ActConfig;

/// A small ACT-shaped config for tests and demos: a ResNet-18 layout 8 to 32 wide, a 32-wide
/// transformer (4 heads, 2 encoder and 2 decoder layers), two cameras at 70 x 90, state 6,
/// action 5, chunk 7 (the golden fixture's sizes).
pub fn act_small_config() -> ActConfig {
    ActConfig {
        dim_model: 32,
        n_heads: 4,
        dim_feedforward: 48,
        n_encoder_layers: 2,
        n_decoder_layers: 2,
        pre_norm: false,
        gelu: false,
        chunk_size: 7,
        n_action_steps: 5,
        state_dim: 6,
        action_dim: 5,
        num_views: 2,
        image_height: 70,
        image_width: 90,
        blocks: [2, 2, 2, 2],
        widths: [8, 8, 16, 24, 32],
        cameras: vec![
            "observation.images.top".into(),
            "observation.images.wrist".into(),
        ],
    }
}

/// lerobot's ACT defaults: torchvision's ResNet-18, a 512-wide transformer (8 heads, FFN
/// 3200, 4 encoder layers, 1 decoder layer), chunk 100; two cameras at 480 x 640 and
/// 14-dimensional state and action as ALOHA's (the sizes `tools/golden/act.py --size full`
/// writes).
pub fn act_full_config() -> ActConfig {
    ActConfig {
        dim_model: 512,
        n_heads: 8,
        dim_feedforward: 3200,
        n_encoder_layers: 4,
        n_decoder_layers: 1,
        chunk_size: 100,
        n_action_steps: 100,
        state_dim: 14,
        action_dim: 14,
        image_height: 480,
        image_width: 640,
        widths: [64, 64, 128, 256, 512],
        ..act_small_config()
    }
}
