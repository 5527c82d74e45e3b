//! GR00T N1.7 against lerobot 0.6.1 itself (with transformers 5.5.4). The fixture
//! `tests/fixtures/groot17-tiny` is a lerobot checkpoint with random (re-randomized) weights
//! plus the base model folder, the Qwen3-VL backbone folder, lerobot's inputs, per-stage
//! intermediates and action chunk, made by `tools/golden/groot17.py` (rerun instructions
//! there). The tests convert it with `vla::convert::gr00t_n1_7` and compare the prompt's
//! token ids, the frame transform and pixels, the backbone's image tokens and deepstack
//! features, the LM's features, the VL context, the first velocity, and the whole chunk on
//! cpu, vulkan and ggml. Stages are fed lerobot's own inputs.

mod support;

use std::path::{Path, PathBuf};
use support::{check, cosine, fixture, open, qwen_patch_rows_to_chw, Golden};
use vla::convert::gr00t_n1_7 as convert;
use vla::gguf::{GgmlType, GgufFile};
use vla::graph::GraphBuilder;
use vla::models::common::text_rows;
use vla::models::flow::FlowArch;
use vla::models::gr00t_n1_7::{graphs, Gr00tN17, Gr00tN17Config};
use vla::policy::{Observation, Policy, RuntimeOptions};
use vla::preprocess::area::gr00t_frame;
use vla::Tensor;

const TOL: f32 = 1e-4;

fn dir() -> PathBuf {
    fixture("groot17-tiny")
}

/// The checkpoint in `dir` converted (a temporary file, mapped).
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

/// An I64 tensor of the fixture.
fn ints(g: &Golden, name: &str) -> Vec<i64> {
    g.st.i64(name).unwrap()
}

/// The instruction's ids: lerobot's prompt without the converted prompt around it.
fn instruction(g: &Golden, cfg: &Gr00tN17Config) -> Vec<i32> {
    let ids = ints(g, "token_ids");
    let (b, a) = (cfg.prompt.before.len(), cfg.prompt.after.len());
    ids[b..ids.len() - a].iter().map(|&t| t as i32).collect()
}

fn observation(g: &Golden, cfg: &Gr00tN17Config) -> Observation {
    Observation {
        images: vec![g.image(0)],
        state: g.f32("state"),
        prompt: None,
        tokens: Some(instruction(g, cfg)),
        noise: Some(g.f32("noise")),
    }
}

/// The model-sized frame lerobot's processor fed the tower, `[3, H, W]`.
fn golden_pixels(g: &Golden, cfg: &Gr00tN17Config) -> Vec<f32> {
    let v = &cfg.vision;
    let grid = v.grid();
    qwen_patch_rows_to_chw(&g.f32("pixels"), grid, v.patch_size, v.merge)
}

#[test]
fn converted_prompt_and_config_are_the_fixtures() {
    let file = converted(GgmlType::F32);
    let cfg = Gr00tN17Config::read(&file).unwrap();
    let g = Golden::load(&dir());
    let ids: Vec<u32> = ints(&g, "token_ids").iter().map(|&t| t as u32).collect();
    assert_eq!(cfg.prompt.before[..], ids[..cfg.prompt.before.len()]);
    let after = ids.len() - cfg.prompt.after.len();
    assert_eq!(cfg.prompt.after[..], ids[after..]);
    // lerobot's formalized instruction, through the tokenizer in the GGUF.
    let m = Gr00tN17::new(file, &RuntimeOptions::default()).unwrap();
    let task = g.meta["task"].as_str().unwrap();
    assert_eq!(
        m.prompt_text(task, &[]),
        g.meta["language"].as_str().unwrap()
    );
    let want: Vec<u32> = instruction(&g, &cfg).iter().map(|&t| t as u32).collect();
    assert_eq!(m.tokenize_prompt(task, &[]).unwrap(), want);
    let grid = g.ids("image_grid_thw");
    assert_eq!(
        (cfg.vision.image_h, cfg.vision.image_w),
        (grid[1] as usize * 16, grid[2] as usize * 16)
    );
    assert_eq!(
        (cfg.io.chunk_size, cfg.valid_horizon, cfg.io.num_steps),
        (
            g.usize("action_horizon"),
            g.usize("valid_horizon"),
            g.usize("num_steps")
        )
    );
    assert_eq!(cfg.default_embodiment, "libero_sim");
    assert_eq!(m.info().embodiment.as_deref(), Some("libero_sim (2)"));
}

