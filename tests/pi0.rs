//! pi0 and pi0.5 on small random-weight configs: padding, and pi0.5's state bins and prompt.
//! What every arch does (determinism, shapes, every backend vs cpu, bad requests):
//! tests/conformance.rs. Agreement with lerobot itself: tests/pi0_golden.rs.

use vla::gguf::{GgmlType, GgufFile};
use vla::models::common::gaussian_noise;
use vla::models::pi0::{pi05_prompt, random_gguf, small_config, state_bin, Pi0, Variant};
use vla::policy::{Image, ImageData, Observation, Policy, RuntimeOptions};

const VARIANTS: [Variant; 2] = [Variant::Pi0, Variant::Pi05];

/// On cpu, with room for `max_tokens` instruction tokens.
fn model_with(variant: Variant, max_tokens: usize) -> Pi0 {
    let mut cfg = small_config(variant);
    cfg.io.tokenizer_max_length = max_tokens;
    let bytes = random_gguf(&cfg, 11, GgmlType::F32).unwrap();
    let opts = RuntimeOptions::default();
    Pi0::new(GgufFile::from_bytes(bytes).unwrap(), &opts).unwrap()
}

fn model(variant: Variant) -> Pi0 {
    model_with(variant, small_config(variant).io.tokenizer_max_length)
}

fn observation(variant: Variant) -> Observation {
    let cfg = small_config(variant);
    let image = |h: usize, w: usize, k: u32| Image {
        height: h,
        width: w,
        data: ImageData::RgbU8(
            (0..h * w * 3)
                .map(|i| ((i as u32 * 37 + k * 11) % 251) as u8)
                .collect(),
        ),
    };
    Observation {
        // Not the model's size, not square: exercises resize-with-pad.
        images: vec![image(24, 40, 1), image(45, 30, 2)],
        state: vec![0.3, -1.2, 0.5, 2.0, 0.0, -0.7],
        prompt: None,
        tokens: Some(vec![2, 77, 301, 12, 9]),
        noise: Some(gaussian_noise(
            cfg.io.chunk_size * cfg.io.max_action_dim,
            42,
        )),
        token_mask: None,
    }
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn padding_tokens_do_not_change_the_chunk() {
    for variant in VARIANTS {
        // Room for 24 tokens (19 of them padding) or exactly 5: the same chunk.
        let obs = observation(variant);
        let want = model_with(variant, 5).predict(&obs).unwrap();
        let got = model(variant).predict(&obs).unwrap();
        let err = max_abs_diff(&want.actions, &got.actions);
        println!("{variant:?}: padded vs unpadded prompt: max abs err {err:e}");
        assert!(
            err < 1e-4,
            "{variant:?}: padding changed the chunk by {err}"
        );
    }
}

#[test]
fn state_bins_follow_numpy_digitize() {
    // np.digitize(np.float32(x), np.linspace(-1, 1, 257)[:-1]) - 1 at and around the edges
    // (values as numpy 2 gives them).
    for (x, want) in [
        (-1.5, -1),
        (-1.0, 0),
        (-0.99, 1),
        (0.0, 128),
        (1.0 - 1.0 / 128.0, 255),
        (0.999, 255),
        (1.0, 255),
        (3.0, 255),
    ] {
        assert_eq!(state_bin(x), want, "{x}");
    }
    assert_eq!(state_bin(-1.0 + 1.0 / 128.0 - 1e-6), 0);
    assert_eq!(
        pi05_prompt("  pick_up\nthe cube ", &[0.0, -1.0]),
        "Task: pick up the cube, State: 128 0;\nAction: "
    );
}

/// Structure, not timing: every action-expert layer reads the prefix's cache and the new
/// rows as two key parts (no concatenation) with heads inside positions (no permute); the
/// only concats of a step build its mask and (pi0) the state / action / time input. Each
/// FFN's gate / up / GELU is one gated matmul.
#[test]
fn denoise_layers_copy_nothing_around_attention() {
    use vla::graph::GraphBuilder;
    use vla::models::pi0::graphs;
    for variant in VARIANTS {
        let cfg = small_config(variant);
        let graph = graphs::denoise(GraphBuilder::over(None), &cfg).unwrap();
        let count = |kind: &str| graph.nodes().iter().filter(|n| n.op.kind() == kind).count();
        assert_eq!(count("permute"), 0, "{variant:?}");
        assert!(
            count("concat") <= 3,
            "{variant:?}: {} concats",
            count("concat")
        );
        assert_eq!(count("attention"), cfg.lm.n_layers, "{variant:?}");
        // each FFN's gate and up projections and activation: one op
        assert_eq!(count("geglu_matmul"), cfg.lm.n_layers, "{variant:?}");
        assert_eq!(count("gelu_tanh_mul"), 0, "{variant:?}");
        // pi0's RMSNorms are read by the matmuls after them; pi0.5's adaptive norms read
        // their scale and shift in place (two a layer and the output's), and its gated
        // residuals their gates (one op each, no slice, mul and add): the one slice left
        // takes the action rows
        match variant {
            Variant::Pi0 => assert_eq!(count("rms_norm") + count("ada_rms_norm"), 0),
            Variant::Pi05 => {
                assert_eq!(count("ada_rms_norm"), 2 * cfg.lm.n_layers + 1);
                assert_eq!(count("add_gated"), 2 * cfg.lm.n_layers);
                assert_eq!(count("slice"), 1);
            }
        }
        let two_parts = graph.nodes().iter().filter(|n| n.kv_parts() == 2).count();
        assert_eq!(two_parts, cfg.lm.n_layers, "{variant:?}");
    }
}
