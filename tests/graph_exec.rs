//! The graph executor on a model-shaped graph whose weights come straight from a GGUF file.

use vla::backend::{self, Backend, CpuBackend};
use vla::gguf::{GgmlType, GgufFile, GgufWriter};
use vla::graph::GraphBuilder;
use vla::{ops, Tensor};

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 500.0 - 1.0)
        .collect()
}

/// A pre-norm MLP block: y = x + down(gelu(up(rms_norm(x)))).
fn model_file(dir: &std::path::Path) -> GgufFile {
    let (d, h) = (64, 160);
    let mut w = GgufWriter::new();
    w.add_f32("norm.weight", GgmlType::F32, &[d], &values(d as usize, 1))
        .unwrap();
    w.add_f32(
        "up.weight",
        GgmlType::F16,
        &[d, h],
        &values((d * h) as usize, 2),
    )
    .unwrap();
    w.add_f32(
        "down.weight",
        GgmlType::Q8_0,
        &[h, d],
        &values((d * h) as usize, 3),
    )
    .unwrap();
    let path = dir.join("mlp.gguf");
    w.write_to_file(&path).unwrap();
    GgufFile::open(&path).unwrap()
}

#[test]
fn mlp_block_on_cpu_matches_ops_and_borrows_weights() {
    let dir = tempfile::tempdir().unwrap();
    let file = model_file(dir.path());
    let mut g = GraphBuilder::new(&file);
    let x = g.input("x", &[5, 64]);
    let norm = g.stored_weight("norm.weight").unwrap();
    let up = g.stored_weight("up.weight").unwrap();
    let down = g.stored_weight("down.weight").unwrap();
    let n = g.rms_norm(x, norm, 1e-6, 0.0).unwrap();
    let u = g.matmul(n, up).unwrap();
    let a = g.gelu_tanh(u);
    let dn = g.matmul(a, down).unwrap();
    let y = g.add(x, dn).unwrap();
    let graph = g.build(&[y, u]).unwrap();
    // (the norm is read by the up matmul and dropped: builder ids no longer index the graph)
    assert_eq!(graph.node(graph.outputs()[0]).shape, vec![5, 64]);

    let xin = Tensor::from_f32(vec![5, 64], values(320, 9)).unwrap();
    let mut exe = CpuBackend.compile(&graph, &file).unwrap();
    let outs = exe.run(&[("x", &xin)]).unwrap();

    // The same computation, op by op, on tensors borrowed from the mapped file.
    use vla::backend::WeightStore;
    let (nw, uw, dw) = (
        file.weight("norm.weight").unwrap(),
        file.weight("up.weight").unwrap(),
        file.weight("down.weight").unwrap(),
    );
    assert!(
        nw.is_borrowed() && uw.is_borrowed() && dw.is_borrowed(),
        "weights must be zero-copy"
    );
    // the matrices in the layouts the backend packs them in where this CPU has the kernels
    // (made once at compile; the file's pages then let go), so the sums are the same
    let (up_p, down_p) = (
        ops::PackedWeight::new(&uw).unwrap(),
        ops::PackedWeight::new(&dw).unwrap(),
    );
    let n = ops::rms_norm(&xin, &nw, 1e-6).unwrap();
    let u = ops::matmul_add_packed(&n, &uw, up_p.as_ref(), None).unwrap();
    let a = ops::gelu_tanh(&u).unwrap();
    let y = ops::add(
        &xin,
        &ops::matmul_add_packed(&a, &dw, down_p.as_ref(), None).unwrap(),
    )
    .unwrap();
    assert_eq!(outs[0].as_f32().unwrap(), y.as_f32().unwrap());
    assert_eq!(outs[1].as_f32().unwrap(), u.as_f32().unwrap());

    let stats = exe.stats();
    assert_eq!(stats.dispatches, 5); // input, norm + up, gelu, down, add
                                     // the file's bytes, or the packed layouts' in their place
    let up_bytes = up_p.map_or(64 * 160 * 2, |p| p.bytes());
    let down_bytes = down_p.map_or(160 / 32 * 34 * 64, |p| p.bytes());
    assert_eq!(stats.weight_bytes, 64 * 4 + up_bytes + down_bytes);
    assert!(stats.peak_activation_bytes > 0);
}

