//! pi0 and pi0.5 against lerobot 0.4.4 itself (with openpi's patched transformers). The
//! fixtures `tests/fixtures/pi0-tiny` and `pi05-tiny` are lerobot checkpoints with random
//! (re-randomized) weights plus lerobot's inputs, per-stage intermediates and action chunk,
//! made by `tools/golden/pi0.py` (rerun instructions there). Each test converts the fixture
//! with `vla::convert::pi0` and compares preprocessing, the vision tower + projector per
//! camera, the prefill's keys/values per layer, the first velocity, and the whole chunk on
//! cpu, vulkan and ggml. Intermediates are fed lerobot's own inputs, so a mismatch points at
//! the stage that has it.

#[macro_use]
mod support;

use std::path::{Path, PathBuf};
use support::golden::{rows_where, tensor, test_backend, Fixture, Stages};
use support::{check, cosine, Golden};
use vla::convert::pi0 as convert;
use vla::gguf::{GgmlType, GgufFile, GgufWriter};
use vla::models::flow::FlowArch;
use vla::models::pi0::{graphs, time_input, Pi0, Pi0Config, Variant};
use vla::policy::{Observation, Policy, RuntimeOptions};
use vla::Tensor;

const TOL: f32 = 1e-4;
/// The first velocity and the chunk are held tighter: 0.004's f32 rounding in the time
/// embedding's period moved pi0's by 7e-5 / 1.8e-5, which passed `TOL`.
const OUT_TOL: f32 = 2e-5;

const VARIANTS: [Variant; 2] = [Variant::Pi0, Variant::Pi05];

fn dir(v: Variant) -> PathBuf {
    support::fixture(match v {
        Variant::Pi0 => "pi0-tiny",
        Variant::Pi05 => "pi05-tiny",
    })
}

fn fixture(v: Variant) -> Fixture<Pi0Config> {
    Fixture::new(dir(v), converted, |g, _| observation(g))
}

/// The checkpoint in `dir` at its sizes (`arch.json`).
fn converted(dir: &Path, dtype: GgmlType) -> vla::Result<GgufWriter<'static>> {
    let opts = convert::Options {
        dtype: Some(dtype),
        sizes: Some(convert::Sizes::from_json(&dir.join("arch.json"))?),
        tokenizer: None,
        no_tokenizer: false,
    };
    convert::convert(dir, &opts, &mut |_, _, _| {}).map(|c| c.writer)
}

/// The instruction ids lerobot fed (without its padding).
fn ids(g: &Golden) -> Vec<i32> {
    let all = g.ids("token_ids");
    all[..g.usize("n_valid_tokens")].to_vec()
}

fn observation(g: &Golden) -> Observation {
    Observation {
        images: (0..g.usize("n_images")).map(|i| g.image(i)).collect(),
        state: g.f32("state"),
        prompt: None,
        tokens: Some(ids(g)),
        noise: Some(g.f32("noise")),
        token_mask: None,
    }
}

