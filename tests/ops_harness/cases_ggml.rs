//! ggml-only checks: every op family the ggml lowering maps, against the CPU reference with
//! the harness bounds (these cases run on ggml only, so a wgpu gap cannot fail them), and
//! the list of cases the shared harness may see answered with `NotImplemented` on ggml.

use super::{graph_and_reference, run, verdict, Cases, Rng, Verdict, NMSE_DEFAULT, NMSE_MATMUL};
use vla::backend::ggml::GgmlBackend;
use vla::gguf::GgmlType;
use vla::graph::{AttentionMask, GraphBuilder};
use vla::ops::{RopeConfig, RopeLayout, RopeMode};
use vla::Tensor;

/// Name prefixes of shared-harness cases that ggml answers `NotImplemented` for.
pub const NOT_IMPLEMENTED: &[&str] = &[
    "rope ",           // fractional positions: ggml_rope_ext takes I32 positions
    "bmm b2 m3 n4 k0", // zero-size tensors
    "slice [4, 6] axis 1 [3, +0)",
    "concat [[6, 2], [0, 2], [1, 2]]",
    "slice [2, 3, 2, 3, 2, 3]", // rank > 4: ggml tensors have 4 dims
    "permute [2, 3, 4, 5, 6]",
    "permute [2, 3, 2, 3, 2, 3]",
    "permute [2, 2, 2, 2, 2, 2, 2, 2]",
    "concat [[1, 2, 3, 2, 2]",
    "fq_linear ", // FoldQuant files load in dequant mode on ggml
];

/// Cases whose ggml result is known to differ from the reference, with why. The harness
/// reports them as known divergences (not passes) and fails if one starts to agree, so the
/// list cannot go stale.
pub const KNOWN_DIVERGENT: &[(&str, &str)] = &[(
    "with -inf",
    "ggml's soft_max gives NaN for a row that is entirely -inf; the reference (and wgpu) give zeros",
)];

/// ggml-cpu's softmax (expf per element, f64 sum) vs ours: ggml's test-backend-ops bound.
const NMSE_SOFTMAX: f64 = 1e-6;

fn ints(shape: &[usize], v: Vec<usize>) -> Tensor<'static> {
    Tensor::from_f32(
        shape.to_vec(),
        v.into_iter().map(|x| x as f32).collect::<Vec<_>>(),
    )
    .unwrap()
}

