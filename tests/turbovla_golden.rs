//! TurboVLA against the PyTorch reference (H-EmbodVis/TurboVLA b553c32, with Grounding
//! DINO's BERT wrapper; stock transformers' DINOv3 and BERT from tiny configs). The fixtures
//! are checkpoints as the reference's loader reads them (`turbovla.pth` with
//! `model_state_dict` and `model_config`, the BERT and DINOv3 folders), random
//! (re-randomized) weights, plus the reference's inputs, intermediates and chunks, made by
//! `tools/golden/turbovla.py` (rerun instructions there): `turbovla-tiny` (padded to 21),
//! `turbovla-tiny-layout` (an instruction with its own padded length, 14) and
//! `turbovla-tiny-nopad` (padded to the longest instruction). The tests convert them with
//! `vla::convert::turbovla` and compare the text plan exactly, every DINOv3 layer, the image
//! tokens, every BERT layer, the text tokens, each fusion and enhancer layer, the state
//! tokens, each decoder layer and the chunk, on cpu, vulkan and ggml.

#[macro_use]
mod support;

use std::path::{Path, PathBuf};
use support::golden::Stages;
use support::{check, cosine, fixture, reopened, Golden};
use vla::convert::turbovla;
use vla::gguf::{GgmlType, GgufFile};
use vla::models::turbovla::{graphs, TextPlan, TurboConfig, TurboPolicy};
use vla::modules::dinov3;
use vla::policy::{Observation, Policy, RuntimeOptions};
use vla::Tensor;

const TOL: f32 = 1e-4;
const FIXTURES: [&str; 3] = [
    "turbovla-tiny",
    "turbovla-tiny-layout",
    "turbovla-tiny-nopad",
];

fn options(dtype: GgmlType) -> turbovla::Options {
    turbovla::Options {
        dtype: Some(dtype),
        statistics: Some(PathBuf::from("libero")),
        ..Default::default()
    }
}

fn converted(dir: &Path, dtype: GgmlType) -> (GgufFile, Golden) {
    let c = turbovla::convert(
        &dir.join("turbovla.pth"),
        &options(dtype),
        &mut |_, _, _| {},
    )
    .unwrap();
    (reopened(&c.writer), Golden::load(dir))
}

fn input(g: &Golden, name: &str) -> Tensor<'static> {
    Tensor::from_f32(g.st.shape(name).unwrap().to_vec(), g.f32(name)).unwrap()
}

/// Row block `i` of the golden tensor `name` (split along its first dimension).
fn part(g: &Golden, name: &str, i: usize) -> Vec<f32> {
    let v = g.f32(name);
    let n = v.len() / g.st.shape(name).unwrap()[0];
    v[i * n..(i + 1) * n].to_vec()
}

/// The instruction's ids as the tokenizer gave them (the padding dropped).
fn ids(g: &Golden) -> Vec<u32> {
    let mask = g.st.i64("text.tokenizer_attention_mask").unwrap();
    g.i64("text.input_ids")
        .into_iter()
        .zip(mask)
        .filter(|&(_, m)| m == 1)
        .map(|(i, _)| i as u32)
        .collect()
}

fn u8s_as_f32(g: &Golden, name: &str) -> Vec<f32> {
    g.st.u8(name).unwrap().iter().map(|&m| m as f32).collect()
}

fn observation(g: &Golden) -> Observation {
    Observation {
        images: vec![g.u8_image("image.primary"), g.u8_image("image.wrist")],
        state: g.f32("state_raw"),
        prompt: None,
        tokens: Some(ids(g).into_iter().map(|i| i as i32).collect()),
        noise: None,
        token_mask: None,
    }
}

fn policy(file: GgufFile, backend: &str) -> Option<TurboPolicy> {
    support::open(backend)?;
    let opts = RuntimeOptions {
        backend: backend.into(),
        ..Default::default()
    };
    Some(TurboPolicy::new(file, &opts).unwrap())
}

