//! Elementwise, activations, and float-weight matmul.

use super::{Cases, NMSE_DEFAULT, NMSE_MATMUL};
use vla::gguf::GgmlType;
use vla::graph::GateAct;

pub fn add(c: &mut Cases) {
    // Bytes as f32: exact (NMSE 0) over sizes that end mid-word and mid-Q8_0-block.
    for shape in [
        vec![1],
        vec![3],
        vec![5, 7, 3],
        vec![13, 31, 3],
        vec![70001],
    ] {
        let n: usize = shape.iter().product();
        let bytes: Vec<u8> = (0..n).map(|i| ((i * 151 + i / 256) % 256) as u8).collect();
        for scaled in [false, true] {
            let t = vla::Tensor::from_u8(shape.clone(), bytes.clone()).unwrap();
            let shape = shape.clone();
            let name = format!(
                "input_u8 {shape:?}{}",
                if scaled { " then scale" } else { "" }
            );
            c.add(name, vec![], vec![("x", t)], 0.0, move |g| {
                let x = g.input_u8("x", &shape);
                Ok(if scaled { g.scale(x, 1.0 / 255.0) } else { x })
            });
        }
    }
    for (a, b) in [
        (vec![7, 13], vec![7, 13]),
        (vec![3, 5, 17], vec![17]),
        (vec![4, 1, 9], vec![1, 6, 9]),
        (vec![1], vec![2, 3, 5, 7]),
        (vec![1000, 3], vec![1000, 1]),
    ] {
        for op in ["add", "mul"] {
            let (ta, tb) = (c.tensor(&a), c.tensor(&b));
            c.add(
                format!("{op} {a:?} {b:?}"),
                vec![],
                vec![("a", ta), ("b", tb)],
                NMSE_DEFAULT,
                {
                    let (a, b) = (a.clone(), b.clone());
                    move |g| {
                        let (x, y) = (g.input("a", &a), g.input("b", &b));
                        if op == "add" {
                            g.add(x, y)
                        } else {
                            g.mul(x, y)
                        }
                    }
                },
            );
        }
    }

    for shape in [vec![1], vec![5, 77], vec![3, 3, 257], vec![70000]] {
        for op in ["scale", "gelu_tanh", "gelu_erf", "silu", "relu"] {
            let mut t = c.tensor(&shape);
            // cover the tails of the activations too
            t.as_f32_mut().unwrap().iter_mut().for_each(|v| *v *= 8.0);
            c.add(
                format!("{op} {shape:?}"),
                vec![],
                vec![("x", t)],
                NMSE_DEFAULT,
                {
                    let shape = shape.clone();
                    move |g| {
                        let x = g.input("x", &shape);
                        Ok(match op {
                            "scale" => g.scale(x, -0.37),
                            "gelu_tanh" => g.gelu_tanh(x),
                            "gelu_erf" => g.gelu_erf(x),
                            "silu" => g.silu(x),
                            _ => g.relu(x),
                        })
                    }
                },
            );
        }
    }

    // gated products act(gate) * up, one op (after the other cases: their draws unchanged)
    for shape in [vec![1], vec![5, 77], vec![3, 3, 257], vec![70000]] {
        for act in [GateAct::Silu, GateAct::GeluTanh] {
            let mut gate = c.tensor(&shape);
            gate.as_f32_mut()
                .unwrap()
                .iter_mut()
                .for_each(|v| *v *= 8.0);
            let up = c.tensor(&shape);
            let shape = shape.clone();
            c.add(
                format!("gated {act:?} {shape:?}"),
                vec![],
                vec![("gate", gate), ("up", up)],
                NMSE_DEFAULT,
                move |g| {
                    let (a, b) = (g.input("gate", &shape), g.input("up", &shape));
                    g.gated(a, b, act)
                },
            );
        }
    }

    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
        for (m, n, k) in [
            (1, 1, 1),
            (1, 67, 96),
            (7, 13, 17),
            (33, 65, 31),
            (64, 96, 128),
            (3, 2, 300),
            (65, 70, 33),
            (130, 131, 50),
        ] {
            let (x, w) = (c.tensor(&[m, k]), c.weight(&[n, k], ty));
            c.add(
                format!("matmul {ty} m{m} n{n} k{k}"),
                vec![("w", w)],
                vec![("x", x)],
                NMSE_MATMUL,
                move |g| {
                    let x = g.input("x", &[m, k]);
                    let w = g.stored_weight("w")?;
                    g.matmul(x, w)
                },
            )
            .kernel_sets = true;
        }
        // the fused addend: a bias [n] or a residual of the output's shape, on the matvec
        // (m <= 16), small-tile and large-tile paths
        for (m, n, k) in [(5, 33, 64), (40, 70, 96), (130, 67, 33)] {
            for full in [false, true] {
                let cs = if full { vec![m, n] } else { vec![n] };
                let (x, w, a) = (c.tensor(&[m, k]), c.weight(&[n, k], ty), c.tensor(&cs));
                let what = if full { "residual" } else { "bias" };
                c.add(
                    format!("matmul_add {ty} {what} m{m} n{n} k{k}"),
                    vec![("w", w)],
                    vec![("x", x), ("c", a)],
                    NMSE_MATMUL,
                    move |g| {
                        let x = g.input("x", &[m, k]);
                        let w = g.stored_weight("w")?;
                        let a = g.input("c", &cs);
                        g.matmul_add(x, w, a)
                    },
                )
                .kernel_sets = true;
            }
        }
        let (x, w) = (c.tensor(&[2, 3, 40]), c.weight(&[9, 40], ty));
        c.add(
            format!("matmul {ty} batched [2, 3, 40]"),
            vec![("w", w)],
            vec![("x", x)],
            NMSE_MATMUL,
            |g| {
                let x = g.input("x", &[2, 3, 40]);
                let w = g.stored_weight("w")?;
                g.matmul(x, w)
            },
        )
        .kernel_sets = true;
    }
}

