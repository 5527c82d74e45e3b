//! Qwen3-VL (GR00T N1.7's and VLA-JEPA's backbone: `vla::modules::{qwen_vision, qwen_text}`)
//! against transformers' `Qwen3VLModel`: `tests/fixtures/qwen3vl-tiny`, made by
//! `tools/golden/qwen3vl.py` (every tensor re-randomized; a 6 x 6 position table resampled to a
//! 4 x 4 grid; two deepstack taps; interleaved multimodal RoPE). Converted with
//! `vla::convert::qwen` and run on cpu, vulkan and ggml: the vision tower's patch embedding,
//! merged tokens and deepstack features, then the language model over the spliced prompt.

#[macro_use]
mod support;

use support::golden::{backends, Stages};
use support::{check, fixture, qwen_patch_rows_to_chw, Golden};
use vla::convert::{qwen, Safetensors};
use vla::gguf::{GgmlType, GgufFile, GgufWriter};
use vla::graph::{GraphBuilder, NodeId};
use vla::layers::{rms_norm, splice_rows, GatedActivation};
use vla::modules::decoder::{DecoderConfig, DecoderStack, Rotary};
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
        image_h: g.usize("image_size"),
        image_w: g.usize("image_size"),
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
    let mut map = qwen::vision_name_map(cfg, "visual.", "vit");
    map.extend(qwen::lm_name_map("language_model.", lm_layers));
    gguf_of(&st, "qwen3vl_test", map, (cfg, "visual."))
}

/// A GGUF of architecture `arch` holding the checkpoint's tensors `map` (ours, theirs) in f32
/// and the vision tower's derived ones (`cfg`'s, under `visual`).
fn gguf_of(
    st: &Safetensors,
    arch: &str,
    map: Vec<(String, String)>,
    (cfg, visual): (&QwenVisionConfig, &str),
) -> GgufFile {
    let dims = |shape: &[usize]| -> Vec<u64> { shape.iter().rev().map(|&d| d as u64).collect() };
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", arch).unwrap();
    for (ours, theirs) in map {
        let shape = dims(st.require_shape(&theirs).unwrap());
        w.add_f32(ours, GgmlType::F32, &shape, &st.f32(&theirs).unwrap())
            .unwrap();
    }
    for (name, shape, vals) in qwen::vision_derived(st, cfg, visual, "vit").unwrap() {
        w.add_f32(name, GgmlType::F32, &dims(&shape), &vals)
            .unwrap();
    }
    GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()
}

/// Rows of `x` (`[rows * cols, d]`, the reference's merge-block order) in row-major order.
fn row_major(x: &[f32], (rows, cols): (usize, usize), m: usize, d: usize) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    for k in 0..rows * cols {
        let (block, ir, ic) = (k / (m * m), (k / m) % m, k % m);
        let (br, bc) = (block / (cols / m), block % (cols / m));
        let t = (br * m + ir) * cols + bc * m + ic;
        out[t * d..(t + 1) * d].copy_from_slice(&x[k * d..(k + 1) * d]);
    }
    out
}

/// Nodes of the backbone graph [`backbone`] builds.
struct Backbone {
    patches: NodeId,
    merged: NodeId,
    deepstack: Vec<NodeId>,
    /// The prompt's embeddings with the image spliced in.
    spliced: NodeId,
    /// The last layer's output, before the final norm.
    lm: NodeId,
    positions: Vec<[f32; 3]>,
}

/// The vision tower over input `image` `[3, H, W]` and the language model over input
/// `tokens` (`ids`, one image's pad run at the first `image_id`), M-RoPE and deepstack.
#[allow(clippy::too_many_arguments)]
fn backbone(
    gb: &mut GraphBuilder,
    cfg: &QwenVisionConfig,
    text: &DecoderConfig,
    sections: [usize; 3],
    [lm_layers, inter, vocab, h]: [usize; 4],
    ids: &[f32],
    image_id: f32,
) -> Backbone {
    let (d, p) = (cfg.hidden, cfg.patch_size);
    let img = gb.input("image", &[3, cfg.image_h, cfg.image_w]);
    let w = gb.weight("vit.patch_embd.weight", &[d, 3, p, p]).unwrap();
    let b = gb.weight("vit.patch_embd.bias", &[d]).unwrap();
    let patches = gb.patch_embed(img, w, b).unwrap();
    let (merged, deepstack) = qwen_vision_tower(gb, img, cfg, "vit").unwrap();
    let l = ids.len();
    let start = ids.iter().position(|&t| t == image_id).unwrap();
    let tokens = gb.input("tokens", &[l]);
    let table = gb.weight("token_embd.weight", &[vocab, h]).unwrap();
    let embeds = gb.embedding(table, tokens).unwrap();
    let spliced = splice_rows(gb, embeds, &[(start, merged)], false).unwrap();
    let (rows, cols) = cfg.grid();
    let (grid_h, grid_w) = (rows / cfg.merge, cols / cfg.merge);
    let positions = mrope_positions(l, &[ImageSpan::still(start, grid_h, grid_w)]);
    let (cos, sin) = mrope_tables(&positions, text.head_dim, text.rope_theta, sections);
    let shape = vec![l, 1, text.head_dim];
    let table = |gb: &mut GraphBuilder, n: &str, v| {
        gb.constant(n, Tensor::from_f32(shape.clone(), v).unwrap())
            .unwrap()
    };
    let (cos, sin) = (table(gb, "mrope.cos", cos), table(gb, "mrope.sin", sin));
    let causal: Vec<f32> = (0..l * l)
        .map(|k| f32::from(u8::from(k % l <= k / l)))
        .collect();
    let mask = gb
        .constant("mask.causal", Tensor::from_f32(vec![l, l], causal).unwrap())
        .unwrap();
    let adds: Vec<Vec<(usize, NodeId)>> = deepstack.iter().map(|&f| vec![(start, f)]).collect();
    let rotary = Rotary::Tables { cos, sin };
    let stack = DecoderStack {
        stack: "vlm",
        layers: lm_layers,
        inter,
        cfg: text,
    };
    let lm = stack
        .forward(gb, spliced, rotary, Some(mask), &adds)
        .unwrap();
    Backbone {
        patches,
        merged,
        deepstack,
        spliced,
        lm,
        positions,
    }
}

