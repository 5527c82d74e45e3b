//! Evo-1 against lerobot 0.6.1 itself (transformers 5.5.4). The fixture
//! `tests/fixtures/evo1-tiny` is a lerobot checkpoint with random (re-randomized) weights
//! plus the InternVL3 config folder (config, tokenizer), lerobot's inputs, per-stage
//! intermediates and chunk, made by `tools/golden/evo1.py` (rerun instructions there): three
//! cameras of four views (one absent), frames of other sizes than the model's. The tests
//! convert it with `vla::convert::evo1` and compare the prompt's ids, the resized frames, the
//! image tokens, the language model's output, the first velocity and the chunk on cpu,
//! vulkan and ggml.

mod support;

use std::path::{Path, PathBuf};
use support::{check, cosine, fixture, open, Golden};
use vla::convert::evo1 as convert;
use vla::gguf::{GgmlType, GgufFile};
use vla::graph::GraphBuilder;
use vla::models::common::text_rows;
use vla::models::evo1::{graphs, Evo1, Evo1Config};
use vla::models::flow::FlowArch;
use vla::policy::{Image, ImageData, Observation, Policy, RuntimeOptions};
use vla::Tensor;

const TOL: f32 = 1e-4;

fn dir() -> PathBuf {
    fixture("evo1-tiny")
}

fn converted_from(dir: &Path, dtype: GgmlType) -> GgufFile {
    let opts = convert::Options {
        dtype: Some(dtype),
        ..Default::default()
    };
    let c = convert::convert(dir, &opts, &mut |_, _, _| {}).unwrap();
    support::reopened(&c.writer)
}

fn converted(dtype: GgmlType) -> GgufFile {
    converted_from(&dir(), dtype)
}

fn ints(g: &Golden, name: &str) -> Vec<i64> {
    g.st.i64(name).unwrap()
}

/// The instruction's ids: lerobot's prompt after the converted image blocks.
fn text_ids(g: &Golden, cfg: &Evo1Config) -> Vec<i32> {
    let ids = ints(g, "token_ids");
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
    let file = converted(GgmlType::F32);
    let cfg = Evo1Config::read(&file).unwrap();
    let g = Golden::load(&dir());
    let ids: Vec<u32> = ints(&g, "token_ids").iter().map(|&t| t as u32).collect();
    assert_eq!(cfg.prompt.before[..], ids[..cfg.prompt.before.len()]);
    let m = Evo1::new(file, &RuntimeOptions::default()).unwrap();
    let task = g.meta["task"].as_str().unwrap();
    let want: Vec<u32> = text_ids(&g, &cfg).iter().map(|&t| t as u32).collect();
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

fn stages_match_lerobot(backend: &str, dir: &Path, tol: f32) {
    let Some(be) = open(backend) else { return };
    let g = Golden::load(dir);
    let file = converted_from(dir, GgmlType::F32);
    let cfg = Evo1Config::read(&file).unwrap();
    let t = |shape: Vec<usize>, v: Vec<f32>| Tensor::from_f32(shape, v).unwrap();
    let (s, h, n) = (cfg.vision.image_size, cfg.lm.hidden, cfg.n_img_tokens());
    let cams = cfg.io.n_images;
    let graph = graphs::vision(GraphBuilder::new(&file), &cfg).unwrap();
    let mut vision = be.compile(&graph, &file).unwrap();
    let all = g.f32("pixels");
    let px: Vec<Tensor> = (0..cams)
        .map(|i| {
            t(
                vec![3, s, s],
                all[i * 3 * s * s..(i + 1) * 3 * s * s].to_vec(),
            )
        })
        .collect();
    let names: Vec<String> = (0..cams).map(|i| format!("image.{i}")).collect();
    let inputs: Vec<(&str, &Tensor)> = names.iter().map(String::as_str).zip(&px).collect();
    let out = vision.run(&inputs).unwrap();
    let want = g.f32("vision");
    check(
        &format!("{backend}: image tokens"),
        out[0].as_f32().unwrap(),
        &want[..cams * n * h],
        tol,
    );

    // The prefill's inputs as a request makes them, with lerobot's image tokens.
    let obs = observation(&g, &cfg, false);
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
        t(vec![cams * n, h], want[..cams * n * h].to_vec()),
    )];
    prefix.extend(req.prefix);
    let valid = prefix.iter().find(|(n, _)| n == "valid").unwrap().1.clone();
    let mask: Vec<f32> = ints(&g, "attention_mask")
        .iter()
        .map(|&m| m as f32)
        .collect();
    assert_eq!(
        valid.as_f32().unwrap()[..mask.len()],
        mask[..],
        "valid rows"
    );
    let refs: Vec<(&str, &Tensor)> = prefix.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut gb = GraphBuilder::new(&file);
    let lm = graphs::features(&mut gb, &cfg).unwrap();
    let mut exe = be.compile(&gb.build(&[lm]).unwrap(), &file).unwrap();
    let out = exe.run(&refs[..refs.len() - 1]).unwrap();
    // Rows lerobot masks (the absent view's) hold features nothing reads.
    let got = out[0].as_f32().unwrap();
    let keep = |v: &[f32]| -> Vec<f32> {
        (0..mask.len())
            .filter(|&r| mask[r] > 0.0)
            .flat_map(|r| v[r * h..(r + 1) * h].to_vec())
            .collect()
    };
    check(
        &format!("{backend}: language model output"),
        &keep(got),
        &keep(&g.f32("lm_out")),
        tol,
    );

    let graph = graphs::prefill(GraphBuilder::new(&file), &cfg).unwrap();
    let kv = be.compile(&graph, &file).unwrap().run(&refs).unwrap();
    let graph = graphs::denoise(GraphBuilder::new(&file), &cfg).unwrap();
    let mut denoise = be.compile(&graph, &file).unwrap();
    let io = &cfg.io;
    let x_t = t(vec![io.chunk_size, io.max_action_dim], g.f32("noise"));
    let time = cfg.time_input(0.0).unwrap();
    let names: Vec<String> = (0..kv.len() / 2)
        .flat_map(|i| [format!("kv.{i}.k"), format!("kv.{i}.v")])
        .collect();
    let mut inputs: Vec<(&str, &Tensor)> =
        vec![("x_t", &x_t), ("time_emb", &time), ("valid", &valid)];
    inputs.extend(names.iter().map(String::as_str).zip(kv.iter()));
    let out = denoise.run(&inputs).unwrap();
    let what = format!("{backend}: first velocity");
    check(&what, out[0].as_f32().unwrap(), &g.f32("velocity.0"), tol);
}