#[test]
fn run_time_inputs_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let file = model_file(dir.path());
    let mut g = GraphBuilder::new(&file);
    let x = g.input("x", &[2, 64]);
    let y = g.scale(x, 2.0);
    let graph = g.build(&[y]).unwrap();
    let mut exe = CpuBackend.compile(&graph, &file).unwrap();
    let wrong = Tensor::from_f32(vec![3, 64], vec![0.0; 192]).unwrap();
    let right = Tensor::from_f32(vec![2, 64], vec![1.0; 128]).unwrap();
    let e = exe.run(&[("x", &wrong)]).unwrap_err().to_string();
    assert!(
        e.contains("shape [3, 64], the graph expects [2, 64]"),
        "{e}"
    );
    assert!(exe
        .run(&[])
        .unwrap_err()
        .to_string()
        .contains("missing input \"x\""));
    let e = exe
        .run(&[("x", &right), ("z", &right)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown input \"z\""), "{e}");
    assert_eq!(
        exe.run(&[("x", &right)]).unwrap()[0].as_f32().unwrap(),
        &[2.0; 128][..]
    );
}

#[test]
fn builder_rejects_bad_shapes_and_names() {
    let dir = tempfile::tempdir().unwrap();
    let file = model_file(dir.path());
    let mut g = GraphBuilder::new(&file);
    let x = g.input("x", &[2, 63]);
    let up = g.stored_weight("up.weight").unwrap();
    assert!(g
        .matmul(x, up)
        .unwrap_err()
        .to_string()
        .contains("need x [.., K], w [N, K]"));
    assert!(matches!(
        g.stored_weight("nope"),
        Err(vla::Error::TensorNotFound(_))
    ));
    assert!(g.reshape(x, &[5, 5]).is_err());
    assert!(g.permute(x, &[0, 0]).is_err());
    assert!(g.slice(x, 1, 60, 4).is_err());
    let e = backend::open("cuda")
        .err()
        .expect("no cuda backend")
        .to_string();
    assert!(e.contains("expected one of: cpu, vulkan"), "{e}");
    assert_eq!(
        backend::open("cpu")
            .unwrap()
            .description()
            .split(' ')
            .next(),
        Some("cpu")
    );
}

