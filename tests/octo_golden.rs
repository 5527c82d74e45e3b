//! Octo against the JAX reference (octo-models/octo 241fb35). The fixtures are Octo
//! checkpoints as `OctoModel.save_pretrained` writes them, with random (re-randomized)
//! weights and a tiny T5, plus the reference's inputs, intermediates, recorded DDPM noise and
//! chunks, made by `tools/golden/octo.py` (rerun instructions there): `octo-tiny` (the
//! diffusion head, `use_correct_attention`) and `octo-tiny-l1` (the L1 head with attention
//! pooling, proprio tokens, the December 2023 attention rule). The tests convert them with
//! `vla::convert::octo` and compare every stem stage, T5's output, the transformer's input and
//! mask, each block, the head and the chunk, on cpu, vulkan and ggml.

#[macro_use]
mod support;

use std::path::Path;
use support::golden::Stages;
use support::{check, cosine, fixture, reopened, Golden};
use vla::convert::octo;
use vla::gguf::{GgmlType, GgufFile};
use vla::models::octo::{graphs, rules, Head, OctoConfig, OctoPolicy};
use vla::policy::{Image, ImageData, Observation, Policy, RuntimeOptions};
use vla::preprocess::FrameKey;
use vla::Tensor;

const TOL: f32 = 1e-4;

fn converted(dir: &Path, dtype: GgmlType) -> (GgufFile, Golden) {
    let opts = octo::Options {
        dtype: Some(dtype),
        no_tokenizer: true,
        ..Default::default()
    };
    let c = octo::convert(dir, &opts, &mut |_, _, _| {}).unwrap();
    (reopened(&c.writer), Golden::load(dir))
}

fn shape(g: &Golden, name: &str) -> Vec<usize> {
    g.st.shape(name).unwrap().to_vec()
}

fn input(g: &Golden, name: &str) -> Tensor<'static> {
    Tensor::from_f32(shape(g, name), g.f32(name)).unwrap()
}

/// Row `i` of the golden tensor `name` (split along its first dimension).
fn row(g: &Golden, name: &str, i: usize) -> Vec<f32> {
    let v = g.f32(name);
    let n = v.len() / shape(g, name)[0];
    v[i * n..(i + 1) * n].to_vec()
}

/// Camera `cam`'s frame at window step `t` (`image.<cam>` is `[window, side, side, 3]`).
fn frame(g: &Golden, cam: &str, t: usize) -> Image {
    let name = format!("image.{cam}");
    let s = shape(g, &name);
    let n = s[1] * s[2] * 3;
    let bytes = g.st.u8(&name).unwrap()[t * n..(t + 1) * n].to_vec();
    Image {
        height: s[1],
        width: s[2],
        data: ImageData::RgbU8(bytes),
    }
}

fn bytes(img: &Image) -> Tensor<'static> {
    let ImageData::RgbU8(d) = &img.data else {
        unreachable!()
    };
    Tensor::from_u8(vec![img.height, img.width, 3], d.clone()).unwrap()
}

/// The instruction's real ids (the reference pads them to 16 and masks the padding in T5).
fn ids(g: &Golden) -> Vec<i32> {
    let mask = g.ids("attention_mask");
    g.ids("input_ids")
        .into_iter()
        .zip(mask)
        .filter(|&(_, m)| m == 1)
        .map(|(i, _)| i)
        .collect()
}

/// The noise the reference drew for the last window step: the start, then each step's.
fn noise(g: &Golden, cfg: &OctoConfig) -> Vec<f32> {
    let last = cfg.window - 1;
    let mut v = row(g, "noise.init", last);
    let steps = g.f32("noise.steps");
    let ha = cfg.horizon * cfg.action_dim;
    for s in 0..cfg.steps {
        let at = (s * cfg.window + last) * ha;
        v.extend(&steps[at..at + ha]);
    }
    v
}

/// The proprio the reference was given, back in raw units (the reference's input is
/// normalized by `dataset`'s statistics; the request's state is raw), oldest step first.
fn raw_proprio(g: &Golden, dir: &Path, dataset: &str) -> Vec<f32> {
    if !g.has("proprio") {
        return vec![];
    }
    let text = std::fs::read_to_string(dir.join("dataset_statistics.json")).unwrap();
    let stats = vla::models::octo::DatasetStats::parse(&text).unwrap();
    let (_, s) = stats.select(Some(dataset)).unwrap();
    let p = s.proprio.unwrap();
    let z = g.f32("proprio");
    z.iter()
        .enumerate()
        .map(|(i, &v)| {
            let d = i % p.mean.len();
            v * (p.std[d] + 1e-8) + p.mean[d]
        })
        .collect()
}

