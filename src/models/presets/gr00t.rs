//! GR00T N1.5, GR00T N1.7 and VLA-JEPA presets.

use super::{lm_sizes, siglip};
use crate::config::limits::MAX_SEQUENCE;
use crate::layers::GatedActivation;
use crate::models::common::ActionIo;
use crate::models::embodiment::Embodiments;
use crate::models::gr00t::{Gr00tConfig, HeadConfig, PromptIds};
use crate::models::gr00t_n1_7::{FrameConfig, Gr00tN17Config};
use crate::models::vla_jepa::{IoSteps, VlaJepaConfig};
use crate::modules::decoder::DecoderConfig;
use crate::modules::dit::BlockStack;
use crate::modules::qwen_text::MropeConfig;
use crate::modules::qwen_vision::QwenVisionConfig;

/// A small GR00T N1.5-shaped config for tests and demos: two cameras of 4 image tokens, a
/// two-layer Qwen3, two VL self-attention blocks, a four-block DiT, 4 embodiments.
pub fn gr00t_small_config() -> Gr00tConfig {
    gr00t_sized(
        [32, 2, 2, 64, 28, 14],
        [64, 2, 128, 512],
        [4, 2, 16],
        [2, 4, 16],
        [4, 2, 24],
        [40, 4, 4],
    )
}

/// GR00T N1.5's sizes (Eagle-2.5: SigLIP 1152 x 27 at 224, Qwen3 2048 wide cut to 12 layers,
/// 4 VL self-attention blocks of 32 x 64, DiT 16 x 1536 = 32 x 48; head hidden 1024, 32 future
/// tokens, 32 embodiments), one camera: for benchmarks of full-size random-weight models.
pub fn gr00t_full_config() -> Gr00tConfig {
    let mut cfg = gr00t_sized(
        [1152, 27, 16, 4304, 224, 14],
        [2048, 12, 6144, 151680],
        [16, 8, 128],
        [4, 32, 64],
        [16, 32, 48],
        [1024, 32, 32],
    );
    cfg.io.n_images = 1;
    cfg.io.chunk_size = 16;
    cfg.io.max_state_dim = 64;
    cfg.io.max_action_dim = 32;
    cfg.head.max_seq_len = 1024;
    cfg.head.image_token = 151669;
    cfg.prompt = stand_in_prompt(1, cfg.vision.n_patches(), 151669);
    cfg.io.tokenizer_max_length = cfg.prompt.text_bound(MAX_SEQUENCE); // no bound in lerobot
    cfg
}

