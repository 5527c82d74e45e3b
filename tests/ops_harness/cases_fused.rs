//! What the wgpu executable fuses across nodes (`src/backend/wgpu/fuse/`): sibling
//! products (a layer's q, k and v projections of one input, through one norm or none, with
//! biases or none, compared through their concatenation) and gated residuals written by the
//! product they gate (pi0.5's `x + o_proj(h) * gate`), rope pairs (queries and keys
//! rotated by one dispatch); and the structural facts that they fuse.

use super::{gpu_backends, Cases, NMSE_MATMUL};
use std::collections::HashMap;
use vla::backend::wgpu::{KernelSet, WgpuOptions};
use vla::backend::Backend;
use vla::gguf::GgmlType;
use vla::graph::{GraphBuilder, NodeId};
use vla::ops::{RopeConfig, RopeLayout, RopeMode};
use vla::Tensor;

/// The input `name` `[m, k]`, RMS-normalised by the input `gain` with gain offset `norm`.
fn rows(
    g: &mut GraphBuilder,
    name: &str,
    (m, k): (usize, usize),
    norm: Option<f32>,
) -> vla::Result<NodeId> {
    let x = g.input(name, &[m, k]);
    match norm {
        Some(offset) => {
            let gain = g.input("gain", &[k]);
            g.rms_norm(x, gain, 1e-6, offset)
        }
        None => Ok(x),
    }
}

/// `x` `[m, k]`, then per width of `ns` a product `x @ w_i^T (+ b_i)` (RMS-normalised rows
/// with `norm`), concatenated along the columns.
fn siblings(
    g: &mut GraphBuilder,
    (m, k): (usize, usize),
    ns: &[usize],
    norm: bool,
    bias: bool,
) -> vla::Result<NodeId> {
    let x = rows(g, "x", (m, k), norm.then_some(1.0))?;
    let mut outs = Vec::new();
    for i in 0..ns.len() {
        let w = g.stored_weight(&format!("w{i}"))?;
        outs.push(match bias {
            true => {
                let b = g.stored_weight(&format!("b{i}"))?;
                g.matmul_add(x, w, b)?
            }
            false => g.matmul(x, w)?,
        });
    }
    g.concat(&outs, 1)
}

/// `x + (h @ w^T) * m[part W..]` (`h` RMS-normalised with `norm`), `x` `[m, W]`, `m` three
/// parts of `W`: the product and the residual.
fn gated_residual(
    g: &mut GraphBuilder,
    (m, k, w): (usize, usize, usize),
    norm: bool,
    part: usize,
) -> vla::Result<(NodeId, NodeId)> {
    let h = rows(g, "h", (m, k), norm.then_some(0.0))?;
    let x = g.input("x", &[m, w]);
    let mods = g.input("mods", &[3 * w]);
    let wt = g.stored_weight("w")?;
    let y = g.matmul(h, wt)?;
    Ok((y, g.add_gated(x, y, mods, part)?))
}

/// Queries `[seq, hq, d]` and keys `[seq, hk, d]` (or heads first) rotated at the same
/// positions, both flattened and concatenated.
fn rope_pair(
    g: &mut GraphBuilder,
    (q_shape, k_shape): ([usize; 3], [usize; 3]),
    seq: usize,
    cfg: RopeConfig,
) -> vla::Result<NodeId> {
    let pos = g.input("pos", &[seq]);
    let q = g.input("q", &q_shape);
    let k = g.input("k", &k_shape);
    let q = g.rope(q, pos, cfg)?;
    let k = g.rope(k, pos, cfg)?;
    let flat = |g: &mut GraphBuilder, t: NodeId, s: [usize; 3]| g.reshape(t, &[s.iter().product()]);
    let (q, k) = (flat(g, q, q_shape)?, flat(g, k, k_shape)?);
    g.concat(&[q, k], 0)
}

