//! GR00T N1.5 against lerobot 0.4.4 itself. The fixture `tests/fixtures/groot-tiny` is a
//! lerobot checkpoint with random (re-randomized) weights plus lerobot's inputs, per-stage
//! intermediates and action chunk, made by `tools/golden/groot.py` (rerun instructions
//! there). The tests convert it with `vla::convert::gr00t` and compare the prompt's token ids,
//! the camera preprocessing, the vision tower + projector per camera, the LM's features, the
//! VL self-attention output, the first velocity, and the whole chunk on cpu, vulkan and ggml.
//! Stages are fed lerobot's own inputs, so a mismatch points at the stage that has it.

#[macro_use]
mod support;

use support::golden::{cache, env_dir, tensor, test_backend, Fixture, Stages, CPU};
use support::golden::{instruction, prompt_is_the_references};
use support::{check, Golden};
use vla::config::limits::MAX_SEQUENCE;
use vla::gguf::GgmlType;
use vla::models::common::text_rows;
use vla::models::flow::FlowArch;
use vla::models::gr00t::{graphs, Gr00t, Gr00tConfig};
use vla::policy::{Image, ImageData, Observation, Policy, RuntimeOptions};
use vla::Tensor;

const TOL: f32 = 1e-4;

fn fixture() -> Fixture<Gr00tConfig> {
    let dir = support::fixture("groot-tiny");
    Fixture::new(dir, converter!(vla::convert::gr00t), |g, cfg| {
        observation(g, cfg, false)
    })
}

/// lerobot's task.
const TASK: &str = "Pick up the red cube and put it in the bowl";

/// lerobot's whole prompt, as ids.
fn golden_ids(g: &Golden) -> Vec<u32> {
    let all = g.ids("token_ids");
    all[..g.usize("n_tokens")]
        .iter()
        .map(|&t| t as u32)
        .collect()
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
        tokens: Some(instruction(&golden_ids(g), &cfg.prompt)),
        noise: Some(g.f32("noise")),
        token_mask: None,
    }
}

#[test]
fn converted_prompt_and_config_are_the_fixtures() {
    let fx = fixture();
    let file = fx.gguf(GgmlType::F32);
    let cfg = Gr00tConfig::read(&file).unwrap();
    let g = &fx.g;
    // The instruction as the tokenizer shipped in the GGUF encodes lerobot's `str([task])`.
    let m = Gr00t::new(file, &RuntimeOptions::default()).unwrap();
    assert_eq!(m.prompt_text(TASK, &[]), format!("['{TASK}']"));
    prompt_is_the_references(&m, &cfg.prompt, &golden_ids(g), TASK);
    assert_eq!(
        (cfg.io.n_images, cfg.io.chunk_size, cfg.io.num_steps),
        (
            g.usize("n_images"),
            g.usize("action_horizon"),
            g.usize("num_steps")
        )
    );
    assert_eq!(cfg.embodiments.default, "new_embodiment");
}

#[test]
fn preprocessing_matches_torchvision() {
    fixture().pixels_match("", 1e-6);
}

/// Vision, the backbone and the first denoising step on `backend`, each fed lerobot's
/// inputs.
fn stages_match_lerobot(fx: &Fixture<Gr00tConfig>, backend: &str, tol: f32) {
    let Some(st) = Stages::open(backend, tol) else {
        return;
    };
    let g = &fx.g;
    let mut file = fx.gguf(GgmlType::F32);
    let cfg = Gr00tConfig::read(&file).unwrap();
    // The default embodiment's slices of the embodiment MLPs, as the policy loads them.
    let active = cfg.select_weights(&mut file, None).unwrap();
    assert_eq!(active.as_deref(), Some("new_embodiment (31)"));
    let vision = st.graph("vision", &file, &cfg, graphs::vision);
    let cams = (cfg.io.n_images, &cfg.vision);
    let img_tokens = st.siglip_vision(g, vision, cams, &file, "mm.fc");

    // The backbone over lerobot's prompt ids, right-padded to the graph's length.
    let ids = golden_ids(g);
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
    let rows = cfg.io.n_images * cfg.n_img_tokens();
    let prefix = [
        ("img_tokens", tensor(vec![rows, h], img_tokens)),
        ("tokens", tensor(vec![l], tokens)),
        ("positions", tensor(vec![l], layout.positions.clone())),
        ("valid", layout.valid_input().unwrap()),
    ];
    let refs: Vec<(&str, &Tensor)> = prefix.iter().map(|(n, t)| (*n, t)).collect();
    let mut backbone = st.build("backbone", &file, |gb| {
        let (lm, vl) = graphs::backbone(gb, &cfg)?;
        Ok(vec![lm, vl])
    });
    let out = backbone.run(&refs);
    st.check_outputs(g, &out, &["lm_out", "vl"], n * h);

    // The first velocity over our prefill (keys and values of the cross-attending blocks).
    let kv = cache(st.graph("prefill", &file, &cfg, graphs::prefill).run(&refs));
    let denoise = st.graph("denoise", &file, &cfg, graphs::denoise);
    let x_t = tensor(
        vec![cfg.io.chunk_size, cfg.io.max_action_dim],
        g.f32("noise"),
    );
    let time = cfg.time_input(0.0).unwrap();
    let mut state = g.f32("state_norm");
    state.resize(cfg.io.max_state_dim, 0.0);
    let state = tensor(vec![1, cfg.io.max_state_dim], state);
    let valid = layout.valid_input().unwrap();
    let inputs = [
        ("x_t", &x_t),
        ("time_emb", &time),
        ("valid", &valid),
        ("state", &state),
    ];
    st.first_velocity(g, denoise, &inputs, &kv);
}

