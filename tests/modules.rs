//! The model-definition machinery: weights declared by the graphs (shapes checked against
//! the store, conflicts named, matmul weights found), and the module options no released
//! arch here uses yet (QK-norm, qkv bias, the MLP connector, a tower under another prefix),
//! each run on the cpu backend against the same computation written out on the host.

use std::collections::HashMap;
use vla::backend::{Backend, CpuBackend};
use vla::graph::{declared_weights, matmul_weights, GraphBuilder};
use vla::layers::GatedActivation;
use vla::models::flow::FlowArch;
use vla::models::pi0::{small_config, Variant};
use vla::modules::decoder::{DecoderConfig, Layer};
use vla::modules::vision::{embed_image, Connector, VisionConfig};
use vla::Tensor;

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let h = (i as u32 ^ seed.wrapping_mul(0x9E37_79B9)).wrapping_mul(2_654_435_761);
            (h >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        })
        .collect()
}

/// A store holding a random tensor for every weight `graph` declares.
fn store_for(graphs: &[vla::graph::Graph]) -> HashMap<String, Tensor<'static>> {
    declared_weights(graphs)
        .unwrap()
        .into_iter()
        .enumerate()
        .map(|(i, (name, shape))| {
            let n = shape.iter().product();
            let t = Tensor::from_f32(shape, values(n, i as u32 + 1)).unwrap();
            (name, t)
        })
        .collect()
}

fn get(store: &HashMap<String, Tensor<'static>>, name: &str) -> Vec<f32> {
    store[name].to_vec_f32().unwrap()
}

/// `x [s, k] @ w^T [n, k] (+ b)`.
fn linear(x: &[f32], w: &[f32], b: Option<&[f32]>, k: usize) -> Vec<f32> {
    let n = w.len() / k;
    x.chunks(k)
        .flat_map(|row| {
            (0..n).map(move |j| {
                let dot: f32 = row
                    .iter()
                    .zip(&w[j * k..(j + 1) * k])
                    .map(|(a, b)| a * b)
                    .sum();
                dot + b.map_or(0.0, |b| b[j])
            })
        })
        .collect()
}

/// RMSNorm of each `d`-wide row with gain `g`.
fn rms(x: &[f32], g: &[f32], d: usize, eps: f32) -> Vec<f32> {
    x.chunks(d)
        .flat_map(|row| {
            let ms = row.iter().map(|v| v * v).sum::<f32>() / d as f32;
            let r = 1.0 / (ms + eps).sqrt();
            row.iter().zip(g).map(move |(v, g)| v * r * g)
        })
        .collect()
}

/// GPT-NeoX rotary embedding of `[S, H, d]` rows at `pos[s]`: pairs `(i, i + d/2)`.
fn rope_neox(x: &[f32], pos: &[f32], d: usize, theta: f32) -> Vec<f32> {
    let per_token = x.len() / pos.len();
    let mut out = x.to_vec();
    for (t, chunk) in out.chunks_mut(per_token).enumerate() {
        for head in chunk.chunks_mut(d) {
            for i in 0..d / 2 {
                let angle = f64::from(pos[t]) * f64::from(theta).powf(-2.0 * i as f64 / d as f64);
                let (sin, cos) = (angle.sin() as f32, angle.cos() as f32);
                let (a, b) = (head[i], head[i + d / 2]);
                head[i] = a * cos - b * sin;
                head[i + d / 2] = b * cos + a * sin;
            }
        }
    }
    out
}

fn assert_close(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}");
    let err = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(err < 1e-5, "{what}: max abs err {err}");
}

