//! VLA-Adapter against the reference's own code (OpenHelix-Team/VLA-Adapter). The fixture
//! `tests/fixtures/vla-adapter-tiny` is the checkpoint folder the reference's evaluation loads
//! (config.json, model.safetensors, the head's `.pt` files, dataset_statistics.json, the
//! tokenizer), random weights at the released geometry (two cameras at 224, 512 task rows, 24
//! layers, 64 action queries, chunk 8) but narrow, plus the reference's inputs, stages and
//! chunk, made by `tools/golden/vla_adapter.py` (rerun instructions and every deviation
//! there). The tests convert it with `vla::convert::vla_adapter` and compare the pixels, each
//! tower, the projector, the language model's input and hidden states at the head's rows, the
//! head's blocks and the chunk, on cpu, vulkan and ggml.

#[macro_use]
mod support;

use std::path::Path;
use support::golden::prismatic::{input, observation, policy_on, towers_and_projector};
use support::golden::{Stages, CPU};
use support::{check, cosine, fixture, reopened, Golden};
use vla::convert::vla_adapter;
use vla::gguf::{GgmlType, GgufFile};
use vla::models::openvla::{self, OpenVlaArch};
use vla::models::vla_adapter::{graphs, VlaAdapterConfig};
use vla::policy::Policy;
use vla::Tensor;

const TOL: f32 = 1e-4;
const LAYERS: [usize; 5] = [1, 2, 12, 23, 24];
const BLOCKS: [usize; 4] = [0, 1, 22, 23];

fn dir() -> std::path::PathBuf {
    fixture("vla-adapter-tiny")
}

fn converted(dir: &Path, dtype: GgmlType) -> (GgufFile, Golden) {
    let opts = vla_adapter::Options {
        dtype: Some(dtype),
        ..Default::default()
    };
    let c = vla_adapter::convert(dir, &opts, &mut |_, _, _| {}).unwrap();
    (reopened(&c.writer), Golden::load(dir))
}

/// Every stage fed the reference's own input where the fixture has it.
fn stages_match(dir: &Path, backend: &str, tol: f32) {
    let (file, g) = converted(dir, GgmlType::F32);
    let name = dir.file_name().unwrap().to_string_lossy();
    let cfg = VlaAdapterConfig::read(&file).unwrap();
    let Some(st) = Stages::labelled(backend, format!("{name} {backend}"), tol) else {
        return;
    };
    towers_and_projector(&st, &g, &file, &cfg.vision, cfg.lm.hidden);

    // the language model's input from the prompt's ids and the reference's patches
    let mut ids = g.f32("ids");
    let n_prompt = ids.len();
    ids.push(cfg.io.stop_id as f32);
    let ids = Tensor::from_f32(vec![n_prompt + 1], ids).unwrap();
    let patches = input(&g, "patches");
    let mut exe = st.build("sequence", &file, |gb| {
        let (i, p) = (gb.input("ids", ids.shape()), gb.input("p", patches.shape()));
        Ok(vec![graphs::sequence(gb, &cfg, i, p)?])
    });
    st.check(
        "lm_in",
        &exe.run1(&[("ids", &ids), ("p", &patches)]),
        &g.f32("lm_in"),
    );

    // the hidden states at the head's rows, then the head from them and the projected state
    let lm_in = input(&g, "lm_in");
    let state = Tensor::from_f32(vec![1, 8], g.f32("proprio_norm")).unwrap();
    let mut exe = st.build("language model + head", &file, |gb| {
        let x = gb.input("x", lm_in.shape());
        let states = graphs::lm_states(gb, &cfg, x, n_prompt)?;
        let state = gb.input("state", &[1, 8]);
        let p = openvla::proprio(gb, state, cfg.lm.hidden)?;
        let mut out = vec![p];
        out.extend(states.iter().map(|s| s.1));
        out.extend(LAYERS.iter().map(|&l| states[l - 1].0));
        out.extend(graphs::head_rows(gb, &cfg, &states, p)?);
        Ok(out)
    });
    let out = exe.run(&[("x", &lm_in), ("state", &state)]);
    let v = |i: usize| out[i].to_vec_f32().unwrap();
    st.check("proprio_feat", &v(0), &g.f32("proprio_feat"));
    let layers = cfg.lm.layers;
    for l in 1..=layers {
        let want = format!("adapter.{l}");
        st.check(&want, &v(l), &g.f32(&want));
    }
    for (k, &l) in LAYERS.iter().enumerate() {
        let want = format!("task.{l}");
        st.check(&want, &v(1 + layers + k), &g.f32(&want));
    }
    let head = 1 + layers + LAYERS.len();
    st.check("head.x0", &v(head), &g.f32("head.x0"));
    for b in BLOCKS {
        let want = format!("head.blk.{b}");
        st.check(&want, &v(head + 1 + b), &g.f32(&want));
    }
    st.check("actions_norm", &v(out.len() - 1), &g.f32("actions_norm"));
}

/// The chunk in world units from the cameras' bytes, the raw state and the task's text.
fn chunk_matches(dir: &Path, backend: &str) {
    let (file, g) = converted(dir, GgmlType::F32);
    let name = dir.file_name().unwrap().to_string_lossy();
    let Some(mut p) = policy_on::<VlaAdapterConfig>(file, backend) else {
        return;
    };
    let chunk = p.predict(&observation(&g)).unwrap();
    assert_eq!((chunk.chunk_size, chunk.action_dim), (8, 7));
    assert!(chunk.warnings.is_empty(), "{:?}", chunk.warnings);
    check(
        &format!("{name} {backend}: actions"),
        &chunk.actions,
        &g.f32("actions"),
        TOL,
    );
}