fn observation(g: &Golden, dir: &Path, cfg: &OctoConfig, dataset: &str) -> Observation {
    let images = (0..cfg.window)
        .flat_map(|t| cfg.cameras().map(move |(c, _)| (t, c)))
        .map(|(t, c)| frame(g, c, t))
        .collect();
    Observation {
        images,
        state: raw_proprio(g, dir, dataset),
        prompt: None,
        tokens: Some(ids(g)),
        noise: (cfg.head == Head::Diffusion).then(|| noise(g, cfg)),
        token_mask: None,
    }
}

fn policy(file: GgufFile, backend: &str, dataset: &str) -> Option<OctoPolicy> {
    support::open(backend)?;
    let opts = RuntimeOptions {
        backend: backend.into(),
        embodiment: Some(dataset.into()),
        ..Default::default()
    };
    Some(OctoPolicy::new(file, &opts).unwrap())
}

/// The one-hot bins of each window step's proprio, as the reference binned it.
fn proprio_inputs(g: &Golden, cfg: &OctoConfig) -> Vec<(String, Tensor<'static>)> {
    if cfg.proprio_dim == 0 {
        return vec![];
    }
    let bins = g.i64("proprio.bins");
    let (pd, n) = (cfg.proprio_dim, cfg.proprio_bins);
    (0..cfg.window)
        .map(|t| {
            let mut one_hot = vec![0.0; pd * n];
            for i in 0..pd {
                one_hot[i * n + bins[t * pd + i] as usize] = 1.0;
            }
            let t_ = Tensor::from_f32(vec![pd, n], one_hot).unwrap();
            (graphs::proprio_input(t), t_)
        })
        .collect()
}