/// The host's text plan (padding, sub-sentence mask, positions, key mask) is the
/// reference's, exactly.
#[test]
fn text_plans_are_the_references() {
    for name in FIXTURES {
        let (file, g) = converted(&fixture(name), GgmlType::F32);
        let cfg = TurboConfig::read(&file).unwrap();
        let plan = TextPlan::new(&cfg, &ids(&g), None);
        let want_ids: Vec<u32> = g.i64("text.input_ids").iter().map(|&i| i as u32).collect();
        assert_eq!(plan.ids, want_ids, "{name}: padded ids");
        let pos: Vec<f32> = g
            .i64("text.position_ids")
            .iter()
            .map(|&p| p as f32)
            .collect();
        assert_eq!(plan.positions, pos, "{name}: positions");
        assert_eq!(
            plan.bert_mask(),
            u8s_as_f32(&g, "text.bert_attention_mask"),
            "{name}: BERT's mask"
        );
        assert_eq!(
            plan.mask,
            u8s_as_f32(&g, "text.self_attention_mask"),
            "{name}: the enhancer's mask"
        );
        assert_eq!(
            plan.keys,
            u8s_as_f32(&g, "text.token_mask"),
            "{name}: the key mask"
        );
    }
}

/// Every stage fed the reference's own input.
fn stages_match(dir: &Path, backend: &str) {
    let (file, g) = converted(dir, GgmlType::F32);
    let name = dir.file_name().unwrap().to_string_lossy();
    let cfg = TurboConfig::read(&file).unwrap();
    let Some(st) = Stages::labelled(backend, format!("{name} {backend}"), TOL) else {
        return;
    };
    let s = cfg.vit.image_size;

    // the pixels from the frames, and each view's DINOv3 layers from the reference's pixels
    for (v, cam) in ["image.primary", "image.wrist"].iter().enumerate() {
        let img = g.u8_image(cam);
        let key = vla::preprocess::FrameKey {
            height: s,
            width: s,
            bytes: true,
        };
        let mut exe = st.build("pixels", &file, |gb| {
            Ok(vec![graphs::pixels(gb, "f", key)?])
        });
        let vla::policy::ImageData::RgbU8(bytes) = img.data else {
            unreachable!()
        };
        let frame = Tensor::from_u8(vec![s, s, 3], bytes).unwrap();
        st.check(
            format!("view {v} pixels"),
            &exe.run1(&[("f", &frame)]),
            &part(&g, "pixel_values", v),
        );
        let pixels = Tensor::from_f32(vec![3, s, s], part(&g, "pixel_values", v)).unwrap();
        let mut exe = st.build("dinov3", &file, |gb| {
            let x = gb.input("x", &[3, s, s]);
            dinov3::dinov3_layers(gb, x, &cfg.vit)
        });
        let out = exe.run(&[("x", &pixels)]);
        for (i, got) in out.iter().enumerate() {
            let want = match i {
                0 => format!("vit.view{v}.embeddings"),
                i => format!("vit.view{v}.layer{}", i - 1),
            };
            st.check(&want, &got.to_vec_f32().unwrap(), &g.f32(&want));
        }
    }

    // the image tokens from the reference's patch tokens
    let n = cfg.vit.n_patches();
    let towers: Vec<Tensor> = (0..2)
        .map(|v| input(&g, &format!("vit.view{v}.patch_tokens")))
        .collect();
    let mut exe = st.build("image tokens", &file, |gb| {
        let t: Vec<_> = (0..2)
            .map(|v| gb.input(format!("t{v}"), &[n, cfg.vit.hidden]))
            .collect();
        Ok(vec![graphs::image_tokens(gb, &cfg, &t)?])
    });
    let got = exe.run1(&[("t0", &towers[0]), ("t1", &towers[1])]);
    st.check("visual_positioned", &got, &g.f32("visual_positioned"));

    // BERT over the reference's ids, positions and mask
    let plan = TextPlan::new(&cfg, &ids(&g), None);
    let (b, l) = (plan.bert_len, plan.len);
    let t_ids = Tensor::from_f32(
        vec![b],
        plan.ids.iter().map(|&i| i as f32).collect::<Vec<f32>>(),
    )
    .unwrap();
    let t_pos = Tensor::from_f32(vec![b], plan.positions.clone()).unwrap();
    let t_mask = Tensor::from_f32(vec![b, b], plan.bert_mask()).unwrap();
    let mut exe = st.build("bert", &file, |gb| graphs::bert(gb, &cfg, b));
    let out = exe.run(&[
        (graphs::IDS, &t_ids),
        (graphs::POSITIONS, &t_pos),
        (graphs::BERT_MASK, &t_mask),
    ]);
    for (i, got) in out.iter().enumerate() {
        let want = match i {
            0 => "bert.embeddings".to_owned(),
            i => format!("bert.layer{}", i - 1),
        };
        st.check(&want, &got.to_vec_f32().unwrap(), &g.f32(&want));
    }
    let hidden = input(&g, "bert.last_hidden_state");
    let mut exe = st.build("text tokens", &file, |gb| {
        let x = gb.input("x", hidden.shape());
        Ok(vec![graphs::text_tokens(gb, &cfg, x, l)?])
    });
    st.check(
        "text.projection",
        &exe.run1(&[("x", &hidden)]),
        &g.f32("text.projection"),
    );

    // each fusion and enhancer layer
    let rows = 2 * n;
    let keys: Vec<f32> = (0..rows).flat_map(|_| plan.keys.iter().copied()).collect();
    let keys = Tensor::from_f32(vec![rows, l], keys).unwrap();
    let mask = Tensor::from_f32(vec![l, l], plan.mask.clone()).unwrap();
    let (mut v_in, mut l_in) = (input(&g, "visual_positioned"), input(&g, "text.projection"));
    for i in 0..cfg.fusion_layers {
        let mut exe = st.build(&format!("fusion {i}"), &file, |gb| {
            let (v, t) = (gb.input("v", v_in.shape()), gb.input("l", l_in.shape()));
            let (k, m) = (gb.input("k", keys.shape()), gb.input("m", mask.shape()));
            let (v, t) = graphs::fusion(gb, &cfg, (v, t), k, i)?;
            let e = graphs::enhancer(gb, &cfg, t, m, i)?;
            Ok(vec![v, t, e])
        });
        let out = exe.run(&[("v", &v_in), ("l", &l_in), ("k", &keys), ("m", &mask)]);
        let p = format!("interaction.layer{i}");
        for (got, want) in out.iter().zip([
            "visual_after_fusion",
            "text_after_fusion",
            "text_after_enhancer",
        ]) {
            let want = format!("{p}.{want}");
            st.check(&want, &got.to_vec_f32().unwrap(), &g.f32(&want));
        }
        v_in = input(&g, &format!("{p}.visual_after_fusion"));
        l_in = input(&g, &format!("{p}.text_after_enhancer"));
    }

    // the state tokens, and the decoder over the reference's memory
    let state = Tensor::from_f32(vec![1, cfg.state_dim], g.f32("state_norm")).unwrap();
    let mut exe = st.build("state tokens", &file, |gb| {
        Ok(vec![graphs::state_tokens(gb, &cfg)?])
    });
    st.check(
        "state_tokens",
        &exe.run1(&[(graphs::STATE, &state)]),
        &g.f32("state_tokens"),
    );
    let memory = input(&g, "decoder_memory");
    let mut exe = st.build("decoder", &file, |gb| {
        let m = gb.input("m", memory.shape());
        graphs::decoder(gb, &cfg, m)
    });
    let out = exe.run(&[("m", &memory)]);
    for (i, got) in out.iter().enumerate() {
        let want = match i == cfg.decoder_layers {
            true => "actions_pre_tanh".to_owned(),
            false => format!("decoder.layer{i}"),
        };
        st.check(&want, &got.to_vec_f32().unwrap(), &g.f32(&want));
    }
}