#[test]
fn qk_norm_and_qkv_bias_compute_what_qwen_does() {
    let cfg = DecoderConfig {
        q_heads: 4,
        kv_heads: 2,
        head_dim: 8,
        rope_theta: 10000.0,
        norm_eps: 1e-6,
        ffn: GatedActivation::Silu,
        qk_norm: true,
        qkv_bias: true,
    };
    let (s, w) = (3, 24);
    let build = |mut g: GraphBuilder| {
        let x = g.input("x", &[s, w]);
        let pos = g.input("pos", &[s]);
        let layer = Layer::new("lm", 0, 40, &cfg);
        let query = layer.query(&mut g, x).unwrap();
        let (hn, q) = (query.normed, query.q);
        let (k, v) = layer.rotated_kv(&mut g, hn, pos).unwrap();
        g.build(&[q, k, v]).unwrap()
    };
    let declared = build(GraphBuilder::declaring());
    let names: Vec<String> = declared_weights(std::slice::from_ref(&declared))
        .unwrap()
        .into_iter()
        .map(|(n, shape)| format!("{n} {shape:?}"))
        .collect();
    for want in [
        "lm.blk.0.attn_q.bias [32]",
        "lm.blk.0.attn_q_norm.weight [8]",
        "lm.blk.0.attn_k.bias [16]",
        "lm.blk.0.attn_k_norm.weight [8]",
        "lm.blk.0.attn_v.bias [16]",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} not in {names:?}");
    }
    assert!(
        !names.iter().any(|n| n.contains("attn_v_norm")),
        "{names:?}"
    );

    let store = store_for(std::slice::from_ref(&declared));
    let graph = build(GraphBuilder::new(&store));
    let x = values(s * w, 99);
    let pos = vec![0.0f32, 1.0, 5.0];
    let mut exe = CpuBackend.compile(&graph, &store).unwrap();
    let out = exe
        .run(&[
            ("x", &Tensor::from_f32(vec![s, w], x.clone()).unwrap()),
            ("pos", &Tensor::from_f32(vec![s], pos.clone()).unwrap()),
        ])
        .unwrap();
    let p = |n: &str| get(&store, &format!("lm.blk.0.{n}"));
    let hn = rms(&x, &p("attn_norm.weight"), w, cfg.norm_eps);
    let proj = |n: &str| {
        linear(
            &hn,
            &p(&format!("{n}.weight")),
            Some(&p(&format!("{n}.bias"))),
            w,
        )
    };
    let q = rms(&proj("attn_q"), &p("attn_q_norm.weight"), 8, cfg.norm_eps);
    // Keys: normalised per head, then rotated (the norm comes first in Qwen3).
    let k = rms(&proj("attn_k"), &p("attn_k_norm.weight"), 8, cfg.norm_eps);
    let k = rope_neox(&k, &pos, 8, cfg.rope_theta);
    assert_close("q", &out[0].to_vec_f32().unwrap(), &q);
    assert_close("k", &out[1].to_vec_f32().unwrap(), &k);
    assert_close("v", &out[2].to_vec_f32().unwrap(), &proj("attn_v"));
}

#[test]
fn mlp_connector_and_tower_prefix() {
    let vision = VisionConfig {
        prefix: "dino",
        hidden: 16,
        layers: 1,
        heads: 2,
        inter: 32,
        image_size: 8,
        patch_size: 4,
        ln_eps: 1e-6,
        ..Default::default()
    };
    let connector = Connector::Mlp {
        pixel_shuffle: 1,
        ln_eps: 1e-5,
    };
    let build = |mut g: GraphBuilder, out_tower: bool| {
        let img = g.input("image", &[3, 8, 8]);
        let t = vla::modules::vision::vision_tower(&mut g, img, &vision).unwrap();
        let out = embed_image(&mut g, img, &vision, connector, 12).unwrap();
        g.build(&if out_tower { vec![t, out] } else { vec![out] })
            .unwrap()
    };
    let declared = build(GraphBuilder::declaring(), true);
    let shapes = declared_weights(std::slice::from_ref(&declared)).unwrap();
    assert!(shapes
        .iter()
        .all(|(n, _)| n.starts_with("dino.") || n.starts_with("mm.")));
    let find = |n: &str| shapes.iter().find(|(m, _)| m == n).map(|(_, s)| s.clone());
    assert_eq!(find("dino.pos_embd.weight"), Some(vec![4, 16]));
    assert_eq!(find("mm.ln.weight"), Some(vec![16]));
    assert_eq!(find("mm.fc1.weight"), Some(vec![12, 16]));
    assert_eq!(find("mm.fc2.weight"), Some(vec![12, 12]));
    assert_eq!(connector.n_tokens(4), 4);

    let store = store_for(std::slice::from_ref(&declared));
    let graph = build(GraphBuilder::new(&store), true);
    let image = Tensor::from_f32(vec![3, 8, 8], values(192, 5)).unwrap();
    let out = CpuBackend
        .compile(&graph, &store)
        .unwrap()
        .run(&[("image", &image)])
        .unwrap();
    let tower = out[0].to_vec_f32().unwrap();
    // LayerNorm -> fc1 -> erf GELU -> fc2, on the tower's output.
    let (g, b) = (get(&store, "mm.ln.weight"), get(&store, "mm.ln.bias"));
    let ln: Vec<f32> = tower
        .chunks(16)
        .flat_map(|row| {
            let mean = row.iter().sum::<f32>() / 16.0;
            let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / 16.0;
            let r = 1.0 / (var + 1e-5).sqrt();
            let (g, b) = (g.clone(), b.clone());
            row.iter()
                .enumerate()
                .map(move |(i, v)| (v - mean) * r * g[i] + b[i])
                .collect::<Vec<_>>()
        })
        .collect();
    let h = linear(
        &ln,
        &get(&store, "mm.fc1.weight"),
        Some(&get(&store, "mm.fc1.bias")),
        16,
    );
    let h: Vec<f32> = h
        .iter()
        .map(|&v| (0.5 * f64::from(v) * (1.0 + erf(f64::from(v) / 2f64.sqrt()))) as f32)
        .collect();
    let want = linear(
        &h,
        &get(&store, "mm.fc2.weight"),
        Some(&get(&store, "mm.fc2.bias")),
        12,
    );
    assert_close("mlp connector", &out[1].to_vec_f32().unwrap(), &want);
}

