//! Qwen3-VL (GR00T N1.7's and VLA-JEPA's backbone: `vla::modules::{qwen_vision, qwen_text}`)
//! against transformers' `Qwen3VLModel`: `tests/fixtures/qwen3vl-tiny`, made by
//! `tools/golden/qwen3vl.py` (every tensor re-randomized; a 6 x 6 position table resampled to a
//! 4 x 4 grid; two deepstack taps; interleaved multimodal RoPE). Converted with
//! `vla::convert::qwen` and run on cpu, vulkan and ggml: the vision tower's patch embedding,
//! merged tokens and deepstack features, then the language model over the spliced prompt.

mod support;

use support::{check, fixture, open, Golden};
use vla::convert::{qwen, Safetensors};
use vla::gguf::{GgmlType, GgufFile, GgufWriter};
use vla::graph::GraphBuilder;
use vla::layers::{rms_norm, splice_rows, GatedActivation};
use vla::modules::decoder::{decoder_stack, DecoderConfig, Rotary};
use vla::modules::qwen_text::{mrope_positions, mrope_tables, ImageSpan};
use vla::modules::qwen_vision::{qwen_vision_tower, QwenVisionConfig};
use vla::Tensor;

const TOL: f32 = 1e-4;

fn config(g: &Golden) -> QwenVisionConfig {
    let m = &g.meta["vision"];
    let u = |k: &str| m[k].as_u64().unwrap() as usize;
    QwenVisionConfig {
        hidden: u("hidden_size"),
        layers: u("depth"),
        heads: u("num_heads"),
        inter: u("intermediate_size"),
        image_size: g.usize("image_size"),
        patch_size: u("patch_size"),
        merge: u("spatial_merge_size"),
        out: u("out_hidden_size"),
        deepstack: m["deepstack_visual_indexes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect(),
    }
}

/// The language model's attention settings (Qwen3: QK-norm, SwiGLU) and the M-RoPE sections.
fn text_config(g: &Golden) -> (DecoderConfig, [usize; 3]) {
    let t = &g.meta["text"];
    let u = |k: &str| t[k].as_u64().unwrap() as usize;
    let s = &t["rope_scaling"]["mrope_section"];
    let sec = |i: usize| s[i].as_u64().unwrap() as usize;
    let cfg = DecoderConfig {
        q_heads: u("num_attention_heads"),
        kv_heads: u("num_key_value_heads"),
        head_dim: u("head_dim"),
        rope_theta: t["rope_theta"].as_f64().unwrap() as f32,
        norm_eps: t["rms_norm_eps"].as_f64().unwrap() as f32,
        ffn: GatedActivation::Silu,
        qk_norm: true,
        qkv_bias: false,
    };
    (cfg, [sec(0), sec(1), sec(2)])
}

/// The fixture's model as a GGUF.
fn converted(cfg: &QwenVisionConfig, lm_layers: usize) -> GgufFile {
    let st = Safetensors::open(&fixture("qwen3vl-tiny").join("model.safetensors")).unwrap();
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "qwen3vl_test")
        .unwrap();
    let mut map = qwen::vision_name_map(cfg, "visual.", "vit");
    map.extend(qwen::lm_name_map("language_model.", lm_layers));
    for (ours, theirs) in map {
        let shape = st.require_shape(&theirs).unwrap().to_vec();
        let dims: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
        w.add_f32(ours, GgmlType::F32, &dims, &st.f32(&theirs).unwrap())
            .unwrap();
    }
    for (name, shape, vals) in qwen::vision_derived(&st, cfg, "visual.", "vit").unwrap() {
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
    let g = Golden::load(&fixture("qwen3vl-tiny"));
    let cfg = config(&g);
    let (text, sections) = text_config(&g);
    let lm_layers = g.meta["text"]["num_hidden_layers"].as_u64().unwrap() as usize;
    let file = converted(&cfg, lm_layers);
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
    // The language model over the prompt, the image's tokens spliced in at its pad ids.
    let ids: Vec<f32> = g.ids("token_ids").iter().map(|&t| t as f32).collect();
    let (l, n_img) = (ids.len(), g.usize("n_img_tokens"));
    let image_id = g.usize("image_token_id") as f32;
    let start = ids.iter().position(|&t| t == image_id).unwrap();
    let tokens = gb.input("tokens", &[l]);
    let vocab = g.meta["text"]["vocab_size"].as_u64().unwrap() as usize;
    let h = g.meta["text"]["hidden_size"].as_u64().unwrap() as usize;
    let table = gb.weight("token_embd.weight", &[vocab, h]).unwrap();
    let embeds = gb.embedding(table, tokens).unwrap();
    let x = splice_rows(&mut gb, embeds, &[(start, out)], false).unwrap();
    let side = cfg.grid() / cfg.merge;
    let span = ImageSpan {
        start,
        grid_h: side,
        grid_w: side,
    };
    let positions = mrope_positions(l, &[span]);
    let (cos, sin) = mrope_tables(&positions, text.head_dim, text.rope_theta, sections);
    let shape = vec![l, 1, text.head_dim];
    let cos = gb
        .constant("mrope.cos", Tensor::from_f32(shape.clone(), cos).unwrap())
        .unwrap();
    let sin = gb
        .constant("mrope.sin", Tensor::from_f32(shape, sin).unwrap())
        .unwrap();
    let causal: Vec<f32> = (0..l * l)
        .map(|k| f32::from(u8::from(k % l <= k / l)))
        .collect();
    let mask = gb
        .constant("mask.causal", Tensor::from_f32(vec![l, l], causal).unwrap())
        .unwrap();
    let inter = g.meta["text"]["intermediate_size"].as_u64().unwrap() as usize;
    let deepstack: Vec<Vec<(usize, _)>> = deep.iter().map(|&d| vec![(start, d)]).collect();
    let rotary = Rotary::Tables { cos, sin };
    let lm = decoder_stack(
        &mut gb,
        x,
        "vlm",
        lm_layers,
        inter,
        &text,
        rotary,
        Some(mask),
        &deepstack,
    )
    .unwrap();
    let lm = rms_norm(&mut gb, lm, "vlm.output_norm", text.norm_eps).unwrap();
    let mut outputs = vec![patches, out, x, lm];
    outputs.extend(&deep);
    let mut exe = be.compile(&gb.build(&outputs).unwrap(), &file).unwrap();
    let pixels = Tensor::from_f32(vec![3, s, s], g.f32("pixels")).unwrap();
    let ids = Tensor::from_f32(vec![l], ids).unwrap();
    let got = exe.run(&[("image", &pixels), ("tokens", &ids)]).unwrap();
    let want = row_major(&g.f32("patch_embeds"), side * cfg.merge, cfg.merge, d);
    let what = format!("{backend}: patch embedding (temporal kernel summed)");
    check(&what, got[0].as_f32().unwrap(), &want, TOL);
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
            got[4 + j].as_f32().unwrap(),
            &g.f32(&format!("deepstack.{j}")),
            TOL,
        );
    }
    let what = format!("{backend}: prompt embeddings, image spliced");
    check(
        &what,
        got[2].as_f32().unwrap(),
        &g.f32("inputs_embeds"),
        TOL,
    );
    let ours: Vec<f32> = (0..3)
        .flat_map(|k| positions.iter().map(move |p| p[k]))
        .collect();
    assert_eq!(ours, g.f32("position_ids"), "multimodal RoPE positions");
    assert_eq!(span.len(), n_img);
    check(
        &format!("{backend}: language model output"),
        got[3].as_f32().unwrap(),
        &g.f32("last_hidden"),
        TOL,
    );
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
