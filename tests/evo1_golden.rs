//! Evo-1 against lerobot 0.6.1 itself (transformers 5.5.4). The fixture
//! `tests/fixtures/evo1-tiny` is a lerobot checkpoint with random (re-randomized) weights
//! plus the InternVL3 config folder (config, tokenizer), lerobot's inputs, per-stage
//! intermediates and chunk, made by `tools/golden/evo1.py` (rerun instructions there): three
//! cameras of four views (one absent), frames of other sizes than the model's. The tests
//! convert it with `vla::convert::evo1` and compare the prompt's ids, the resized frames, the
//! image tokens, the language model's output, the first velocity and the chunk on cpu,
//! vulkan and ggml.

#[macro_use]
mod support;

use support::golden::{cache, env_dir, rows_where, tensor, test_backend, Fixture, Stages, CPU};
use support::{check, cosine, Golden};
use vla::gguf::GgmlType;
use vla::models::common::text_rows;
use vla::models::evo1::{graphs, Evo1, Evo1Config};
use vla::models::flow::FlowArch;
use vla::policy::{Image, ImageData, Observation, Policy, RuntimeOptions};
use vla::Tensor;

const TOL: f32 = 1e-4;

fn fixture() -> Fixture<Evo1Config> {
    let dir = support::fixture("evo1-tiny");
    Fixture::new(dir, converter!(vla::convert::evo1), |g, cfg| {
        observation(g, cfg, false)
    })
}

/// The instruction's ids: lerobot's prompt after the converted image blocks.
fn text_ids(g: &Golden, cfg: &Evo1Config) -> Vec<i32> {
    let ids = g.i64("token_ids");
    ids[cfg.prompt.before.len()..]
        .iter()
        .map(|&t| t as i32)
        .collect()
}

/// The request with the frames lerobot's resize produced (so the pixels are exact) or, with
/// `raw`, the cameras' own frames.
fn observation(g: &Golden, cfg: &Evo1Config, raw: bool) -> Observation {
    let name = |i: usize| match raw {
        true => format!("image.{i}"),
        false => format!("frame.{i}"),
    };
    Observation {
        images: (0..cfg.io.n_images).map(|i| g.u8_image(&name(i))).collect(),
        state: g.f32("state"),
        prompt: None,
        tokens: Some(text_ids(g, cfg)),
        noise: Some(g.f32("noise")),
        token_mask: None,
    }
}

fn as_f32_image(img: &Image) -> Vec<f32> {
    match &img.data {
        ImageData::RgbU8(d) => d.iter().map(|&b| f32::from(b)).collect(),
        ImageData::RgbF32(d) => d.clone(),
    }
}

#[test]
fn converted_prompt_and_preprocessing_are_the_fixtures() {
    let fx = fixture();
    let file = fx.gguf(GgmlType::F32);
    let cfg = Evo1Config::read(&file).unwrap();
    let g = &fx.g;
    let ids: Vec<u32> = g.i64("token_ids").iter().map(|&t| t as u32).collect();
    assert_eq!(cfg.prompt.before[..], ids[..cfg.prompt.before.len()]);
    let m = Evo1::new(file, &RuntimeOptions::default()).unwrap();
    let task = fx.task();
    let want: Vec<u32> = text_ids(g, &cfg).iter().map(|&t| t as u32).collect();
    assert_eq!(m.tokenize_prompt(task, &[]).unwrap(), want);
    // The frames: our float kernel rounds a few pixels one level from torch's.
    let camera = cfg.spec().camera;
    let (s, n) = (cfg.vision.image_size, cfg.vision.image_size.pow(2));
    let all = g.f32("pixels");
    for i in 0..cfg.io.n_images {
        let frame = as_f32_image(&g.u8_image(&format!("frame.{i}")));
        let px = camera.pixels(&g.image(i)).unwrap();
        let mut off = 0;
        for c in 0..3 {
            let (mean, std) = ([0.485, 0.456, 0.406][c], [0.229, 0.224, 0.225][c]);
            for p in 0..n {
                let level = (px[c * n + p] * std + mean) * 255.0;
                let d = (level - frame[p * 3 + c]).abs();
                assert!(
                    d < 1.0 + 1e-3,
                    "camera {i}: pixel {p} channel {c}: {level} vs {}",
                    frame[p * 3 + c]
                );
                off += usize::from(d > 0.5);
            }
        }
        println!(
            "camera {i}: {off} of {} values one level off torch's",
            3 * n
        );
        assert!(off * 100 <= 3 * n, "camera {i}: {off} values differ");
        // At the model's size the resize is the identity: lerobot's pixels exactly.
        let frame_img = g.u8_image(&format!("frame.{i}"));
        let px = camera.pixels(&frame_img).unwrap();
        check(
            &format!("pixels, camera {i}"),
            &px,
            &all[i * 3 * n..(i + 1) * 3 * n],
            1e-6,
        );
        assert_eq!((frame_img.height, frame_img.width), (s, s));
    }
}

