//! Octo's sizes: octo-small-1.5 (ViT-S, two cameras, T5-base, the diffusion head) and a
//! small model of the same structure for the demo and tests.

use crate::models::octo::config::{Stem, CAMERAS};
use crate::models::octo::{Head, OctoConfig};

/// SmallStem16 stems (6 input channels: the frame and the goal image) for the primary and
/// the wrist camera ([`CAMERAS`]' order), each of `widths` and `features`.
fn stems(primary: usize, wrist: usize, widths: [usize; 4], features: usize) -> Vec<Option<Stem>> {
    debug_assert_eq!(CAMERAS.len(), 2);
    let stem = |side| Stem {
        side,
        in_channels: 6,
        widths,
        patch: 1,
        features,
    };
    vec![Some(stem(primary)), Some(stem(wrist))]
}

/// octo-small-1.5: a 384-wide, 12-block, 6-head transformer (MLP 1536), the primary camera
/// at 256 (SmallStem16: 256 tokens) and the wrist at 128 (64), T5-base (12 layers, 768
/// wide, 12 heads, ReLU FFN 3072, vocab 32128), window 2, one readout, the DDPM head
/// (horizon 4 x 7, 20 steps, MLP-ResNet 3 x 256, time features 32).
pub fn octo_full_config() -> OctoConfig {
    OctoConfig {
        d: 384,
        layers: 12,
        heads: 6,
        ffn: 1536,
        window: 2,
        max_horizon: 10,
        stems: stems(256, 128, [32, 96, 192, 384], 512),
        t5_d: 768,
        t5_layers: 12,
        t5_heads: 12,
        t5_kv: 64,
        t5_ffn: 3072,
        t5_vocab: 32128,
        ..OctoConfig::empty()
    }
}

/// The demo's and tests' Octo: the full model's structure at small sizes (primary 64,
/// wrist 32, stems 32 wide, a 32-wide transformer, a 24-wide T5), plus 3 proprio
/// dimensions in 8 bins (as Octo's finetunes add).
pub fn octo_small_config() -> OctoConfig {
    OctoConfig {
        d: 32,
        layers: 2,
        heads: 4,
        ffn: 64,
        window: 2,
        max_horizon: 10,
        stems: stems(64, 32, [32, 32, 32, 64], 48),
        t5_d: 24,
        t5_layers: 2,
        t5_heads: 3,
        t5_kv: 8,
        t5_ffn: 40,
        t5_vocab: 400,
        proprio_dim: 3,
        proprio_bins: 8,
        time_dim: 8,
        hidden: 32,
        blocks: 2,
        head: Head::Diffusion,
        ..OctoConfig::empty()
    }
}