fn rope_cfg(mode: RopeMode, layout: RopeLayout, n_rot: Option<usize>) -> RopeConfig {
    RopeConfig {
        mode,
        theta: 10000.0,
        n_rot,
        freq_scale: 1.0,
        layout,
    }
}

/// q and k projected from `x` `[seq, k]` (their products fused), split into heads (views)
/// and rotated (a pair once the projections are fused), concatenated.
fn projected_rope_pair(
    g: &mut GraphBuilder,
    (seq, k, hq, hk, d): (usize, usize, usize, usize, usize),
    cfg: RopeConfig,
) -> vla::Result<NodeId> {
    let x = g.input("x", &[seq, k]);
    let pos = g.input("pos", &[seq]);
    let mut heads = Vec::new();
    for (name, h) in [("wq", hq), ("wk", hk)] {
        let w = g.stored_weight(name)?;
        let y = g.matmul(x, w)?;
        let y = g.reshape(y, &[seq, h, d])?;
        let y = g.rope(y, pos, cfg)?;
        heads.push(g.reshape(y, &[seq, h * d])?);
    }
    g.concat(&heads, 1)
}

pub fn add(c: &mut Cases) {
    add_siblings(c);
    for (i, (seq, k, hq, hk, d)) in [(7, 64, 4, 2, 16), (50, 96, 3, 1, 64)]
        .into_iter()
        .enumerate()
    {
        let mode = [RopeMode::Neox, RopeMode::Normal][i];
        let cfg = rope_cfg(mode, RopeLayout::SeqHeadDim, None);
        let pos: Vec<f32> = (0..seq).map(|i| (i * 7) as f32).collect();
        let inputs = vec![
            ("x", c.tensor(&[seq, k])),
            ("pos", vla::Tensor::from_f32(vec![seq], pos).unwrap()),
        ];
        let weights = vec![
            ("wq", c.weight(&[hq * d, k], GgmlType::F32)),
            ("wk", c.weight(&[hk * d, k], GgmlType::F32)),
        ];
        let dims = (seq, k, hq, hk, d);
        let name = format!("projected rope pair {mode:?} {dims:?}");
        let build = move |g: &mut GraphBuilder| projected_rope_pair(g, dims, cfg);
        c.add(name, weights, inputs, NMSE_MATMUL, build).kernel_sets = true;
    }
    // (seq, query heads, key heads, head dim, rotated dims)
    for (seq, hq, hk, d, n_rot) in [
        (7, 3, 1, 64, None),
        (13, 5, 2, 64, Some(32)),
        (50, 15, 5, 64, None),
        (9, 4, 4, 72, Some(48)),
    ] {
        for mode in [RopeMode::Normal, RopeMode::Neox] {
            for layout in [RopeLayout::SeqHeadDim, RopeLayout::HeadSeqDim] {
                let shapes = match layout {
                    RopeLayout::SeqHeadDim => ([seq, hq, d], [seq, hk, d]),
                    RopeLayout::HeadSeqDim => ([hq, seq, d], [hk, seq, d]),
                };
                let pos: Vec<f32> = (0..seq).map(|i| (i * 37 % 1000) as f32).collect();
                let pos = vla::Tensor::from_f32(vec![seq], pos).unwrap();
                let inputs = vec![
                    ("pos", pos),
                    ("q", c.tensor(&shapes.0)),
                    ("k", c.tensor(&shapes.1)),
                ];
                let cfg = rope_cfg(mode, layout, n_rot);
                let name = format!("rope pair {mode:?} {layout:?} {shapes:?} n_rot {n_rot:?}");
                let build = move |g: &mut GraphBuilder| rope_pair(g, shapes, seq, cfg);
                c.add(name, vec![], inputs, super::NMSE_DEFAULT, build);
            }
        }
    }
    let types = [
        GgmlType::F32,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q5_0,
    ];
    let shapes = [(3, 64, 40), (37, 96, 70), (50, 512, 96)];
    for (i, ty) in types.into_iter().enumerate() {
        for (j, &(m, k, w)) in shapes.iter().enumerate() {
            let (norm, part) = ((i + j) % 2 == 0, (i + j) % 3);
            let weights = vec![("w", c.weight(&[w, k], ty))];
            let mut inputs = vec![
                ("h", c.tensor(&[m, k])),
                ("x", c.tensor(&[m, w])),
                ("mods", c.tensor(&[3 * w])),
            ];
            if norm {
                inputs.push(("gain", c.tensor(&[k])));
            }
            let name = format!("gated residual {ty} m{m} k{k} w{w} norm {norm} part {part}");
            let build = move |g: &mut GraphBuilder| Ok(gated_residual(g, (m, k, w), norm, part)?.1);
            let case = match ty.is_quantized() {
                true => c.add_int_dot(name, weights, inputs, NMSE_MATMUL, build),
                false => c.add(name, weights, inputs, NMSE_MATMUL, build),
            };
            case.kernel_sets = true;
        }
    }
}