/// `GraphBuilder::inline` composes graphs: a weight read by both copies is one node, bound
/// inputs take the given node, unbound ones get the namespace, an op of the same inputs is
/// made once, and the composed graph computes the graphs one after the other. Constants
/// travel with the graph and are not weights.
#[test]
fn inlined_graphs_share_weights_and_compute_in_sequence() {
    use std::collections::HashMap;
    use vla::graph::Op;
    let store: HashMap<String, Tensor<'static>> = [(
        "w".to_string(),
        Tensor::from_f32(vec![3, 3], values(9, 7)).unwrap(),
    )]
    .into();
    // step(x) = x @ w^T + 2 * c, with c a constant
    let mut g = GraphBuilder::new(&store);
    let x = g.input("x", &[2, 3]);
    let w = g.stored_weight("w").unwrap();
    let c = Tensor::from_f32(vec![1, 3], vec![0.5, -1.0, 2.0]).unwrap();
    let c = g.constant("c", c).unwrap();
    let c2 = g.scale(c, 2.0);
    let y = g.matmul(x, w).unwrap();
    let y = g.add(y, c2).unwrap();
    let step = g.build(&[y]).unwrap();
    assert_eq!(
        step.weights().count(),
        1,
        "the constant is not a stored weight"
    );

    let mut h = GraphBuilder::new(&store);
    h.stage("first");
    let a = h.inline(&step, "s", |_| None).unwrap()[0];
    h.stage("second");
    let b = h.inline(&step, "s", |n| (n == "x").then_some(a)).unwrap()[0];
    let twice = h.build(&[b]).unwrap();
    let count = |f: &dyn Fn(&Op) -> bool| twice.nodes().iter().filter(|n| f(&n.op)).count();
    assert_eq!(
        count(&|op| matches!(op, Op::Weight(_))),
        2,
        "w and c once each"
    );
    assert_eq!(
        count(&|op| matches!(op, Op::Scale(_))),
        1,
        "2 * c made once"
    );
    assert_eq!(count(&|op| matches!(op, Op::MatMul { .. })), 2);
    assert_eq!(twice.input_names().collect::<Vec<_>>(), ["s.x"]);
    // FLOPs: 2 per multiply-add of the matmul x [2, 3] @ w^T, elementwise not counted; per stage.
    let n_out = step.node(step.outputs()[0]).shape[1] as u64;
    let f = 2 * 2 * n_out * 3;
    assert_eq!(step.flops_by_stage(), [(String::new(), f)]);
    assert_eq!(
        twice.flops_by_stage(),
        [("first".to_string(), f), ("second".to_string(), f)]
    );

    let cpu = CpuBackend;
    let x0 = Tensor::from_f32(vec![2, 3], values(6, 3)).unwrap();
    let mut one = cpu.compile(&step, &store).unwrap();
    let mid = one.run(&[("x", &x0)]).unwrap().remove(0);
    let want = one.run(&[("x", &mid)]).unwrap().remove(0);
    let mut two = cpu.compile(&twice, &store).unwrap();
    let got = two.run(&[("s.x", &x0)]).unwrap().remove(0);
    assert_eq!(got.as_f32().unwrap(), want.as_f32().unwrap());
    assert_eq!(
        two.stage_ms().map(|s| s.len()),
        Some(2),
        "cpu times each stage"
    );
    assert_eq!(one.stage_ms(), None, "an unstaged graph has no stage times");

    // A constant name is one value; binding a node of another shape is an error.
    let mut bad = GraphBuilder::new(&store);
    let other = Tensor::from_f32(vec![1, 3], vec![0.0; 3]).unwrap();
    bad.constant("c", other).unwrap();
    assert!(bad.inline(&step, "s", |_| None).is_err());
    let mut bad = GraphBuilder::new(&store);
    let wrong = bad.input("z", &[3, 2]);
    assert!(bad.inline(&step, "s", |_| Some(wrong)).is_err());
}

/// Attention's FLOPs: 2 x Hq x Sq x Sk x (D + Dv) (scores and the weighted sum), whatever the
/// kv-head count; patch embedding as a matmul over C x p x p.
#[test]
fn flops_count_attention_and_patch_embed() {
    use std::collections::HashMap;
    use vla::graph::AttentionMask;
    let mut store: HashMap<String, Tensor<'static>> = HashMap::new();
    store.insert(
        "pw".into(),
        Tensor::from_f32(vec![5, 3, 2, 2], vec![0.0; 60]).unwrap(),
    );
    store.insert(
        "pb".into(),
        Tensor::from_f32(vec![5], vec![0.0; 5]).unwrap(),
    );
    let mut g = GraphBuilder::new(&store);
    let q = g.input("q", &[3, 4, 8]);
    let k = g.input("k", &[7, 2, 8]);
    let v = g.input("v", &[7, 2, 6]);
    g.stage("attn");
    let o = g
        .attention(q, &[(k, v)], AttentionMask::None, None, None)
        .unwrap();
    g.stage("patches");
    let img = g.input("img", &[3, 4, 6]);
    let (pw, pb) = (
        g.weight("pw", &[5, 3, 2, 2]).unwrap(),
        g.weight("pb", &[5]).unwrap(),
    );
    let p = g.patch_embed(img, pw, pb).unwrap();
    let graph = g.build(&[o, p]).unwrap();
    assert_eq!(
        graph.flops_by_stage(),
        [
            ("attn".to_string(), 2 * 4 * 3 * 7 * (8 + 6)),
            // 6 patches x 5 outputs x (3 x 2 x 2) inputs
            ("patches".to_string(), 2 * 6 * 5 * 12),
        ]
    );
}

