//! Evo-1 presets.

use super::{lm_sizes, siglip};
use crate::layers::GatedActivation;
use crate::models::common::ActionIo;
use crate::models::evo1::Evo1Config;
use crate::models::gr00t::PromptIds;
use crate::modules::decoder::DecoderConfig;
use crate::modules::evo1_head::Evo1HeadConfig;
use crate::modules::vision::{TowerStyle, VisionConfig};

/// A small Evo-1-shaped config for tests and demos: an InternViT of 2 layers at 84 (9
/// tokens a view), a 3-layer Qwen2, a 2-block head; two cameras of three views, chunk 10 of
/// 24-wide padded state (8 real) and action (7 real), 4 steps.
pub fn evo1_small_config() -> Evo1Config {
    evo1_sized(
        [32, 2, 2, 64, 84, 14],
        [64, 3, 96, 512],
        [4, 2, 16],
        [64, 4, 2, 48, 40],
        (10, 4, 24),
    )
}

/// Evo-1's released sizes (InternVL3-1B: InternViT-300M 1024 x 24 at 448, Qwen2.5-0.5B cut
/// to 14 layers; head 896 x 8 blocks of 8 heads, hidden 1024), LIBERO's two cameras of
/// three views, chunk 50, 32 steps.
pub fn evo1_full_config() -> Evo1Config {
    let mut cfg = evo1_sized(
        [1024, 24, 16, 4096, 448, 14],
        [896, 14, 4864, 151674],
        [14, 2, 64],
        [896, 8, 8, 1024, 1024],
        (50, 32, 64),
    );
    cfg.io.pad_token_id = 151643;
    cfg.image_token = 151667;
    cfg.prompt = evo1_prompt(3, cfg.n_img_tokens(), [151665, 151667, 151666]);
    cfg.io.tokenizer_max_length = cfg.prompt.text_bound(1024); // lerobot's max_text_length
    cfg
}

/// An Evo-1 config of tower `[hidden, layers, heads, inter, image, patch]`, LM `[hidden,
/// layers, inter, vocab]` with `[q heads, kv heads, head dim]`, head `[embed, heads,
/// layers, hidden, state hidden]` and `(chunk, steps, instruction tokens)`.
fn evo1_sized(
    vit: [usize; 6],
    lm: [usize; 4],
    [q_heads, kv_heads, head_dim]: [usize; 3],
    [embed, heads, layers, hidden, state_hidden]: [usize; 5],
    (chunk_size, num_steps, tokenizer_max_length): (usize, usize, usize),
) -> Evo1Config {
    let lm = lm_sizes(lm);
    let image_token = lm.vocab_size - 2;
    let vision = VisionConfig {
        style: TowerStyle::InternVit,
        ..siglip(vit)
    };
    let mut cfg = Evo1Config {
        vision,
        attn: DecoderConfig {
            q_heads,
            kv_heads,
            head_dim,
            rope_theta: 1e6,
            norm_eps: 1e-6,
            ffn: GatedActivation::Silu,
            qk_norm: false,
            qkv_bias: true,
        },
        head: Evo1HeadConfig {
            embed,
            heads,
            layers,
            hidden,
            state_hidden,
        },
        io: ActionIo {
            tokenizer_max_length,
            pad_token_id: 0,
            chunk_size,
            num_steps,
            max_state_dim: 24,
            max_action_dim: 24,
            state_dim: 8,
            action_dim: 7,
            n_images: 2,
        },
        max_views: 3,
        image_token,
        lm,
        prompt: PromptIds::default(),
        view_marks: [0; 2],
    };
    let ids = [image_token - 1, image_token, image_token + 1];
    cfg.prompt = evo1_prompt(3, cfg.n_img_tokens(), ids);
    cfg
}

/// A stand-in Evo-1 prompt: per view, two ids for `Image-{v}: `, then `<img>`, `n`
/// `<IMG_CONTEXT>`, `</img>` (`[open, context, close]`) and a newline id.
fn evo1_prompt(views: usize, n: usize, [open, context, close]: [usize; 3]) -> PromptIds {
    let mut before = Vec::new();
    for v in 0..views as u32 {
        before.extend([10 + v, 4, open as u32]);
        before.extend(std::iter::repeat_n(context as u32, n));
        before.extend([close as u32, 9]);
    }
    PromptIds::new(before, Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::flow::FlowArch;

    /// The released Evo-1 sizes pass the checks and declare lerobot's parameter count
    /// (`tools/golden/evo1.py --size full --dry`: 775,198,640 at chunk 50) plus the two
    /// sinusoid tables the reference keeps as buffers (1000 and 50 rows of 896).
    #[test]
    fn evo1_full_config_has_the_references_parameters() {
        let cfg = evo1_full_config();
        crate::config::check(&cfg, cfg.arch()).unwrap();
        let total: usize = cfg
            .tensor_shapes()
            .unwrap()
            .iter()
            .map(|(_, s)| s.iter().product::<usize>())
            .sum();
        assert_eq!(total, 775_198_640 + (1000 + 50) * 896);
        let small = evo1_small_config();
        crate::config::check(&small, small.arch()).unwrap();
    }
}