fn tower_matches(backend: &str) {
    let Some(st) = Stages::open(backend, TOL) else {
        return;
    };
    let g = Golden::load(&fixture("qwen3vl-tiny"));
    let cfg = config(&g);
    let (text, sections) = text_config(&g);
    let lm_layers = g.meta["text"]["num_hidden_layers"].as_u64().unwrap() as usize;
    let file = converted(&cfg, lm_layers);
    let (d, s) = (cfg.hidden, cfg.image_h);
    let pos = file.dequantize("vit.pos_embd.weight").unwrap();
    let want_pos = row_major(&g.f32("pos_embeds"), cfg.grid(), cfg.merge, d);
    check("resampled position table", &pos, &want_pos, 1e-6);

    let ids: Vec<f32> = g.ids("token_ids").iter().map(|&t| t as f32).collect();
    let (l, n_img) = (ids.len(), g.usize("n_img_tokens"));
    let t = |k: &str| g.meta["text"][k].as_u64().unwrap() as usize;
    let sizes = [
        lm_layers,
        t("intermediate_size"),
        t("vocab_size"),
        t("hidden_size"),
    ];
    let image_id = g.usize("image_token_id") as f32;
    let mut gb = GraphBuilder::new(&file);
    let bb = backbone(&mut gb, &cfg, &text, sections, sizes, &ids, image_id);
    let lm = rms_norm(&mut gb, bb.lm, "vlm.output_norm", text.norm_eps).unwrap();
    let mut outputs = vec![bb.patches, bb.merged, bb.spliced, lm];
    outputs.extend(&bb.deepstack);
    let mut exe = st.compile("backbone", &gb.build(&outputs).unwrap(), &file);
    let pixels = Tensor::from_f32(vec![3, s, s], g.f32("pixels")).unwrap();
    let ids = Tensor::from_f32(vec![l], ids).unwrap();
    let got = exe.run(&[("image", &pixels), ("tokens", &ids)]);
    let out = |k: usize| got[k].as_f32().unwrap();
    let want = row_major(&g.f32("patch_embeds"), cfg.grid(), cfg.merge, d);
    st.check("patch embedding (temporal kernel summed)", out(0), &want);
    st.check("merged tokens", out(1), &g.f32("out"));
    for j in 0..cfg.deepstack.len() {
        let want = g.f32(&format!("deepstack.{j}"));
        st.check(format_args!("deepstack feature {j}"), out(4 + j), &want);
    }
    let want = g.f32("inputs_embeds");
    st.check("prompt embeddings, image spliced", out(2), &want);
    let positions = bb.positions;
    let span_len = (cfg.grid().0 / cfg.merge) * (cfg.grid().1 / cfg.merge);
    let ours: Vec<f32> = (0..3)
        .flat_map(|k| positions.iter().map(move |p| p[k]))
        .collect();
    assert_eq!(ours, g.f32("position_ids"), "multimodal RoPE positions");
    assert_eq!(span_len, n_img);
    st.check("language model output", out(3), &g.f32("last_hidden"));
}

backend_tests! {
    cpu_matches_transformers,
    vulkan_matches_transformers,
    ggml_matches_transformers => tower_matches
}

/// An I64 tensor of the fixture as f32 (ids and positions are exact).
fn ints(g: &Golden, name: &str) -> Vec<f32> {
    g.st.i64(name).unwrap().iter().map(|&v| v as f32).collect()
}