/// The chunk in the robot's units from the frames, ids and raw state, through the policy.
fn chunk_matches(dir: &Path, backend: &str) {
    let (file, g) = converted(dir, GgmlType::F32);
    let name = dir.file_name().unwrap().to_string_lossy();
    let Some(mut p) = policy(file, backend) else {
        return;
    };
    let chunk = p.predict(&observation(&g)).unwrap();
    assert!(chunk.warnings.is_empty(), "{:?}", chunk.warnings);
    check(
        &format!("{name} {backend}: env_actions"),
        &chunk.actions,
        &g.f32("env_actions"),
        TOL,
    );
}

backend_tests! {
    cpu_stages_match_turbovla, vulkan_stages_match_turbovla, ggml_stages_match_turbovla
    => |b| for f in FIXTURES { stages_match(&fixture(f), b) }
}

backend_tests! {
    cpu_chunk_matches_turbovla, vulkan_chunk_matches_turbovla, ggml_chunk_matches_turbovla
    => |b| for f in FIXTURES { chunk_matches(&fixture(f), b) }
}

/// bf16 matrices keep the chunk's direction.
#[test]
fn bf16_stays_close() {
    let dir = fixture("turbovla-tiny");
    let (file, g) = converted(&dir, GgmlType::BF16);
    let mut p = policy(file, "cpu").unwrap();
    let chunk = p.predict(&observation(&g)).unwrap();
    let c = cosine(&chunk.actions, &g.f32("env_actions"));
    assert!(c >= 0.999, "bf16 cosine {c}");
}

