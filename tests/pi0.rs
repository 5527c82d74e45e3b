//! pi0 and pi0.5 on small random-weight configs: every backend gives the CPU reference's
//! chunk, padding and the suffix masks behave, bad requests get clear errors. (Agreement
//! with lerobot itself: tests/pi0_golden.rs.)

mod support;

use vla::gguf::{GgmlType, GgufFile};
use vla::models::common::gaussian_noise;
use vla::models::pi0::{pi05_prompt, random_gguf, small_config, state_bin, Pi0, Variant};
use vla::policy::{Image, ImageData, Observation, Policy, RuntimeOptions};

const VARIANTS: [Variant; 2] = [Variant::Pi0, Variant::Pi05];

fn model_with(variant: Variant, backend: &str, max_tokens: usize) -> Pi0 {
    let mut cfg = small_config(variant);
    cfg.io.tokenizer_max_length = max_tokens;
    let bytes = random_gguf(&cfg, 11, GgmlType::F32).unwrap();
    let opts = RuntimeOptions {
        backend: backend.into(),
        ..Default::default()
    };
    Pi0::new(GgufFile::from_bytes(bytes).unwrap(), &opts).unwrap()
}

fn model(variant: Variant, backend: &str) -> Pi0 {
    model_with(
        variant,
        backend,
        small_config(variant).io.tokenizer_max_length,
    )
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
    }
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn cpu_chunk_is_deterministic_and_depends_on_every_input() {
    for variant in VARIANTS {
        let mut m = model(variant, "cpu");
        let obs = observation(variant);
        let a = m.predict(&obs).unwrap();
        assert_eq!((a.chunk_size, a.action_dim), (10, 6));
        assert!(a.actions.iter().all(|v| v.is_finite()));
        assert_eq!(a.actions, m.predict(&obs).unwrap().actions);
        let mut edits: Vec<Observation> = Vec::new();
        let mut o = obs.clone();
        o.tokens = Some(vec![2, 77, 301, 12, 10]);
        edits.push(o);
        let mut o = obs.clone();
        if let ImageData::RgbU8(d) = &mut o.images[1].data {
            d[1000] ^= 0x40;
        }
        edits.push(o);
        let mut o = obs.clone();
        o.noise.as_mut().unwrap()[3] += 0.5;
        edits.push(o);
        if variant == Variant::Pi0 {
            // pi0.5 reads the state only through the prompt, which token ids replace.
            let mut o = obs.clone();
            o.state[5] += 0.5;
            edits.push(o);
        }
        for o in edits {
            assert_ne!(m.predict(&o).unwrap().actions, a.actions, "{variant:?}");
        }
    }
}

#[test]
fn padding_tokens_do_not_change_the_chunk() {
    for variant in VARIANTS {
        // Room for 24 tokens (19 of them padding) or exactly 5: the same chunk.
        let obs = observation(variant);
        let want = model_with(variant, "cpu", 5).predict(&obs).unwrap();
        let got = model(variant, "cpu").predict(&obs).unwrap();
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

/// The chunk within `tol` x max |action| of the cpu reference's.
fn agrees_with_cpu(backend: &str, tol: f32) {
    for variant in VARIANTS {
        let obs = observation(variant);
        let want = model(variant, "cpu").predict(&obs).unwrap();
        let mut m = model(variant, backend);
        let got = m.predict(&obs).unwrap();
        let err = max_abs_diff(&want.actions, &got.actions);
        let scale = want.actions.iter().fold(0f32, |a, v| a.max(v.abs()));
        println!(
            "{variant:?} on {}: max abs err vs cpu {err:e} (max |action| {scale})",
            m.info().backend
        );
        assert!(
            err <= tol * scale.max(1.0),
            "{variant:?} {backend}: max abs err {err}"
        );
    }
}

#[test]
fn vulkan_agrees_with_cpu() {
    agrees_with_cpu("vulkan", 1e-4);
}

/// On ggml-cpu, and on each other ggml device in `VLA_TEST_GGML_DEVICES` (as the op
/// harness). ggml's GPU kernels take matmul inputs in f16 (ggml-vulkan: NMSE ~1e-7 per F32
/// matmul, 3e-6 per F16 one), which moved the demo chunks by 3-5e-4 of their scale there.
#[cfg(feature = "ggml")]
#[test]
fn ggml_agrees_with_cpu() {
    for name in support::ggml_backend_names() {
        agrees_with_cpu(&name, if name == "ggml" { 1e-4 } else { 5e-3 });
    }
}

#[test]
fn bad_requests_are_errors() {
    for variant in VARIANTS {
        let mut m = model(variant, "cpu");
        type Edit = Box<dyn Fn(&mut Observation)>;
        let cases: Vec<(&str, Edit)> = vec![
            ("one image", Box::new(|o| drop(o.images.pop()))),
            ("state length", Box::new(|o| o.state.push(1.0))),
            ("non-finite state", Box::new(|o| o.state[0] = f32::NAN)),
            ("noise length", Box::new(|o| o.noise = Some(vec![0.0; 7]))),
            (
                "token out of vocab",
                Box::new(|o| o.tokens = Some(vec![100_000])),
            ),
            (
                "too many tokens",
                Box::new(|o| o.tokens = Some(vec![1; 25])),
            ),
            (
                "prompt without a tokenizer",
                Box::new(|o| (o.tokens, o.prompt) = (None, Some("pick".into()))),
            ),
            ("image data length", Box::new(|o| o.images[0].height += 1)),
        ];
        for (what, edit) in cases {
            let mut obs = observation(variant);
            edit(&mut obs);
            let err = m.predict(&obs).expect_err(what);
            println!("{variant:?} {what}: {err}");
        }
        assert!(m.predict(&observation(variant)).is_ok());
    }
}
