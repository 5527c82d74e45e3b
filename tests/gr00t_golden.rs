//! GR00T N1.5 against lerobot 0.4.4 itself. The fixture `tests/fixtures/groot-tiny` is a
//! lerobot checkpoint with random (re-randomized) weights plus lerobot's inputs, per-stage
//! intermediates and action chunk, made by `tools/golden/groot.py` (rerun instructions
//! there). The tests convert it with `vla::convert::gr00t` and compare the prompt's token ids,
//! the camera preprocessing, the vision tower + projector per camera, the LM's features, the
//! VL self-attention output, the first velocity, and the whole chunk on cpu, vulkan and ggml.
//! Stages are fed lerobot's own inputs, so a mismatch points at the stage that has it.

mod support;

use std::path::{Path, PathBuf};
use support::{check, cosine, fixture, open, Golden};
use vla::convert::gr00t as convert;
use vla::gguf::{GgmlType, GgufFile};
use vla::graph::GraphBuilder;
use vla::models::common::text_rows;
use vla::models::flow::FlowArch;
use vla::models::gr00t::{graphs, Gr00t, Gr00tConfig};
use vla::modules::vision::vision_tower;
use vla::policy::{Image, ImageData, Observation, Policy, RuntimeOptions};
use vla::Tensor;

const TOL: f32 = 1e-4;

fn dir() -> PathBuf {
    fixture("groot-tiny")
}

fn converted(dtype: GgmlType) -> GgufFile {
    converted_from(&dir(), dtype)
}

/// The checkpoint in `dir` converted, written to a temporary file and mapped (the full size
/// does not fit in memory twice).
fn converted_from(dir: &Path, dtype: GgmlType) -> GgufFile {
    let opts = convert::Options {
        dtype: Some(dtype),
        ..Default::default()
    };
    let c = convert::convert(dir, &opts, &mut |_, _, _| {}).unwrap();
    support::reopened(&c.writer)
}

/// lerobot's whole prompt, as ids.
fn golden_ids(g: &Golden) -> Vec<u32> {
    let all = g.ids("token_ids");
    all[..g.usize("n_tokens")]
        .iter()
        .map(|&t| t as u32)
        .collect()
}

/// The instruction's ids: lerobot's prompt without the converted prompt around it.
fn instruction(g: &Golden, cfg: &Gr00tConfig) -> Vec<i32> {
    let ids = golden_ids(g);
    let (b, a) = (cfg.prompt.before.len(), cfg.prompt.after.len());
    ids[b..ids.len() - a].iter().map(|&t| t as i32).collect()
}

/// The frames as lerobot's model saw them (already resized, back to bytes): a test of the
/// model apart from the resize.
fn model_sized_image(g: &Golden, i: usize, size: usize) -> Image {
    let px = g.f32(&format!("pixels.{i}"));
    let n = size * size;
    let rgb = (0..n)
        .flat_map(|p| (0..3).map(move |c| (p, c)))
        .map(|(p, c)| (px[c * n + p] * 127.5 + 127.5).round() as u8)
        .collect();
    Image {
        height: size,
        width: size,
        data: ImageData::RgbU8(rgb),
    }
}

fn observation(g: &Golden, cfg: &Gr00tConfig, resized: bool) -> Observation {
    let s = cfg.vision.image_size;
    let images = (0..g.usize("n_images"))
        .map(|i| match resized {
            true => model_sized_image(g, i, s),
            false => g.image(i),
        })
        .collect();
    Observation {
        images,
        state: g.f32("state"),
        prompt: None,
        tokens: Some(instruction(g, cfg)),
        noise: Some(g.f32("noise")),
    }
}

#[test]
fn converted_prompt_and_config_are_the_fixtures() {
    let file = converted(GgmlType::F32);
    let cfg = Gr00tConfig::read(&file).unwrap();
    let g = Golden::load(&dir());
    let ids = golden_ids(&g);
    assert_eq!(cfg.prompt.before[..], ids[..cfg.prompt.before.len()]);
    assert_eq!(
        cfg.prompt.after[..],
        ids[ids.len() - cfg.prompt.after.len()..]
    );
    // The instruction as the tokenizer shipped in the GGUF encodes lerobot's `str([task])`.
    let m = Gr00t::new(file, &RuntimeOptions::default()).unwrap();
    let task = "Pick up the red cube and put it in the bowl";
    let text = m.prompt_text(task, &[]);
    assert_eq!(text, format!("['{task}']"));
    let want: Vec<u32> = instruction(&g, &cfg).iter().map(|&t| t as u32).collect();
    assert_eq!(m.tokenize_prompt(task, &[]).unwrap(), want);
    assert_eq!(
        (cfg.io.n_images, cfg.io.chunk_size, cfg.io.num_steps),
        (
            g.usize("n_images"),
            g.usize("action_horizon"),
            g.usize("num_steps")
        )
    );
    assert_eq!(cfg.default_embodiment, "new_embodiment");
}

