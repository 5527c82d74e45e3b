//! GR00T N1.6 against NVIDIA Isaac-GR00T's own `Gr00tN1d6` (n1.6.1-release, transformers 5.5.4).
//! The fixture `tests/fixtures/groot16-tiny` is Isaac-GR00T's checkpoint layout with random
//! (re-randomized) weights, its processor's files, a tiny Eagle folder, the inputs, stages and
//! chunk, made by `tools/golden/groot16.py` (rerun instructions there). The tests convert it
//! with `vla::convert::gr00t_n1_6` and compare the frames, the prompt's ids, the image
//! tokens, the backbone's features, the head's context, the first velocity and the chunk
//! on cpu, vulkan and ggml.

#[macro_use]
mod support;

use support::golden::{cache, instruction, tensor, Fixture, Stages};
use support::{check, Golden};
use vla::gguf::GgmlType;
use vla::models::common::text_rows;
use vla::models::flow::FlowArch;
use vla::models::gr00t_n1_6::{graphs, Gr00tN16Config};
use vla::policy::{ImageData, Observation, RuntimeOptions};
use vla::preprocess::area::{gr00t_frame, letterbox};
use vla::Tensor;

const TOL: f32 = 1e-4;

fn fixture() -> Fixture<Gr00tN16Config> {
    let dir = support::fixture("groot16-tiny");
    Fixture::new(dir, converter!(vla::convert::gr00t_n1_6), observation)
}

/// The released frame geometry at tiny widths (`tools/golden/groot16.py --size frame`): two
/// 120 x 200 cameras letterboxed, shortest edge 256, 252 x 252 frames (PIL's bicubic), an 18 x
/// 18 patch grid from SigLIP2's 16 x 16 table, 81 image tokens a camera.
fn frame_fixture() -> Fixture<Gr00tN16Config> {
    let dir = support::fixture("groot16-frame");
    Fixture::new(dir, converter!(vla::convert::gr00t_n1_6), observation)
}

fn observation(g: &Golden, cfg: &Gr00tN16Config) -> Observation {
    Observation {
        images: (0..cfg.io.n_images).map(|i| g.image(i)).collect(),
        state: g.f32("state"),
        prompt: None,
        tokens: Some(instruction(&g.i64("token_ids"), &cfg.prompt)),
        noise: Some(g.f32("noise")),
        token_mask: None,
    }
}

/// Isaac-GR00T's eval transform (LetterBoxPad, SmallestMaxSize with INTER_AREA, the centre
/// crop, SmallestMaxSize again) gives the reference's frames byte for byte, and the model's
/// input (Eagle's smart_resize, then `(x / 255 - 0.5) / 0.5` channels first) its pixels
/// within `tol`: exactly where the frame is already at smart_resize's size (`groot16-tiny`),
/// through PIL's bicubic 256 -> 252 at the released geometry (`groot16-frame`).
fn frames_match(fx: &Fixture<Gr00tN16Config>, tol: f32) {
    let g = &fx.g;
    let arch: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fx.dir.join("arch.json")).unwrap()).unwrap();
    let edge = arch["image"]["shortest_edge"].as_u64().unwrap() as usize;
    let cfg = fx.config();
    let camera = cfg.spec().camera;
    for i in 0..cfg.io.n_images {
        let img = g.image(i);
        let ImageData::RgbU8(raw) = &img.data else {
            panic!("image.{i}: bytes expected")
        };
        let (square, side) = letterbox(raw, (img.height, img.width));
        let (frame, (h, w)) = gr00t_frame(&square, (side, side), edge, 0.95);
        let want = g.u8_image(&format!("frame.{i}"));
        assert_eq!((h, w), (want.height, want.width), "frame.{i}: size");
        let ImageData::RgbU8(want) = &want.data else {
            panic!()
        };
        assert!(&frame == want, "frame.{i}: not the reference's bytes");
        let what = format!("{}: pixels.{i}", fx.dir.display());
        let pixels = camera.pixels(&img).unwrap();
        check(&what, &pixels, &g.f32(&format!("pixels.{i}")), tol);
    }
}

#[test]
fn frames_match_isaacs_eval_transform() {
    frames_match(&fixture(), 1e-6);
    frames_match(&frame_fixture(), 1e-6);
}