/// Every stage fed the reference's own input.
fn stages_match_octo(dir: &Path, backend: &str) {
    let (file, g) = converted(dir, GgmlType::F32);
    let name = dir.file_name().unwrap().to_string_lossy();
    let cfg = OctoConfig::read(&file).unwrap();
    let Some(st) = Stages::labelled(backend, format!("{name} {backend}"), TOL) else {
        return;
    };
    let file = vla::models::octo::standardize_stems(file, &cfg).unwrap();
    let file = vla::models::common::kernels_as_matrices(file).unwrap();

    // each camera's stem, window step 0
    for (cam, stem) in cfg.cameras() {
        let img = frame(&g, cam, 0);
        let key = FrameKey {
            height: img.height,
            width: img.width,
            bytes: true,
        };
        let mut exe = st.build(&format!("{cam} stem"), &file, |gb| {
            let x = graphs::stem_input(gb, "frame", key, stem)?;
            let p = vla::layers::Scope::new(format!("octo.obs.{cam}"));
            graphs::stem(gb, &p, stem, x)
        });
        let out = exe.run(&[("frame", &bytes(&img))]);
        for (i, got) in out.iter().enumerate() {
            let want = match i {
                4 => format!("stem.{cam}.out"),
                i => format!("stem.{cam}.{i}"),
            };
            st.check(&want, &got.to_vec_f32().unwrap(), &g.f32(&want));
        }
    }

    // T5 over the padded ids
    let s = cfg.lang_tokens;
    let t5_ids: Vec<f32> = g.ids("input_ids").iter().map(|&i| i as f32).collect();
    let t5_mask: Vec<f32> = g
        .ids("attention_mask")
        .iter()
        .map(|&m| if m == 1 { 0.0 } else { graphs::MASKED })
        .collect();
    let tokens = Tensor::from_f32(vec![s], t5_ids).unwrap();
    let t5_mask = Tensor::from_f32(vec![1, 1, s], t5_mask).unwrap();
    let mut exe = st.build("t5", &file, |gb| Ok(vec![graphs::t5_encoder(gb, &cfg)?]));
    let buckets = rules::t5_buckets(s, cfg.t5_buckets, cfg.t5_max_distance);
    let buckets = Tensor::from_f32(vec![s * s], buckets).unwrap();
    let t5_in = [
        (graphs::TOKENS, &tokens),
        (graphs::T5_MASK, &t5_mask),
        (graphs::T5_BUCKETS, &buckets),
    ];
    let got = exe.run1(&t5_in);
    st.check("t5.out", &got, &g.f32("t5.out"));

    // the whole sequence from the frames, ids and proprio
    let frames: Vec<(String, Tensor)> = (0..cfg.window)
        .flat_map(|t| {
            cfg.cameras()
                .enumerate()
                .map(move |(c, (cam, _))| (t, c, cam))
        })
        .map(|(t, c, cam)| (graphs::frame_input(&cfg, t, c), bytes(&frame(&g, cam, t))))
        .collect();
    let keys: Vec<FrameKey> = frames
        .iter()
        .map(|(_, t)| FrameKey {
            height: t.shape()[0],
            width: t.shape()[1],
            bytes: true,
        })
        .collect();
    let proprio = proprio_inputs(&g, &cfg);
    let mut exe = st.build("sequence", &file, |gb| {
        Ok(vec![graphs::sequence(gb, &cfg, &keys)?])
    });
    let mut inputs: Vec<(&str, &Tensor)> = frames.iter().map(|(n, t)| (n.as_str(), t)).collect();
    inputs.extend(proprio.iter().map(|(n, t)| (n.as_str(), t)));
    inputs.extend(t5_in);
    st.check(
        "transformer.in",
        &exe.run1(&inputs),
        &g.f32("transformer.in"),
    );

    // the mask, exactly
    let mask = vla::models::octo::sequence_mask(&cfg, 0);
    let want: Vec<f32> =
        g.st.u8("attention.mask")
            .unwrap()
            .iter()
            .map(|&m| m as f32)
            .collect();
    assert_eq!(
        mask, want,
        "{name}: attention mask ({})",
        g.meta["attention_rule"]
    );
    let n = shape(&g, "transformer.in")[0];
    let mask = Tensor::from_f32(vec![n, n], mask).unwrap();

    // each block fed the reference's input, then the whole transformer
    let mut x = input(&g, "transformer.in");
    for i in 0..cfg.layers {
        let mut exe = st.build(&format!("block {i}"), &file, |gb| {
            let (xi, m) = (gb.input("x", x.shape()), gb.input("mask", mask.shape()));
            Ok(vec![graphs::block(gb, &cfg, xi, m, i)?])
        });
        let want = format!("transformer.layer.{i}");
        st.check(
            &want,
            &exe.run1(&[("x", &x), ("mask", &mask)]),
            &g.f32(&want),
        );
        x = input(&g, &want);
    }
    let x_in = input(&g, "transformer.in");
    let mut exe = st.build("transformer", &file, |gb| {
        let x = gb.input("x", x_in.shape());
        let outs = graphs::transformer(gb, &cfg, x)?;
        Ok(vec![*outs.last().unwrap()])
    });
    let got = exe.run1(&[("x", &x_in), (graphs::MASK, &mask)]);
    st.check("transformer.out", &got, &g.f32("transformer.out"));

    // the head on the reference's transformer output
    let out = input(&g, "transformer.out");
    let last = cfg.window - 1;
    match cfg.head {
        Head::Diffusion => {
            let steps = rules::ddpm_steps(cfg.steps, cfg.schedule_s);
            let w = file
                .dequantize("octo.head.diffusion.time_fourier.weight")
                .unwrap();
            let tff = vla::models::octo::time_features(&w, &steps);
            let ha = cfg.horizon * cfg.action_dim;
            let noise = Tensor::from_f32(vec![cfg.steps + 1, ha], noise(&g, &cfg)).unwrap();
            let mut exe = st.build("diffusion head", &file, |gb| {
                let x = gb.input("x", out.shape());
                let r = graphs::last_readouts(gb, &cfg, x)?;
                let emb = graphs::mean_rows(gb, r)?;
                let (eps, a) = graphs::diffusion(gb, &cfg, emb, &tff, &steps, None)?;
                Ok(vec![emb, eps, a])
            });
            let got = exe.run(&[("x", &out), (graphs::NOISE, &noise)]);
            let got: Vec<Vec<f32>> = got.iter().map(|t| t.to_vec_f32().unwrap()).collect();
            st.check(
                "embedding (last step)",
                &got[0],
                &row(&g, "embedding", last),
            );
            st.check(
                "eps.first (last step)",
                &got[1],
                &row(&g, "eps.first", last),
            );
            st.check("actions.normalized", &got[2], &g.f32("actions.normalized"));
        }
        Head::L1 => {
            let mut exe = st.build("l1 head", &file, |gb| {
                let x = gb.input("x", out.shape());
                let r = graphs::last_readouts(gb, &cfg, x)?;
                Ok(vec![graphs::l1(gb, &cfg, r)?])
            });
            let m = cfg.max_action;
            let got: Vec<f32> = exe
                .run1(&[("x", &out)])
                .iter()
                .map(|v| (v / m).tanh() * m)
                .collect();
            st.check("actions.normalized", &got, &g.f32("actions.normalized"));
        }
    }
}