#[test]
fn preprocessing_matches_opencv_and_torchvision() {
    let g = Golden::load(&dir());
    let cfg = Gr00tN17Config::read(&converted(GgmlType::F32)).unwrap();
    let img = g.image(0);
    let bytes = match &img.data {
        vla::policy::ImageData::RgbU8(b) => b.clone(),
        _ => unreachable!(),
    };
    let (frame, size) = gr00t_frame(&bytes, (img.height, img.width), 64, 0.95);
    let want = g.st.u8("frame.0").unwrap();
    assert_eq!(size, (64, 97));
    assert!(frame == want, "the frame transform differs from cv2's");
    let px = cfg.spec().camera.pixels(&img).unwrap();
    check("pixels", &px, &golden_pixels(&g, &cfg), 1e-6);
}

/// Vision, the backbone and the first denoising step on `backend`, each fed lerobot's
/// inputs.
fn stages_match_lerobot(backend: &str, dir: &Path, tol: f32) {
    let Some(be) = open(backend) else { return };
    let g = Golden::load(dir);
    let mut file = converted_from(dir, GgmlType::F32);
    let cfg = Gr00tN17Config::read(&file).unwrap();
    let active = cfg.select_weights(&mut file, None).unwrap();
    assert_eq!(active.as_deref(), Some("libero_sim (2)"));
    let t = |shape: Vec<usize>, v: Vec<f32>| Tensor::from_f32(shape, v).unwrap();
    let (ih, iw, h) = (cfg.vision.image_h, cfg.vision.image_w, cfg.lm.hidden);
    let taps = cfg.vision.deepstack.len();
    let graph = graphs::vision(GraphBuilder::new(&file), &cfg).unwrap();
    let mut vision = be.compile(&graph, &file).unwrap();
    let px = t(vec![3, ih, iw], golden_pixels(&g, &cfg));
    let out = vision.run(&[("image.0", &px)]).unwrap();
    let out = out[0].as_f32().unwrap();
    let n = cfg.n_img_tokens();
    let column = |v: &[f32], k: usize| -> Vec<f32> {
        (0..n)
            .flat_map(|r| v[r * (1 + taps) * h + k * h..][..h].to_vec())
            .collect()
    };
    let mut names = vec!["vision".to_owned()];
    names.extend((0..taps).map(|j| format!("deepstack.{j}")));
    for (k, name) in names.iter().enumerate() {
        let what = format!("{backend}: {name}");
        check(&what, &column(out, k), &g.f32(name), tol);
    }
    // lerobot's image tokens and deepstack features side by side, as the prefill reads them.
    let want: Vec<Vec<f32>> = names.iter().map(|n| g.f32(n)).collect();
    let img_tokens: Vec<f32> = (0..n)
        .flat_map(|r| {
            want.iter()
                .flat_map(move |w| w[r * h..(r + 1) * h].to_vec())
        })
        .collect();

    let ids = ints(&g, "token_ids");
    let real = ids.len();
    // graphs for the instruction's bucket of rows, as a request compiles them
    let cfg = cfg.with_text_rows(text_rows(
        real - cfg.prompt.before.len() - cfg.prompt.after.len(),
        cfg.io.tokenizer_max_length,
    ));
    let mut tokens: Vec<f32> = ids.iter().map(|&t| t as f32).collect();
    tokens.resize(cfg.seq_len(), 0.0);
    let layout = cfg.layout(real);
    let l = cfg.seq_len();
    let prefix = [
        ("img_tokens", t(vec![n, (1 + taps) * h], img_tokens)),
        ("tokens", t(vec![l], tokens)),
        ("valid", layout.valid_input().unwrap()),
    ];
    let refs: Vec<(&str, &Tensor)> = prefix.iter().map(|(n, t)| (*n, t)).collect();
    let mut gb = GraphBuilder::new(&file);
    let (lm, vl) = graphs::backbone(&mut gb, &cfg).unwrap();
    let mut backbone = be.compile(&gb.build(&[lm, vl]).unwrap(), &file).unwrap();
    let out = backbone.run(&refs).unwrap();
    for (k, name) in [(0, "lm_out"), (1, "vl")] {
        let got = &out[k].as_f32().unwrap()[..real * h];
        check(&format!("{backend}: {name}"), got, &g.f32(name), tol);
    }

    let graph = graphs::prefill(GraphBuilder::new(&file), &cfg).unwrap();
    let kv = be.compile(&graph, &file).unwrap().run(&refs).unwrap();
    let graph = graphs::denoise(GraphBuilder::new(&file), &cfg).unwrap();
    let mut denoise = be.compile(&graph, &file).unwrap();
    let x_t = t(
        vec![cfg.io.chunk_size, cfg.io.max_action_dim],
        g.f32("noise"),
    );
    let time = cfg.time_input(0.0).unwrap();
    let state = t(vec![1, cfg.io.max_state_dim], g.f32("state_padded"));
    let valid = layout.valid_input().unwrap();
    let names: Vec<String> = (0..kv.len() / 2)
        .flat_map(|i| [format!("kv.{i}.k"), format!("kv.{i}.v")])
        .collect();
    let mut inputs: Vec<(&str, &Tensor)> = vec![
        ("x_t", &x_t),
        ("time_emb", &time),
        ("valid", &valid),
        ("state", &state),
    ];
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
    let cfg = Gr00tN17Config::read(&file).unwrap();
    let mut m = Gr00tN17::new(file, &opts).unwrap();
    let obs = observation(&g, &cfg);
    // The normalised, clipped state lerobot fed the model.
    check(
        "normalised state",
        &m.normalised_state(&obs).unwrap(),
        &g.f32("state_padded"),
        1e-6,
    );
    let chunk = m.predict(&obs).unwrap();
    assert_eq!((chunk.chunk_size, chunk.action_dim), (16, 7));
    let what = format!("{backend}: action chunk (16 of 40 rows, world units)");
    check(&what, &chunk.actions, &g.f32("actions"), tol);
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
    support::act_dtypes_hold("GR00T N1.7", "vulkan", &g.f32("actions"), |act| {
        let opts = RuntimeOptions {
            backend: "vulkan".into(),
            act_dtype: act,
            ..Default::default()
        };
        let file = converted(GgmlType::F32);
        let cfg = Gr00tN17Config::read(&file)?;
        let mut m = Gr00tN17::new(file, &opts)?;
        Ok(m.predict(&observation(&g, &cfg))?.actions)
    });
}