/// Abramowitz-Stegun 7.1.26 would be too coarse; a series is exact enough for |x| < 3.
fn erf(x: f64) -> f64 {
    let mut sum = 0.0;
    let mut term = x;
    for n in 0..60 {
        sum += term / (2 * n + 1) as f64;
        term *= -x * x / (n + 1) as f64;
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

#[test]
fn a_weight_declared_twice_with_two_shapes_is_named() {
    let mut g = GraphBuilder::declaring();
    g.weight("a.weight", &[2, 3]).unwrap();
    let err = g.weight("a.weight", &[3, 2]).unwrap_err().to_string();
    assert!(err.contains("a.weight") && err.contains("[2, 3]"), "{err}");

    let store: HashMap<String, Tensor<'static>> = [(
        "a.weight".to_owned(),
        Tensor::from_f32(vec![2, 3], vec![0.0; 6]).unwrap(),
    )]
    .into();
    let mut g = GraphBuilder::new(&store);
    let err = g.weight("a.weight", &[3, 2]).unwrap_err().to_string();
    assert!(
        err.contains("has shape [2, 3], the config implies [3, 2]"),
        "{err}"
    );
    assert!(
        g.weight("b.weight", &[1]).is_err(),
        "a missing tensor is an error"
    );
}

#[test]
fn weight_dtype_targets_are_the_weights_a_matmul_reads() {
    // pi0.5's adaRMS matrices feed matmuls; the name rule `--weight-dtype` used before
    // skipped them ("norm" in the name). Embeddings, norms and positions feed none.
    let cfg = small_config(Variant::Pi05);
    let graphs = cfg.graphs(None).unwrap();
    let targets = matmul_weights(&graphs);
    assert!(targets.contains("aex.blk.0.ada_attn_norm.weight"));
    assert!(targets.contains("vlm.blk.0.attn_q.weight"));
    assert!(targets.contains("mm.proj.weight"));
    for not in [
        "token_embd.weight",
        "vit.pos_embd.weight",
        "vlm.blk.0.attn_norm.weight",
    ] {
        assert!(!targets.contains(not), "{not}");
    }
    // Every target is a declared 2-D weight.
    let declared = cfg.tensor_shapes().unwrap();
    for t in &targets {
        let shape = &declared.iter().find(|(n, _)| n == t).unwrap().1;
        assert_eq!(shape.len(), 2, "{t}");
    }
}

/// The one-run predict graph of a full-size model (pi0 and pi0.5 at openpi's sizes, built
/// over no store): every weight once however many steps, the same weights as the stage
/// graphs, and per step only the denoise nodes that depend on x or t (what depends on the
/// request alone is made once).
#[test]
fn predict_graph_declares_each_weight_once_at_full_size() {
    use vla::graph::Op;
    use vla::models::flow::predict_graph;
    use vla::models::pi0::full_config;
    for variant in [Variant::Pi0, Variant::Pi05] {
        let cfg = full_config(variant);
        let spec = cfg.spec();
        let graph = |steps| {
            let mut spec = spec.clone();
            spec.io.num_steps = steps;
            predict_graph(&cfg, &spec, None, &spec.model_frames()).unwrap()
        };
        let (one, ten) = (graph(1), graph(10));
        let stages = cfg.graphs(None).unwrap();
        let want = declared_weights(&stages).unwrap();
        assert_eq!(
            declared_weights(std::slice::from_ref(&ten)).unwrap(),
            want,
            "{variant:?}"
        );
        let ops = |g: &vla::graph::Graph| {
            let n = g.nodes().iter();
            n.filter(|n| !matches!(n.op, Op::Weight(_) | Op::Input(_)))
                .count()
        };
        let denoise = ops(&stages[2]);
        let per_step = (ops(&ten) - ops(&one)) / 9;
        // x's Euler update adds 2 ops a step; what depends on the request alone is not
        // repeated: the masks (3 ops), and pi0's state projection (one matmul with its bias).
        let hoisted = match variant {
            Variant::Pi0 => 3 + 1,
            Variant::Pi05 => 3,
        };
        assert_eq!(per_step, denoise + 2 - hoisted, "{variant:?}: ops per step");
        assert_eq!(ten.stages().len(), 3, "{variant:?}");
    }
}