/// `build` drops the ops no output depends on (and remaps the stages), keeps every input and
/// weight, and the graph computes what it did.
#[test]
fn ops_no_output_reads_are_dropped() {
    use std::collections::HashMap;
    use vla::graph::{GraphBuilder, Op};
    let w: HashMap<String, vla::Tensor<'static>> = HashMap::from([(
        "w".to_owned(),
        vla::Tensor::from_f32(vec![2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap(),
    )]);
    let mut g = GraphBuilder::new(&w);
    let x = g.input("x", &[1, 3]);
    let unused = g.input("unused", &[2]);
    let dead = g.silu(x); // read by nothing
    let _dead_too = g.scale(dead, 2.0);
    g.stage("second");
    let wn = g.weight("w", &[2, 3]).unwrap();
    let y = g.matmul(x, wn).unwrap();
    let _ = unused;
    let graph = g.build(&[y]).unwrap();
    let ops: Vec<&str> = graph.nodes().iter().map(|n| n.op.kind()).collect();
    assert_eq!(ops, ["input", "input", "weight", "matmul"]);
    assert_eq!(graph.stages(), &[("second".to_owned(), 2)]);
    assert!(graph
        .nodes()
        .iter()
        .all(|n| !matches!(n.op, Op::Silu | Op::Scale(_))));
    let mut exe = vla::backend::CpuBackend.compile(&graph, &w).unwrap();
    let x = vla::Tensor::from_f32(vec![1, 3], vec![1.0, 0.0, -1.0]).unwrap();
    let u = vla::Tensor::from_f32(vec![2], vec![0.0, 0.0]).unwrap();
    let out = exe.run(&[("x", &x), ("unused", &u)]).unwrap();
    assert_eq!(out[0].to_vec_f32().unwrap(), vec![-2.0, -2.0]);
}

/// `Graph::handed_over` counts each value a stage computes and a later stage reads, once
/// (a prefill's keys and values read by every denoise step).
#[test]
fn handed_over_counts_what_one_stage_leaves_the_next() {
    use vla::graph::GraphBuilder;
    let mut g = GraphBuilder::declaring();
    let x = g.input("x", &[4, 8]);
    g.stage("prefill");
    let k = g.scale(x, 2.0);
    let v = g.scale(x, 3.0);
    let late = g.scale(x, 4.0);
    g.stage("denoise");
    let mut y = g.input("y", &[4, 8]);
    for _ in 0..3 {
        let a = g.add(y, k).unwrap();
        y = g.mul(a, v).unwrap();
    }
    let z = g.add(y, late).unwrap();
    let graph = g.build(&[z]).unwrap();
    // k, v and the value added at the end: three [4, 8] values, x (no stage) not counted
    assert_eq!(graph.handed_over("prefill", "denoise"), 3 * 32);
    assert_eq!(graph.handed_over("denoise", "prefill"), 0);
}

