//! VLA-JEPA against lerobot 0.6.1 itself (transformers 5.5.4). The fixture
//! `tests/fixtures/vla-jepa-tiny` is a lerobot checkpoint with random (re-randomized) weights
//! plus the Qwen3-VL and V-JEPA 2 config folders, lerobot's inputs, per-stage intermediates
//! and chunk, made by `tools/golden/vla_jepa.py` (rerun instructions there). The tests convert
//! it with `vla::convert::vla_jepa` and compare the prompt's ids, the pixels (area step, float
//! bicubic), the image tokens and deepstack features, the embodied tokens' hidden states, the
//! first velocity and the chunk (clipped, gripper snapped, unnormalised, binarised) on cpu,
//! vulkan and ggml.

#[macro_use]
mod support;

use std::path::Path;
use support::golden::{cache, env_dir, json_rows, tensor, test_backend, Fixture, Stages};
use support::golden::{instruction, prompt_is_the_references};
use support::{check, qwen_patch_rows_to_chw, Golden};
use vla::config::limits::MAX_SEQUENCE;
use vla::gguf::GgmlType;
use vla::models::common::text_rows;
use vla::models::flow::FlowArch;
use vla::models::vla_jepa::{graphs, VlaJepa, VlaJepaConfig};
use vla::policy::{Observation, RuntimeOptions};
use vla::Tensor;

const TOL: f32 = 1e-4;

fn fixture() -> Fixture<VlaJepaConfig> {
    let dir = support::fixture("vla-jepa-tiny");
    Fixture::new(dir, converter!(vla::convert::vla_jepa), observation)
}

fn observation(g: &Golden, cfg: &VlaJepaConfig) -> Observation {
    Observation {
        images: vec![g.image(0), g.image(1)],
        state: g.f32("state"),
        prompt: None,
        tokens: Some(instruction(&g.i64("token_ids"), &cfg.prompt)),
        noise: Some(g.f32("noise")),
        token_mask: None,
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
    let fx = fixture();
    let file = fx.gguf(GgmlType::F32);
    let cfg = VlaJepaConfig::read(&file).unwrap();
    let g = &fx.g;
    // The text segment's ids: lerobot's prompt without the converted ids around it.
    let m = VlaJepa::new(file, &RuntimeOptions::default()).unwrap();
    prompt_is_the_references(&m, &cfg.prompt, &g.i64("token_ids"), fx.task());
    let camera = cfg.spec().camera;
    for i in 0..2 {
        let px = camera.pixels(&g.image(i)).unwrap();
        let what = format!("pixels, camera {i}");
        check(&what, &px, &golden_pixels(g, &cfg, i), 1e-5);
    }
}

fn stages_match_lerobot(fx: &Fixture<VlaJepaConfig>, backend: &str, tol: f32) {
    let Some(st) = Stages::open(backend, tol) else {
        return;
    };
    let g = &fx.g;
    let file = fx.gguf(GgmlType::F32);
    let cfg = VlaJepaConfig::read(&file).unwrap();
    let (ih, iw, h) = (cfg.vision.image_h, cfg.vision.image_w, cfg.lm.hidden);
    let (n, taps) = (2 * cfg.n_img_tokens(), cfg.vision.deepstack.len());
    let px: Vec<Tensor> = (0..2)
        .map(|i| tensor(vec![3, ih, iw], golden_pixels(g, &cfg, i)))
        .collect();
    let vision = st.graph("vision", &file, &cfg, graphs::vision);
    let img_tokens = st.deepstack_vision(g, vision, &px, [n, taps, h]);

    // The prefill's inputs as a request makes them, with lerobot's image tokens.
    let obs = observation(g, &cfg);
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
        tensor(vec![n, (1 + taps) * h], img_tokens),
    )];
    prefix.extend(req.prefix);
    let refs: Vec<(&str, &Tensor)> = prefix.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut exe = st.build("conditioning", &file, |gb| {
        Ok(vec![graphs::conditioning(gb, &cfg)?])
    });
    let embodied = exe.run1(&refs);
    st.check("embodied hidden states", &embodied, &g.f32("embodied"));

    let kv = cache(st.graph("prefill", &file, &cfg, graphs::prefill).run(&refs));
    let denoise = st.graph("denoise", &file, &cfg, graphs::denoise);
    let io = &cfg.io;
    let x_t = tensor(vec![io.chunk_size, io.action_dim], g.f32("noise"));
    let time = cfg.time_input(0.0).unwrap();
    let state = tensor(vec![1, io.state_dim], g.f32("state_norm"));
    let valid = prefix.iter().find(|(n, _)| n == "valid").unwrap().1.clone();
    let inputs = [
        ("x_t", &x_t),
        ("time_emb", &time),
        ("valid", &valid),
        ("state", &state),
    ];
    st.first_velocity(g, denoise, &inputs, &kv);
}

/// The stages, then the chunk from the normalised state lerobot fed the model.
fn matches_lerobot(fx: &Fixture<VlaJepaConfig>, backend: &str) {
    stages_match_lerobot(fx, backend, TOL);
    let shape = |cfg: &VlaJepaConfig| (cfg.io.chunk_size, cfg.io.action_dim);
    let what = "action chunk (world units, gripper binarised)";
    fx.state_and_chunk_match(backend, ("state_norm", shape), what, TOL);
}

flow_golden_tests! { fixture, "VLA-JEPA", matches_lerobot, bf16_weights_stay_close }

