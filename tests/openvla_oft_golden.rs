//! OpenVLA-OFT against the reference's own code (moojink/openvla-oft). The fixture
//! `tests/fixtures/openvla-oft-tiny` is the checkpoint folder the reference's evaluation loads
//! (config.json, model.safetensors, the head's `.pt` files, dataset_statistics.json, the
//! tokenizer), random weights at the released geometry (two cameras at 224, the proprio token,
//! the 56 action slots, Llama 2's vocabulary) but narrow and 4 layers deep, plus the
//! reference's inputs, stages and chunk, made by `tools/golden/openvla_oft.py` (rerun
//! instructions, the emulated bidirectional attention and every deviation there). The tests
//! convert it with `vla::convert::openvla_oft` and compare each tower, the projector, the
//! proprio token, the language model's input and every layer's hidden state at the head's
//! rows, the head's blocks and the chunk, on cpu, vulkan and ggml.

#[macro_use]
mod support;

use support::golden::prismatic::{input, observation, policy_on, towers_and_projector};
use support::golden::{Stages, CPU};
use support::{check, cosine, fixture, reopened, Golden};
use vla::convert::openvla_oft;
use vla::gguf::{GgmlType, GgufFile};
use vla::layers::rms_norm;
use vla::models::openvla::{self, OpenVlaArch};
use vla::models::openvla_oft::{graphs, OpenVlaOftConfig};
use vla::modules::decoder::{DecoderStack, Rotary};
use vla::policy::{Observation, Policy};
use vla::Tensor;

const TOL: f32 = 1e-4;

fn converted(dtype: GgmlType) -> (GgufFile, Golden) {
    let dir = fixture("openvla-oft-tiny");
    let opts = openvla_oft::Options {
        dtype: Some(dtype),
        ..Default::default()
    };
    let c = openvla_oft::convert(&dir, &opts, &mut |_, _, _| {}).unwrap();
    (reopened(&c.writer), Golden::load(&dir))
}

/// Every stage fed the reference's own input (`hidden.{l}`: layer `l`'s output at the head's
/// rows; `actions_hidden`: the last after the final norm).
fn stages_match(backend: &str) {
    let (file, g) = converted(GgmlType::F32);
    let cfg = OpenVlaOftConfig::read(&file).unwrap();
    let Some(st) = Stages::labelled(backend, format!("openvla-oft-tiny {backend}"), TOL) else {
        return;
    };
    towers_and_projector(&st, &g, &file, &cfg.vision, cfg.lm.hidden);
    let h = cfg.lm.hidden;

    // the proprio token and the language model's input
    let state = Tensor::from_f32(vec![1, 8], g.f32("proprio_norm")).unwrap();
    let mut ids = g.f32("ids");
    ids.push(cfg.empty_id as f32);
    let n_prompt = ids.len();
    ids.push(cfg.io.stop_id as f32);
    let ids = Tensor::from_f32(vec![n_prompt + 1], ids).unwrap();
    let patches = input(&g, "patches");
    let mut exe = st.build("proprio + sequence", &file, |gb| {
        let s = gb.input("state", &[1, 8]);
        let p = openvla::proprio(gb, s, h)?;
        let (i, x) = (gb.input("ids", ids.shape()), gb.input("p", patches.shape()));
        Ok(vec![p, graphs::sequence(gb, &cfg, i, x, p)?])
    });
    let out = exe.run(&[("state", &state), ("ids", &ids), ("p", &patches)]);
    st.check(
        "proprio_feat",
        &out[0].to_vec_f32().unwrap(),
        &g.f32("proprio_feat"),
    );
    st.check("lm_in", &out[1].to_vec_f32().unwrap(), &g.f32("lm_in"));

    // every layer's hidden state at the head's rows (the last after the final norm), no mask
    let lm_in = input(&g, "lm_in");
    let (start, rows, layers) = (cfg.head_start(n_prompt), cfg.slots(), cfg.lm.layers);
    let mut exe = st.build("language model", &file, |gb| {
        let mut x = gb.input("x", lm_in.shape());
        let l = gb.shape(x)[0];
        let pos: Vec<f32> = (0..l).map(|i| i as f32).collect();
        let pos = gb.constant("pos", Tensor::from_f32(vec![l], pos)?)?;
        let dec = cfg.lm.decoder(false);
        let stack = DecoderStack {
            stack: "lm",
            layers,
            inter: cfg.lm.inter,
            cfg: &dec,
        };
        let mut out = Vec::new();
        for i in 0..layers {
            x = stack
                .layer(i)
                .forward(gb, x, Rotary::Positions(pos), None)?;
            out.push(gb.slice(x, 0, start, rows)?);
        }
        let last = out[layers - 1];
        out.push(rms_norm(gb, last, "lm.output_norm", cfg.lm.rms_eps)?);
        Ok(out)
    });
    let out = exe.run(&[("x", &lm_in)]);
    let names = (1..=layers).map(|l| format!("hidden.{l}"));
    for (got, want) in out.iter().zip(names.chain(["actions_hidden".into()])) {
        st.check(&want, &got.to_vec_f32().unwrap(), &g.f32(&want));
    }

    // the head from the reference's last hidden state
    let hidden = input(&g, "actions_hidden");
    let mut exe = st.build("head", &file, |gb| {
        let x = gb.input("x", hidden.shape());
        graphs::head(gb, &cfg, x)
    });
    let out = exe.run(&[("x", &hidden)]);
    let names = ["head.x0", "head.blk.0", "head.blk.1", "actions_norm"];
    for (got, name) in out.iter().zip(names) {
        st.check(name, &got.to_vec_f32().unwrap(), &g.f32(name));
    }
}

