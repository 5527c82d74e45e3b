//! SmolVLA on the random-weight demo config: every backend gives the CPU reference's chunk,
//! and bad requests get clear errors. (Agreement with lerobot itself: tests/smolvla_golden.rs.)

mod support;

use vla::gguf::GgufFile;
use vla::models::smolvla::{demo_config, demo_tokenizer, gaussian_noise, random_gguf, SmolVla};
use vla::policy::{Image, ImageData, Observation, Policy, RuntimeOptions};

fn model(backend: &str) -> SmolVla {
    let bytes = random_gguf(&demo_config(), 7, vla::gguf::GgmlType::F32).unwrap();
    let opts = RuntimeOptions {
        backend: backend.into(),
        ..Default::default()
    };
    SmolVla::new(GgufFile::from_bytes(bytes).unwrap(), &opts).unwrap()
}

fn observation() -> Observation {
    let cfg = demo_config();
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
        images: vec![image(48, 80, 1), image(70, 50, 2)],
        state: vec![0.3, -1.2, 0.5, 2.0, 0.0, -0.7],
        prompt: None,
        tokens: Some(vec![5, 77, 301, 12, 9]),
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
    short_cfg.io.tokenizer_max_length = 5;
    let bytes = random_gguf(&short_cfg, 7, vla::gguf::GgmlType::F32).unwrap();
    let mut short = SmolVla::new(
        GgufFile::from_bytes(bytes).unwrap(),
        &RuntimeOptions::default(),
    )
    .unwrap();
    let want = short.predict(&obs).unwrap();
    let got = model("cpu").predict(&obs).unwrap();
    let err = max_abs_diff(&want.actions, &got.actions);
    println!("padded vs unpadded prompt: max abs err {err:e}");
    assert!(err < 1e-4, "padding changed the chunk by {err}");
}

#[test]
fn prompt_gives_the_chunk_of_its_tokens() {
    // The demo GGUF ships a tokenizer: a text prompt must give exactly the chunk of the ids
    // it encodes to, with lerobot's trailing newline added when missing.
    let mut m = model("cpu");
    let tok = m
        .tokenizer()
        .expect("the demo GGUF has a tokenizer")
        .clone();
    let text = "pick up the red cube";
    let ids = tok.encode(&format!("{text}\n")).unwrap();
    assert!(ids.len() < text.len(), "merges should apply: {ids:?}");
    let mut by_ids = observation();
    by_ids.tokens = Some(ids.iter().map(|&t| t as i32).collect());
    let want = m.predict(&by_ids).unwrap().actions;
    for prompt in [text.to_string(), format!("{text}\n")] {
        let mut obs = observation();
        (obs.tokens, obs.prompt) = (None, Some(prompt));
        assert_eq!(m.predict(&obs).unwrap().actions, want);
    }
    // Without the newline the ids, and so the chunk, differ.
    let mut bare = observation();
    bare.tokens = Some(
        tok.encode(text)
            .unwrap()
            .iter()
            .map(|&t| t as i32)
            .collect(),
    );
    assert_ne!(m.predict(&bare).unwrap().actions, want);
}

#[test]
fn demo_tokenizer_makes_instruction_words_single_tokens() {
    let tok = demo_tokenizer().unwrap();
    assert!(tok.len() <= demo_config().lm.vocab_size);
    for word in [
        " pick", " up", " the", " red", " cube", " drawer", "pick", "\n\n",
    ] {
        assert_eq!(tok.encode(word).unwrap().len(), 1, "{word:?}");
    }
    let text = "pick up the red cube\n";
    assert_eq!(tok.decode(&tok.encode(text).unwrap()), text);
}

#[test]
fn long_prompts_are_truncated_as_lerobot_does() {
    let mut m = model("cpu");
    let max = demo_config().io.tokenizer_max_length;
    let text = "pick up the red cube, then open the top drawer and put the cube inside it\n";
    let ids = m.tokenizer().unwrap().encode(text).unwrap();
    assert!(ids.len() > max);
    let mut by_ids = observation();
    by_ids.tokens = Some(ids[..max].iter().map(|&t| t as i32).collect());
    let mut by_text = observation();
    (by_text.tokens, by_text.prompt) = (None, Some(text.into()));
    assert_eq!(
        m.predict(&by_text).unwrap().actions,
        m.predict(&by_ids).unwrap().actions
    );
}

#[test]
fn prompt_without_a_tokenizer_is_an_error() {
    // The demo weights with every tokenizer.ggml.* key removed.
    let file =
        GgufFile::from_bytes(random_gguf(&demo_config(), 7, vla::gguf::GgmlType::F32).unwrap())
            .unwrap();
    let mut w = vla::gguf::GgufWriter::new();
    for (k, v) in file
        .metadata()
        .iter()
        .filter(|(k, _)| !k.starts_with("tokenizer."))
    {
        w.add_metadata(k.clone(), v.clone()).unwrap();
    }
    for t in file.tensors() {
        w.add_tensor(t.name.clone(), t.ty, &t.dims, file.tensor_bytes(t))
            .unwrap();
    }
    let mut m = SmolVla::new(
        GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap(),
        &RuntimeOptions::default(),
    )
    .unwrap();
    assert!(m.tokenizer().is_none());
    let mut obs = observation();
    (obs.tokens, obs.prompt) = (None, Some("pick up the red cube".into()));
    let err = m.predict(&obs).unwrap_err().to_string();
    assert!(err.contains("no tokenizer"), "{err}");
    // Token ids still work, and give the chunk the model with a tokenizer gives.
    assert_eq!(
        m.predict(&observation()).unwrap().actions,
        model("cpu").predict(&observation()).unwrap().actions
    );
}

/// The chunk within `tol` x max |action| of the cpu reference's.
fn agrees_with_cpu(backend: &str, tol: f32) {
    let obs = observation();
    let want = model("cpu").predict(&obs).unwrap();
    let mut m = model(backend);
    println!("smolvla demo on {}", m.info().backend);
    let got = m.predict(&obs).unwrap();
    let err = max_abs_diff(&want.actions, &got.actions);
    let scale = want.actions.iter().fold(0f32, |a, v| a.max(v.abs()));
    println!("{backend}: max abs err vs cpu {err:e} (max |action| {scale})");
    assert!(err <= tol * scale.max(1.0), "{backend}: max abs err {err}");
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
    let mut m = model("cpu");
    type Edit = Box<dyn Fn(&mut Observation)>;
    let cases: Vec<(&str, Edit)> = vec![
        ("one image", Box::new(|o| drop(o.images.pop()))),
        ("state length", Box::new(|o| o.state.push(1.0))),
        ("noise length", Box::new(|o| o.noise = Some(vec![0.0; 7]))),
        (
            "token out of vocab",
            Box::new(|o| o.tokens = Some(vec![100_000])),
        ),
        ("negative token", Box::new(|o| o.tokens = Some(vec![-1]))),
        (
            "too many tokens",
            Box::new(|o| o.tokens = Some(vec![1; 17])),
        ),
        ("no instruction", Box::new(|o| o.tokens = None)),
        (
            "prompt and tokens",
            Box::new(|o| o.prompt = Some("pick up the cube".into())),
        ),
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