fn stages_match_lerobot(fx: &Fixture<Evo1Config>, backend: &str, tol: f32) {
    let Some(st) = Stages::open(backend, tol) else {
        return;
    };
    let g = &fx.g;
    let file = fx.gguf(GgmlType::F32);
    let cfg = Evo1Config::read(&file).unwrap();
    let (s, h, n) = (cfg.vision.image_size, cfg.lm.hidden, cfg.n_img_tokens());
    let cams = cfg.io.n_images;
    let all = g.f32("pixels");
    let px: Vec<Tensor> = (0..cams)
        .map(|i| tensor(vec![3, s, s], all[i * 3 * s * s..][..3 * s * s].to_vec()))
        .collect();
    let mut vision = st.graph("vision", &file, &cfg, graphs::vision);
    let want = g.f32("vision");
    let img_tokens = want[..cams * n * h].to_vec();
    st.check("image tokens", &vision.run_images(&px), &img_tokens);

    // The prefill's inputs as a request makes them, with lerobot's image tokens.
    let obs = observation(g, &cfg, false);
    let text = obs.tokens.clone().unwrap();
    // graphs for the instruction's bucket of rows, as a request compiles them
    let cfg = cfg.with_text_rows(text_rows(text.len(), cfg.io.tokenizer_max_length));
    let mut tokens: Vec<f32> = text.iter().map(|&t| t as f32).collect();
    tokens.resize(cfg.io.tokenizer_max_length, 0.0);
    let req = cfg
        .request_inputs(tokens, text.len(), &g.f32("state_norm"))
        .unwrap();
    let mut prefix = vec![(
        "img_tokens".to_owned(),
        tensor(vec![cams * n, h], img_tokens),
    )];
    prefix.extend(req.prefix);
    let valid = prefix.iter().find(|(n, _)| n == "valid").unwrap().1.clone();
    let mask: Vec<f32> = g.i64("attention_mask").iter().map(|&m| m as f32).collect();
    assert_eq!(
        valid.as_f32().unwrap()[..mask.len()],
        mask[..],
        "valid rows"
    );
    let refs: Vec<(&str, &Tensor)> = prefix.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut exe = st.build("features", &file, |gb| {
        Ok(vec![graphs::features(gb, &cfg)?])
    });
    let got = exe.run1(&refs[..refs.len() - 1]);
    // Rows lerobot masks (the absent view's) hold features nothing reads.
    let keep: Vec<bool> = mask.iter().map(|&m| m > 0.0).collect();
    let want = g.f32("lm_out");
    let (got, want) = (rows_where(&got, h, &keep), rows_where(&want, h, &keep));
    st.check("language model output", &got, &want);

    let kv = cache(st.graph("prefill", &file, &cfg, graphs::prefill).run(&refs));
    let denoise = st.graph("denoise", &file, &cfg, graphs::denoise);
    let io = &cfg.io;
    let x_t = tensor(vec![io.chunk_size, io.max_action_dim], g.f32("noise"));
    let time = cfg.time_input(0.0).unwrap();
    let inputs = [("x_t", &x_t), ("time_emb", &time), ("valid", &valid)];
    st.first_velocity(g, denoise, &inputs, &kv);
}

/// The stages, then the chunk from the normalised state lerobot fed the model.
fn matches_lerobot(fx: &Fixture<Evo1Config>, backend: &str) {
    stages_match_lerobot(fx, backend, TOL);
    let shape = |cfg: &Evo1Config| (cfg.io.chunk_size, cfg.io.action_dim);
    let what = "action chunk (world units)";
    fx.state_and_chunk_match(backend, ("state_norm", shape), what, TOL);
}

flow_golden_tests! { fixture, "Evo-1", matches_lerobot, bf16_weights_stay_close }

/// The cameras' own frames (resized by our kernel, a few values one level from torch's)
/// still give lerobot's chunk closely.
#[test]
fn raw_frames_give_a_close_chunk() {
    let fx = fixture();
    let mut m = fx.cpu();
    let obs = observation(&fx.g, m.config(), true);
    let chunk = m.predict(&obs).unwrap();
    let c = cosine(&chunk.actions, &fx.actions());
    println!("raw-frame chunk cosine {c:.7}");
    assert!(c >= 0.9999, "raw-frame chunk cosine {c}");
}