/// The chunk in world units from the frames, ids, raw proprio and noise, through the policy,
/// with each dataset's statistics (`small_arm` has fewer action dimensions than the model:
/// the sampler keeps the others at noise, as the reference's does).
fn chunk_matches_octo(dir: &Path, backend: &str) {
    for (dataset, want) in [
        ("bridge_dataset", "actions"),
        ("small_arm", "actions.small_arm"),
    ] {
        let (file, g) = converted(dir, GgmlType::F32);
        let name = dir.file_name().unwrap().to_string_lossy();
        let cfg = OctoConfig::read(&file).unwrap();
        let Some(mut p) = policy(file, backend, dataset) else {
            return;
        };
        let chunk = p.predict(&observation(&g, dir, &cfg, dataset)).unwrap();
        assert!(chunk.warnings.is_empty(), "{:?}", chunk.warnings);
        if cfg.head == Head::L1 {
            // the L1 head draws no noise: a request's is not read, and the reply says so
            let ha = cfg.horizon * cfg.action_dim;
            let noisy = Observation {
                noise: Some(vec![0.5; ha]),
                ..observation(&g, dir, &cfg, dataset)
            };
            let got = p.predict(&noisy).unwrap();
            assert_eq!(got.actions, chunk.actions, "noise changed the L1 chunk");
            assert!(got.warnings.iter().any(|w| w.contains("noise")), "{got:?}");
        }
        let want_v = g.f32(want);
        assert_eq!(chunk.actions.len(), want_v.len(), "{want}");
        check(
            &format!("{name} {backend}: {want} ({dataset})"),
            &chunk.actions,
            &want_v,
            TOL,
        );
    }
}

backend_tests! {
    cpu_stages_match_octo, vulkan_stages_match_octo, ggml_stages_match_octo
    => |b| stages_match_octo(&fixture("octo-tiny"), b)
}

backend_tests! {
    cpu_chunk_matches_octo, vulkan_chunk_matches_octo, ggml_chunk_matches_octo
    => |b| chunk_matches_octo(&fixture("octo-tiny"), b)
}

backend_tests! {
    cpu_l1_matches_octo, vulkan_l1_matches_octo, ggml_l1_matches_octo
    => |b| {
        stages_match_octo(&fixture("octo-tiny-l1"), b);
        chunk_matches_octo(&fixture("octo-tiny-l1"), b);
    }
}

/// The converted config is the fixture's (sizes from config.json and the parameters).
#[test]
fn converted_config_is_the_fixtures() {
    for (dir, head) in [("octo-tiny", Head::Diffusion), ("octo-tiny-l1", Head::L1)] {
        let (file, g) = converted(&fixture(dir), GgmlType::F32);
        let cfg = OctoConfig::read(&file).unwrap();
        let want = &g.meta["config"];
        assert_eq!(cfg.head, head);
        assert_eq!(
            cfg.d,
            want["token_embedding_size"].as_u64().unwrap() as usize
        );
        assert_eq!(cfg.layers, want["num_layers"].as_u64().unwrap() as usize);
        assert_eq!(cfg.window, want["window"].as_u64().unwrap() as usize);
        assert_eq!(
            cfg.correct_attention,
            want["use_correct_attention"].as_bool().unwrap()
        );
        assert_eq!(
            cfg.t5_heads,
            want["t5"]["num_heads"].as_u64().unwrap() as usize
        );
        for (cam, s) in cfg.cameras() {
            assert_eq!(
                s.side,
                want["cameras"][cam]["side"].as_u64().unwrap() as usize
            );
            assert_eq!(
                s.grid(),
                want["cameras"][cam]["grid"].as_u64().unwrap() as usize
            );
        }
    }
}

/// bf16 matmul weights: the chunk stays close to the reference's f32 one.
#[test]
fn bf16_weights_stay_close() {
    let dir = fixture("octo-tiny");
    let (file, g) = converted(&dir, GgmlType::BF16);
    let cfg = OctoConfig::read(&file).unwrap();
    let mut p = policy(file, "cpu", "bridge_dataset").unwrap();
    let got = p
        .predict(&observation(&g, &dir, &cfg, "bridge_dataset"))
        .unwrap();
    let cos = cosine(&got.actions, &g.f32("actions"));
    println!("octo bf16: chunk cosine {cos:.6}");
    assert!(cos >= support::golden::BF16_MIN_COSINE, "cosine {cos}");
}