/// Graphs whose buffer plan reuses slots: an input declared after other nodes must not
/// share a slot that an earlier node still reads (all inputs are written before the pass).
pub fn add_planner(c: &mut Cases) {
    let (a, b, d) = (c.tensor(&[64]), c.tensor(&[64]), c.tensor(&[64]));
    c.add(
        "planner: late input".into(),
        vec![],
        vec![("a", a), ("b", b), ("d", d)],
        NMSE_DEFAULT,
        |g| {
            let a = g.input("a", &[64]);
            let s = g.scale(a, 2.0);
            let t = g.silu(s); // a and s are free from here on
            let b = g.input("b", &[64]);
            let u = g.mul(t, b)?;
            let d = g.input("d", &[64]);
            g.add(u, d)
        },
    );
}

/// A weight and an embedding table over the 128 MiB storage-binding limit of lavapipe (and
/// many GPUs) are split into row chunks; every chunk must land in the right output columns
/// (matmul, matvec) or rows (embedding).
#[test]
fn tensors_split_across_bindings() {
    use super::{gpu_backends, nmse, run, Case, Rng};
    use vla::backend::CpuBackend;
    use vla::graph::GraphBuilder;
    let mut c = Cases {
        rng: Rng(0xC0FFEE),
        list: Vec::new(),
    };
    let (n, k) = (33_000, 2048); // 135 MB as F16
    let w = c.weight(&[n, k], GgmlType::F16);
    for m in [3, 20] {
        let x = c.tensor(&[m, k]);
        c.add(
            format!("split matmul m{m}"),
            vec![("w", w.clone())],
            vec![("x", x)],
            NMSE_MATMUL,
            move |g| {
                let x = g.input("x", &[m, k]);
                let w = g.stored_weight("w")?;
                g.matmul(x, w)
            },
        );
    }
    let table = c.weight(&[16_500, 2048], GgmlType::F32); // 135 MB
    let ids: Vec<f32> = [0, 8191, 8192, 16_383, 16_384, 16_499]
        .iter()
        .map(|&i| i as f32)
        .collect();
    let ids = vla::Tensor::from_f32(vec![ids.len()], ids).unwrap();
    c.add(
        "split embedding".into(),
        vec![("t", table)],
        vec![("ids", ids)],
        NMSE_DEFAULT,
        |g| {
            let t = g.stored_weight("t")?;
            let ids = g.input("ids", &[6]);
            g.embedding(t, ids)
        },
    );
    for b in gpu_backends().into_iter().filter(|b| !b.int_dot_only) {
        for case in &c.list {
            let case: &Case = case;
            let graph = {
                let mut g = GraphBuilder::new(&case.weights);
                let out = (case.build)(&mut g).unwrap();
                g.build(&[out]).unwrap()
            };
            let reference = run(&CpuBackend, &graph, case).unwrap();
            let out =
                run(&b.backend, &graph, case).unwrap_or_else(|e| panic!("{}: {e}", case.name));
            let e = nmse(&out, &reference);
            println!("{:<24} nmse {e:9.2e}", case.name);
            assert!(e <= case.max_nmse, "{}: nmse {e}", case.name);
        }
    }
}
