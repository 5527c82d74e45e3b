//! VLA-JEPA against lerobot 0.6.1 itself (transformers 5.5.4). The fixture
//! `tests/fixtures/vla-jepa-tiny` is a lerobot checkpoint with random (re-randomized) weights
//! plus the Qwen3-VL and V-JEPA 2 config folders, lerobot's inputs, per-stage intermediates
//! and chunk, made by `tools/golden/vla_jepa.py` (rerun instructions there). The tests convert
//! it with `vla::convert::vla_jepa` and compare the prompt's ids, the pixels (area step, float
//! bicubic), the image tokens and deepstack features, the embodied tokens' hidden states, the
//! first velocity and the chunk (clipped, gripper snapped, unnormalised, binarised) on cpu,
//! vulkan and ggml.

mod support;

use std::path::{Path, PathBuf};
use support::{check, cosine, fixture, open, qwen_patch_rows_to_chw, Golden};
use vla::convert::vla_jepa as convert;
use vla::gguf::{GgmlType, GgufFile};
use vla::graph::GraphBuilder;
use vla::models::common::text_rows;
use vla::models::flow::FlowArch;
use vla::models::vla_jepa::{graphs, VlaJepa, VlaJepaConfig};
use vla::policy::{Observation, Policy, RuntimeOptions};
use vla::Tensor;

const TOL: f32 = 1e-4;

fn dir() -> PathBuf {
    fixture("vla-jepa-tiny")
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

/// The text segment's ids: lerobot's prompt without the converted ids around it.
fn text_ids(g: &Golden, cfg: &VlaJepaConfig) -> Vec<i32> {
    let ids = ints(g, "token_ids");
    let (b, a) = (cfg.prompt.before.len(), cfg.prompt.after.len());
    ids[b..ids.len() - a].iter().map(|&t| t as i32).collect()
}

fn observation(g: &Golden, cfg: &VlaJepaConfig) -> Observation {
    Observation {
        images: vec![g.image(0), g.image(1)],
        state: g.f32("state"),
        prompt: None,
        tokens: Some(text_ids(g, cfg)),
        noise: Some(g.f32("noise")),
    }
}

/// Camera `i`'s frame as lerobot's processor fed the tower, `[3, H, W]`.
fn golden_pixels(g: &Golden, cfg: &VlaJepaConfig, i: usize) -> Vec<f32> {
    let v = &cfg.vision;
    let (rows, cols) = v.grid();
    let per = rows * cols * 3 * 2 * v.patch_size * v.patch_size;
    let all = g.f32("pixels");
    qwen_patch_rows_to_chw(
        &all[i * per..(i + 1) * per],
        (rows, cols),
        v.patch_size,
        v.merge,
    )
}

#[test]
fn converted_prompt_and_preprocessing_are_the_fixtures() {
    let file = converted(GgmlType::F32);
    let cfg = VlaJepaConfig::read(&file).unwrap();
    let g = Golden::load(&dir());
    let ids: Vec<u32> = ints(&g, "token_ids").iter().map(|&t| t as u32).collect();
    assert_eq!(cfg.prompt.before[..], ids[..cfg.prompt.before.len()]);
    let after = ids.len() - cfg.prompt.after.len();
    assert_eq!(cfg.prompt.after[..], ids[after..]);
    let m = VlaJepa::new(file, &RuntimeOptions::default()).unwrap();
    let task = g.meta["task"].as_str().unwrap();
    let want: Vec<u32> = text_ids(&g, &cfg).iter().map(|&t| t as u32).collect();
    assert_eq!(m.tokenize_prompt(task, &[]).unwrap(), want);
    let camera = cfg.spec().camera;
    for i in 0..2 {
        let px = camera.pixels(&g.image(i)).unwrap();
        let what = format!("pixels, camera {i}");
        check(&what, &px, &golden_pixels(&g, &cfg, i), 1e-5);
    }
}

fn stages_match_lerobot(backend: &str, dir: &Path, tol: f32) {
    let Some(be) = open(backend) else { return };
    let g = Golden::load(dir);
    let file = converted_from(dir, GgmlType::F32);
    let cfg = VlaJepaConfig::read(&file).unwrap();
    let t = |shape: Vec<usize>, v: Vec<f32>| Tensor::from_f32(shape, v).unwrap();
    let (ih, iw, h) = (cfg.vision.image_h, cfg.vision.image_w, cfg.lm.hidden);
    let taps = cfg.vision.deepstack.len();
    let graph = graphs::vision(GraphBuilder::new(&file), &cfg).unwrap();
    let mut vision = be.compile(&graph, &file).unwrap();
    let px: Vec<Tensor> = (0..2)
        .map(|i| t(vec![3, ih, iw], golden_pixels(&g, &cfg, i)))
        .collect();
    let out = vision
        .run(&[("image.0", &px[0]), ("image.1", &px[1])])
        .unwrap();
    let out = out[0].as_f32().unwrap();
    let n = 2 * cfg.n_img_tokens();
    let column = |k: usize| -> Vec<f32> {
        (0..n)
            .flat_map(|r| out[r * (1 + taps) * h + k * h..][..h].to_vec())
            .collect()
    };
    let mut names = vec!["vision".to_owned()];
    names.extend((0..taps).map(|j| format!("deepstack.{j}")));
    for (k, name) in names.iter().enumerate() {
        check(&format!("{backend}: {name}"), &column(k), &g.f32(name), tol);
    }
    let want: Vec<Vec<f32>> = names.iter().map(|n| g.f32(n)).collect();
    let img_tokens: Vec<f32> = (0..n)
        .flat_map(|r| {
            want.iter()
                .flat_map(move |w| w[r * h..(r + 1) * h].to_vec())
        })
        .collect();

    // The prefill's inputs as a request makes them, with lerobot's image tokens.
    let obs = observation(&g, &cfg);
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
        t(vec![n, (1 + taps) * h], img_tokens),
    )];
    prefix.extend(req.prefix);
    let refs: Vec<(&str, &Tensor)> = prefix.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut gb = GraphBuilder::new(&file);
    let cond = graphs::conditioning(&mut gb, &cfg).unwrap();
    let mut exe = be.compile(&gb.build(&[cond]).unwrap(), &file).unwrap();
    let out = exe.run(&refs).unwrap();
    let what = format!("{backend}: embodied hidden states");
    check(&what, out[0].as_f32().unwrap(), &g.f32("embodied"), tol);

    let graph = graphs::prefill(GraphBuilder::new(&file), &cfg).unwrap();
    let kv = be.compile(&graph, &file).unwrap().run(&refs).unwrap();
    let graph = graphs::denoise(GraphBuilder::new(&file), &cfg).unwrap();
    let mut denoise = be.compile(&graph, &file).unwrap();
    let io = &cfg.io;
    let x_t = t(vec![io.chunk_size, io.action_dim], g.f32("noise"));
    let time = cfg.time_input(0.0).unwrap();
    let state = t(vec![1, io.state_dim], g.f32("state_norm"));
    let valid = prefix.iter().find(|(n, _)| n == "valid").unwrap().1.clone();
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
    let cfg = VlaJepaConfig::read(&file).unwrap();
    let mut m = VlaJepa::new(file, &opts).unwrap();
    let obs = observation(&g, &cfg);
    let state = m.normalised_state(&obs).unwrap();
    check("normalised state", &state, &g.f32("state_norm"), 1e-6);
    let chunk = m.predict(&obs).unwrap();
    assert_eq!(
        (chunk.chunk_size, chunk.action_dim),
        (cfg.io.chunk_size, cfg.io.action_dim)
    );
    let what = format!("{backend}: action chunk (world units, gripper binarised)");
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
    support::act_dtypes_hold("VLA-JEPA", "vulkan", &g.f32("actions"), |act| {
        let opts = RuntimeOptions {
            backend: "vulkan".into(),
            act_dtype: act,
            ..Default::default()
        };
        let file = converted(GgmlType::F32);
        let cfg = VlaJepaConfig::read(&file)?;
        let mut m = VlaJepa::new(file, &opts)?;
        Ok(m.predict(&observation(&g, &cfg))?.actions)
    });
}

