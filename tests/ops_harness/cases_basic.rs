//! Elementwise, activations, and float-weight matmul.

use super::{Cases, NMSE_DEFAULT, NMSE_MATMUL};
use vla::gguf::GgmlType;

pub fn add(c: &mut Cases) {

    for (a, b) in [
        (vec![7, 13], vec![7, 13]),
        (vec![3, 5, 17], vec![17]),
        (vec![4, 1, 9], vec![1, 6, 9]),
        (vec![1], vec![2, 3, 5, 7]),
        (vec![1000, 3], vec![1000, 1]),
    ] {
        for op in ["add", "mul"] {
            let (ta, tb) = (c.tensor(&a), c.tensor(&b));
            c.add(format!("{op} {a:?} {b:?}"), vec![], vec![("a", ta), ("b", tb)], NMSE_DEFAULT, {
                let (a, b) = (a.clone(), b.clone());
                move |g| {
                    let (x, y) = (g.input("a", &a), g.input("b", &b));
                    if op == "add" { g.add(x, y) } else { g.mul(x, y) }
                }
            });
        }
    }

    for shape in [vec![1], vec![5, 77], vec![3, 3, 257], vec![70000]] {
        for op in ["scale", "gelu_tanh", "gelu_erf", "silu"] {
            let mut t = c.tensor(&shape);
            // cover the tails of the activations too
            t.as_f32_mut().unwrap().iter_mut().for_each(|v| *v *= 8.0);
            c.add(format!("{op} {shape:?}"), vec![], vec![("x", t)], NMSE_DEFAULT, {
                let shape = shape.clone();
                move |g| {
                    let x = g.input("x", &shape);
                    Ok(match op {
                        "scale" => g.scale(x, -0.37),
                        "gelu_tanh" => g.gelu_tanh(x),
                        "gelu_erf" => g.gelu_erf(x),
                        _ => g.silu(x),
                    })
                }
            });
        }
    }

    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
        for (m, n, k) in [(1, 1, 1), (1, 67, 96), (7, 13, 17), (33, 65, 31), (64, 96, 128), (3, 2, 300)] {
            let (x, w) = (c.tensor(&[m, k]), c.weight(&[n, k], ty));
            c.add(format!("matmul {ty} m{m} n{n} k{k}"), vec![("w", w)], vec![("x", x)], NMSE_MATMUL, move |g| {
                let x = g.input("x", &[m, k]);
                let w = g.weight("w")?;
                g.matmul(x, w)
            });
        }
        let (x, w) = (c.tensor(&[2, 3, 40]), c.weight(&[9, 40], ty));
        c.add(format!("matmul {ty} batched [2, 3, 40]"), vec![("w", w)], vec![("x", x)], NMSE_MATMUL, |g| {
            let x = g.input("x", &[2, 3, 40]);
            let w = g.weight("w")?;
            g.matmul(x, w)
        });
    }
}


/// Graphs whose buffer plan reuses slots: an input declared after other nodes must not
/// share a slot that an earlier node still reads (all inputs are written before the pass).
pub fn add_planner(c: &mut Cases) {
    let (a, b, d) = (c.tensor(&[64]), c.tensor(&[64]), c.tensor(&[64]));
    c.add("planner: late input".into(), vec![], vec![("a", a), ("b", b), ("d", d)], NMSE_DEFAULT, |g| {
        let a = g.input("a", &[64]);
        let s = g.scale(a, 2.0);
        let t = g.silu(s); // a and s are free from here on
        let b = g.input("b", &[64]);
        let u = g.mul(t, b)?;
        let d = g.input("d", &[64]);
        g.add(u, d)
    });
}