#[test]
fn converted_config_is_the_fixtures() {
    for v in VARIANTS {
        let fx = fixture(v);
        let arch: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(fx.dir.join("arch.json")).unwrap())
                .unwrap();
        let cfg = fx.config();
        let u = |x: &serde_json::Value| x.as_u64().unwrap() as usize;
        let (vi, vl, ex) = (&arch["vision"], &arch["vlm"], &arch["expert"]);
        assert_eq!(cfg.variant, v);
        assert_eq!(
            (
                cfg.vision.hidden,
                cfg.vision.layers,
                cfg.vision.heads,
                cfg.vision.inter,
                cfg.vision.image_size,
                cfg.vision.patch_size
            ),
            (
                u(&vi["hidden"]),
                u(&vi["layers"]),
                u(&vi["heads"]),
                u(&vi["inter"]),
                u(&vi["image_size"]),
                u(&vi["patch_size"])
            )
        );
        assert_eq!(
            (
                cfg.lm.hidden,
                cfg.lm.n_layers,
                cfg.lm.inter,
                cfg.attn.q_heads,
                cfg.attn.kv_heads,
                cfg.attn.head_dim,
                cfg.lm.vocab_size
            ),
            (
                u(&vl["width"]),
                u(&vl["depth"]),
                u(&vl["mlp_dim"]),
                u(&vl["num_heads"]),
                u(&vl["num_kv_heads"]),
                u(&vl["head_dim"]),
                u(&vl["vocab_size"])
            )
        );
        assert_eq!(
            (cfg.expert.hidden, cfg.expert.inter),
            (u(&ex["width"]), u(&ex["mlp_dim"]))
        );
        let g = &fx.g;
        assert_eq!(
            (cfg.io.n_images, cfg.io.chunk_size, cfg.io.num_steps),
            (
                g.usize("n_images"),
                g.usize("chunk_size"),
                g.usize("num_steps")
            )
        );
        assert_eq!(cfg.prefix_len(), g.usize("prefix_len"));
    }
}

#[test]
fn preprocessing_matches_lerobot() {
    for v in VARIANTS {
        fixture(v).pixels_match(&format!("{v:?} "), 1e-5);
    }
}

/// Vision, prefill and the first denoising step on `backend`, each fed lerobot's inputs.
fn stages_match_lerobot(v: Variant, backend: &str) {
    let Some(st) = Stages::labelled(backend, format!("{v:?} {backend}"), TOL) else {
        return;
    };
    let fx = fixture(v);
    let g = &fx.g;
    let file = fx.gguf(GgmlType::F32);
    let cfg = Pi0Config::read(&file).unwrap();
    let vision = st.graph("vision", &file, &cfg, graphs::vision);
    let cams = (cfg.io.n_images, &cfg.vision);
    let img_tokens = st.siglip_vision(g, vision, cams, &file, "projector");

    let ids = ids(g);
    let layout = cfg.layout(ids.len());
    let p = cfg.prefix_len();
    let tokens: Vec<f32> = g.ids("token_ids").iter().map(|&t| t as f32).collect();
    let rows = cfg.io.n_images * cfg.n_img_tokens();
    let inputs = [
        ("img_tokens", tensor(vec![rows, cfg.lm.hidden], img_tokens)),
        ("tokens", tensor(vec![cfg.io.tokenizer_max_length], tokens)),
        ("positions", tensor(vec![p], layout.positions.clone())),
        ("valid", layout.valid_input().unwrap()),
    ];
    let refs: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (*n, t)).collect();
    let kv = st.graph("prefill", &file, &cfg, graphs::prefill).run(&refs);
    // Rows of padding tokens differ by design after layer 0 (lerobot's padding queries
    // attend to everything, ours to themselves); nothing reads them, so compare valid rows.
    let row = cfg.attn.kv_heads * cfg.attn.head_dim;
    for l in 0..cfg.lm.n_layers {
        for (k, name) in [(0, "k"), (1, "v")] {
            let got = rows_where(kv[2 * l + k].as_f32().unwrap(), row, &layout.valid);
            let want = rows_where(&g.f32(&format!("kv.{l}.{name}")), row, &layout.valid);
            st.check(format_args!("prefill layer {l} {name}"), &got, &want);
        }
    }

    // The first velocity, over lerobot's cache (padding rows are masked out).
    let kv_shape = vec![p, cfg.attn.kv_heads, cfg.attn.head_dim];
    let lerobot_kv: Vec<(String, Tensor)> = (0..cfg.lm.n_layers)
        .flat_map(|l| ["k", "v"].map(|n| format!("kv.{l}.{n}")))
        .map(|name| (name.clone(), tensor(kv_shape.clone(), g.f32(&name))))
        .collect();
    let x_t = tensor(
        vec![cfg.io.chunk_size, cfg.io.max_action_dim],
        g.f32("noise"),
    );
    let time = time_input(&cfg, 1.0).unwrap();
    let mut state = g.f32("state_norm");
    state.resize(cfg.io.max_state_dim, 0.0);
    let state = tensor(vec![1, cfg.io.max_state_dim], state);
    let suffix = cfg.suffix_inputs(&layout).unwrap();
    let valid = layout.valid_input().unwrap();
    let mut inputs: Vec<(&str, &Tensor)> =
        vec![("x_t", &x_t), ("time_emb", &time), ("valid", &valid)];
    if v == Variant::Pi0 {
        inputs.push(("state", &state));
    }
    inputs.extend(suffix.iter().map(|(n, t)| (n.as_str(), t)));
    let mut denoise = st.graph("denoise", &file, &cfg, graphs::denoise);
    let velocity = denoise.run_cached(&inputs, &lerobot_kv);
    st.check_within("first velocity", &velocity, &g.f32("velocity.0"), OUT_TOL);
}