/// GR00T N1.7's backbone (`tests/fixtures/groot17-tiny`, `tools/golden/groot17.py`: lerobot
/// 0.6.1 with transformers 5.5.4) from the pixels it fed: a non-square 4 x 6 patch grid, an
/// 8 x 8 position table, three deepstack taps, and the last kept LM layer's output before the
/// final norm (what the N1.7 head reads).
fn groot17_backbone_matches(backend: &str) {
    let Some(st) = Stages::open(backend, TOL) else {
        return;
    };
    let dir = fixture("groot17-tiny");
    let g = Golden::load(&dir);
    let arch: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("arch.json")).unwrap()).unwrap();
    let (v, lm) = (&arch["vision"], &arch["lm"]);
    let u = |x: &serde_json::Value| x.as_u64().unwrap() as usize;
    let thw: Vec<usize> = arch["image_processor"]["grid_thw"]
        .as_array()
        .unwrap()
        .iter()
        .map(u)
        .collect();
    let p = u(&v["patch_size"]);
    let cfg = QwenVisionConfig {
        hidden: u(&v["hidden_size"]),
        layers: u(&v["depth"]),
        heads: u(&v["num_heads"]),
        inter: u(&v["intermediate_size"]),
        image_h: thw[1] * p,
        image_w: thw[2] * p,
        patch_size: p,
        merge: u(&v["spatial_merge_size"]),
        out: u(&v["out_hidden_size"]),
        deepstack: v["deepstack_visual_indexes"]
            .as_array()
            .unwrap()
            .iter()
            .map(u)
            .collect(),
    };
    let sec: Vec<usize> = lm["mrope_section"]
        .as_array()
        .unwrap()
        .iter()
        .map(u)
        .collect();
    let text = DecoderConfig {
        q_heads: u(&lm["heads"]),
        kv_heads: u(&lm["kv_heads"]),
        head_dim: u(&lm["head_dim"]),
        rope_theta: lm["rope_theta"].as_f64().unwrap() as f32,
        norm_eps: lm["rms_eps"].as_f64().unwrap() as f32,
        ffn: GatedActivation::Silu,
        qk_norm: true,
        qkv_bias: false,
    };
    let layers = u(&lm["layers_used"]);
    let (h, vocab) = (u(&lm["hidden"]), u(&lm["vocab"]));
    // The checkpoint's backbone tensors as a GGUF (the tied embedding is stored as lm_head).
    let pre = "_groot_model.backbone.model.";
    let ckpt = Safetensors::open(&dir.join("model.safetensors")).unwrap();
    let mut map = qwen::vision_name_map(&cfg, &format!("{pre}model.visual."), "vit");
    map.extend(qwen::lm_name_map(
        &format!("{pre}model.language_model."),
        layers,
    ));
    map.retain(|(ours, _)| ours != "token_embd.weight");
    map.push(("token_embd.weight".into(), format!("{pre}lm_head.weight")));
    let visual = format!("{pre}model.visual.");
    let file = gguf_of(&ckpt, "groot17_backbone_test", map, (&cfg, &visual));

    let (ih, iw) = (cfg.image_h, cfg.image_w);
    let image = qwen_patch_rows_to_chw(&g.f32("pixels"), (thw[1], thw[2]), p, cfg.merge);
    let ids: Vec<f32> = ints(&g, "token_ids");
    let image_id = arch["image_token_id"].as_u64().unwrap() as f32;
    let mut gb = GraphBuilder::new(&file);
    let sizes = [layers, u(&lm["intermediate"]), vocab, h];
    let bb = backbone(
        &mut gb,
        &cfg,
        &text,
        [sec[0], sec[1], sec[2]],
        sizes,
        &ids,
        image_id,
    );
    let mut outputs = vec![bb.merged, bb.lm];
    outputs.extend(&bb.deepstack);
    let mut exe = st.compile("backbone", &gb.build(&outputs).unwrap(), &file);
    let image = Tensor::from_f32(vec![3, ih, iw], image).unwrap();
    let tokens = Tensor::from_f32(vec![ids.len()], ids).unwrap();
    let got = exe.run(&[("image", &image), ("tokens", &tokens)]);
    let out = |k: usize| got[k].as_f32().unwrap();
    st.check("N1.7 merged image tokens", out(0), &g.f32("vision"));
    for j in 0..cfg.deepstack.len() {
        let want = g.f32(&format!("deepstack.{j}"));
        st.check(format_args!("N1.7 deepstack {j}"), out(2 + j), &want);
    }
    let ours: Vec<f32> = (0..3)
        .flat_map(|k| bb.positions.iter().map(move |p| p[k]))
        .collect();
    assert_eq!(ours, ints(&g, "position_ids"), "N1.7 M-RoPE positions");
    let what = "N1.7 LM features (last kept layer, before the norm)";
    st.check(what, out(1), &g.f32("lm_out"));
}

#[test]
fn groot17_backbone_matches_lerobot() {
    for backend in backends() {
        groot17_backbone_matches(backend);
    }
}
