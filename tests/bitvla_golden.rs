//! BitVLA against the reference's own code (ustcwhy/BitVLA: its BitLinear SigLIP, BitNet and
//! LLaVA files over transformers 4.51.3, and its OFT-style wrapper). The fixture
//! `tests/fixtures/bitvla-tiny` is the checkpoint folder the reference's LIBERO evaluation
//! loads (config.json, model.safetensors of bf16 master weights, the head's `.pt` files,
//! dataset_statistics.json, the tokenizer with the chat template): random ternary weights at
//! the released geometry (two cameras at 224, 512 image placeholders in the prompt, the proprio
//! placeholder, 56 action slots, the 128264-token vocabulary), narrow and 3 / 4 layers deep,
//! plus the reference's inputs, stages and chunk, made by `tools/golden/bitvla.py`.
//!
//! The reference fake-quantizes (`round(x * s) / s` in floats); we run its integer form
//! (int8 activation codes times ternary codes, then the scales). Both round each activation
//! to an int8 code, a step function: a rounding-level difference in a site's input moves a
//! code by one where a value sits within that difference of a rounding boundary, which moves
//! the site's output by up to a code's worth. The checks say how far that goes: the integer
//! sites fed the reference's own inputs give its codes and outputs exactly (to f32 rounding);
//! the float stages (projector, proprio, sequence, head) match to 1e-5; the quantized stages
//! (tower, each language-model layer, the chunk) within bounds measured against the
//! reference's own sensitivity (its chunk moves by 3.3e-2 when SigLIP's eager attention is
//! swapped for SDPA: `tools/golden/bitvla.py`).

#[macro_use]
mod support;

use support::golden::prismatic::{input, observation, policy_on};
use support::golden::{Stages, CPU};
use support::{cosine, fixture, reopened, Golden};
use vla::convert::bitvla;
use vla::foldquant::ternary_form;
use vla::gguf::{GgmlType, GgufFile};
use vla::layers::linear;
use vla::models::bitvla::{graphs, BitvlaConfig};
use vla::models::openvla::{self, OpenVlaArch, PromptShape};
use vla::models::openvla_oft::graphs::l1_head;
use vla::modules::vision::{tower_layer, vision_tower};
use vla::ops::foldquant::{act_row, ActPrologue, ActRule};
use vla::ops::ternary;
use vla::policy::Policy;
use vla::Tensor;

/// Float stages (no int8 rounding between the reference's input and the output).
const TOL: f32 = 1e-5;
/// Stages through int8 activation codes fed the reference's input (see the module doc): a
/// code moved by one at a rounding boundary moves an output by a code's worth, 1 / 127 of
/// its row's largest value at most times a weight step.
const QUANT_TOL: f32 = 1e-2;

fn converted(dtype: GgmlType) -> (GgufFile, Golden) {
    let dir = fixture("bitvla-tiny");
    let opts = bitvla::Options {
        dtype: Some(dtype),
        ..Default::default()
    };
    let c = bitvla::convert(&dir, &opts, &mut |_, _, _| {}).unwrap();
    (
        ternary_form(reopened(&c.writer)).unwrap(),
        Golden::load(&dir),
    )
}

fn shape(g: &Golden) -> PromptShape {
    let layout = &g.meta["layout"];
    PromptShape {
        len: layout["prompt_end"].as_u64().unwrap() as usize,
        image_start: layout["image.0"][0].as_u64().unwrap() as usize,
    }
}