/// A block with products, a residual, rope and attention, batched for 3 requests: each
/// request apart is the same ops (its outputs bit for bit the graph's alone, 3 times the
/// products), stacked the products run once over the requests' rows (close to it).
#[test]
fn batched_graph_runs_each_request_as_alone() {
    use std::collections::HashMap;
    use vla::graph::{batch_input, request_part, AttentionMask, Op};
    use vla::ops::{RopeConfig, RopeLayout, RopeMode};
    let (s, d, heads) = (5, 8, 2);
    let mut store: HashMap<String, Tensor<'static>> = HashMap::new();
    for (k, name) in ["wq", "wo"].iter().enumerate() {
        let w = Tensor::from_f32(vec![d, d], values(d * d, 20 + k as u32)).unwrap();
        store.insert(name.to_string(), w);
    }
    let mut g = GraphBuilder::new(&store);
    let x = g.input("x", &[s, d]);
    let pos = g.input("pos", &[s]);
    let (wq, wo) = (
        g.weight("wq", &[d, d]).unwrap(),
        g.weight("wo", &[d, d]).unwrap(),
    );
    let q = g.matmul(x, wq).unwrap();
    let q = g.reshape(q, &[s, heads, d / heads]).unwrap();
    let cfg = RopeConfig::new(RopeMode::Neox, 10000.0);
    assert_eq!(cfg.layout, RopeLayout::SeqHeadDim);
    let q = g.rope(q, pos, cfg).unwrap();
    let a = g
        .attention(q, &[(q, q)], AttentionMask::Causal, None, None)
        .unwrap();
    let a = g.reshape(a, &[s, d]).unwrap();
    let y = g.matmul_add(a, wo, x).unwrap();
    let graph = g.build(&[y]).unwrap();
    let products = |g: &vla::graph::Graph| {
        let m = g
            .nodes()
            .iter()
            .filter(|n| matches!(n.op, Op::MatMul { .. }));
        m.count()
    };
    let requests: Vec<[Tensor; 2]> = (0..3)
        .map(|b| {
            let pos: Vec<f32> = (0..s).map(|i| (i + 2 * b) as f32).collect();
            [
                Tensor::from_f32(vec![s, d], values(s * d, 7 + b as u32)).unwrap(),
                Tensor::from_f32(vec![s], pos).unwrap(),
            ]
        })
        .collect();
    let alone: Vec<Vec<f32>> = (requests.iter())
        .map(|[x, p]| {
            let mut exe = CpuBackend.compile(&graph, &store).unwrap();
            exe.run(&[("x", x), ("pos", p)]).unwrap()[0]
                .to_vec_f32()
                .unwrap()
        })
        .collect();
    assert!(graph.batched(0, true).is_err(), "a batch of none");
    for stack in [false, true] {
        let batched = graph.batched(3, stack).unwrap();
        let want = if stack { 2 } else { 6 };
        assert_eq!(products(&batched), want, "products, stack {stack}");
        let names: Vec<[String; 2]> = (0..3)
            .map(|b| [batch_input(b, "x"), batch_input(b, "pos")])
            .collect();
        let inputs: Vec<(&str, &Tensor)> = (names.iter().zip(&requests))
            .flat_map(|(n, r)| [(n[0].as_str(), &r[0]), (n[1].as_str(), &r[1])])
            .collect();
        let mut exe = CpuBackend.compile(&batched, &store).unwrap();
        let out = exe.run(&inputs).unwrap()[0].to_vec_f32().unwrap();
        for (b, want) in alone.iter().enumerate() {
            let got = request_part(&out, 3, b);
            let err = (got.iter().zip(want))
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            match stack {
                false => assert_eq!(got, &want[..], "request {b} apart"),
                true => assert!(err < 1e-5, "request {b} stacked: {err}"),
            }
        }
    }
}

/// On wgpu, a graph compiled over the same store as a live executable (a batched predict
/// beside the one-request predict) uploads no weights of its own: sibling products' fused
/// weights and single ones alike. Once no executable holds them, they are uploaded again.
#[test]
fn wgpu_executables_over_one_store_share_its_weights() {
    use std::collections::HashMap;
    let b = backend::open("vulkan").expect("vulkan: scripts/test.sh installs lavapipe");
    let (s, d) = (4, 16);
    let mut store: HashMap<String, Tensor<'static>> = HashMap::new();
    for (k, name) in ["wq", "wk", "wv", "wo"].iter().enumerate() {
        let w = Tensor::from_f32(vec![d, d], values(d * d, 40 + k as u32)).unwrap();
        store.insert(name.to_string(), w);
    }
    let mut g = GraphBuilder::new(&store);
    let x = g.input("x", &[s, d]);
    let mut ys = Vec::new();
    for name in ["wq", "wk", "wv"] {
        let w = g.weight(name, &[d, d]).unwrap();
        ys.push(g.matmul(x, w).unwrap());
    }
    let qk = g.add(ys[0], ys[1]).unwrap();
    let y = g.add(qk, ys[2]).unwrap();
    let wo = g.weight("wo", &[d, d]).unwrap();
    let out = g.matmul(y, wo).unwrap();
    let graph = g.build(&[out]).unwrap();
    let batched = graph.batched(2, true).unwrap();
    let first = b.compile(&graph, &store).unwrap();
    let own = first.stats().weight_bytes;
    assert!(
        own >= 4 * (4 * d * d) as u64,
        "the first uploads every weight: {own}"
    );
    let second = b.compile(&batched, &store).unwrap();
    assert_eq!(
        second.stats().weight_bytes,
        0,
        "the batched graph shares them"
    );
    drop((first, second));
    let third = b.compile(&graph, &store).unwrap();
    assert_eq!(
        third.stats().weight_bytes,
        own,
        "uploaded again once none holds them"
    );
}