fn add_siblings(c: &mut Cases) {
    let shapes: [(usize, usize, &[usize]); 4] = [
        (5, 64, &[40, 24, 24]),
        (37, 96, &[33, 17, 70]),
        (50, 512, &[96, 64, 40]), // deep enough to split K on the 16-row tile
        (17, 64, &[48, 48]),
    ];
    let types = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q4_1,
    ];
    for (i, ty) in types.into_iter().enumerate() {
        for (j, &(m, k, ns)) in shapes.iter().enumerate() {
            let (norm, bias) = ((i + j) % 2 == 0, (i + j) % 3 == 1);
            let mut weights = Vec::new();
            for (n_i, &n) in ns.iter().enumerate() {
                weights.push((["w0", "w1", "w2"][n_i], c.weight(&[n, k], ty)));
                if bias {
                    weights.push((["b0", "b1", "b2"][n_i], c.tensor(&[n])));
                }
            }
            let mut inputs = vec![("x", c.tensor(&[m, k]))];
            if norm {
                inputs.push(("gain", c.tensor(&[k])));
            }
            let name = format!("sibling products {ty} m{m} k{k} n{ns:?} norm {norm} bias {bias}");
            let ns = ns.to_vec();
            let build = move |g: &mut GraphBuilder| siblings(g, (m, k), &ns, norm, bias);
            let case = match ty.is_quantized() {
                true => c.add_int_dot(name, weights, inputs, NMSE_MATMUL, build),
                false => c.add(name, weights, inputs, NMSE_MATMUL, build),
            };
            case.kernel_sets = true;
        }
    }
}

/// Dispatches of the graph `build` makes (its output), compiled on `base` with `kernels`
/// (or the adapter's own) and fusion on or off.
fn dispatch_count(
    base: &super::TestBackend,
    weights: &HashMap<String, Tensor<'static>>,
    (kernels, fuse): (Option<KernelSet>, bool),
    build: impl FnOnce(&mut GraphBuilder) -> NodeId,
) -> usize {
    let mut g = GraphBuilder::new(weights);
    let out = build(&mut g);
    let graph = g.build(&[out]).unwrap();
    let b = base.backend.reconfigured(WgpuOptions {
        kernels: kernels.or(base.backend.options().kernels),
        fuse_nodes: Some(fuse),
        ..base.backend.options()
    });
    b.compile(&graph, weights).unwrap().stats().dispatches
}

/// The adapter as it opens; none only under `VLA_ALLOW_NO_GPU=1` (`gpu_backends` warned).
fn default_backend() -> Option<super::TestBackend> {
    gpu_backends().into_iter().find(|b| b.is_default())
}