/// The converted prompt is Isaac's around the instruction; the stages from Isaac's own inputs:
/// the image tokens (SigLIP2, unshuffle, mlp1), the backbone's features (Qwen3 with its final
/// norm) and the head's context (vlln) at the real rows, the first velocity.
fn stages_match_isaac(fx: &Fixture<Gr00tN16Config>, backend: &str, tol: f32) {
    let Some(st) = Stages::open(backend, tol) else {
        return;
    };
    let g = &fx.g;
    let mut file = fx.gguf(GgmlType::F32);
    let cfg = Gr00tN16Config::read(&file).unwrap();
    let active = cfg.select_weights(&mut file, None).unwrap();
    assert_eq!(active.as_deref(), Some("new_embodiment (10)"));
    let ids = g.i64("token_ids");
    let instr = instruction(&ids, &cfg.prompt);
    let rebuilt: Vec<i64> = (cfg.prompt.before.iter().map(|&t| t as i64))
        .chain(instr.iter().map(|&t| t as i64))
        .chain(cfg.prompt.after.iter().map(|&t| t as i64))
        .collect();
    assert_eq!(rebuilt, ids, "the prompt around the instruction");

    let (s, h, n) = (cfg.vision.image_size, cfg.lm.hidden, cfg.n_image_rows());
    let px: Vec<Tensor> = (0..cfg.io.n_images)
        .map(|i| tensor(vec![3, s, s], g.f32(&format!("pixels.{i}"))))
        .collect();
    let mut vision = st.graph("vision", &file, &cfg, graphs::vision);
    let names: Vec<String> = (0..px.len()).map(|i| format!("image.{i}")).collect();
    let inputs: Vec<(&str, &Tensor)> = names.iter().map(String::as_str).zip(&px).collect();
    st.check(
        "vision (image tokens)",
        &vision.run1(&inputs),
        &g.f32("vision"),
    );

    let real = ids.len();
    let cfg = cfg.with_text_rows(text_rows(instr.len(), cfg.io.tokenizer_max_length));
    let text: Vec<f32> = instr.iter().map(|&t| t as f32).collect();
    let req = cfg
        .request_inputs(text, instr.len(), &g.f32("state_padded"))
        .unwrap();
    let img = tensor(vec![n, h], g.f32("vision"));
    let mut prefix: Vec<(&str, &Tensor)> = vec![("img_tokens", &img)];
    prefix.extend(req.prefix.iter().map(|(k, t)| (k.as_str(), t)));
    let mut backbone = st.build("backbone", &file, |gb| {
        let (lm, vl) = graphs::backbone(gb, &cfg)?;
        Ok(vec![lm, vl])
    });
    let out = backbone.run(&prefix);
    st.check_outputs(g, &out, &["backbone", "vlln"], real * h);

    let kv = cache(
        st.graph("prefill", &file, &cfg, graphs::prefill)
            .run(&prefix),
    );
    let x_t = tensor(
        vec![cfg.io.chunk_size, cfg.io.max_action_dim],
        g.f32("noise"),
    );
    let time = cfg.time_input(0.0).unwrap();
    let valid = &req.prefix.iter().find(|(k, _)| k == "valid").unwrap().1;
    let mut inputs: Vec<(&str, &Tensor)> =
        vec![("x_t", &x_t), ("time_emb", &time), ("valid", valid)];
    inputs.extend(req.suffix.iter().map(|(k, t)| (k.as_str(), t)));
    let denoise = st.graph("denoise", &file, &cfg, graphs::denoise);
    st.first_velocity(g, denoise, &inputs, &kv);
}

/// The stages, then the chunk (8 of 16 rows) from the normalised, clipped state Isaac-GR00T
/// fed the model.
fn matches_isaac(fx: &Fixture<Gr00tN16Config>, backend: &str) {
    stages_match_isaac(fx, backend, TOL);
    let what = "action chunk (8 of 16 rows, world units)";
    fx.state_and_chunk_match(backend, ("state_padded", |_| (8, 4)), what, TOL);
}

flow_golden_tests! { fixture, "GR00T N1.6", matches_isaac, bf16_weights_stay_close }

/// At the released frame geometry (`groot16-frame`: the 18 x 18 grid, which SigLIP2's 14-patch
/// windows do not divide, the resized table, 81 tokens a camera): the stages and the chunk
/// from the raw cameras on every backend.
#[test]
fn released_frame_geometry_matches_isaac() {
    let fx = frame_fixture();
    for backend in support::golden::backends() {
        matches_isaac(&fx, backend);
    }
}

/// GR00T N1.6's released sizes with random weights (~11 GB, not committed):
/// `tools/golden/groot16.py --upstream DIR --size full --out FULL`, then
/// `VLA_GR00T16_GOLDEN=FULL VLA_TEST_BACKEND=cpu cargo test --test gr00t16_golden -- --ignored`.
#[test]
#[ignore = "needs VLA_GR00T16_GOLDEN=<dir> made by tools/golden/groot16.py --size full"]
fn full_size_matches_isaac() {
    let fx = fixture().at(support::golden::env_dir("VLA_GR00T16_GOLDEN"));
    frames_match(&fx, 1e-6);
    matches_isaac(&fx, &support::golden::test_backend());
}

/// A text prompt is formalized, tokenized with the GGUF's tokenizer (Eagle's, the fixture's
/// small one) and gives Isaac's chunk.
#[test]
fn text_prompt_gives_isaacs_chunk() {
    let fx = fixture();
    fx.text_prompt_gives_the_chunk(fx.task(), "text prompt: chunk", TOL);
}

