//! SmolVLA on the random-weight demo config: every backend gives the CPU reference's chunk,
//! and bad requests get clear errors. (Agreement with lerobot itself: tests/smolvla_golden.rs.)

use vla::gguf::GgufFile;
use vla::models::smolvla::{demo_config, gaussian_noise, random_gguf, SmolVla};
use vla::policy::{Image, ImageData, Observation, Policy, RuntimeOptions};

fn model(backend: &str) -> SmolVla {
    let bytes = random_gguf(&demo_config(), 7, vla::gguf::GgmlType::F32).unwrap();
    let opts = RuntimeOptions { backend: backend.into(), ..Default::default() };
    SmolVla::new(GgufFile::from_bytes(bytes).unwrap(), &opts).unwrap()
}

fn observation() -> Observation {
    let cfg = demo_config();
    let image = |h: usize, w: usize, k: u32| Image {
        height: h,
        width: w,
        data: ImageData::RgbU8((0..h * w * 3).map(|i| ((i as u32 * 37 + k * 11) % 251) as u8).collect()),
    };
    Observation {
        // Not the model's size, not square: exercises resize-with-pad.
        images: vec![image(48, 80, 1), image(70, 50, 2)],
        state: vec![0.3, -1.2, 0.5, 2.0, 0.0, -0.7],
        prompt: None,
        tokens: Some(vec![5, 77, 301, 12, 9]),
        noise: Some(gaussian_noise(cfg.chunk_size * cfg.max_action_dim, 42)),
    }
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn cpu_chunk_is_deterministic_and_shaped() {
    let mut m = model("cpu");
    let obs = observation();
    let a = m.predict(&obs).unwrap();
    let b = m.predict(&obs).unwrap();
    assert_eq!((a.chunk_size, a.action_dim), (50, 6));
    assert_eq!(a.actions.len(), 300);
    assert!(a.actions.iter().all(|v| v.is_finite()));
    assert_eq!(a.actions, b.actions);
    // The chunk depends on every input: instruction, state, images and noise.
    let mut other = obs.clone();
    other.tokens = Some(vec![5, 77, 301, 12, 10]);
    assert_ne!(m.predict(&other).unwrap().actions, a.actions);
    let mut other = obs.clone();
    other.state[5] += 0.5;
    assert_ne!(m.predict(&other).unwrap().actions, a.actions);
    let mut other = obs.clone();
    if let ImageData::RgbU8(d) = &mut other.images[1].data {
        d[1000] ^= 0x40;
    }
    assert_ne!(m.predict(&other).unwrap().actions, a.actions);
}

#[test]
fn padding_tokens_do_not_change_the_chunk() {
    // The same weights with room for 16 or for exactly 5 instruction tokens: the 11 pad
    // tokens of the first are masked out, so both give the same chunk (up to summation order).
    let obs = observation();
    let mut short_cfg = demo_config();
    short_cfg.tokenizer_max_length = 5;
    let bytes = random_gguf(&short_cfg, 7, vla::gguf::GgmlType::F32).unwrap();
    let mut short = SmolVla::new(GgufFile::from_bytes(bytes).unwrap(), &RuntimeOptions::default()).unwrap();
    let want = short.predict(&obs).unwrap();
    let got = model("cpu").predict(&obs).unwrap();
    let err = max_abs_diff(&want.actions, &got.actions);
    println!("padded vs unpadded prompt: max abs err {err:e}");
    assert!(err < 1e-4, "padding changed the chunk by {err}");
}

fn agrees_with_cpu(backend: &str) {
    let obs = observation();
    let want = model("cpu").predict(&obs).unwrap();
    let mut m = model(backend);
    println!("smolvla demo on {}", m.info().backend);
    let got = m.predict(&obs).unwrap();
    let err = max_abs_diff(&want.actions, &got.actions);
    let scale = want.actions.iter().fold(0f32, |a, v| a.max(v.abs()));
    println!("{backend}: max abs err vs cpu {err:e} (max |action| {scale})");
    assert!(err <= 1e-4 * scale.max(1.0), "{backend}: max abs err {err}");
}

#[test]
fn vulkan_agrees_with_cpu() {
    agrees_with_cpu("vulkan");
}

#[cfg(feature = "ggml")]
#[test]
fn ggml_agrees_with_cpu() {
    agrees_with_cpu("ggml");
}

#[test]
fn bad_requests_are_errors() {
    let mut m = model("cpu");
    type Edit = Box<dyn Fn(&mut Observation)>;
    let cases: Vec<(&str, Edit)> = vec![
        ("one image", Box::new(|o| drop(o.images.pop()))),
        ("state length", Box::new(|o| o.state.push(1.0))),
        ("noise length", Box::new(|o| o.noise = Some(vec![0.0; 7]))),
        ("token out of vocab", Box::new(|o| o.tokens = Some(vec![100_000]))),
        ("negative token", Box::new(|o| o.tokens = Some(vec![-1]))),
        ("too many tokens", Box::new(|o| o.tokens = Some(vec![1; 17]))),
        ("no instruction", Box::new(|o| o.tokens = None)),
        ("image data length", Box::new(|o| o.images[0].height += 1)),
        ("zero-size image", Box::new(|o| o.images[0].width = 0)),
    ];
    for (what, edit) in cases {
        let mut obs = observation();
        edit(&mut obs);
        let err = m.predict(&obs).expect_err(what);
        println!("{what}: {err}");
    }
    // And the model still serves a good request afterwards.
    assert!(m.predict(&observation()).is_ok());
}