/// `vision` `[hidden, layers, heads, inter, image, patch]`, `lm` `[hidden, layers, inter,
/// vocab]`, `heads` `[q, kv, head_dim]`, `vlsa` and `dit` `[layers, heads, head_dim]`, `head`
/// `[hidden, future tokens, embodiments]`; two cameras, 4 steps, chunk 8, 16-wide state and
/// 12-wide action of 6 real dimensions, a stand-in prompt.
fn gr00t_sized(
    vision: [usize; 6],
    lm: [usize; 4],
    heads: [usize; 3],
    vlsa: [usize; 3],
    dit: [usize; 3],
    head: [usize; 3],
) -> Gr00tConfig {
    let stack = |name, [layers, heads, head_dim]: [usize; 3]| BlockStack {
        name,
        layers,
        heads,
        head_dim,
    };
    let image_token = lm[3] - 12;
    let vision = siglip(vision);
    let n_images = 2;
    Gr00tConfig {
        prompt: stand_in_prompt(n_images, vision.n_patches(), image_token),
        vision,
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
        vlsa: stack("vlsa", vlsa),
        dit: stack("dit", dit),
        head: HeadConfig {
            embed: dit[1] * dit[2],
            hidden: head[0],
            future_tokens: head[1],
            max_seq_len: 32,
            embodiments: head[2],
            buckets: 1000,
            image_token,
        },
        io: ActionIo {
            n_images,
            tokenizer_max_length: 16,
            pad_token_id: 0,
            chunk_size: 8,
            num_steps: 4,
            max_state_dim: 16,
            max_action_dim: 12,
            state_dim: 6,
            action_dim: 6,
        },
        embodiments: Embodiments {
            tags: format!(r#"{{"so100": 2, "new_embodiment": {}}}"#, head[2] - 1),
            default: "new_embodiment".into(),
        },
    }
}

/// A small GR00T N1.7-shaped config for tests and demos: two cameras of 64 x 96 (6 merged
/// tokens each), a 3-block Qwen3-VL tower with two deepstack taps, a 3-layer language model,
/// two VL self-attention blocks, a 6-block AlternateVLDiT, 4 embodiments.
pub fn gr00t_n1_7_small_config() -> Gr00tN17Config {
    gr00t_n1_7_sized(N17Sizes {
        vision: [32, 3, 2, 64, 64, 96],
        deepstack: vec![0, 1],
        lm: [64, 3, 96, 512],
        heads: [4, 2, 16],
        mrope: [4, 2, 2],
        vlsa: [2, 4, 16],
        dit: [6, 2, 16],
        head: [24, 4],
    })
}

/// GR00T N1.7's released sizes (Cosmos-Reason2-2B: Qwen3-VL tower 1024 x 24 with deepstack taps 5,
/// 11, 17, the language model 2048 wide cut to 16 of 28 layers; 4 VL self-attention blocks of
/// 32 x 64, DiT 32 x 1536 = 32 x 48, head hidden 1024, 32 embodiments), one 256 x 256 camera.
pub fn gr00t_n1_7_full_config() -> Gr00tN17Config {
    let mut cfg = gr00t_n1_7_sized(N17Sizes {
        vision: [1024, 24, 16, 4096, 256, 256],
        deepstack: vec![5, 11, 17],
        lm: [2048, 16, 6144, 151936],
        heads: [16, 8, 128],
        mrope: [24, 20, 20],
        vlsa: [4, 32, 64],
        dit: [32, 32, 48],
        head: [1024, 32],
    });
    cfg.io.n_images = 1;
    cfg.head.max_seq_len = 1024;
    cfg.head.image_token = 151655;
    cfg.prompt = stand_in_prompt(1, cfg.vision.n_tokens(), 151655);
    cfg.io.tokenizer_max_length = cfg.prompt.text_bound(MAX_SEQUENCE); // no bound in lerobot
    cfg
}

/// The sizes a GR00T N1.7 preset chooses.
struct N17Sizes {
    /// `[hidden, layers, heads, inter, image h, image w]` (patch 16, merge 2).
    vision: [usize; 6],
    deepstack: Vec<usize>,
    /// `[hidden, layers, inter, vocab]`.
    lm: [usize; 4],
    /// `[q, kv, head_dim]`.
    heads: [usize; 3],
    mrope: [usize; 3],
    /// `[layers, heads, head_dim]`.
    vlsa: [usize; 3],
    /// `[layers, heads, head_dim]`.
    dit: [usize; 3],
    /// `[hidden, embodiments]`.
    head: [usize; 2],
}

/// A GR00T N1.7 config of `sizes`: two cameras, 4 steps, 40 actions of which 16 are
/// returned, 132-wide state and action of 8 and 7 real dimensions (LIBERO's), a stand-in
/// prompt.
fn gr00t_n1_7_sized(sizes: N17Sizes) -> Gr00tN17Config {
    let N17Sizes {
        vision: [vh, vl, vheads, vinter, image_h, image_w],
        deepstack,
        lm,
        heads,
        mrope,
        vlsa,
        dit,
        head: [hidden, embodiments],
    } = sizes;
    let stack = |name, [layers, heads, head_dim]: [usize; 3]| BlockStack {
        name,
        layers,
        heads,
        head_dim,
    };
    let image_token = lm[3] - 12;
    let vision = QwenVisionConfig {
        hidden: vh,
        layers: vl,
        heads: vheads,
        inter: vinter,
        image_h,
        image_w,
        patch_size: 16,
        merge: 2,
        out: lm[0],
        deepstack,
    };
    let n_images = 2;
    Gr00tN17Config {
        prompt: stand_in_prompt(n_images, vision.n_tokens(), image_token),
        vision,
        frame: FrameConfig {
            edge: image_h.min(image_w),
            crop: 0.95,
        },
        lm: lm_sizes(lm),
        attn: DecoderConfig {
            q_heads: heads[0],
            kv_heads: heads[1],
            head_dim: heads[2],
            rope_theta: 5e6,
            norm_eps: 1e-6,
            ffn: GatedActivation::Silu,
            qk_norm: true,
            ..Default::default()
        },
        mrope: MropeConfig { sections: mrope },
        vlsa: stack("vlsa", vlsa),
        dit: stack("dit", dit),
        text_every: 2,
        head: HeadConfig {
            embed: dit[1] * dit[2],
            hidden,
            future_tokens: 0,
            max_seq_len: 64,
            embodiments,
            buckets: 1000,
            image_token,
        },
        io: ActionIo {
            n_images,
            tokenizer_max_length: 16,
            pad_token_id: 0,
            chunk_size: 40,
            num_steps: 4,
            max_state_dim: 132,
            max_action_dim: 132,
            state_dim: 8,
            action_dim: 7,
        },
        valid_horizon: 16,
        embodiments: Embodiments {
            tags: format!(
                r#"{{"libero_sim": 2, "new_embodiment": {}}}"#,
                embodiments - 1
            ),
            default: "libero_sim".into(),
        },
    }
}

/// A small VLA-JEPA-shaped config for tests and demos: two 96 x 96 cameras (9 merged tokens
/// each, area-averaged to 64 first), a 3-block tower with two deepstack taps, a 3-layer
/// language model, 8 embodied tokens, a 4-block DiT.
pub fn vla_jepa_small_config() -> VlaJepaConfig {
    let base = gr00t_n1_7_sized(N17Sizes {
        vision: [32, 3, 2, 64, 96, 96],
        deepstack: vec![0, 1],
        lm: [64, 3, 96, 512],
        heads: [4, 2, 16],
        mrope: [4, 2, 2],
        vlsa: [1, 4, 16],
        dit: [4, 2, 16],
        head: [24, 1],
    });
    let mut cfg = vla_jepa_from(base, 8, (64, 64));
    // the text segment holds lerobot's template text (~70 ids of the demo tokenizer) too
    cfg.io.tokenizer_max_length = 96;
    cfg
}

/// VLA-JEPA's released sizes (Qwen3-VL-2B: tower 1024 x 24, all 28 LM layers; DiT-B 16 x
/// 768 = 12 x 64, action hidden 1024, 32 embodied tokens), two cameras area-averaged to 224
/// and enlarged to 256 (64 tokens each), 7 x 7 chunk.
pub fn vla_jepa_full_config() -> VlaJepaConfig {
    let mut base = gr00t_n1_7_sized(N17Sizes {
        vision: [1024, 24, 16, 4096, 256, 256],
        deepstack: vec![5, 11, 17],
        lm: [2048, 28, 6144, 151936],
        heads: [16, 8, 128],
        mrope: [24, 20, 20],
        vlsa: [1, 32, 64],
        dit: [16, 12, 64],
        head: [1024, 1],
    });
    base.head.max_seq_len = 1024;
    base.head.image_token = 151655;
    let mut cfg = vla_jepa_from(base, 32, (224, 224));
    cfg.embodied_token = 151697;
    cfg.prompt = jepa_prompt(2, cfg.n_img_tokens(), 151655, 151697, 32);
    cfg.io.tokenizer_max_length = cfg.prompt.text_bound(MAX_SEQUENCE); // no bound in lerobot
    cfg
}

/// A VLA-JEPA config from an N1.7-shaped one's backbone and DiT: `embodied` tokens, 7 x 7
/// chunk of 8-wide state, LIBERO's post-processing.
fn vla_jepa_from(base: Gr00tN17Config, embodied: usize, area: (usize, usize)) -> VlaJepaConfig {
    let embodied_token = base.lm.vocab_size - 2;
    let n_img = base.vision.n_tokens();
    VlaJepaConfig {
        prompt: jepa_prompt(2, n_img, base.head.image_token, embodied_token, embodied),
        vision: base.vision,
        lm: base.lm,
        attn: base.attn,
        mrope: base.mrope,
        dit: base.dit,
        head: HeadConfig {
            future_tokens: embodied,
            embodiments: 1,
            ..base.head
        },
        io: ActionIo {
            chunk_size: 7,
            max_state_dim: 8,
            max_action_dim: 7,
            ..base.io
        },
        steps: IoSteps {
            area,
            clip_actions: true,
            pre_snap: true,
            binarize: true,
            gripper_dim: 6,
            gripper_threshold: 0.5,
            pixels: Default::default(),
        },
        embodied_token,
        text_before: "Your task is ".into(),
        text_after: ". Infer the temporal dynamics from frames ".into(),
    }
}

/// A stand-in VLA-JEPA prompt: a header, each camera's image tokens between markers; after
/// the text, stand-in action tokens, the `embodied` run and a footer.
fn jepa_prompt(
    cameras: usize,
    n_img: usize,
    image: usize,
    token: usize,
    embodied: usize,
) -> PromptIds {
    let mut p = stand_in_prompt(cameras, n_img, image);
    p.after = vec![20; 6];
    p.after.extend(std::iter::repeat_n(token as u32, embodied));
    p.after.extend([6, 7, 8]);
    p
}

/// A chat-shaped prompt of arbitrary ids around the instruction: a header, each camera's
/// image tokens between two markers, and a footer.
fn stand_in_prompt(cameras: usize, n_img: usize, image_token: usize) -> PromptIds {
    let mut before = vec![1, 2, 3];
    for i in 0..cameras as u32 {
        before.extend([10 + i, 4]);
        before.extend(std::iter::repeat_n(image_token as u32, n_img));
        before.push(5);
    }
    PromptIds::new(before, vec![6, 7, 8])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::flow::FlowArch;

    /// The released GR00T sizes pass the config checks, and the DiT and the VL self-attention
    /// blocks declare exactly the parameters lerobot's modules count at those sizes
    /// (`Total number of DiT parameters: 550386688`, `... SelfAttentionTransformer
    /// parameters: 201433088`, printed by `tools/golden/groot.py --size full`).
    #[test]
    fn gr00t_full_config_is_consistent() {
        let cfg = gr00t_full_config();
        crate::config::check(&cfg, cfg.arch()).unwrap();
        let shapes = cfg.tensor_shapes().unwrap();
        let count = |prefix: &str| -> usize {
            shapes
                .iter()
                .filter(|(n, _)| n.starts_with(prefix))
                .map(|(_, s)| s.iter().product::<usize>())
                .sum()
        };
        assert_eq!(count("aex.dit."), 550_386_688);
        assert_eq!(count("aex.vlsa."), 201_433_088);
        let small = gr00t_small_config();
        crate::config::check(&small, small.arch()).unwrap();
    }

    #[test]
    fn gr00t_n1_7_and_vla_jepa_configs_pass_their_checks() {
        for cfg in [gr00t_n1_7_small_config(), gr00t_n1_7_full_config()] {
            crate::config::check(&cfg, cfg.arch()).unwrap();
        }
        for cfg in [vla_jepa_small_config(), vla_jepa_full_config()] {
            crate::config::check(&cfg, cfg.arch()).unwrap();
        }
    }
}