/// Fusing is structural: three sibling products take one product's dispatches (plus the
/// concatenation's), three with `fuse_nodes` off; products sharing a weight with
/// another reader stay apart.
#[test]
fn sibling_products_fuse() {
    let Some(base) = default_backend() else {
        return;
    };
    let w = |n: usize| Tensor::from_f32(vec![n, 64], vec![0.5; n * 64]).unwrap();
    let weights: HashMap<String, Tensor<'static>> = [
        ("w0".to_owned(), w(40)),
        ("w1".to_owned(), w(24)),
        ("w2".to_owned(), w(24)),
    ]
    .into();
    let build = |shared: bool| {
        move |g: &mut GraphBuilder| {
            let out = siblings(g, (50, 64), &[40, 24, 24], false, false).unwrap();
            if !shared {
                return out;
            }
            // w1 read by a product of another input too
            let y = g.input("y", &[3, 64]);
            let w1 = g.weight("w1", &[24, 64]).unwrap();
            let p = g.matmul(y, w1).unwrap();
            let p = g.reshape(p, &[72]).unwrap();
            let out = g.reshape(out, &[50 * 88]).unwrap();
            g.concat(&[out, p], 0).unwrap()
        }
    };
    for kernels in [KernelSet::Portable, KernelSet::Gpu] {
        let count =
            |fuse, shared| dispatch_count(&base, &weights, (Some(kernels), fuse), build(shared));
        // products, then the concatenation (one copy an input)
        assert_eq!(count(true, false), 1 + 3, "{kernels:?}");
        assert_eq!(count(false, false), 3 + 3, "{kernels:?}");
        assert_eq!(count(true, true), 4 + 3 + 2, "{kernels:?}");
    }
}

/// A gated residual of a product is structural too: the product's dispatches write it (one
/// dispatch for both), two with fusion off, and two when the product is read elsewhere.
#[test]
fn gated_residuals_fuse() {
    let Some(base) = default_backend() else {
        return;
    };
    let w = Tensor::from_f32(vec![40, 64], vec![0.5; 40 * 64]).unwrap();
    let weights: HashMap<String, Tensor<'static>> = [("w".to_owned(), w)].into();
    let build = |read_elsewhere: bool| {
        move |g: &mut GraphBuilder| {
            let (y, out) = gated_residual(g, (50, 64, 40), false, 1).unwrap();
            match read_elsewhere {
                true => g.add(out, y).unwrap(),
                false => out,
            }
        }
    };
    for kernels in [KernelSet::Portable, KernelSet::Gpu] {
        let count = |fuse, elsewhere| {
            dispatch_count(&base, &weights, (Some(kernels), fuse), build(elsewhere))
        };
        assert_eq!(count(true, false), 1, "{kernels:?}");
        assert_eq!(count(false, false), 2, "{kernels:?}");
        assert_eq!(count(true, true), 3, "{kernels:?}");
    }
}

/// Rope pairs are structural: one dispatch rotates both (then the concatenation's two
/// copies), two with fusion off, two when the keys are computed after the queries' rope.
#[test]
fn rope_pairs_fuse() {
    let Some(base) = default_backend() else {
        return;
    };
    let cfg = rope_cfg(RopeMode::Neox, RopeLayout::SeqHeadDim, None);
    let build = |keys_after: bool| {
        move |g: &mut GraphBuilder| match keys_after {
            false => rope_pair(g, ([5, 4, 8], [5, 2, 8]), 5, cfg).unwrap(),
            true => {
                let pos = g.input("pos", &[5]);
                let q = g.input("q", &[5, 2, 8]);
                let q = g.rope(q, pos, cfg).unwrap();
                let k = g.scale(q, 0.5);
                let k = g.rope(k, pos, cfg).unwrap();
                g.concat(&[q, k], 0).unwrap()
            }
        }
    };
    let count = |fuse, after| dispatch_count(&base, &HashMap::new(), (None, fuse), build(after));
    assert_eq!(count(true, false), 1 + 2);
    assert_eq!(count(false, false), 2 + 2);
    assert_eq!(count(true, true), 3 + 2);
}

