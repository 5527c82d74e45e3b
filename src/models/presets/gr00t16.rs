//! GR00T N1.6 presets.

use super::{lm_sizes, siglip};
use crate::config::limits::MAX_SEQUENCE;
use crate::layers::GatedActivation;
use crate::models::common::ActionIo;
use crate::models::embodiment::Embodiments;
use crate::models::gr00t_n1_6::Gr00tN16Config;
use crate::models::gr00t_n1_7::FrameConfig;
use crate::models::prompt::PromptIds;
use crate::modules::decoder::DecoderConfig;
use crate::modules::dit::BlockStack;
use crate::modules::gr00t_head::HeadConfig;

/// A small GR00T N1.6-shaped config for tests and demos: two cameras of 56 x 56 (4 x 4
/// patches, 4 tokens each after the unshuffle), a 2-layer Qwen3, a 4-block DiT, 4
/// embodiments, chunk 8 of which 4 are returned.
pub fn gr00t_n1_6_small_config() -> Gr00tN16Config {
    let mut cfg = gr00t_n1_6_sized(
        [32, 2, 2, 64, 56, 14],
        [64, 2, 128, 512],
        [4, 2, 16],
        [4, 2, 16],
        [24, 4],
    );
    cfg.io.n_images = 2;
    (cfg.io.chunk_size, cfg.valid_horizon) = (8, 4);
    (cfg.io.max_state_dim, cfg.io.max_action_dim) = (16, 12);
    (cfg.io.state_dim, cfg.io.action_dim) = (6, 6);
    cfg.head.max_seq_len = 32;
    cfg.finish_prompt(500);
    cfg.io.tokenizer_max_length = 16;
    cfg
}

/// GR00T N1.6's released sizes (Eagle Block2A-2B-v2: SigLIP2 1152 x 27 at 252 with a 2 x 2
/// unshuffle, Qwen3 2048 cut to 16 layers; DiT 32 x 1536 = 32 x 48, head hidden 1024, 32
/// embodiments), one camera, 50 actions of 128 of which 16 are returned.
pub fn gr00t_n1_6_full_config() -> Gr00tN16Config {
    let mut cfg = gr00t_n1_6_sized(
        [1152, 27, 16, 4304, 252, 14],
        [2048, 16, 6144, 151680],
        [16, 8, 128],
        [32, 32, 48],
        [1024, 32],
    );
    cfg.io.n_images = 1;
    (cfg.io.chunk_size, cfg.valid_horizon) = (50, 16);
    (cfg.io.max_state_dim, cfg.io.max_action_dim) = (128, 128);
    (cfg.io.state_dim, cfg.io.action_dim) = (8, 7);
    cfg.head.max_seq_len = 1024;
    cfg.finish_prompt(151669);
    cfg
}

impl Gr00tN16Config {
    /// A stand-in prompt with image token `image` (a system turn, the instruction, then each
    /// camera's image tokens between markers), its instruction bound as the reference's
    /// (none: the graphs' longest).
    fn finish_prompt(&mut self, image: u32) {
        self.head.image_token = image as usize;
        let mut after = Vec::new();
        for k in 0..self.io.n_images as u32 {
            after.extend([20 + k, 11]);
            after.extend(std::iter::repeat_n(image, self.n_img_tokens()));
            after.push(12);
        }
        after.extend([6, 7]);
        self.prompt = PromptIds::new(vec![1, 2, 3, 4, 5], after);
        self.io.tokenizer_max_length = self.prompt.text_bound(MAX_SEQUENCE);
    }
}

/// `vision` `[hidden, layers, heads, inter, image, patch]`, `lm` `[hidden, layers, inter,
/// vocab]`, `heads` `[q, kv, head_dim]`, `dit` `[layers, heads, head_dim]`, `head` `[hidden,
/// embodiments]`; GR00T's frame transform at the image's side, 4 steps.
fn gr00t_n1_6_sized(
    vision: [usize; 6],
    lm: [usize; 4],
    heads: [usize; 3],
    dit: [usize; 3],
    head: [usize; 2],
) -> Gr00tN16Config {
    let [layers, dit_heads, head_dim] = dit;
    Gr00tN16Config {
        vision: siglip(vision),
        pixel_shuffle: 2,
        connector_eps: 1e-5,
        frame: FrameConfig {
            edge: vision[4],
            crop: 0.95,
        },
        lm: lm_sizes(lm),
        attn: DecoderConfig {
            q_heads: heads[0],
            kv_heads: heads[1],
            head_dim: heads[2],
            rope_theta: 1e6,
            norm_eps: 1e-6,
            ffn: GatedActivation::Silu,
            qk_norm: true,
            ..Default::default()
        },
        dit: BlockStack {
            name: "dit",
            layers,
            heads: dit_heads,
            head_dim,
        },
        text_every: 2,
        head: HeadConfig {
            embed: dit_heads * head_dim,
            hidden: head[0],
            future_tokens: 0,
            max_seq_len: 32,
            embodiments: head[1],
            buckets: 1000,
            image_token: 0,
        },
        io: ActionIo {
            num_steps: 4,
            ..Default::default()
        },
        valid_horizon: 1,
        prompt: PromptIds::default(),
        embodiments: Embodiments {
            tags: format!(r#"{{"new_embodiment": {}}}"#, head[1] - 1),
            default: "new_embodiment".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::flow::FlowArch;

    #[test]
    fn presets_pass_the_config_checks() {
        for cfg in [gr00t_n1_6_small_config(), gr00t_n1_6_full_config()] {
            crate::config::check(&cfg, cfg.arch()).unwrap();
        }
        assert_eq!(gr00t_n1_6_full_config().n_img_tokens(), 81);
    }
}