fn chunk_matches_lerobot(fx: &Fixture<Gr00tConfig>, backend: &str, resized: bool, tol: f32) {
    let Some(mut m) = fx.on(backend) else { return };
    let obs = observation(&fx.g, m.config(), resized);
    let chunk = m.predict(&obs).unwrap();
    let what = format!(
        "{backend}: action chunk (frames {})",
        if resized {
            "at model size"
        } else {
            "as captured"
        }
    );
    check(&what, &chunk.actions, &fx.actions(), tol);
}

/// The stages and the chunk from frames as captured; on cpu, from frames at model size too.
fn matches_lerobot(fx: &Fixture<Gr00tConfig>, backend: &str) {
    stages_match_lerobot(fx, backend, TOL);
    if backend == CPU {
        chunk_matches_lerobot(fx, backend, true, TOL);
    }
    chunk_matches_lerobot(fx, backend, false, TOL);
}

flow_golden_tests! { fixture, "GR00T N1.5", matches_lerobot, bf16_weights_stay_close }

/// GR00T-N1.5-3B's real sizes with random weights (~9.6 GB, not committed):
/// `tools/golden/groot.py --size full --out DIR`, then
/// `VLA_GR00T_GOLDEN=DIR VLA_TEST_BACKEND=cpu cargo test --release --test gr00t_golden -- --ignored`.
#[test]
#[ignore = "needs VLA_GR00T_GOLDEN=<dir> made by tools/golden/groot.py --size full"]
fn full_size_matches_lerobot() {
    let fx = fixture().at(env_dir("VLA_GR00T_GOLDEN"));
    let backend = test_backend();
    stages_match_lerobot(&fx, &backend, TOL);
    chunk_matches_lerobot(&fx, &backend, false, TOL);
}

/// A text prompt goes through the Eagle tokenizer in the GGUF and gives lerobot's chunk.
#[test]
fn text_prompt_gives_lerobots_chunk() {
    fixture().text_prompt_gives_the_chunk(TASK, "text prompt: action chunk", TOL);
}

