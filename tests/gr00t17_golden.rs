//! GR00T N1.7 against lerobot 0.6.1 itself (with transformers 5.5.4). The fixture
//! `tests/fixtures/groot17-tiny` is a lerobot checkpoint with random (re-randomized) weights
//! plus the base model folder, the Qwen3-VL backbone folder, lerobot's inputs, per-stage
//! intermediates and action chunk, made by `tools/golden/groot17.py` (rerun instructions
//! there). The tests convert it with `vla::convert::gr00t_n1_7` and compare the prompt's
//! token ids, the frame transform and pixels, the backbone's image tokens and deepstack
//! features, the LM's features, the VL context, the first velocity, and the whole chunk on
//! cpu, vulkan and ggml. Stages are fed lerobot's own inputs.

#[macro_use]
mod support;

use support::golden::{cache, env_dir, tensor, test_backend, Fixture, Stages};
use support::golden::{instruction, prompt_is_the_references};
use support::{check, qwen_patch_rows_to_chw, Golden};
use vla::gguf::GgmlType;
use vla::models::common::text_rows;
use vla::models::flow::FlowArch;
use vla::models::gr00t_n1_7::{graphs, Gr00tN17, Gr00tN17Config};
use vla::policy::{Observation, Policy, RuntimeOptions};
use vla::preprocess::area::gr00t_frame;
use vla::Tensor;

const TOL: f32 = 1e-4;

fn fixture() -> Fixture<Gr00tN17Config> {
    let dir = support::fixture("groot17-tiny");
    Fixture::new(dir, converter!(vla::convert::gr00t_n1_7), observation)
}

fn observation(g: &Golden, cfg: &Gr00tN17Config) -> Observation {
    Observation {
        images: vec![g.image(0)],
        state: g.f32("state"),
        prompt: None,
        tokens: Some(instruction(&g.i64("token_ids"), &cfg.prompt)),
        noise: Some(g.f32("noise")),
        token_mask: None,
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
    let fx = fixture();
    let file = fx.gguf(GgmlType::F32);
    let cfg = Gr00tN17Config::read(&file).unwrap();
    let g = &fx.g;
    // lerobot's formalized instruction, through the tokenizer in the GGUF.
    let m = Gr00tN17::new(file, &RuntimeOptions::default()).unwrap();
    let task = fx.task();
    assert_eq!(
        m.prompt_text(task, &[]),
        g.meta["language"].as_str().unwrap()
    );
    prompt_is_the_references(&m, &cfg.prompt, &g.i64("token_ids"), task);
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
    assert_eq!(cfg.embodiments.default, "libero_sim");
    assert_eq!(m.info().embodiment.as_deref(), Some("libero_sim (2)"));
}

#[test]
fn preprocessing_matches_opencv_and_torchvision() {
    let fx = fixture();
    let (g, cfg) = (&fx.g, fx.config());
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
    check("pixels", &px, &golden_pixels(g, &cfg), 1e-6);
}

/// Vision, the backbone and the first denoising step on `backend`, each fed lerobot's
/// inputs.
fn stages_match_lerobot(fx: &Fixture<Gr00tN17Config>, backend: &str, tol: f32) {
    let Some(st) = Stages::open(backend, tol) else {
        return;
    };
    let g = &fx.g;
    let mut file = fx.gguf(GgmlType::F32);
    let cfg = Gr00tN17Config::read(&file).unwrap();
    let active = cfg.select_weights(&mut file, None).unwrap();
    assert_eq!(active.as_deref(), Some("libero_sim (2)"));
    let (ih, iw, h) = (cfg.vision.image_h, cfg.vision.image_w, cfg.lm.hidden);
    let (n, taps) = (cfg.n_img_tokens(), cfg.vision.deepstack.len());
    let px = [tensor(vec![3, ih, iw], golden_pixels(g, &cfg))];
    let vision = st.graph("vision", &file, &cfg, graphs::vision);
    // lerobot's image tokens and deepstack features side by side, as the prefill reads them.
    let img_tokens = st.deepstack_vision(g, vision, &px, [n, taps, h]);

    let ids = g.i64("token_ids");
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
        ("img_tokens", tensor(vec![n, (1 + taps) * h], img_tokens)),
        ("tokens", tensor(vec![l], tokens)),
        ("valid", layout.valid_input().unwrap()),
    ];
    let refs: Vec<(&str, &Tensor)> = prefix.iter().map(|(n, t)| (*n, t)).collect();
    let mut backbone = st.build("backbone", &file, |gb| {
        let (lm, vl) = graphs::backbone(gb, &cfg)?;
        Ok(vec![lm, vl])
    });
    let out = backbone.run(&refs);
    st.check_outputs(g, &out, &["lm_out", "vl"], real * h);

    let kv = cache(st.graph("prefill", &file, &cfg, graphs::prefill).run(&refs));
    let x_t = tensor(
        vec![cfg.io.chunk_size, cfg.io.max_action_dim],
        g.f32("noise"),
    );
    let time = cfg.time_input(0.0).unwrap();
    let state = tensor(vec![1, cfg.io.max_state_dim], g.f32("state_padded"));
    let valid = layout.valid_input().unwrap();
    let inputs = [
        ("x_t", &x_t),
        ("time_emb", &time),
        ("valid", &valid),
        ("state", &state),
    ];
    let denoise = st.graph("denoise", &file, &cfg, graphs::denoise);
    st.first_velocity(g, denoise, &inputs, &kv);
}