fn chunk_matches_lerobot(v: Variant, backend: &str) {
    let fx = fixture(v);
    let Some(mut m) = fx.on(backend) else { return };
    let what = format!("{v:?} {backend}: action chunk");
    check(&what, &fx.chunk(&mut m), &fx.actions(), OUT_TOL);
}

backend_tests! {
    cpu_matches_lerobot, vulkan_matches_lerobot, ggml_matches_lerobot => |backend| {
        for v in VARIANTS {
            stages_match_lerobot(v, backend);
            chunk_matches_lerobot(v, backend);
        }
    }
}

/// 16-bit activations keep the chunk (cosine to the f32 chunk, README table).
#[test]
fn vulkan_16bit_activations_keep_the_chunk() {
    for v in VARIANTS {
        fixture(v).act_16bit_keeps_the_chunk(&format!("{v:?}"));
    }
}

/// A `variant` file in vla.cpp's layout (its names, keys and Gemma gains), written from the
/// fixture's lerobot checkpoint by an independent writer (tests/interop/vlacpp_pi0_writer.py,
/// vlacpp_pi05_writer.py: numpy + gguf-py), loads as it is and gives lerobot's chunk on every
/// backend; so does pi0.5's FoldQuant W8A8 export by the independent FoldQuant writer (the
/// sites with both sides multiples of 64: the decoder's `attn_o` at these sizes), within the
/// quantization's error.
fn vlacpp_layout_gives_lerobots_chunk(v: Variant) {
    let (arch, writer) = match v {
        Variant::Pi0 => ("pi0", "vlacpp_pi0_writer.py"),
        Variant::Pi05 => ("pi05", "vlacpp_pi05_writer.py"),
    };
    let tmp = std::env::temp_dir();
    let float = tmp.join(format!("vla-vlacpp-{arch}-{}.gguf", std::process::id()));
    let fq = tmp.join(format!("vla-vlacpp-{arch}-fq-{}.gguf", std::process::id()));
    support::interop(writer, &[dir(v).as_os_str(), float.as_os_str()]);
    let mut files = vec![&float];
    if v == Variant::Pi05 {
        support::interop(
            "foldquant_writer.py",
            &[float.as_os_str(), fq.as_os_str(), "w8a8".as_ref()],
        );
        files.push(&fq);
    }
    let fx = fixture(v);
    for backend in support::golden::backends() {
        if support::open(backend).is_none() {
            continue;
        }
        let opts = RuntimeOptions {
            backend: backend.into(),
            ..Default::default()
        };
        for path in &files {
            let file = GgufFile::open(path).unwrap();
            assert!(
                file.get(&format!("{arch}.intermediate")).is_some(),
                "not vla.cpp's layout"
            );
            let quantized = file.get(&format!("{arch}.quant.method")).is_some();
            let mut m = vla::models::from_gguf(file, &opts).unwrap();
            let chunk = m.predict(&observation(&fx.g)).unwrap();
            if quantized {
                let cos = cosine(&chunk.actions, &fx.actions());
                assert!(
                    cos > 0.999,
                    "{backend}: vla.cpp-layout {arch}, FoldQuant W8A8: cosine {cos}"
                );
            } else {
                check(
                    &format!("{backend}: vla.cpp-layout {arch}: action chunk"),
                    &chunk.actions,
                    &fx.actions(),
                    OUT_TOL,
                );
            }
        }
    }
    for path in files {
        std::fs::remove_file(path).unwrap();
    }
}