#[cfg(feature = "ggml")]
#[test]
fn ggml_matches_lerobot() {
    stages_match_lerobot("ggml", &dir(), TOL);
    chunk_matches_lerobot("ggml", &dir(), TOL);
}

/// VLA-JEPA's released sizes with random weights (~11 GB, not committed):
/// `tools/golden/vla_jepa.py --size full --out DIR`, then `VLA_VLA_JEPA_GOLDEN=DIR
/// VLA_TEST_BACKEND=cpu cargo test --release --test vla_jepa_golden -- --ignored`.
#[test]
#[ignore = "needs VLA_VLA_JEPA_GOLDEN=<dir> made by tools/golden/vla_jepa.py --size full"]
fn full_size_matches_lerobot() {
    let dir = std::env::var("VLA_VLA_JEPA_GOLDEN").expect("VLA_VLA_JEPA_GOLDEN=<dir>");
    let backend = std::env::var("VLA_TEST_BACKEND").unwrap_or_else(|_| "cpu".into());
    stages_match_lerobot(&backend, Path::new(&dir), TOL);
    chunk_matches_lerobot(&backend, Path::new(&dir), TOL);
}

/// bf16 matmul weights: the chunk stays close to lerobot's f32 one.
#[test]
fn bf16_weights_stay_close() {
    let g = Golden::load(&dir());
    let file = converted(GgmlType::BF16);
    let cfg = VlaJepaConfig::read(&file).unwrap();
    let mut m = VlaJepa::new(file, &RuntimeOptions::default()).unwrap();
    let chunk = m.predict(&observation(&g, &cfg)).unwrap();
    let c = cosine(&chunk.actions, &g.f32("actions"));
    println!("bf16 chunk cosine {c:.6}");
    assert!(c >= 0.999, "bf16 chunk cosine {c}");
}