/// The two recorded BitLinear sites: our weight's codes and step are the reference's, our
/// activation codes of its input are its codes, and our integer site gives its output.
fn integer_sites_match(backend: &str) {
    let (file, g) = converted(GgmlType::F32);
    let Some(st) = Stages::labelled(backend, format!("bitvla-tiny {backend}"), TOL) else {
        return;
    };
    for (site, ours, bias) in [
        ("lm0_q", "lm.blk.0.attn_q", false),
        ("vit0_fc1", "vit.blk.0.fc1", true),
    ] {
        let p = format!("bit.{site}");
        let x = input(&g, &format!("{p}.x"));
        let (rows, k) = (x.shape()[0], x.shape()[1]);
        if backend == CPU {
            let w = file.tensor_info(&format!("{ours}.weight")).unwrap();
            let codes = ternary::unpack(file.tensor_bytes(w)).unwrap();
            let want: Vec<i8> = g
                .f32(&format!("{p}.wcodes"))
                .iter()
                .map(|&c| c as i8)
                .collect();
            assert_eq!(codes, want, "{site}: ternary codes");
            // the mean in f64 rounded once; torch's f32 reduction may land an ulp away
            let step = file.dequantize(&format!("{ours}.scale")).unwrap()[0];
            let want = g.f32(&format!("{p}.wmean"))[0];
            assert!(
                (step - want).abs() <= 2.0 * f32::EPSILON * want,
                "{site}: step {step} vs {want}"
            );
            let prologue = ActPrologue {
                norm: None,
                ascale: None,
                block: 1,
                bits: 8,
                clip: 1.0,
                rule: ActRule::BitNet,
            };
            let xs = x.as_f32().unwrap();
            let got: Vec<f32> = (xs.chunks(k))
                .flat_map(|r| act_row(r, &prologue).0)
                .map(f32::from)
                .collect();
            assert_eq!(
                got,
                g.f32(&format!("{p}.xcodes")),
                "{site}: activation codes"
            );
        }
        let n = g.st.shape(&format!("{p}.y")).unwrap()[1];
        let mut exe = st.build(site, &file, |gb| {
            let x = gb.input("x", &[rows, k]);
            Ok(vec![linear(gb, x, ours, n, bias)?])
        });
        st.check(&p, &exe.run1(&[("x", &x)]), &g.f32(&format!("{p}.y")));
    }
}