#[test]
fn vlacpp_pi0_layout_gives_lerobots_chunk() {
    vlacpp_layout_gives_lerobots_chunk(Variant::Pi0);
}

#[test]
fn vlacpp_pi05_layout_gives_lerobots_chunk() {
    vlacpp_layout_gives_lerobots_chunk(Variant::Pi05);
}

#[test]
fn bf16_weights_stay_close() {
    for v in VARIANTS {
        fixture(v).bf16_stays_close(&format!("{v:?}"));
    }
}

#[test]
fn text_prompt_tokenizes_as_lerobot() {
    // The converter ships the checkpoint's tokenizer (a PaliGemma-style SentencePiece BPE);
    // the task plus the state must give lerobot's ids, and so lerobot's chunk.
    for v in VARIANTS {
        let fx = fixture(v);
        let g = &fx.g;
        let mut m = fx.cpu();
        assert!(
            m.tokenizer().is_some(),
            "{v:?}: the converted GGUF should carry the tokenizer"
        );
        let obs = observation(g);
        let state = m.normalised_state(&obs).unwrap();
        let task = g.meta["task"].as_str().unwrap();
        assert_eq!(
            m.prompt_text(task, &state),
            g.meta["prompt"].as_str().unwrap(),
            "{v:?} prompt text"
        );
        let got: Vec<i32> = m
            .tokenize_prompt(task, &state)
            .unwrap()
            .iter()
            .map(|&t| t as i32)
            .collect();
        assert_eq!(got, ids(g), "{v:?} token ids");
        let by_text = Observation {
            tokens: None,
            prompt: Some(task.into()),
            ..obs
        };
        check(
            &format!("{v:?}: chunk from the text prompt"),
            &m.predict(&by_text).unwrap().actions,
            &fx.actions(),
            OUT_TOL,
        );
    }
}

/// At openpi's real sizes: `VLA_PI0_GOLDEN=DIR` names a folder written by
/// `tools/golden/pi0.py --size full` (pi0 or pi05, ~14 GB); the test converts it once to
/// `DIR/vla-f32.gguf` and compares the chunk on `VLA_TEST_BACKEND` (default cpu). Needs
/// ~16 GB of RAM and minutes; run with `cargo test --release --test pi0_golden -- --ignored full_size`.
#[test]
#[ignore]
fn full_size_matches_lerobot() {
    let Some(dir) = std::env::var_os("VLA_PI0_GOLDEN").map(PathBuf::from) else {
        panic!("set VLA_PI0_GOLDEN to a folder from tools/golden/pi0.py --size full");
    };
    let gguf = dir.join("vla-f32.gguf");
    if !gguf.is_file() {
        let writer = converted(&dir, GgmlType::F32).unwrap();
        writer.write_to_file(&gguf).unwrap();
    }
    let g = Golden::load(&dir);
    let backend = test_backend();
    let opts = RuntimeOptions {
        backend: backend.clone(),
        ..Default::default()
    };
    let mut m = Pi0::new(GgufFile::open(&gguf).unwrap(), &opts).unwrap();
    let v = m.config().variant;
    let chunk = m.predict(&observation(&g)).unwrap();
    println!("{v:?} full size on {}: {:?}", m.info().backend, chunk.times);
    check(
        &format!("{v:?} full size {backend}: action chunk"),
        &chunk.actions,
        &g.f32("actions"),
        TOL,
    );
}