/// vla.cpp's layout of the same checkpoint, written independently
/// (tests/interop/vlacpp_octo_writer.py: numpy, msgpack and gguf-py, as vla.cpp's converter
/// names and shapes every tensor) runs as our conversion does, bit for bit, on every backend,
/// and so matches the reference. (Its keys do not say which attention rule or whether the
/// task repeats: vla.cpp's runtime assumes octo-small-1.5's, as ours then does; the December
/// rule fixture is not such a model.) Its tokenizer, SentencePiece's own model, tokenizes the
/// task's text into the ids the chunk is made from.
#[test]
fn vlacpp_layout_gives_our_conversions_chunk() {
    let dir = fixture("octo-tiny");
    let tmp = std::env::temp_dir().join(format!("vla-octo-vlacpp-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let theirs = tmp.join("vlacpp.gguf");
    let spm = dir.join("t5-tiny");
    support::interop(
        "vlacpp_octo_writer.py",
        &[
            dir.as_os_str(),
            theirs.as_os_str(),
            "--tokenizer".as_ref(),
            spm.as_os_str(),
        ],
    );
    let g = Golden::load(&dir);
    let prompt = g_prompt(&dir);
    for backend in support::golden::backends() {
        let (file, _) = converted(&dir, GgmlType::F32);
        let cfg = OctoConfig::read(&file).unwrap();
        let Some(mut ours) = policy(file, backend, "bridge_dataset") else {
            continue;
        };
        let obs = observation(&g, &dir, &cfg, "bridge_dataset");
        let want = ours.predict(&obs).unwrap().actions;
        let file = GgufFile::open(&theirs).unwrap();
        let mut p = policy(file, backend, "bridge_dataset").unwrap();
        let got = p.predict(&obs).unwrap().actions;
        assert_eq!(
            got, want,
            "{backend}: vla.cpp-layout Octo vs our conversion"
        );
        check(
            &format!("{backend}: vla.cpp layout"),
            &got,
            &g.f32("actions"),
            TOL,
        );
        // Its tokenizer is SentencePiece's model (`octo.tokenizer.spm_model`): the task's
        // text gives the ids, and so the chunk.
        let text = Observation {
            tokens: None,
            prompt: Some(prompt.clone()),
            ..obs
        };
        assert_eq!(
            p.predict(&text).unwrap().actions,
            got,
            "{backend}: vla.cpp-layout Octo, text prompt vs ids"
        );
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

/// The converter ships the checkpoint's T5 tokenizer (its `t5-tiny` folder, SentencePiece
/// unigram with T5's normalizer): the task's text gives the reference's ids (12 pieces and
/// `</s>`), so the text request's chunk is the ids request's; a text of more than 16 tokens,
/// which the reference's tokenizer would cut, is refused naming the bound.
#[test]
fn text_prompt_tokenizes_as_octo() {
    let dir = fixture("octo-tiny");
    let opts = octo::Options {
        dtype: Some(GgmlType::F32),
        ..Default::default()
    };
    let c = octo::convert(&dir, &opts, &mut |_, _, _| {}).unwrap();
    assert!(
        c.notes.iter().any(|n| n.contains("spiece.model")),
        "the SentencePiece model ships too (vla.cpp reads it): {:?}",
        c.notes
    );
    let file = reopened(&c.writer);
    let tok = vla::tokenizer::Tokenizer::from_gguf(&file).unwrap();
    let prompt = g_prompt(&dir);
    let want: Vec<u32> = ids(&Golden::load(&dir)).iter().map(|&i| i as u32).collect();
    assert_eq!(tok.encode(&prompt).unwrap(), want, "{prompt:?}");
    let g = Golden::load(&dir);
    let cfg = OctoConfig::read(&file).unwrap();
    let mut p = policy(file, "cpu", "bridge_dataset").unwrap();
    let by_ids = p
        .predict(&observation(&g, &dir, &cfg, "bridge_dataset"))
        .unwrap();
    let text = Observation {
        tokens: None,
        prompt: Some(prompt.clone()),
        ..observation(&g, &dir, &cfg, "bridge_dataset")
    };
    assert_eq!(p.predict(&text).unwrap().actions, by_ids.actions);
    let long = Observation {
        prompt: Some(format!("{prompt} then put the red block back on the table")),
        ..text
    };
    let err = p.predict(&long).unwrap_err().to_string();
    assert!(err.contains("bound of 16"), "{err}");
}

fn g_prompt(dir: &Path) -> String {
    Golden::load(dir).meta["prompt"]
        .as_str()
        .unwrap()
        .to_owned()
}