/// Every stage fed the reference's own input.
fn stages_match(backend: &str) {
    let (file, g) = converted(GgmlType::F32);
    let cfg = BitvlaConfig::read(&file).unwrap();
    let Some(st) = Stages::labelled(backend, format!("bitvla-tiny {backend}"), TOL) else {
        return;
    };
    let s = cfg.vision.image_size;
    // the tower: camera 0's embeddings from our pixels of image.0, then each layer from the
    // reference's input to it; camera 1 whole from the reference's processed pixels
    let px0 = cfg.camera().pixels(&g.u8_image("image.0")).unwrap();
    let px0 = Tensor::from_f32(vec![3, s, s], px0).unwrap();
    let mut embed = cfg.vision.tower();
    embed.layers = 0;
    let mut exe = st.build("tower embeddings", &file, |gb| {
        let x = gb.input("x", &[3, s, s]);
        Ok(vec![vision_tower(gb, x, &embed)?])
    });
    st.check(
        "vit.0.hidden.0",
        &exe.run1(&[("x", &px0)]),
        &g.f32("vit.0.hidden.0"),
    );
    let tower = cfg.vision.tower();
    for l in 1..=cfg.vision.layers {
        let prev = input(&g, &format!("vit.0.hidden.{}", l - 1));
        let mut exe = st.build("tower layer", &file, |gb| {
            let x = gb.input("x", prev.shape());
            Ok(vec![tower_layer(gb, x, &tower, l - 1)?])
        });
        let name = match l == cfg.vision.layers {
            true => "vit.0".to_owned(),
            false => format!("vit.0.hidden.{l}"),
        };
        let got = exe.run1(&[("x", &prev)]);
        st.check_within(
            format!("{name} (layer {l})"),
            &got,
            &g.f32(&name),
            QUANT_TOL,
        );
    }
    let px1 = input(&g, "pixels.1");
    let mut exe = st.build("tower", &file, |gb| {
        let x = gb.input("x", &[3, s, s]);
        Ok(vec![vision_tower(gb, x, &tower)?])
    });
    st.check_within(
        "vit.1",
        &exe.run1(&[("x", &px1)]),
        &g.f32("vit.1"),
        QUANT_TOL,
    );

    // the projector over the reference's features
    let feats = [input(&g, "vit.0"), input(&g, "vit.1")];
    let mut exe = st.build("projector", &file, |gb| {
        let t: Vec<_> = (0..2)
            .map(|c| gb.input(format!("v{c}"), feats[c].shape()))
            .collect();
        Ok(vec![graphs::patches(gb, &cfg, &t)?])
    });
    let got = exe.run1(&[("v0", &feats[0]), ("v1", &feats[1])]);
    st.check("patches", &got, &g.f32("patches"));

    // the proprio feature and the language model's input
    let p = shape(&g);
    let h = cfg.lm.hidden;
    let state = Tensor::from_f32(vec![1, 8], g.f32("proprio_norm")).unwrap();
    let mut ids = g.f32("ids");
    ids.push(cfg.io.stop_id as f32);
    let ids = Tensor::from_f32(vec![p.len + 1], ids).unwrap();
    let patches = input(&g, "patches");
    let mut exe = st.build("proprio + sequence", &file, |gb| {
        let s = gb.input("state", &[1, 8]);
        let pro = openvla::proprio(gb, s, h)?;
        let (i, x) = (gb.input("ids", ids.shape()), gb.input("p", patches.shape()));
        Ok(vec![pro, graphs::sequence(gb, &cfg, i, x, pro, p)?])
    });
    let out = exe.run(&[("state", &state), ("ids", &ids), ("p", &patches)]);
    let feat = out[0].to_vec_f32().unwrap();
    st.check("proprio_feat", &feat, &g.f32("proprio_feat"));
    st.check("lm_in", &out[1].to_vec_f32().unwrap(), &g.f32("lm_in"));

    // each layer from the reference's input to it, no mask; the final norm at the head's rows
    for l in 1..=cfg.lm.layers {
        let prev = match l {
            1 => input(&g, "lm_in"),
            _ => input(&g, &format!("hidden.{}", l - 1)),
        };
        let mut exe = st.build("language model", &file, |gb| {
            let x = gb.input("x", prev.shape());
            let n = gb.shape(x)[0];
            let pos: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let pos = gb.constant("pos", Tensor::from_f32(vec![n], pos)?)?;
            let y = graphs::layer(gb, &cfg, l - 1, x, pos)?;
            let mut out = vec![y];
            if l == cfg.lm.layers {
                out.push(graphs::head_rows(gb, &cfg, y, p)?);
            }
            Ok(out)
        });
        let out = exe.run(&[("x", &prev)]);
        let name = format!("hidden.{l}");
        st.check_within(
            &name,
            &out[0].to_vec_f32().unwrap(),
            &g.f32(&name),
            QUANT_TOL,
        );
        if l == cfg.lm.layers {
            let rows = out[1].to_vec_f32().unwrap();
            st.check_within("actions_hidden", &rows, &g.f32("actions_hidden"), QUANT_TOL);
        }
    }

    // the head from the reference's last hidden state
    let hidden = input(&g, "actions_hidden");
    let mut exe = st.build("head", &file, |gb| {
        let x = gb.input("x", hidden.shape());
        l1_head(gb, &cfg.io, &cfg.head, h, x)
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
    let Some(mut p) = policy_on::<BitvlaConfig>(file, backend) else {
        return;
    };
    let chunk = p.predict(&observation(&g)).unwrap();
    assert_eq!((chunk.chunk_size, chunk.action_dim), (8, 7));
    assert!(chunk.warnings.is_empty(), "{:?}", chunk.warnings);
    // end to end, as close as the reference is to itself with SDPA in SigLIP's attention
    let spread = g.meta["checks"]["actions_max_diff_eager_vs_sdpa_siglip"]
        .as_f64()
        .unwrap() as f32;
    let want = g.f32("actions");
    let err = (chunk.actions.iter().zip(&want))
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let cos = cosine(&chunk.actions, &want);
    println!("bitvla-tiny {backend}: actions max abs err {err:.3e}, cosine {cos:.6} (the reference's own spread {spread:.3e})");
    assert!(
        err <= 2.0 * spread && cos >= 0.999,
        "bitvla-tiny {backend}: actions max abs err {err:e}, cosine {cos}"
    );
}

backend_tests! {
    cpu_integer_sites_match_the_reference, vulkan_integer_sites_match_the_reference, ggml_integer_sites_match_the_reference
    => integer_sites_match
}

backend_tests! {
    cpu_stages_match_the_reference, vulkan_stages_match_the_reference, ggml_stages_match_the_reference
    => stages_match
}

backend_tests! {
    cpu_chunk_matches_the_reference, vulkan_chunk_matches_the_reference, ggml_chunk_matches_the_reference
    => chunk_matches
}

/// The task's text through the GGUF's tokenizer and the chat template gives the reference's
/// ids, images and proprio placeholders where the reference has them.
#[test]
fn the_prompt_is_the_references() {
    let (file, g) = converted(GgmlType::F32);
    let p = policy_on::<BitvlaConfig>(file, CPU).unwrap();
    let ids = p.model_ids(&observation(&g)).unwrap();
    let want: Vec<u32> = g.f32("ids").iter().map(|&t| t as u32).collect();
    assert_eq!(ids, want);
    assert_eq!(p.config().image_start(&ids).unwrap(), shape(&g).image_start);
}

#[test]
fn bf16_weights_keep_the_chunk() {
    let (file, g) = converted(GgmlType::BF16);
    let mut p = policy_on::<BitvlaConfig>(file, CPU).unwrap();
    let got = p.predict(&observation(&g)).unwrap().actions;
    let cos = cosine(&got, &g.f32("actions"));
    println!("bf16: cosine {cos:.6}");
    assert!(cos >= 0.999, "bf16 chunk cosine {cos}");
}

/// vla.cpp's own `bitvla` layout (int2 Ladder tiles, fused `ffn_gate_up`, the tower's `fc2`
/// padded, `statistics_json`, no tokenizer), written by an independent numpy + gguf-py writer
/// from the layout's facts (tests/interop/vlacpp_bitvla_writer.py), gives the chunk of our own
/// conversion of the same checkpoint bit for bit on every backend (the same codes, steps and
/// float weights after translation: the same graphs). The checkpoint is 128 wide
/// (tests/interop/bitvla_checkpoint.py, numpy only): vla.cpp's tiles take no narrower matrix,
/// which the golden fixture's 48 / 32 widths are.
#[test]
fn vlacpp_layout_gives_our_conversions_chunk() {
    let tmp = std::env::temp_dir().join(format!("vla-bitvla-vlacpp-{}", std::process::id()));
    let ckpt = tmp.join("ckpt");
    let theirs = tmp.join("vlacpp.gguf");
    std::fs::create_dir_all(&tmp).unwrap();
    support::interop("bitvla_checkpoint.py", &[ckpt.as_os_str()]);
    support::interop(
        "vlacpp_bitvla_writer.py",
        &[ckpt.as_os_str(), theirs.as_os_str(), "--f32".as_ref()],
    );
    let opts = bitvla::Options {
        dtype: Some(GgmlType::F32),
        ..Default::default()
    };
    let ours = bitvla::convert(&ckpt, &opts, &mut |_, _, _| {}).unwrap();
    let g = Golden::load(&fixture("bitvla-tiny"));
    for backend in support::golden::backends() {
        let Some(mut p) = policy_on::<BitvlaConfig>(reopened(&ours.writer), backend) else {
            continue;
        };
        // vla.cpp's file has no tokenizer: the ids ours makes of the task
        let ids = p.model_ids(&observation(&g)).unwrap();
        let obs = vla::policy::Observation {
            prompt: None,
            tokens: Some(ids.iter().map(|&t| t as i32).collect()),
            ..observation(&g)
        };
        let want = p.predict(&obs).unwrap().actions;
        let file = GgufFile::open(&theirs).unwrap();
        let mut q = policy_on::<BitvlaConfig>(file, backend).unwrap();
        let got = q.predict(&obs).unwrap().actions;
        assert_eq!(
            got, want,
            "{backend}: vla.cpp-layout BitVLA vs our conversion"
        );
        if backend == CPU {
            let err = q.predict(&observation(&g)).unwrap_err().to_string();
            assert!(err.contains("tokenizer"), "a text prompt: {err}");
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