/// A text prompt is stripped, tokenized with the GGUF's tokenizer and gives lerobot's chunk.
#[test]
fn text_prompt_gives_lerobots_chunk() {
    let fx = fixture();
    fx.text_prompt_gives_the_chunk(fx.task(), "chunk from the text prompt", TOL);
}

/// Evo-1's released sizes with random weights (~3 GB, not committed):
/// `tools/golden/evo1.py --size full --out DIR`, then `VLA_EVO1_GOLDEN=DIR
/// VLA_TEST_BACKEND=cpu cargo test --release --test evo1_golden -- --ignored`.
#[test]
#[ignore = "needs VLA_EVO1_GOLDEN=<dir> made by tools/golden/evo1.py --size full"]
fn full_size_matches_lerobot() {
    let fx = fixture().at(env_dir("VLA_EVO1_GOLDEN"));
    matches_lerobot(&fx, &test_backend());
}

/// Instructions longer than any other fixture's (tools/golden/long_prompt.py), and one past
/// max_text_length that lerobot's tokenizer cuts (the same cut, and a warning in the reply), give
/// lerobot's ids and chunk, on cpu and vulkan: the prefill follows the prompt's length.
#[test]
fn long_instructions_give_lerobots_chunk() {
    fixture().long_prompts_match(|cfg| &cfg.prompt, TOL);
}

/// The bound is lerobot's `max_text_length` (1024) less the image blocks; token ids past it
/// are refused (a text prompt is cut there instead: `long_instructions_give_lerobots_chunk`).
#[test]
fn token_ids_past_the_bound_are_refused() {
    fixture()
        .past_the_bound_is_refused(|cfg| 1024 - cfg.prompt.before.len() - cfg.prompt.after.len());
}

/// vla.cpp's Evo-1 layout: the fixture's checkpoint written by an independent writer as
/// vla.cpp's converter writes the official checkpoint (tests/interop/vlacpp_evo1_writer.py:
/// numpy + gguf-py; fused `attn_qkv` / `attn_in`, padded statistics), loads as it is and,
/// sent what vla.cpp's Evo-1 client sends (lerobot's whole prompt as ids, every view's frame,
/// the absent view's a blank one, hidden by `attention_mask`), gives lerobot's chunk on every
/// backend. A prompt without image slots gets every view's block first (vla.cpp's rule).
#[test]
fn vlacpp_layout_gives_lerobots_chunk() {
    let fx = fixture();
    let g = &fx.g;
    let gguf = std::env::temp_dir().join(format!("vla-vlacpp-evo1-{}.gguf", std::process::id()));
    support::interop(
        "vlacpp_evo1_writer.py",
        &[fx.dir.as_os_str(), gguf.as_os_str()],
    );
    let cfg = Evo1Config::read(&fx.gguf(GgmlType::F32)).unwrap();
    let mut obs = observation(g, &cfg, false);
    let blank = Image {
        height: 84,
        width: 84,
        data: ImageData::RgbU8(vec![0; 84 * 84 * 3]),
    };
    obs.images.push(blank);
    let ids: Vec<i32> = g.i64("token_ids").iter().map(|&t| t as i32).collect();
    let mask: Vec<bool> = g.i64("attention_mask").iter().map(|&m| m == 1).collect();
    assert!(
        mask.iter().any(|&m| !m),
        "the fixture hides its absent view"
    );
    obs.tokens = Some(ids.clone());
    obs.token_mask = Some(mask);
    let open = |backend: &str| {
        let opts = RuntimeOptions {
            backend: backend.into(),
            ..Default::default()
        };
        vla::models::from_gguf(vla::gguf::GgufFile::open(&gguf).unwrap(), &opts).unwrap()
    };
    for backend in support::golden::backends() {
        if support::open(backend).is_none() {
            continue;
        }
        let chunk = open(backend).predict(&obs).unwrap();
        let what = format!("{backend}: vla.cpp-layout Evo-1: action chunk");
        check(&what, &chunk.actions, &fx.actions(), TOL);
    }
    // No image slots: every view's <img>, image tokens and </img> go first.
    let mut m = open(CPU);
    let image = g.usize("image_token_id") as i32;
    obs.tokens = Some(ids.iter().copied().filter(|&t| t != image).collect());
    obs.token_mask = None;
    let chunk = m.predict(&obs).unwrap().actions;
    assert!(chunk.iter().all(|x| x.is_finite()));
    assert_ne!(chunk, fx.actions());
    let _ = std::fs::remove_file(gguf);
}