/// The stages, then the chunk (16 of 40 rows) from the normalised, clipped state lerobot fed
/// the model.
fn matches_lerobot(fx: &Fixture<Gr00tN17Config>, backend: &str) {
    stages_match_lerobot(fx, backend, TOL);
    let what = "action chunk (16 of 40 rows, world units)";
    fx.state_and_chunk_match(backend, ("state_padded", |_| (16, 7)), what, TOL);
}

flow_golden_tests! { fixture, "GR00T N1.7", matches_lerobot, bf16_weights_stay_close }

/// GR00T N1.7's released sizes with random weights (~13 GB, not committed):
/// `tools/golden/groot17.py --size full --out DIR`, then `VLA_GR00T17_GOLDEN=DIR
/// VLA_TEST_BACKEND=cpu cargo test --release --test gr00t17_golden -- --ignored`.
#[test]
#[ignore = "needs VLA_GR00T17_GOLDEN=<dir> made by tools/golden/groot17.py --size full"]
fn full_size_matches_lerobot() {
    let fx = fixture().at(env_dir("VLA_GR00T17_GOLDEN"));
    matches_lerobot(&fx, &test_backend());
}

/// A text prompt is formalized, tokenized with the GGUF's tokenizer and gives lerobot's chunk.
#[test]
fn text_prompt_gives_lerobots_chunk() {
    let fx = fixture();
    fx.text_prompt_gives_the_chunk(fx.task(), "text prompt: chunk", TOL);
}

/// `--embodiment` picks another slice of the embodiment MLPs; an id past the weights'
/// embodiments is an error.
#[test]
fn embodiment_selects_its_weights() {
    let fx = fixture();
    let obs = fx.observation(&fx.config());
    let run = |e: Option<&str>| -> vla::Result<Vec<f32>> {
        let opts = RuntimeOptions {
            embodiment: e.map(str::to_owned),
            ..Default::default()
        };
        let mut m = fx.policy(GgmlType::F32, &opts)?;
        m.predict(&obs).map(|c| c.actions)
    };
    let default = run(None).unwrap();
    let other = run(Some("simpler_env_google")).unwrap();
    assert_ne!(default, other);
    let e = run(Some("new_embodiment")).unwrap_err().to_string();
    assert!(e.contains("id 10") && e.contains("4 embodiments"), "{e}");
}