fn cases() -> Cases {
    let mut c = Cases {
        rng: Rng(0x1234_5678_9ABC_DEF1),
        list: Vec::new(),
    };

    for shape in [vec![3, 37], vec![2, 5, 1000], vec![1]] {
        let mut x = c.tensor(&shape);
        x.as_f32_mut().unwrap().iter_mut().for_each(|v| *v *= 10.0);
        c.add(
            format!("softmax {shape:?}"),
            vec![],
            vec![("x", x)],
            NMSE_SOFTMAX,
            move |g| {
                let x = g.input("x", &shape);
                Ok(g.softmax(x))
            },
        );
    }

    for (ty, offset) in [
        (GgmlType::F32, 0.0),
        (GgmlType::F32, 1.0),
        (GgmlType::F16, 0.0),
    ] {
        let (x, w) = (c.tensor(&[4, 3, 64]), c.weight(&[64], ty));
        c.add(
            format!("rms_norm {ty} offset {offset}"),
            vec![("w", w)],
            vec![("x", x)],
            NMSE_DEFAULT,
            move |g| {
                let x = g.input("x", &[4, 3, 64]);
                let w = g.stored_weight("w")?;
                g.rms_norm(x, w, 1e-6, offset)
            },
        );
        let (x, w, b) = (c.tensor(&[5, 96]), c.weight(&[96], ty), c.weight(&[96], ty));
        c.add(
            format!("layer_norm {ty} offset {offset}"),
            vec![("w", w), ("b", b)],
            vec![("x", x)],
            NMSE_DEFAULT,
            |g| {
                let x = g.input("x", &[5, 96]);
                let (w, b) = (g.stored_weight("w")?, g.stored_weight("b")?);
                g.layer_norm(x, w, b, 1e-5)
            },
        );
    }

    for mode in [RopeMode::Normal, RopeMode::Neox] {
        for layout in [RopeLayout::SeqHeadDim, RopeLayout::HeadSeqDim] {
            for n_rot in [None, Some(16)] {
                let (s, h, d) = (7, 3, 32);
                let shape = match layout {
                    RopeLayout::SeqHeadDim => [s, h, d],
                    RopeLayout::HeadSeqDim => [h, s, d],
                };
                let x = c.tensor(&shape);
                let pos = ints(&[s], vec![0, 1, 2, 3, 50, 100, 511]);
                let mut cfg = RopeConfig::new(mode, 10000.0);
                cfg.layout = layout;
                cfg.n_rot = n_rot;
                c.add(
                    format!("rope {mode:?} {layout:?} n_rot {n_rot:?}"),
                    vec![],
                    vec![("x", x), ("pos", pos)],
                    NMSE_DEFAULT,
                    move |g| {
                        let x = g.input("x", &shape);
                        let p = g.input("pos", &[s]);
                        g.rope(x, p, cfg)
                    },
                );
            }
        }
    }

    // (.., rows of a second key part: 0 = one part)
    for (hq, hkv, sq, sk, d, dv, new) in [
        (4, 2, 5, 9, 32, 16, 0),
        (2, 2, 9, 4, 16, 16, 0),
        (8, 1, 1, 33, 64, 64, 0),
        (4, 2, 5, 9, 32, 16, 5),
    ] {
        for mask in [
            AttentionMask::None,
            AttentionMask::Causal,
            AttentionMask::Allowed,
        ] {
            let (q, k, v) = (
                c.tensor(&[sq, hq, d]),
                c.tensor(&[sk - new, hkv, d]),
                c.tensor(&[sk - new, hkv, dv]),
            );
            let mut inputs = vec![("q", q), ("k", k), ("v", v)];
            if new > 0 {
                inputs.push(("k1", c.tensor(&[new, hkv, d])));
                inputs.push(("v1", c.tensor(&[new, hkv, dv])));
            }
            if mask == AttentionMask::Allowed {
                // A prefix-LM style mask with one fully masked row and a non-0/1 "allowed" value.
                let m: Vec<f32> = (0..sq * sk)
                    .map(|i| {
                        let (r, j) = (i / sk, i % sk);
                        if r == 1 {
                            0.0
                        } else if j < 2 || j <= r {
                            2.0
                        } else {
                            0.0
                        }
                    })
                    .collect();
                inputs.push(("m", Tensor::from_f32(vec![sq, sk], m).unwrap()));
            }
            let name = format!("attention {mask:?} q{hq}x{sq}x{d} kv{hkv}x{sk} ({new} new) dv{dv}");
            c.add(name, vec![], inputs, NMSE_MATMUL, move |g| {
                let q = g.input("q", &[sq, hq, d]);
                let k = g.input("k", &[sk - new, hkv, d]);
                let v = g.input("v", &[sk - new, hkv, dv]);
                let mut kv = vec![(k, v)];
                if new > 0 {
                    kv.push((
                        g.input("k1", &[new, hkv, d]),
                        g.input("v1", &[new, hkv, dv]),
                    ));
                }
                let m = (mask == AttentionMask::Allowed).then(|| g.input("m", &[sq, sk]));
                g.attention(q, &kv, mask, m, Some(0.3))
            });
        }
    }

    for (ty, img) in [(GgmlType::F32, [3, 32, 32]), (GgmlType::F16, [3, 35, 49])] {
        let (x, w, b) = (
            c.tensor(&img),
            c.weight(&[8, 3, 16, 16], ty),
            c.weight(&[8], GgmlType::F32),
        );
        c.add(
            format!("patch_embed {ty} {img:?}"),
            vec![("w", w), ("b", b)],
            vec![("x", x)],
            NMSE_MATMUL,
            move |g| {
                let x = g.input("x", &img);
                let (w, b) = (g.stored_weight("w")?, g.stored_weight("b")?);
                g.patch_embed(x, w, b)
            },
        );
    }

    for axis in 0..3 {
        let mut shapes = vec![[2, 3, 4]; 3];
        shapes
            .iter_mut()
            .enumerate()
            .for_each(|(i, s)| s[axis] = i + 1);
        let inputs: Vec<_> = ["a", "b", "c"]
            .into_iter()
            .zip(shapes.iter().map(|s| c.tensor(s)))
            .collect();
        c.add(
            format!("concat axis {axis}"),
            vec![],
            inputs,
            NMSE_DEFAULT,
            move |g| {
                let xs: Vec<_> = ["a", "b", "c"]
                    .iter()
                    .zip(&shapes)
                    .map(|(n, s)| g.input(*n, s))
                    .collect();
                g.concat(&xs, axis)
            },
        );
        let x = c.tensor(&[4, 10, 6]);
        c.add(
            format!("slice axis {axis}"),
            vec![],
            vec![("x", x)],
            NMSE_DEFAULT,
            move |g| {
                let x = g.input("x", &[4, 10, 6]);
                g.slice(x, axis, 1, 2)
            },
        );
    }

    for (shape, perm) in [
        (vec![2, 3, 4], vec![2, 0, 1]),
        (vec![2, 3, 4, 5], vec![0, 2, 1, 3]),
        (vec![5, 7], vec![1, 0]),
    ] {
        let x = c.tensor(&shape);
        c.add(
            format!("permute {shape:?} {perm:?}"),
            vec![],
            vec![("x", x)],
            NMSE_DEFAULT,
            move |g| {
                let x = g.input("x", &shape);
                g.permute(x, &perm)
            },
        );
    }

    let x = c.tensor(&[6, 4]);
    c.add(
        "reshape [6, 4] -> [2, 3, 4] (output is a view)".into(),
        vec![],
        vec![("x", x)],
        NMSE_DEFAULT,
        |g| {
            let x = g.input("x", &[6, 4]);
            g.reshape(x, &[2, 3, 4])
        },
    );

    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_1] {
        let t = c.weight(&[50, 64], ty);
        let ids = ints(&[6], vec![3, 0, 49, 3, 17, 8]);
        c.add(
            format!("embedding {ty}"),
            vec![("t", t)],
            vec![("ids", ids)],
            NMSE_DEFAULT,
            |g| {
                let t = g.stored_weight("t")?;
                let ids = g.input("ids", &[6]);
                g.embedding(t, ids)
            },
        );
    }

    for trans_b in [true, false] {
        let b_shape = if trans_b { [3, 9, 20] } else { [3, 20, 9] };
        let (a, b) = (c.tensor(&[3, 5, 20]), c.tensor(&b_shape));
        c.add(
            format!("bmm trans_b {trans_b}"),
            vec![],
            vec![("a", a), ("b", b)],
            NMSE_MATMUL,
            move |g| {
                let (a, b) = (g.input("a", &[3, 5, 20]), g.input("b", &b_shape));
                g.bmm(a, b, trans_b)
            },
        );
    }

    // A small block: norm -> quantized projections -> rope -> attention -> gelu MLP.
    let (s, h, d) = (6, 2, 32);
    let weights = vec![
        ("n", c.weight(&[h * d], GgmlType::F32)),
        ("wq", c.weight(&[h * d, h * d], GgmlType::Q8_0)),
        ("wk", c.weight(&[h * d, h * d], GgmlType::Q4_0)),
        ("wv", c.weight(&[h * d, h * d], GgmlType::F16)),
        ("up", c.weight(&[128, h * d], GgmlType::Q5_1)),
    ];
    let x = c.tensor(&[s, h * d]);
    let pos = ints(&[s], (0..s).collect());
    c.add(
        "block (norm, quantized proj, rope, attention, mlp)".into(),
        weights,
        vec![("x", x), ("pos", pos)],
        NMSE_MATMUL,
        move |g| {
            let x = g.input("x", &[s, h * d]);
            let p = g.input("pos", &[s]);
            let n = g.stored_weight("n")?;
            let xn = g.rms_norm(x, n, 1e-6, 0.0)?;
            let mut heads = Vec::new();
            for (i, w) in ["wq", "wk", "wv"].into_iter().enumerate() {
                let w = g.stored_weight(w)?;
                let y = g.matmul(xn, w)?;
                let y = g.reshape(y, &[s, h, d])?;
                let y = if i < 2 {
                    g.rope(y, p, RopeConfig::new(RopeMode::Neox, 10000.0))?
                } else {
                    y
                };
                heads.push(y);
            }
            let a = g.attention(
                heads[0],
                &[(heads[1], heads[2])],
                AttentionMask::Causal,
                None,
                None,
            )?;
            let a = g.reshape(a, &[s, h * d])?;
            let a = g.add(a, x)?;
            let up = g.stored_weight("up")?;
            let u = g.matmul(a, up)?;
            Ok(g.gelu_tanh(u))
        },
    );
    c
}

