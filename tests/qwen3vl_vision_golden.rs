//! The Qwen3-VL vision tower (`vla::modules::qwen_vision`, GR00T N1.7's and VLA-JEPA's) against
//! transformers' `Qwen3VLVisionModel`: `tests/fixtures/qwen3vl-vision-tiny`, made by
//! `tools/golden/qwen3vl_vision.py` (every tensor re-randomized; a 6 x 6 position table
//! resampled to a 4 x 4 grid; two deepstack taps). Converted with `vla::convert::qwen_vision`
//! and run on cpu, vulkan and ggml.

mod support;

use support::{check, fixture, open, Golden};
use vla::convert::{qwen_vision, Safetensors};
use vla::gguf::{GgmlType, GgufFile, GgufWriter};
use vla::graph::GraphBuilder;
use vla::modules::qwen_vision::{qwen_vision_tower, QwenVisionConfig};
use vla::Tensor;

const TOL: f32 = 1e-4;

fn config(g: &Golden) -> QwenVisionConfig {
    let m = &g.meta;
    let u = |k: &str| m[k].as_u64().unwrap() as usize;
    QwenVisionConfig {
        hidden: u("hidden_size"),
        layers: u("depth"),
        heads: u("num_heads"),
        inter: u("intermediate_size"),
        image_size: u("image_size"),
        patch_size: u("patch_size"),
        merge: u("spatial_merge_size"),
        out: u("out_hidden_size"),
        deepstack: g
            .ids("deepstack_visual_indexes")
            .iter()
            .map(|&i| i as usize)
            .collect(),
    }
}

/// The fixture's tower as a GGUF.
fn converted(cfg: &QwenVisionConfig) -> GgufFile {
    let st = Safetensors::open(&fixture("qwen3vl-vision-tiny").join("model.safetensors")).unwrap();
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "qwen3vl_vision_test")
        .unwrap();
    for (ours, theirs) in qwen_vision::name_map(cfg, "", "vit") {
        let shape = st.require_shape(&theirs).unwrap().to_vec();
        let dims: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
        w.add_f32(ours, GgmlType::F32, &dims, &st.f32(&theirs).unwrap())
            .unwrap();
    }
    for (name, shape, vals) in qwen_vision::derived(&st, cfg, "", "vit").unwrap() {
        let dims: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
        w.add_f32(name, GgmlType::F32, &dims, &vals).unwrap();
    }
    GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()
}

/// Rows of `x` (`[side * side, d]`, the reference's merge-block order) in row-major order.
fn row_major(x: &[f32], side: usize, m: usize, d: usize) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    for k in 0..side * side {
        let (block, ir, ic) = (k / (m * m), (k / m) % m, k % m);
        let (br, bc) = (block / (side / m), block % (side / m));
        let t = (br * m + ir) * side + bc * m + ic;
        out[t * d..(t + 1) * d].copy_from_slice(&x[k * d..(k + 1) * d]);
    }
    out
}

fn tower_matches(backend: &str) {
    let Some(be) = open(backend) else { return };
    let g = Golden::load(&fixture("qwen3vl-vision-tiny"));
    let cfg = config(&g);
    let file = converted(&cfg);
    let (side, d, s) = (cfg.grid(), cfg.hidden, cfg.image_size);
    let pos = file.dequantize("vit.pos_embd.weight").unwrap();
    let want_pos = row_major(&g.f32("pos_embeds"), side, cfg.merge, d);
    check("resampled position table", &pos, &want_pos, 1e-6);

    let mut gb = GraphBuilder::new(&file);
    let img = gb.input("image", &[3, s, s]);
    let w = gb
        .weight(
            "vit.patch_embd.weight",
            &[d, 3, cfg.patch_size, cfg.patch_size],
        )
        .unwrap();
    let b = gb.weight("vit.patch_embd.bias", &[d]).unwrap();
    let patches = gb.patch_embed(img, w, b).unwrap();
    let (out, deep) = qwen_vision_tower(&mut gb, img, &cfg, "vit").unwrap();
    let mut outputs = vec![patches, out];
    outputs.extend(&deep);
    let mut exe = be.compile(&gb.build(&outputs).unwrap(), &file).unwrap();
    let pixels = Tensor::from_f32(vec![3, s, s], g.f32("pixels")).unwrap();
    let got = exe.run(&[("image", &pixels)]).unwrap();
    let want = row_major(&g.f32("patch_embeds"), side, cfg.merge, d);
    check(
        &format!("{backend}: patch embedding (temporal kernel summed)"),
        got[0].as_f32().unwrap(),
        &want,
        TOL,
    );
    check(
        &format!("{backend}: merged tokens"),
        got[1].as_f32().unwrap(),
        &g.f32("out"),
        TOL,
    );
    for j in 0..cfg.deepstack.len() {
        let what = format!("{backend}: deepstack feature {j}");
        check(
            &what,
            got[2 + j].as_f32().unwrap(),
            &g.f32(&format!("deepstack.{j}")),
            TOL,
        );
    }
}

#[test]
fn cpu_matches_transformers() {
    tower_matches("cpu");
}

#[test]
fn vulkan_matches_transformers() {
    tower_matches("vulkan");
}

#[cfg(feature = "ggml")]
#[test]
fn ggml_matches_transformers() {
    tower_matches("ggml");
}