backend_tests! {
    cpu_stages_match_the_reference, vulkan_stages_match_the_reference, ggml_stages_match_the_reference
    => |b| stages_match(&dir(), b, TOL)
}

backend_tests! {
    cpu_chunk_matches_the_reference, vulkan_chunk_matches_the_reference, ggml_chunk_matches_the_reference
    => |b| chunk_matches(&dir(), b)
}

/// The released sizes with random weights (~5.5 GB, not committed):
/// `tools/golden/vla_adapter.py --upstream DIR --size full --out OUT`, then
/// `VLA_VLA_ADAPTER_GOLDEN=OUT VLA_TEST_BACKEND=cpu cargo test --release --test
/// vla_adapter_golden -- --ignored`.
#[test]
#[ignore = "needs VLA_VLA_ADAPTER_GOLDEN=<dir> made by tools/golden/vla_adapter.py --size full"]
fn full_size_matches_the_reference() {
    let dir = support::golden::env_dir("VLA_VLA_ADAPTER_GOLDEN");
    let backend = support::golden::test_backend();
    stages_match(&dir, &backend, TOL);
    chunk_matches(&dir, &backend);
}

/// The processor's bicubic stretch of the 200 x 240 wrist frame and each tower's value map.
#[test]
fn pixels_match_the_processor() {
    let (file, g) = converted(&dir(), GgmlType::F32);
    let cfg = VlaAdapterConfig::read(&file).unwrap();
    let cams = openvla::cameras(&cfg.vision);
    let img = g.u8_image("image.1");
    for (cam, tower) in cams.iter().zip(["dino", "sig"]) {
        let name = format!("pixels.1.{tower}");
        check(&name, &cam.pixels(&img).unwrap(), &g.f32(&name), 1e-6);
    }
}

/// The head's rotary tables as the reference's bf16 head computes them.
#[test]
fn rotary_tables_are_the_references() {
    for n in [8, 65, 512] {
        let (cos, sin) = graphs::pair_tables(n, 4, 1e4);
        check(
            &format!("rope.{n}.cos"),
            &cos,
            &Golden::load(&dir()).f32(&format!("rope.{n}.cos")),
            0.0,
        );
        check(
            &format!("rope.{n}.sin"),
            &sin,
            &Golden::load(&dir()).f32(&format!("rope.{n}.sin")),
            0.0,
        );
    }
}

/// The task's text through the GGUF's tokenizer and the reference's template gives the
/// reference's ids.
#[test]
fn the_prompt_is_the_references() {
    let (file, g) = converted(&dir(), GgmlType::F32);
    let p = policy_on::<VlaAdapterConfig>(file, CPU).unwrap();
    let ids = p.prompt_ids(&observation(&g)).unwrap();
    let want: Vec<u32> = g.f32("ids").iter().map(|&x| x as u32).collect();
    assert_eq!(ids, want);
}

#[test]
fn bf16_weights_keep_the_chunk() {
    let (file, g) = converted(&dir(), GgmlType::BF16);
    let mut p = policy_on::<VlaAdapterConfig>(file, CPU).unwrap();
    let got = p.predict(&observation(&g)).unwrap().actions;
    let cos = cosine(&got, &g.f32("actions"));
    println!("bf16: cosine {cos:.6}");
    assert!(cos >= 0.999, "bf16 chunk cosine {cos}");
}

/// A file in vla.cpp's own `vla_adapter` layout (fused `qkv`, `vis.d.cls` / `reg` / `pos`,
/// `statistics_json`, no tokenizer), written by an independent gguf-py writer from the
/// fixture's checkpoint, gives the reference's chunk on every backend from the prompt's token
/// ids (a text prompt is refused: no tokenizer); written in bf16 throughout, as vla.cpp's
/// converter writes it, it keeps the chunk's direction.
#[test]
fn vlacpp_layout_gives_the_references_chunk() {
    let g = Golden::load(&dir());
    let write = |name: &str, flags: &[&str]| {
        let out = std::env::temp_dir().join(format!(
            "vla-vlacpp-vla-adapter-{name}-{}.gguf",
            std::process::id()
        ));
        let mut args = vec![dir().into_os_string(), out.clone().into_os_string()];
        args.extend(flags.iter().map(std::ffi::OsString::from));
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        support::interop("vlacpp_vla_adapter_writer.py", &args);
        out
    };
    let mut obs = observation(&g);
    obs.prompt = None;
    obs.tokens = Some(g.f32("ids").iter().map(|&t| t as i32).collect());
    let f32_file = write("f32", &[]);
    for backend in support::golden::backends() {
        let Some(mut p) =
            policy_on::<VlaAdapterConfig>(GgufFile::open(&f32_file).unwrap(), backend)
        else {
            continue;
        };
        let chunk = p.predict(&obs).unwrap();
        assert_eq!((chunk.chunk_size, chunk.action_dim), (8, 7));
        let what = format!("{backend}: vla.cpp-layout VLA-Adapter: actions");
        check(&what, &chunk.actions, &g.f32("actions"), TOL);
        if backend == CPU {
            let err = p.predict(&observation(&g)).unwrap_err().to_string();
            assert!(err.contains("tokenizer"), "a text prompt: {err}");
        }
    }
    let bf16_file = write("bf16", &["--bf16"]);
    let mut p = policy_on::<VlaAdapterConfig>(GgufFile::open(&bf16_file).unwrap(), CPU).unwrap();
    let cos = cosine(&p.predict(&obs).unwrap().actions, &g.f32("actions"));
    println!("vla.cpp-layout bf16: cosine {cos:.6}");
    assert!(cos >= 0.999, "vla.cpp-layout bf16 chunk cosine {cos}");
    for f in [f32_file, bf16_file] {
        let _ = std::fs::remove_file(f);
    }
}