/// Fused sets release what their dispatches read once the last member is placed: a chain
/// of gated residuals (each product reading a scaled copy of the stream) and a chain of
/// layers with fused q/k projections and paired ropes need as much activation memory at 9
/// layers as at 3 (a slot left pinned a layer would grow with the depth), and the gated
/// residuals no more than without fusion (the product's own value takes no slot).
#[test]
fn fused_sets_release_what_they_read() {
    let Some(base) = default_backend() else {
        return;
    };
    let w = |r: usize, c: usize| Tensor::from_f32(vec![r, c], vec![0.01; r * c]).unwrap();
    let weights: HashMap<String, Tensor<'static>> = [
        ("w".to_owned(), w(40, 40)),
        ("wq".to_owned(), w(16, 16)),
        ("wk".to_owned(), w(8, 16)),
        ("wo".to_owned(), w(16, 24)),
    ]
    .into();
    let gated_chain = |g: &mut GraphBuilder, layers: usize| {
        let mut x = g.input("x", &[50, 40]);
        let mods = g.input("mods", &[3 * 40]);
        let w = g.weight("w", &[40, 40]).unwrap();
        for _ in 0..layers {
            let t = g.scale(x, 0.5);
            let y = g.matmul(t, w).unwrap();
            x = g.add_gated(x, y, mods, 1).unwrap();
        }
        x
    };
    let cfg = rope_cfg(RopeMode::Neox, RopeLayout::SeqHeadDim, None);
    let rope_chain = |g: &mut GraphBuilder, layers: usize| {
        let mut x = g.input("x", &[9, 16]);
        let pos = g.input("pos", &[9]);
        let (wq, wk) = (
            g.weight("wq", &[16, 16]).unwrap(),
            g.weight("wk", &[8, 16]).unwrap(),
        );
        let wo = g.weight("wo", &[16, 24]).unwrap();
        for _ in 0..layers {
            let q = g.matmul(x, wq).unwrap();
            let q = g.reshape(q, &[9, 2, 8]).unwrap();
            let q = g.rope(q, pos, cfg).unwrap();
            let k = g.matmul(x, wk).unwrap();
            let k = g.reshape(k, &[9, 1, 8]).unwrap();
            let k = g.rope(k, pos, cfg).unwrap();
            let q = g.reshape(q, &[9, 16]).unwrap();
            let k = g.reshape(k, &[9, 8]).unwrap();
            let qk = g.concat(&[q, k], 1).unwrap();
            let o = g.matmul(qk, wo).unwrap();
            x = g.add(x, o).unwrap();
        }
        x
    };
    type Chain<'a> = &'a dyn Fn(&mut GraphBuilder, usize) -> NodeId;
    for (name, build) in [
        ("gated residuals", &gated_chain as Chain),
        ("rope pairs", &rope_chain),
    ] {
        // (peak activation bytes, dispatches)
        let stats = |fuse: bool, layers: usize| {
            let mut g = GraphBuilder::new(&weights);
            let out = build(&mut g, layers);
            let graph = g.build(&[out]).unwrap();
            let b = base.backend.reconfigured(WgpuOptions {
                fuse_nodes: Some(fuse),
                ..base.backend.options()
            });
            let exe = b.compile(&graph, &weights).unwrap();
            (exe.stats().peak_activation_bytes, exe.stats().dispatches)
        };
        let (shallow, deep, unfused) = (stats(true, 3), stats(true, 9), stats(false, 9));
        println!(
            "{name}: fused 3 / 9 layers {shallow:?}, unfused 9 {unfused:?} (bytes, dispatches)"
        );
        assert!(deep.1 < unfused.1, "{name}: nothing fused");
        assert_eq!(shallow.0, deep.0, "{name}: fused peak grows with the depth");
        if name == "gated residuals" {
            assert!(
                deep.0 <= unfused.0,
                "{name}: {deep:?} fused, {unfused:?} not"
            );
        }
    }
}