/// The chunk in world units from the cameras' bytes, the raw state and the task's text.
fn chunk_matches(backend: &str) {
    let (file, g) = converted(GgmlType::F32);
    let Some(mut p) = policy_on::<OpenVlaOftConfig>(file, backend) else {
        return;
    };
    let chunk = p.predict(&observation(&g)).unwrap();
    assert_eq!((chunk.chunk_size, chunk.action_dim), (8, 7));
    assert!(chunk.warnings.is_empty(), "{:?}", chunk.warnings);
    check(
        &format!("openvla-oft-tiny {backend}: actions"),
        &chunk.actions,
        &g.f32("actions"),
        TOL,
    );
}

backend_tests! {
    cpu_stages_match_the_reference, vulkan_stages_match_the_reference, ggml_stages_match_the_reference
    => stages_match
}

backend_tests! {
    cpu_chunk_matches_the_reference, vulkan_chunk_matches_the_reference, ggml_chunk_matches_the_reference
    => chunk_matches
}

/// The task's text through the GGUF's tokenizer (BOS first) and the reference's template gives
/// the reference's ids; the empty token is appended as `predict_action` does, and not twice
/// when a client's ids already end with it.
#[test]
fn the_prompt_is_the_references() {
    let (file, g) = converted(GgmlType::F32);
    let p = policy_on::<OpenVlaOftConfig>(file, CPU).unwrap();
    let ids = p.model_ids(&observation(&g)).unwrap();
    // the model's whole input_ids: the prompt's n_prompt, then the action slots and the stop
    let n = g.usize("n_prompt");
    let want: Vec<u32> = g.meta["ids_model"].as_array().unwrap()[..n]
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(ids, want);
    let given = Observation {
        prompt: None,
        tokens: Some(want.iter().map(|&t| t as i32).collect()),
        ..observation(&g)
    };
    assert_eq!(p.model_ids(&given).unwrap(), want);
}

#[test]
fn bf16_weights_keep_the_chunk() {
    let (file, g) = converted(GgmlType::BF16);
    let mut p = policy_on::<OpenVlaOftConfig>(file, CPU).unwrap();
    let got = p.predict(&observation(&g)).unwrap().actions;
    let cos = cosine(&got, &g.f32("actions"));
    println!("bf16: cosine {cos:.6}");
    assert!(cos >= 0.999, "bf16 chunk cosine {cos}");
}

/// A file in vla.cpp's own `openvla_oft` layout (fused `qkv`, `vis.d.cls` / `reg` / `pos`,
/// `statistics_json`, no tokenizer), written by an independent gguf-py writer from the
/// fixture's checkpoint, gives the reference's chunk on every backend from the prompt's token
/// ids (the reference's `input_ids` up to the empty token; a text prompt is refused: no
/// tokenizer); written in bf16 throughout, as vla.cpp's converter writes it, it gives the same
/// chunk on cpu (the fixture's weights are bf16 values).
#[test]
fn vlacpp_layout_gives_the_references_chunk() {
    let dir = fixture("openvla-oft-tiny");
    let g = Golden::load(&dir);
    let write = |name: &str, flags: &[&str]| {
        let out = std::env::temp_dir().join(format!(
            "vla-vlacpp-openvla-oft-{name}-{}.gguf",
            std::process::id()
        ));
        let mut args = vec![dir.clone().into_os_string(), out.clone().into_os_string()];
        args.extend(flags.iter().map(std::ffi::OsString::from));
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        support::interop("vlacpp_openvla_oft_writer.py", &args);
        out
    };
    let n = g.usize("n_prompt");
    let ids: Vec<i32> = g.meta["ids_model"].as_array().unwrap()[..n]
        .iter()
        .map(|x| x.as_i64().unwrap() as i32)
        .collect();
    let obs = Observation {
        prompt: None,
        tokens: Some(ids),
        ..observation(&g)
    };
    let f32_file = write("f32", &[]);
    for backend in support::golden::backends() {
        let Some(mut p) =
            policy_on::<OpenVlaOftConfig>(GgufFile::open(&f32_file).unwrap(), backend)
        else {
            continue;
        };
        let chunk = p.predict(&obs).unwrap();
        assert_eq!((chunk.chunk_size, chunk.action_dim), (8, 7));
        let what = format!("{backend}: vla.cpp-layout OpenVLA-OFT: actions");
        check(&what, &chunk.actions, &g.f32("actions"), TOL);
        if backend == CPU {
            let err = p.predict(&observation(&g)).unwrap_err().to_string();
            assert!(err.contains("tokenizer"), "a text prompt: {err}");
        }
    }
    let bf16_file = write("bf16", &["--bf16"]);
    let mut p = policy_on::<OpenVlaOftConfig>(GgufFile::open(&bf16_file).unwrap(), CPU).unwrap();
    let got = p.predict(&obs).unwrap().actions;
    let what = "cpu: vla.cpp-layout bf16 OpenVLA-OFT: actions";
    check(what, &got, &g.f32("actions"), TOL);
    for f in [f32_file, bf16_file] {
        let _ = std::fs::remove_file(f);
    }
}