/// VLA-JEPA's released sizes with random weights (~11 GB, not committed):
/// `tools/golden/vla_jepa.py --size full --out DIR`, then `VLA_VLA_JEPA_GOLDEN=DIR
/// VLA_TEST_BACKEND=cpu cargo test --release --test vla_jepa_golden -- --ignored`.
#[test]
#[ignore = "needs VLA_VLA_JEPA_GOLDEN=<dir> made by tools/golden/vla_jepa.py --size full"]
fn full_size_matches_lerobot() {
    let fx = fixture().at(env_dir("VLA_VLA_JEPA_GOLDEN"));
    matches_lerobot(&fx, &test_backend());
}

/// A text prompt is put in the template, tokenized with the GGUF's tokenizer and gives
/// lerobot's chunk.
#[test]
fn text_prompt_gives_lerobots_chunk() {
    let fx = fixture();
    fx.text_prompt_gives_the_chunk(fx.task(), "text prompt: chunk", TOL);
}

/// Instructions longer than any other fixture's (tools/golden/long_prompt.py) give
/// lerobot's ids and chunk, on cpu and vulkan: the prefill follows the prompt's length.
#[test]
fn long_instructions_give_lerobots_chunk() {
    fixture().long_prompts_match(|cfg| &cfg.prompt, TOL);
}

/// An instruction past the bound (`tokenizer_max_length`: what the graphs' longest sequence
/// leaves; the reference has none) is refused with the bound named, not cut.
#[test]
fn instruction_past_the_bound_is_refused() {
    fixture().past_the_bound_is_refused(|cfg| cfg.prompt.text_bound(MAX_SEQUENCE));
}

/// Checkpoints whose settings differ from the fixture's (tools/golden/vla_jepa_variants.py: a
/// copy of the fixture with one setting changed, the edits recorded in variants.json) convert
/// and give lerobot's chunk: CLIP's image mean/std in the Qwen3-VL processor config, and an
/// embedding table with more rows than the backbone config's vocab_size (as lerobot saves a
/// checkpoint after growing the tokenizer).
#[test]
fn checkpoint_settings_are_honoured() {
    let fx = fixture();
    let text = std::fs::read_to_string(fx.dir.join("variants.json")).unwrap();
    let variants: serde_json::Value = serde_json::from_str(&text).unwrap();
    for (case, c) in variants["cases"].as_object().unwrap() {
        let tmp = tempfile::tempdir().unwrap();
        let copy = tmp.path().join("fixture");
        copy_dir(&fx.dir, &copy);
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
        let variant = fx.at(copy);
        let chunk = variant.chunk(&mut variant.cpu());
        check(
            &format!("{case}: chunk"),
            &chunk,
            &json_rows(&c["actions"]),
            TOL,
        );
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

/// vla.cpp's file of lerobot's model (`tests/fixtures/vla-jepa-tiny-hd128`: the released
/// head_dim 128, whose M-RoPE sections vla.cpp's loader fixes), written by an independent
/// writer as vla.cpp's converter writes it (tests/interop/vlacpp_vla_jepa_writer.py: numpy +
/// gguf-py), with the lerobot checkpoint folder given as `--statistics` (what vla.cpp's client
/// reads: the statistics, the post-processing steps, the area step), and lerobot's whole
/// prompt as ids (what vla.cpp's clients send: image slots, action and embodied tokens), gives
/// lerobot's chunk on every backend. Without the folder the load is refused, naming it; a
/// sequence without its embodied tokens is refused.
#[test]
fn vlacpp_layout_gives_lerobots_chunk() {
    let fx = Fixture::new(
        support::fixture("vla-jepa-tiny-hd128"),
        converter!(vla::convert::vla_jepa),
        observation,
    );
    let id = std::process::id();
    let gguf = std::env::temp_dir().join(format!("vla-vlacpp-vla-jepa-{id}.gguf"));
    support::interop(
        "vlacpp_vla_jepa_writer.py",
        &[fx.dir.as_os_str(), gguf.as_os_str()],
    );
    let cfg = fx.config();
    let mut obs = fx.observation(&cfg);
    let ids: Vec<i32> = fx.g.i64("token_ids").iter().map(|&t| t as i32).collect();
    obs.tokens = Some(ids.clone());
    let open = |backend: &str, stats: bool| {
        let opts = RuntimeOptions {
            backend: backend.into(),
            statistics: stats.then(|| fx.dir.clone()),
            ..Default::default()
        };
        vla::models::from_gguf(vla::gguf::GgufFile::open(&gguf).unwrap(), &opts)
    };
    let e = open("cpu", false).err().unwrap().to_string();
    assert!(e.contains("--statistics"), "{e}");
    for backend in support::golden::backends() {
        if support::open(backend).is_none() {
            continue;
        }
        let mut m = open(backend, true).unwrap();
        let chunk = m.predict(&obs).unwrap();
        let what = format!("{backend}: vla.cpp-layout VLA-JEPA: action chunk");
        check(&what, &chunk.actions, &fx.actions(), TOL);
    }
    let mut m = open("cpu", true).unwrap();
    let embodied = cfg.embodied_token as i32;
    obs.tokens = Some(ids.iter().copied().filter(|&t| t != embodied).collect());
    let e = m.predict(&obs).unwrap_err().to_string();
    assert!(e.contains("embodied tokens"), "{e}");
    std::fs::remove_file(&gguf).ok();
}