#[test]
fn ggml_ops_vs_cpu() {
    let backends = super::ggml_backends();
    for (label, b) in &backends {
        println!("ggml ops on {label}: {}", b.description());
    }
    let cases = cases();
    let mut failures = Vec::new();
    for case in &cases.list {
        let (graph, reference) = graph_and_reference(case);
        for (label, backend) in &backends {
            match run(backend.as_ref(), &graph, case) {
                Err(e) => failures.push(format!("{} on {label}: {e}", case.name)),
                Ok(out) => {
                    let Verdict { nmse: e, bad, ok } = verdict(case, &out, &reference);
                    println!(
                        "{:<52} {label:<12} nmse {e:9.2e} (max {:.0e}) {}",
                        case.name,
                        case.max_nmse,
                        if ok { "ok" } else { "FAIL" }
                    );
                    if !ok {
                        failures.push(format!(
                            "{} on {label}: nmse {e:.3e} > {:.0e}, {bad} non-finite",
                            case.name, case.max_nmse
                        ));
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "ggml failures:\n{}",
        failures.join("\n")
    );
}

#[test]
fn ggml_rejects_what_it_cannot_map() {
    let backend = GgmlBackend::cpu().unwrap();
    let w = std::collections::HashMap::new();
    let not_impl = |build: &dyn Fn(&mut GraphBuilder) -> vla::graph::NodeId| {
        let mut g = GraphBuilder::new(&w);
        let out = build(&mut g);
        let graph = g.build(&[out]).unwrap();
        match vla::backend::Backend::compile(&backend, &graph, &w) {
            Err(vla::Error::NotImplemented {
                backend: "ggml", ..
            }) => {}
            Err(e) => panic!("expected NotImplemented, got {e}"),
            Ok(_) => panic!("expected NotImplemented, compiled"),
        }
    };
    // rank 5 (ggml tensors have 4 dims)
    not_impl(&|g| {
        let x = g.input("x", &[1, 2, 3, 4, 5]);
        g.scale(x, 2.0)
    });
    // zero-size tensors
    not_impl(&|g| {
        let x = g.input("x", &[0, 4]);
        g.silu(x)
    });

    // Bad run-time values are errors, not ggml aborts.
    let mut wt = std::collections::HashMap::new();
    wt.insert(
        "t".to_string(),
        Tensor::from_f32(vec![4, 8], vec![0.0; 32]).unwrap(),
    );
    let graph = {
        let mut g = GraphBuilder::new(&wt);
        let t = g.stored_weight("t").unwrap();
        let ids = g.input("ids", &[2]);
        let y = g.embedding(t, ids).unwrap();
        g.build(&[y]).unwrap()
    };
    let mut exe = vla::backend::Backend::compile(&backend, &graph, &wt).unwrap();
    for bad in [[1.0, 4.0], [0.5, 1.0], [-1.0, 0.0]] {
        let ids = Tensor::from_f32(vec![2], bad.to_vec()).unwrap();
        assert!(exe.run(&[("ids", &ids)]).is_err(), "ids {bad:?}");
    }
    let ids = Tensor::from_f32(vec![2], vec![3.0, 0.0]).unwrap();
    assert_eq!(exe.run(&[("ids", &ids)]).unwrap()[0].shape(), &[2, 8]);
}