/// `--embodiment` picks another slice of the embodiment MLPs (another chunk), by tag or id;
/// an unknown tag is an error naming the known ones; the backend holds one slice.
#[test]
fn embodiment_selects_its_weights() {
    let fx = fixture();
    let file = fx.gguf(GgmlType::F32);
    let cfg = Gr00tConfig::read(&file).unwrap();
    let full: u64 = file.tensors().iter().map(|t| t.n_elements()).sum();
    let obs = fx.observation(&cfg);
    let run = |e: Option<&str>| -> vla::Result<(Vec<f32>, String, u64)> {
        let opts = RuntimeOptions {
            embodiment: e.map(str::to_owned),
            ..Default::default()
        };
        let mut m = fx.policy(GgmlType::F32, &opts)?;
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
    fixture().long_prompts_match(|cfg| &cfg.prompt, TOL);
}

/// An instruction past the bound (`tokenizer_max_length`: what the graphs' longest sequence
/// leaves; the reference has none) is refused with the bound named, not cut.
#[test]
fn instruction_past_the_bound_is_refused() {
    fixture().past_the_bound_is_refused(|cfg| cfg.prompt.text_bound(MAX_SEQUENCE));
}

/// vla.cpp's GR00T N1.5 layout: the fixture's lerobot checkpoint written by an independent
/// writer as vla.cpp's converter writes it (tests/interop/vlacpp_gr00t_writer.py: numpy +
/// gguf-py; its `dataset_statistics.json` beside it), loads as it is and, given lerobot's
/// whole prompt as ids (what vla.cpp's clients send, image slots included) and those
/// statistics, gives lerobot's chunk on every backend; so do the ids without image slots
/// (vla.cpp puts every camera's image tokens first then), differently. Without statistics,
/// or with vla.cpp's default embodiment (gr1, 24) the statistics do not cover, the load is
/// refused, naming what to give; a file carrying its own statistics keeps them.
#[test]
fn vlacpp_layout_gives_lerobots_chunk() {
    let fx = fixture();
    let tmp = std::env::temp_dir();
    let id = std::process::id();
    let gguf = tmp.join(format!("vla-vlacpp-gr00t-{id}.gguf"));
    let stats = tmp.join(format!("vla-vlacpp-gr00t-{id}.json"));
    support::interop(
        "vlacpp_gr00t_writer.py",
        &[fx.dir.as_os_str(), gguf.as_os_str(), stats.as_os_str()],
    );
    let cfg = Gr00tConfig::read(&fx.gguf(GgmlType::F32)).unwrap();
    let mut obs = observation(&fx.g, &cfg, false);
    let ids: Vec<i32> = golden_ids(&fx.g).into_iter().map(|t| t as i32).collect();
    obs.tokens = Some(ids.clone());
    let open = |backend: &str, e: Option<&str>, s: bool| {
        let opts = RuntimeOptions {
            backend: backend.into(),
            embodiment: e.map(str::to_owned),
            statistics: s.then(|| stats.clone()),
            ..Default::default()
        };
        vla::models::from_gguf(vla::gguf::GgufFile::open(&gguf).unwrap(), &opts)
    };
    let refused = |e: Option<&str>, s: bool| open(CPU, e, s).err().unwrap().to_string();
    let e = refused(Some("new_embodiment"), false);
    assert!(e.contains("--statistics"), "{e}");
    let e = refused(None, true);
    assert!(e.contains("gr1") && e.contains("new_embodiment"), "{e}");
    for backend in support::golden::backends() {
        if support::open(backend).is_none() {
            continue;
        }
        let mut m = open(backend, Some("new_embodiment"), true).unwrap();
        assert_eq!(m.info().embodiment.as_deref(), Some("new_embodiment (31)"));
        let chunk = m.predict(&obs).unwrap();
        let what = format!("{backend}: vla.cpp-layout GR00T N1.5: action chunk");
        check(&what, &chunk.actions, &fx.actions(), TOL);
    }
    // Without image slots the image tokens go first (vla.cpp's rule): a chunk, another one.
    let image = cfg.head.image_token as i32;
    let mut m = open(CPU, Some("new_embodiment"), true).unwrap();
    obs.tokens = Some(ids.iter().copied().filter(|&t| t != image).collect());
    let first = m.predict(&obs).unwrap().actions;
    assert!(first.iter().all(|x| x.is_finite()));
    assert_ne!(first, fx.actions());
    // A run of slots short of every camera's is refused.
    obs.tokens = Some(ids[..30].to_vec());
    let e = m.predict(&obs).unwrap_err().to_string();
    assert!(e.contains("image tokens"), "{e}");
    // A file that carries the statistics itself keeps them and refuses --statistics.
    let src = vla::gguf::GgufFile::open(&gguf).unwrap();
    let mut w = vla::gguf::metadata_writer(&src).unwrap();
    for t in src.tensors() {
        w.add_tensor(t.name.clone(), t.ty, &t.dims, src.tensor_bytes(t))
            .unwrap();
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    for what in ["state", "action"] {
        for s in ["min", "max"] {
            let v: Vec<f32> = json["new_embodiment"][what][s]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect();
            let name = format!("{what}_{s}");
            w.add_f32(name, GgmlType::F32, &[v.len() as u64], &v)
                .unwrap();
        }
    }
    let bytes = w.to_bytes().unwrap();
    let carried = |s: bool| {
        let opts = RuntimeOptions {
            embodiment: Some("new_embodiment".into()),
            statistics: s.then(|| stats.clone()),
            ..Default::default()
        };
        vla::models::from_gguf(
            vla::gguf::GgufFile::from_bytes(bytes.clone()).unwrap(),
            &opts,
        )
    };
    let e = carried(true).err().unwrap().to_string();
    assert!(e.contains("carries its own"), "{e}");
    obs.tokens = Some(ids.clone());
    let chunk = carried(false).unwrap().predict(&obs).unwrap();
    check("carried statistics", &chunk.actions, &fx.actions(), TOL);
    let _ = std::fs::remove_file(gguf);
    let _ = std::fs::remove_file(stats);
}