fn chunk_matches_lerobot(backend: &str, dir: &Path, tol: f32) {
    if backend != "cpu" && open(backend).is_none() {
        return;
    }
    let g = Golden::load(dir);
    let opts = RuntimeOptions {
        backend: backend.into(),
        ..Default::default()
    };
    let file = converted_from(dir, GgmlType::F32);
    let cfg = Evo1Config::read(&file).unwrap();
    let mut m = Evo1::new(file, &opts).unwrap();
    let obs = observation(&g, &cfg, false);
    let state = m.normalised_state(&obs).unwrap();
    check("normalised state", &state, &g.f32("state_norm"), 1e-6);
    let chunk = m.predict(&obs).unwrap();
    assert_eq!(
        (chunk.chunk_size, chunk.action_dim),
        (cfg.io.chunk_size, cfg.io.action_dim)
    );
    check(
        &format!("{backend}: action chunk (world units)"),
        &chunk.actions,
        &g.f32("actions"),
        tol,
    );
}

#[test]
fn cpu_matches_lerobot() {
    stages_match_lerobot("cpu", &dir(), TOL);
    chunk_matches_lerobot("cpu", &dir(), TOL);
}

#[test]
fn vulkan_matches_lerobot() {
    stages_match_lerobot("vulkan", &dir(), TOL);
    chunk_matches_lerobot("vulkan", &dir(), TOL);
}

/// 16-bit activations keep the chunk (cosine to the f32 chunk, README table).
#[test]
fn vulkan_16bit_activations_keep_the_chunk() {
    let g = Golden::load(&dir());
    support::act_dtypes_hold("Evo-1", "vulkan", &g.f32("actions"), |act| {
        let opts = RuntimeOptions {
            backend: "vulkan".into(),
            act_dtype: act,
            ..Default::default()
        };
        let file = converted(GgmlType::F32);
        let cfg = Evo1Config::read(&file)?;
        let mut m = Evo1::new(file, &opts)?;
        Ok(m.predict(&observation(&g, &cfg, false))?.actions)
    });
}

#[cfg(feature = "ggml")]
#[test]
fn ggml_matches_lerobot() {
    stages_match_lerobot("ggml", &dir(), TOL);
    chunk_matches_lerobot("ggml", &dir(), TOL);
}