#[test]
fn preprocessing_matches_torchvision() {
    let g = Golden::load(&dir());
    let camera = Gr00tConfig::read(&converted(GgmlType::F32))
        .unwrap()
        .spec()
        .camera;
    for i in 0..g.usize("n_images") {
        let img = g.image(i);
        let px = camera.pixels(&img).unwrap();
        check(
            &format!("pixels, camera {i} ({}x{})", img.height, img.width),
            &px,
            &g.f32(&format!("pixels.{i}")),
            1e-6,
        );
    }
}

/// Vision, the backbone and the first denoising step on `backend`, each fed lerobot's
/// inputs.
fn stages_match_lerobot(backend: &str, dir: &Path, tol: f32) {
    let Some(be) = open(backend) else { return };
    let g = Golden::load(dir);
    let mut file = converted_from(dir, GgmlType::F32);
    let cfg = Gr00tConfig::read(&file).unwrap();
    // The default embodiment's slices of the embodiment MLPs, as the policy loads them.
    let active = cfg.select_weights(&mut file, None).unwrap();
    assert_eq!(active.as_deref(), Some("new_embodiment (31)"));
    let t = |shape: Vec<usize>, v: Vec<f32>| Tensor::from_f32(shape, v).unwrap();
    let s = cfg.vision.image_size;
    let mut vision = be
        .compile(
            &graphs::vision(GraphBuilder::new(&file), &cfg).unwrap(),
            &file,
        )
        .unwrap();
    let mut tower = {
        let mut gb = GraphBuilder::new(&file);
        let img = gb.input("image", &[3, s, s]);
        let out = vision_tower(&mut gb, img, &cfg.vision).unwrap();
        be.compile(&gb.build(&[out]).unwrap(), &file).unwrap()
    };
    let pixels: Vec<Tensor> = (0..cfg.io.n_images)
        .map(|i| t(vec![3, s, s], g.f32(&format!("pixels.{i}"))))
        .collect();
    let names: Vec<String> = (0..cfg.io.n_images).map(|i| format!("image.{i}")).collect();
    let inputs: Vec<(&str, &Tensor)> = names.iter().map(String::as_str).zip(&pixels).collect();
    let all = vision.run(&inputs).unwrap().remove(0).to_vec_f32().unwrap();
    let mut img_tokens = Vec::new();
    for (i, px) in pixels.iter().enumerate() {
        let out = tower.run(&[("image", px)]).unwrap();
        let what = format!("{backend}: vision tower, camera {i}");
        check(
            &what,
            out[0].as_f32().unwrap(),
            &g.f32(&format!("vit.{i}")),
            TOL,
        );
        let want = g.f32(&format!("vision.{i}"));
        let n = want.len();
        let what = format!("{backend}: vision + mm.fc, camera {i}");
        check(&what, &all[i * n..(i + 1) * n], &want, tol);
        img_tokens.extend(want);
    }

    // The backbone over lerobot's prompt ids, right-padded to the graph's length.
    let ids = golden_ids(&g);
    let n = ids.len();
    // graphs for the instruction's bucket of rows, as a request compiles them
    let cfg = cfg.with_text_rows(text_rows(
        n - cfg.prompt.before.len() - cfg.prompt.after.len(),
        cfg.io.tokenizer_max_length,
    ));
    let mut tokens: Vec<f32> = ids.iter().map(|&t| t as f32).collect();
    tokens.resize(cfg.seq_len(), 0.0);
    let layout = cfg.layout(n);
    let l = cfg.seq_len();
    let h = cfg.lm.hidden;
    let prefix = [
        (
            "img_tokens",
            t(vec![cfg.io.n_images * cfg.n_img_tokens(), h], img_tokens),
        ),
        ("tokens", t(vec![l], tokens)),
        ("positions", t(vec![l], layout.positions.clone())),
        ("valid", layout.valid_input().unwrap()),
    ];
    let refs: Vec<(&str, &Tensor)> = prefix.iter().map(|(n, t)| (*n, t)).collect();
    let mut gb = GraphBuilder::new(&file);
    let (lm, vl) = graphs::backbone(&mut gb, &cfg).unwrap();
    let mut backbone = be.compile(&gb.build(&[lm, vl]).unwrap(), &file).unwrap();
    let out = backbone.run(&refs).unwrap();
    for (k, name) in [(0, "lm_out"), (1, "vl")] {
        let got = &out[k].as_f32().unwrap()[..n * h];
        check(&format!("{backend}: {name}"), got, &g.f32(name), tol);
    }

    // The first velocity over our prefill (keys and values of the cross-attending blocks).
    let mut prefill = be
        .compile(
            &graphs::prefill(GraphBuilder::new(&file), &cfg).unwrap(),
            &file,
        )
        .unwrap();
    let kv = prefill.run(&refs).unwrap();
    let mut denoise = be
        .compile(
            &graphs::denoise(GraphBuilder::new(&file), &cfg).unwrap(),
            &file,
        )
        .unwrap();
    let x_t = t(
        vec![cfg.io.chunk_size, cfg.io.max_action_dim],
        g.f32("noise"),
    );
    let time = cfg.time_input(0.0).unwrap();
    let mut state = g.f32("state_norm");
    state.resize(cfg.io.max_state_dim, 0.0);
    let state = t(vec![1, cfg.io.max_state_dim], state);
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

fn chunk_matches_lerobot(backend: &str, dir: &Path, resized: bool, tol: f32) {
    if backend != "cpu" && open(backend).is_none() {
        return;
    }
    let g = Golden::load(dir);
    let opts = RuntimeOptions {
        backend: backend.into(),
        ..Default::default()
    };
    let file = converted_from(dir, GgmlType::F32);
    let cfg = Gr00tConfig::read(&file).unwrap();
    let mut m = Gr00t::new(file, &opts).unwrap();
    let chunk = m.predict(&observation(&g, &cfg, resized)).unwrap();
    let what = format!(
        "{backend}: action chunk (frames {})",
        if resized {
            "at model size"
        } else {
            "as captured"
        }
    );
    check(&what, &chunk.actions, &g.f32("actions"), tol);
}

#[test]
fn cpu_matches_lerobot() {
    stages_match_lerobot("cpu", &dir(), TOL);
    chunk_matches_lerobot("cpu", &dir(), true, TOL);
    chunk_matches_lerobot("cpu", &dir(), false, TOL);
}

#[test]
fn vulkan_matches_lerobot() {
    stages_match_lerobot("vulkan", &dir(), TOL);
    chunk_matches_lerobot("vulkan", &dir(), false, TOL);
}

/// 16-bit activations keep the chunk (cosine to the f32 chunk, README table).
#[test]
fn vulkan_16bit_activations_keep_the_chunk() {
    let g = Golden::load(&dir());
    support::act_dtypes_hold("GR00T N1.5", "vulkan", &g.f32("actions"), |act| {
        let opts = RuntimeOptions {
            backend: "vulkan".into(),
            act_dtype: act,
            ..Default::default()
        };
        let file = converted(GgmlType::F32);
        let cfg = Gr00tConfig::read(&file)?;
        let mut m = Gr00t::new(file, &opts)?;
        Ok(m.predict(&observation(&g, &cfg, false))?.actions)
    });
}

#[cfg(feature = "ggml")]
#[test]
fn ggml_matches_lerobot() {
    stages_match_lerobot("ggml", &dir(), TOL);
    chunk_matches_lerobot("ggml", &dir(), false, TOL);
}

/// GR00T-N1.5-3B's real sizes with random weights (~9.6 GB, not committed):
/// `tools/golden/groot.py --size full --out DIR`, then
/// `VLA_GR00T_GOLDEN=DIR VLA_TEST_BACKEND=cpu cargo test --release --test gr00t_golden -- --ignored`.
#[test]
#[ignore = "needs VLA_GR00T_GOLDEN=<dir> made by tools/golden/groot.py --size full"]
fn full_size_matches_lerobot() {
    let dir = PathBuf::from(std::env::var("VLA_GR00T_GOLDEN").expect("VLA_GR00T_GOLDEN=<dir>"));
    let backend = std::env::var("VLA_TEST_BACKEND").unwrap_or_else(|_| "cpu".into());
    stages_match_lerobot(&backend, &dir, TOL);
    chunk_matches_lerobot(&backend, &dir, false, TOL);
}

/// bf16 matmul weights: the chunk stays close to lerobot's f32 one.
#[test]
fn bf16_weights_stay_close() {
    let g = Golden::load(&dir());
    let file = converted(GgmlType::BF16);
    let cfg = Gr00tConfig::read(&file).unwrap();
    let mut m = Gr00t::new(file, &RuntimeOptions::default()).unwrap();
    let chunk = m.predict(&observation(&g, &cfg, false)).unwrap();
    let c = cosine(&chunk.actions, &g.f32("actions"));
    assert!(c >= 0.999, "bf16 chunk cosine {c}");
}

/// A text prompt goes through the Eagle tokenizer in the GGUF and gives lerobot's chunk.
#[test]
fn text_prompt_gives_lerobots_chunk() {
    let g = Golden::load(&dir());
    let file = converted(GgmlType::F32);
    let cfg = Gr00tConfig::read(&file).unwrap();
    let mut m = Gr00t::new(file, &RuntimeOptions::default()).unwrap();
    let mut obs = observation(&g, &cfg, false);
    obs.tokens = None;
    obs.prompt = Some("Pick up the red cube and put it in the bowl".into());
    let chunk = m.predict(&obs).unwrap();
    check(
        "text prompt: action chunk",
        &chunk.actions,
        &g.f32("actions"),
        TOL,
    );
}

/// `--embodiment` picks another slice of the embodiment MLPs (another chunk), by tag or id;
/// an unknown tag is an error naming the known ones; the backend holds one slice.
#[test]
fn embodiment_selects_its_weights() {
    let g = Golden::load(&dir());
    let file = converted(GgmlType::F32);
    let cfg = Gr00tConfig::read(&file).unwrap();
    let full: u64 = file.tensors().iter().map(|t| t.n_elements()).sum();
    let obs = observation(&g, &cfg, false);
    let run = |e: Option<&str>| -> vla::Result<(Vec<f32>, String, u64)> {
        let opts = RuntimeOptions {
            embodiment: e.map(str::to_owned),
            ..Default::default()
        };
        let mut m = Gr00t::new(converted(GgmlType::F32), &opts)?;
        let info = m.info().clone();
        Ok((
            m.predict(&obs)?.actions,
            info.embodiment.unwrap(),
            info.param_count,
        ))
    };
    let (default, tag, params) = run(None).unwrap();
    assert_eq!(tag, "new_embodiment (31)");
    let (so100, tag, _) = run(Some("so100")).unwrap();
    assert_eq!(tag, "so100 (2)");
    assert_eq!(run(Some("2")).unwrap().0, so100);
    assert_ne!(so100, default);
    // 32 embodiments in the file, one loaded: 31/32 of the indexed weights are not counted.
    let indexed: u64 = file
        .tensors()
        .iter()
        .filter(|t| t.name.ends_with(".W") || t.name.ends_with(".b"))
        .map(|t| t.n_elements())
        .sum();
    assert_eq!(params, full - indexed + indexed / 32);
    let e = run(Some("franka")).unwrap_err().to_string();
    assert!(
        e.contains("franka") && e.contains("so100 (2)") && e.contains("gr1 (24)"),
        "{e}"
    );
    assert!(run(Some("32")).is_err());
}

/// Instructions longer than any other fixture's (tools/golden/long_prompt.py) give
/// lerobot's ids and chunk, on cpu and vulkan: the prefill follows the prompt's length.
#[test]
fn long_instructions_give_lerobots_chunk() {
    let g = Golden::load(&dir());
    let file = converted(GgmlType::F32);
    let cfg = Gr00tConfig::read(&file).unwrap();
    let obs = observation(&g, &cfg, false);
    support::long_prompt::long_prompts_match(
        &dir(),
        |opts| Gr00t::new(converted(GgmlType::F32), opts).unwrap(),
        &obs,
        |cfg| &cfg.prompt,
        TOL,
    );
}

/// An instruction past the bound (`tokenizer_max_length`: what the graphs' longest sequence
/// leaves; the reference has none) is refused with the bound named, not cut.
#[test]
fn instruction_past_the_bound_is_refused() {
    let g = Golden::load(&dir());
    let file = converted(GgmlType::F32);
    let cfg = Gr00tConfig::read(&file).unwrap();
    let max = cfg.io.tokenizer_max_length;
    assert_eq!(
        max,
        cfg.prompt.text_bound(vla::config::limits::MAX_SEQUENCE)
    );
    let mut m = Gr00t::new(file, &RuntimeOptions::default()).unwrap();
    support::long_prompt::past_the_bound_is_refused(&mut m, &observation(&g, &cfg, false), max);
}