/// vla.cpp's file of lerobot's model (`tests/fixtures/groot17-tiny-hd128`: the released
/// head_dim 128, whose M-RoPE sections vla.cpp's loader fixes), written by an independent
/// writer as vla.cpp's converter writes an Isaac-GR00T snapshot
/// (tests/interop/vlacpp_gr00t17_writer.py: numpy + gguf-py), loads as it is and, given
/// lerobot's whole prompt as ids (what vla.cpp's clients send, image slots included), gives
/// lerobot's chunk in world units (the file's own statistics) on every backend. Without image
/// slots the image tokens go first (vla.cpp's rule): a chunk, another one. `--statistics` and
/// an embodiment past the weights' are refused. The file's FoldQuant form (the independent
/// writer's) runs as integers.
#[test]
fn vlacpp_layout_gives_lerobots_chunk() {
    let fx = Fixture::new(
        support::fixture("groot17-tiny-hd128"),
        converter!(vla::convert::gr00t_n1_7),
        observation,
    );
    let gguf = std::env::temp_dir().join(format!("vla-vlacpp-gr00t17-{}.gguf", std::process::id()));
    support::interop(
        "vlacpp_gr00t17_writer.py",
        &[fx.dir.as_os_str(), gguf.as_os_str()],
    );
    let cfg = fx.config();
    let mut obs = fx.observation(&cfg);
    let ids: Vec<i32> = fx.g.i64("token_ids").iter().map(|&t| t as i32).collect();
    obs.tokens = Some(ids.clone());
    let open = |backend: &str, opts: RuntimeOptions| {
        let opts = RuntimeOptions {
            backend: backend.into(),
            ..opts
        };
        vla::models::from_gguf(vla::gguf::GgufFile::open(&gguf).unwrap(), &opts)
    };
    for backend in support::golden::backends() {
        if support::open(backend).is_none() {
            continue;
        }
        let mut m = open(backend, RuntimeOptions::default()).unwrap();
        assert_eq!(m.info().embodiment.as_deref(), Some("libero_sim (2)"));
        let chunk = m.predict(&obs).unwrap();
        let what = format!("{backend}: vla.cpp-layout GR00T N1.7: action chunk (16 of 40 rows)");
        check(&what, &chunk.actions, &fx.actions(), TOL);
    }
    let mut m = open("cpu", RuntimeOptions::default()).unwrap();
    let image = cfg.head.image_token as i32;
    obs.tokens = Some(ids.iter().copied().filter(|&t| t != image).collect());
    let first = m.predict(&obs).unwrap().actions;
    assert!(first.iter().all(|x| x.is_finite()));
    assert_ne!(first, fx.actions());
    obs.tokens = Some(
        ids[..ids.len() - 3]
            .iter()
            .copied()
            .filter(|&t| t != image)
            .chain([image])
            .collect(),
    );
    let e = m.predict(&obs).unwrap_err().to_string();
    assert!(e.contains("image tokens"), "{e}");
    let refused = |opts: RuntimeOptions| open("cpu", opts).err().unwrap().to_string();
    let e = refused(RuntimeOptions {
        statistics: Some("stats.json".into()),
        ..Default::default()
    });
    assert!(e.contains("carries its own"), "{e}");
    let e = refused(RuntimeOptions {
        embodiment: Some("new_embodiment".into()),
        ..Default::default()
    });
    assert!(e.contains("id 10"), "{e}");
    // vla.cpp's FoldQuant file of it (the independent writer's W8A8: the language model's
    // attention, whose sides are multiples of 64) runs as integers, near lerobot's chunk.
    let fq = gguf.with_extension("fq.gguf");
    support::interop(
        "foldquant_writer.py",
        &[gguf.as_os_str(), fq.as_os_str(), "w8a8".as_ref()],
    );
    let mut m = vla::models::from_gguf(
        vla::gguf::GgufFile::open(&fq).unwrap(),
        &RuntimeOptions::default(),
    )
    .unwrap();
    assert!(
        m.info().weight_dtypes.contains("I8"),
        "{}",
        m.info().weight_dtypes
    );
    obs.tokens = Some(ids);
    let cos = support::cosine(&m.predict(&obs).unwrap().actions, &fx.actions());
    eprintln!("vla.cpp-layout GR00T N1.7, FoldQuant W8A8 as integers: cosine to lerobot {cos:.6}");
    assert!(cos > 0.999, "cosine {cos}");
    std::fs::remove_file(&gguf).ok();
    std::fs::remove_file(&fq).ok();
}