/// vla.cpp's own layout, written independently (tests/interop/vlacpp_turbovla_writer.py:
/// numpy and gguf-py, byte-identical to vla.cpp's converter on these checkpoints), runs as
/// our conversion does, bit for bit, on every backend: its statistics from `--statistics
/// libero` (vla.cpp's files carry none), its ids from the request (nor a vocabulary).
#[test]
fn vlacpp_layout_gives_our_conversions_chunk() {
    for name in ["turbovla-tiny", "turbovla-tiny-layout"] {
        let dir = fixture(name);
        let tmp = std::env::temp_dir().join(format!("vla-turbovla-vlacpp-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let theirs = tmp.join(format!("{name}.gguf"));
        let arg = |p: PathBuf| p.into_os_string();
        let args = [
            "--ckpt".into(),
            arg(dir.join("turbovla.pth")),
            "--out".into(),
            arg(theirs.clone()),
            "--bert".into(),
            arg(dir.join("bert")),
            "--dinov3-config".into(),
            arg(dir.join("dinov3/config.json")),
            // vla.cpp's converter takes bert-base-uncased alone (its ids and heads are built in)
            "--text-model-name".into(),
            "bert-base-uncased".into(),
        ];
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        support::interop("vlacpp_turbovla_writer.py", &args);
        let g = Golden::load(&dir);
        for backend in support::golden::backends() {
            let (file, _) = converted(&dir, GgmlType::F32);
            let Some(mut ours) = policy(file, backend) else {
                continue;
            };
            let want = ours.predict(&observation(&g)).unwrap().actions;
            let file = GgufFile::open(&theirs).unwrap();
            let refused = TurboPolicy::new(file, &RuntimeOptions::default())
                .err()
                .unwrap();
            assert!(
                refused.to_string().contains("--statistics libero"),
                "{refused}"
            );
            let opts = RuntimeOptions {
                backend: backend.into(),
                statistics: Some(PathBuf::from("libero")),
                ..Default::default()
            };
            let mut p = TurboPolicy::new(GgufFile::open(&theirs).unwrap(), &opts).unwrap();
            let got = p.predict(&observation(&g)).unwrap().actions;
            assert_eq!(
                got, want,
                "{name} {backend}: vla.cpp-layout TurboVLA vs our conversion"
            );
            check(
                &format!("{name} {backend}: vla.cpp layout"),
                &got,
                &g.f32("env_actions"),
                TOL,
            );
        }
    }
}

/// A text prompt gives the reference's ids through the tokenizer our conversion ships.
#[test]
fn text_prompt_gives_the_references_ids() {
    for name in FIXTURES {
        let dir = fixture(name);
        let (file, g) = converted(&dir, GgmlType::F32);
        let mut p = policy(file, "cpu").unwrap();
        let text = Observation {
            tokens: None,
            prompt: Some(g.meta["instruction"].as_str().unwrap().to_owned()),
            ..observation(&g)
        };
        let (ids_got, _) = p.instruction(&text).unwrap();
        assert_eq!(ids_got, ids(&g), "{name}: ids");
        let want = p.predict(&observation(&g)).unwrap().actions;
        assert_eq!(
            p.predict(&text).unwrap().actions,
            want,
            "{name}: the text's chunk"
        );
    }
}