#[cfg(feature = "ggml")]
#[test]
fn ggml_matches_lerobot() {
    stages_match_lerobot("ggml", &dir(), TOL);
    chunk_matches_lerobot("ggml", &dir(), TOL);
}

/// GR00T N1.7's released sizes with random weights (~13 GB, not committed):
/// `tools/golden/groot17.py --size full --out DIR`, then `VLA_GR00T17_GOLDEN=DIR
/// VLA_TEST_BACKEND=cpu cargo test --release --test gr00t17_golden -- --ignored`.
#[test]
#[ignore = "needs VLA_GR00T17_GOLDEN=<dir> made by tools/golden/groot17.py --size full"]
fn full_size_matches_lerobot() {
    let dir = std::env::var("VLA_GR00T17_GOLDEN").expect("VLA_GR00T17_GOLDEN=<dir>");
    let backend = std::env::var("VLA_TEST_BACKEND").unwrap_or_else(|_| "cpu".into());
    stages_match_lerobot(&backend, Path::new(&dir), TOL);
    chunk_matches_lerobot(&backend, Path::new(&dir), TOL);
}

/// bf16 matmul weights: the chunk stays close to lerobot's f32 one.
#[test]
fn bf16_weights_stay_close() {
    let g = Golden::load(&dir());
    let file = converted(GgmlType::BF16);
    let cfg = Gr00tN17Config::read(&file).unwrap();
    let mut m = Gr00tN17::new(file, &RuntimeOptions::default()).unwrap();
    let chunk = m.predict(&observation(&g, &cfg)).unwrap();
    let c = cosine(&chunk.actions, &g.f32("actions"));
    println!("bf16 chunk cosine {c:.6}");
    assert!(c >= 0.999, "bf16 chunk cosine {c}");
}

/// A text prompt is formalized, tokenized with the GGUF's tokenizer and gives lerobot's chunk.
#[test]
fn text_prompt_gives_lerobots_chunk() {
    let g = Golden::load(&dir());
    let file = converted(GgmlType::F32);
    let cfg = Gr00tN17Config::read(&file).unwrap();
    let mut m = Gr00tN17::new(file, &RuntimeOptions::default()).unwrap();
    let mut obs = observation(&g, &cfg);
    obs.tokens = None;
    obs.prompt = Some(g.meta["task"].as_str().unwrap().into());
    let chunk = m.predict(&obs).unwrap();
    check("text prompt: chunk", &chunk.actions, &g.f32("actions"), TOL);
}

/// `--embodiment` picks another slice of the embodiment MLPs; an id past the weights'
/// embodiments is an error.
#[test]
fn embodiment_selects_its_weights() {
    let g = Golden::load(&dir());
    let cfg = Gr00tN17Config::read(&converted(GgmlType::F32)).unwrap();
    let obs = observation(&g, &cfg);
    let run = |e: Option<&str>| -> vla::Result<Vec<f32>> {
        let opts = RuntimeOptions {
            embodiment: e.map(str::to_owned),
            ..Default::default()
        };
        Gr00tN17::new(converted(GgmlType::F32), &opts)?
            .predict(&obs)
            .map(|c| c.actions)
    };
    let default = run(None).unwrap();
    let other = run(Some("simpler_env_google")).unwrap();
    assert_ne!(default, other);
    let e = run(Some("new_embodiment")).unwrap_err().to_string();
    assert!(e.contains("id 10") && e.contains("4 embodiments"), "{e}");
}