/// The cameras' own frames (resized by our kernel, a few values one level from torch's)
/// still give lerobot's chunk closely.
#[test]
fn raw_frames_give_a_close_chunk() {
    let g = Golden::load(&dir());
    let file = converted(GgmlType::F32);
    let cfg = Evo1Config::read(&file).unwrap();
    let mut m = Evo1::new(file, &RuntimeOptions::default()).unwrap();
    let chunk = m.predict(&observation(&g, &cfg, true)).unwrap();
    let c = cosine(&chunk.actions, &g.f32("actions"));
    println!("raw-frame chunk cosine {c:.7}");
    assert!(c >= 0.9999, "raw-frame chunk cosine {c}");
}

/// bf16 matmul weights: the chunk stays close to lerobot's f32 one.
#[test]
fn bf16_weights_stay_close() {
    let g = Golden::load(&dir());
    let file = converted(GgmlType::BF16);
    let cfg = Evo1Config::read(&file).unwrap();
    let mut m = Evo1::new(file, &RuntimeOptions::default()).unwrap();
    let chunk = m.predict(&observation(&g, &cfg, false)).unwrap();
    let c = cosine(&chunk.actions, &g.f32("actions"));
    println!("bf16 chunk cosine {c:.6}");
    assert!(c >= 0.999, "bf16 chunk cosine {c}");
}

/// A text prompt is stripped, tokenized with the GGUF's tokenizer and gives lerobot's chunk.
#[test]
fn text_prompt_gives_lerobots_chunk() {
    let g = Golden::load(&dir());
    let file = converted(GgmlType::F32);
    let cfg = Evo1Config::read(&file).unwrap();
    let mut m = Evo1::new(file, &RuntimeOptions::default()).unwrap();
    let mut obs = observation(&g, &cfg, false);
    obs.tokens = None;
    obs.prompt = Some(g.meta["task"].as_str().unwrap().to_owned());
    let chunk = m.predict(&obs).unwrap();
    check(
        "chunk from the text prompt",
        &chunk.actions,
        &g.f32("actions"),
        TOL,
    );
}

/// Evo-1's released sizes with random weights (~3 GB, not committed):
/// `tools/golden/evo1.py --size full --out DIR`, then `VLA_EVO1_GOLDEN=DIR
/// VLA_TEST_BACKEND=cpu cargo test --release --test evo1_golden -- --ignored`.
#[test]
#[ignore = "needs VLA_EVO1_GOLDEN=<dir> made by tools/golden/evo1.py --size full"]
fn full_size_matches_lerobot() {
    let dir = std::env::var("VLA_EVO1_GOLDEN").expect("VLA_EVO1_GOLDEN=<dir>");
    let backend = std::env::var("VLA_TEST_BACKEND").unwrap_or_else(|_| "cpu".into());
    stages_match_lerobot(&backend, Path::new(&dir), TOL);
    chunk_matches_lerobot(&backend, Path::new(&dir), TOL);
}

/// Instructions longer than any other fixture's (tools/golden/long_prompt.py), and one past
/// max_text_length that lerobot's tokenizer cuts (the same cut, and a warning in the reply), give
/// lerobot's ids and chunk, on cpu and vulkan: the prefill follows the prompt's length.
#[test]
fn long_instructions_give_lerobots_chunk() {
    let g = Golden::load(&dir());
    let file = converted(GgmlType::F32);
    let cfg = Evo1Config::read(&file).unwrap();
    let obs = observation(&g, &cfg, false);
    support::long_prompt::long_prompts_match(
        &dir(),
        |opts| Evo1::new(converted(GgmlType::F32), opts).unwrap(),
        &obs,
        |cfg| &cfg.prompt,
        TOL,
    );
}

/// The bound is lerobot's `max_text_length` (1024) less the image blocks; token ids past it
/// are refused (a text prompt is cut there instead: `long_instructions_give_lerobots_chunk`).
#[test]
fn token_ids_past_the_bound_are_refused() {
    let g = Golden::load(&dir());
    let file = converted(GgmlType::F32);
    let cfg = Evo1Config::read(&file).unwrap();
    let max = cfg.io.tokenizer_max_length;
    assert_eq!(max, 1024 - cfg.prompt.before.len() - cfg.prompt.after.len());
    let mut m = Evo1::new(file, &RuntimeOptions::default()).unwrap();
    let obs = observation(&g, &cfg, false);
    support::long_prompt::past_the_bound_is_refused(&mut m, &obs, max);
}