/// A text prompt is put in the template, tokenized with the GGUF's tokenizer and gives
/// lerobot's chunk.
#[test]
fn text_prompt_gives_lerobots_chunk() {
    let g = Golden::load(&dir());
    let file = converted(GgmlType::F32);
    let cfg = VlaJepaConfig::read(&file).unwrap();
    let mut m = VlaJepa::new(file, &RuntimeOptions::default()).unwrap();
    let mut obs = observation(&g, &cfg);
    obs.tokens = None;
    obs.prompt = Some(g.meta["task"].as_str().unwrap().into());
    let chunk = m.predict(&obs).unwrap();
    check("text prompt: chunk", &chunk.actions, &g.f32("actions"), TOL);
}

/// Instructions longer than any other fixture's (tools/golden/long_prompt.py) give
/// lerobot's ids and chunk, on cpu and vulkan: the prefill follows the prompt's length.
#[test]
fn long_instructions_give_lerobots_chunk() {
    let g = Golden::load(&dir());
    let file = converted(GgmlType::F32);
    let cfg = VlaJepaConfig::read(&file).unwrap();
    let obs = observation(&g, &cfg);
    support::long_prompt::long_prompts_match(
        &dir(),
        |opts| VlaJepa::new(converted(GgmlType::F32), opts).unwrap(),
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
    let cfg = VlaJepaConfig::read(&file).unwrap();
    let max = cfg.io.tokenizer_max_length;
    assert_eq!(
        max,
        cfg.prompt.text_bound(vla::config::limits::MAX_SEQUENCE)
    );
    let mut m = VlaJepa::new(file, &RuntimeOptions::default()).unwrap();
    support::long_prompt::past_the_bound_is_refused(&mut m, &observation(&g, &cfg), max);
}

/// Checkpoints whose settings differ from the fixture's (tools/golden/vla_jepa_variants.py: a
/// copy of the fixture with one setting changed, the edits recorded in variants.json) convert
/// and give lerobot's chunk: CLIP's image mean/std in the Qwen3-VL processor config, and an
/// embedding table with more rows than the backbone config's vocab_size (as lerobot saves a
/// checkpoint after growing the tokenizer).
#[test]
fn checkpoint_settings_are_honoured() {
    let g = Golden::load(&dir());
    let text = std::fs::read_to_string(dir().join("variants.json")).unwrap();
    let variants: serde_json::Value = serde_json::from_str(&text).unwrap();
    for (case, c) in variants["cases"].as_object().unwrap() {
        let tmp = tempfile::tempdir().unwrap();
        let copy = tmp.path().join("fixture");
        copy_dir(&dir(), &copy);
        for e in variants["edits"][case].as_array().unwrap() {
            let path = copy.join(e[0].as_str().unwrap());
            let mut json: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let keys = e[1].as_array().unwrap();
            let mut node = &mut json;
            for k in keys {
                node = &mut node[k.as_str().unwrap()];
            }
            *node = e[2].clone();
            std::fs::write(&path, serde_json::to_string(&json).unwrap()).unwrap();
        }
        if let Some(rows) = variants["rows"].get(case) {
            let names: Vec<&str> = rows[0]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap())
                .collect();
            cut_rows(
                &copy.join("model.safetensors"),
                &names,
                rows[1].as_u64().unwrap() as usize,
            );
        }
        let file = converted_from(&copy, GgmlType::F32);
        let cfg = VlaJepaConfig::read(&file).unwrap();
        let mut m = VlaJepa::new(file, &RuntimeOptions::default()).unwrap();
        let chunk = m.predict(&observation(&g, &cfg)).unwrap();
        let want: Vec<f32> = c["actions"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r.as_array().unwrap().iter())
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        check(&format!("{case}: chunk"), &chunk.actions, &want, TOL);
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        match entry.file_type().unwrap().is_dir() {
            true => copy_dir(&entry.path(), &target),
            false => drop(std::fs::copy(entry.path(), target).unwrap()),
        }
    }
}

/// Keeps the first `rows` rows of the tensors `names` of a safetensors file.
fn cut_rows(path: &Path, names: &[&str], rows: usize) {
    use safetensors::tensor::TensorView;
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let tensors: Vec<(String, TensorView)> = st
        .tensors()
        .into_iter()
        .map(|(name, t)| {
            if !names.contains(&name.as_str()) {
                return (name, t);
            }
            let mut shape = t.shape().to_vec();
            let row_bytes = t.data().len() / shape[0];
            shape[0] = rows;
            let data = &t.data()[..rows * row_bytes];
            (name, TensorView::new(t.dtype(), shape, data).unwrap())
        })
        .collect();
    safetensors::serialize_to_file(tensors, None, path).unwrap();
}