/// `fx`'s checkpoint as vla.cpp's converter writes it (with `--vision-size` at Isaac's
/// frame), by an independent writer (tests/interop/vlacpp_gr00t16_writer.py: numpy +
/// gguf-py); the request of Isaac's whole prompt as ids (what vla.cpp's clients send, image
/// slots included).
fn vlacpp_file(fx: &Fixture<Gr00tN16Config>, name: &str) -> (std::path::PathBuf, Observation) {
    let gguf = std::env::temp_dir().join(format!("vla-vlacpp-{name}-{}.gguf", std::process::id()));
    support::interop(
        "vlacpp_gr00t16_writer.py",
        &[fx.dir.as_os_str(), gguf.as_os_str()],
    );
    let mut obs = fx.observation(&fx.config());
    obs.tokens = Some(fx.g.i64("token_ids").iter().map(|&t| t as i32).collect());
    (gguf, obs)
}

/// vla.cpp's file of Isaac-GR00T's model ([`vlacpp_file`]) loads as it is and, with the
/// checkpoint's embodiment (vla.cpp's default, `gr1` = 20, is past this model's 12 and
/// refused by name), gives Isaac's chunk in world units (the file's own statistics) on every
/// backend; at the released frame geometry too, its z-scored groups read from the file's
/// processor config. Without image slots the image tokens go first (vla.cpp's rule). The
/// file's FoldQuant form (the independent writer's) runs as integers.
#[test]
fn vlacpp_layout_gives_isaacs_chunk() {
    let fx = fixture();
    let (gguf, mut obs) = vlacpp_file(&fx, "gr00t16");
    let cfg = fx.config();
    let ids = obs.tokens.clone().unwrap();
    let open_at = |path: &std::path::Path, backend: &str, embodiment: Option<&str>| {
        let opts = RuntimeOptions {
            backend: backend.into(),
            embodiment: embodiment.map(str::to_owned),
            ..Default::default()
        };
        vla::models::from_gguf(vla::gguf::GgufFile::open(path).unwrap(), &opts)
    };
    let open = |backend: &str, embodiment: Option<&str>| open_at(&gguf, backend, embodiment);
    let e = open("cpu", None).err().unwrap().to_string();
    assert!(e.contains("\"gr1\": id 20"), "{e}");
    let tag = Some("new_embodiment");
    for backend in support::golden::backends() {
        if support::open(backend).is_none() {
            continue;
        }
        let mut m = open(backend, tag).unwrap();
        assert_eq!(m.info().embodiment.as_deref(), Some("new_embodiment (10)"));
        assert_eq!(m.info().camera_names, ["front", "wrist"]);
        let chunk = m.predict(&obs).unwrap();
        let what = format!("{backend}: vla.cpp-layout GR00T N1.6: action chunk (8 of 16 rows)");
        check(&what, &chunk.actions, &fx.actions(), TOL);
    }
    let frame = frame_fixture();
    let (frame_gguf, frame_obs) = vlacpp_file(&frame, "gr00t16-frame");
    let mut m = open_at(&frame_gguf, "cpu", tag).unwrap();
    let what = "cpu: vla.cpp-layout GR00T N1.6 at the released frame geometry: chunk";
    check(
        what,
        &m.predict(&frame_obs).unwrap().actions,
        &frame.actions(),
        TOL,
    );
    std::fs::remove_file(&frame_gguf).ok();
    let mut m = open("cpu", tag).unwrap();
    let image = cfg.head.image_token as i32;
    obs.tokens = Some(ids.iter().copied().filter(|&t| t != image).collect());
    let first = m.predict(&obs).unwrap().actions;
    assert!(first.iter().all(|x| x.is_finite()));
    assert_ne!(first, fx.actions());
    obs.tokens = Some(ids[1..].to_vec());
    obs.tokens.as_mut().unwrap().retain(|&t| t != image);
    obs.tokens.as_mut().unwrap().push(image);
    let e = m.predict(&obs).unwrap_err().to_string();
    assert!(e.contains("image tokens"), "{e}");
    // vla.cpp's FoldQuant file of it (the independent writer's W8A8: the language model's
    // output projections, whose sides are multiples of 64) runs as integers, near Isaac's.
    let fq = gguf.with_extension("fq.gguf");
    support::interop(
        "foldquant_writer.py",
        &[gguf.as_os_str(), fq.as_os_str(), "w8a8".as_ref()],
    );
    let opts = RuntimeOptions {
        embodiment: tag.map(str::to_owned),
        ..Default::default()
    };
    let mut m = vla::models::from_gguf(vla::gguf::GgufFile::open(&fq).unwrap(), &opts).unwrap();
    let dtypes = m.info().weight_dtypes.clone();
    assert!(dtypes.contains("I8"), "{dtypes}");
    obs.tokens = Some(ids);
    let cos = support::cosine(&m.predict(&obs).unwrap().actions, &fx.actions());
    eprintln!("vla.cpp-layout GR00T N1.6, FoldQuant W8A8 as integers: cosine to Isaac {cos:.6}");
    assert!(cos > 0.999, "cosine {cos}");
    std::fs::remove_file(&gguf).ok();
    std::fs::remove_file(&fq).ok();
}
