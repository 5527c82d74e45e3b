//! Quantized-weight matmul (int8 activations, integer block dots), few-row matvec for every
//! weight type, and embedding gathers.

use super::{gpu_backends, Cases, NMSE_DEFAULT, NMSE_MATMUL};
use vla::backend::Backend;
use vla::gguf::{quant, GgmlType};
use vla::graph::{GateAct, GraphBuilder};
use vla::Tensor;

const QUANT: [GgmlType; 5] = [
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
];
const FLOAT: [GgmlType; 3] = [GgmlType::F32, GgmlType::F16, GgmlType::BF16];

fn matmul_case(c: &mut Cases, ty: GgmlType, xs: Vec<usize>, n: usize) {
    let k = *xs.last().unwrap();
    let (mut x, mut w) = (c.tensor(&xs), c.weight(&[n, k], ty));
    let mut name = format!("matmul {ty} x{xs:?} n{n}");
    if ty.is_quantized() && xs.iter().product::<usize>() == k && n == 1 {
        // One output: its NMSE is (relative error)^2 of a single dot product, and the int8
        // activations' rounding (~1/254 of amax per element) is amplified without bound when
        // random signs cancel (the kernel matches an int8-activation emulation to 1e-5
        // relative). Non-negative x and w keep this case meaningful at the matmul bound.
        x.as_f32_mut()
            .unwrap()
            .iter_mut()
            .for_each(|v| *v = v.abs());
        let wv: Vec<f32> = c.rng.vec(n * k).iter().map(|v| v.abs()).collect();
        w = Tensor::from_bytes(vec![n, k], ty, quant::quantize(ty, &wv).unwrap()).unwrap();
        name.push_str(" (x, w >= 0)");
    }
    let build = move |g: &mut GraphBuilder| {
        let x = g.input("x", &xs);
        let w = g.stored_weight("w")?;
        g.matmul(x, w)
    };
    let case = match ty.is_quantized() {
        true => c.add_int_dot(name, vec![("w", w)], vec![("x", x)], NMSE_MATMUL, build),
        false => c.add(name, vec![("w", w)], vec![("x", x)], NMSE_MATMUL, build),
    };
    // both kernel sets have their own float and quantized matmuls
    case.kernel_sets = true;
}

fn ids(v: usize, n: usize, c: &mut Cases) -> Tensor<'static> {
    // first and last rows, repeats, the rest pseudo-random
    let mut ids = vec![0.0, (v - 1) as f32, 0.0];
    while ids.len() < n {
        ids.push(
            ((c.rng.f32() + 1.0) * 0.5 * v as f32)
                .floor()
                .min((v - 1) as f32),
        );
    }
    Tensor::from_f32(vec![n], ids).unwrap()
}

/// A quantized matmul with a fused bias (weight) on the matvec and tiled paths.
fn matmul_add_case(c: &mut Cases, ty: GgmlType, m: usize, n: usize, k: usize) {
    let (x, w, b) = (c.tensor(&[m, k]), c.weight(&[n, k], ty), c.tensor(&[n]));
    let case = c.add_int_dot(
        format!("matmul_add {ty} bias m{m} n{n} k{k}"),
        vec![("w", w), ("b", b)],
        vec![("x", x)],
        NMSE_MATMUL,
        move |g| {
            let x = g.input("x", &[m, k]);
            let w = g.stored_weight("w")?;
            let b = g.stored_weight("b")?;
            g.matmul_add(x, w, b)
        },
    );
    case.kernel_sets = true;
}

/// `act(x @ gate^T) * (x @ up^T)` as one op: the fused tiled GEMM (float weights, M > 16,
/// GPU set), otherwise two products and the gated kernel.
fn gated_matmul_case(c: &mut Cases, ty: GgmlType, act: GateAct, m: usize, n: usize, k: usize) {
    let (x, wg, wu) = (
        c.tensor(&[m, k]),
        c.weight(&[n, k], ty),
        c.weight(&[n, k], ty),
    );
    let name = format!("gated_matmul {act:?} {ty} m{m} n{n} k{k}");
    let build = move |g: &mut GraphBuilder| {
        let x = g.input("x", &[m, k]);
        let (wg, wu) = (g.stored_weight("wg")?, g.stored_weight("wu")?);
        g.gated_matmul(x, wg, wu, act)
    };
    let weights = vec![("wg", wg), ("wu", wu)];
    let case = match ty.is_quantized() {
        true => c.add_int_dot(name, weights, vec![("x", x)], NMSE_MATMUL, build),
        false => c.add(name, weights, vec![("x", x)], NMSE_MATMUL, build),
    };
    case.kernel_sets = true;
}

/// A matmul (or gated matmul) reading an RMSNorm: the tiled GEMM normalises as it reads
/// (float weights, M > 16, GPU set), otherwise the norm kernel writes the rows first. With
/// Gemma's offset, and with a residual addend after the gain input.
fn norm_matmul_case(c: &mut Cases, ty: GgmlType, (m, n, k): (usize, usize, usize), i: usize) {
    let offset = [0.0, 1.0][i % 2];
    let gated = [None, Some(GateAct::Silu), None, Some(GateAct::GeluTanh)][i % 4];
    let residual = gated.is_none() && i.is_multiple_of(3);
    let mut x = c.tensor(&[m, k]);
    // rows of different scales, so the norm matters
    for (r, row) in x.as_f32_mut().unwrap().chunks_mut(k).enumerate() {
        row.iter_mut().for_each(|v| *v *= 0.1 + r as f32);
    }
    let (gain, wg, wu) = (c.tensor(&[k]), c.weight(&[n, k], ty), c.weight(&[n, k], ty));
    let mut inputs = vec![("x", x), ("gain", gain)];
    if residual {
        inputs.push(("r", c.tensor(&[m, n])));
    }
    let what = match (gated, residual) {
        (Some(act), _) => format!("gated {act:?}"),
        (None, true) => "+ residual".into(),
        (None, false) => String::new(),
    };
    let name = format!("norm_matmul {ty} m{m} n{n} k{k} offset {offset} {what}");
    let build = move |g: &mut GraphBuilder| {
        let x = g.input("x", &[m, k]);
        let gain = g.input("gain", &[k]);
        let xn = g.rms_norm(x, gain, 1e-6, offset)?;
        let (wg, wu) = (g.stored_weight("wg")?, g.stored_weight("wu")?);
        match (gated, residual) {
            (Some(act), _) => g.gated_matmul(xn, wg, wu, act),
            (None, true) => {
                let r = g.input("r", &[m, n]);
                g.matmul_add(xn, wg, r)
            }
            (None, false) => g.matmul(xn, wg),
        }
    };
    let weights = vec![("wg", wg), ("wu", wu)];
    let case = match ty.is_quantized() {
        true => c.add_int_dot(name, weights, inputs, NMSE_MATMUL, build),
        false => c.add(name, weights, inputs, NMSE_MATMUL, build),
    };
    case.kernel_sets = true;
}

pub fn add(c: &mut Cases) {
    let mut i = 0;
    for ty in FLOAT.into_iter().chain([GgmlType::Q8_0]) {
        let odd_k = if ty.is_quantized() { 96 } else { 33 };
        for shape in [(5, 40, 64), (17, 65, odd_k), (50, 96, 128), (130, 70, 64)] {
            norm_matmul_case(c, ty, shape, i);
            i += 1;
        }
    }
    for (i, ty) in FLOAT.into_iter().chain([GgmlType::Q8_0]).enumerate() {
        let act = [GateAct::Silu, GateAct::GeluTanh][i % 2];
        let odd_k = if ty.is_quantized() { 64 } else { 31 };
        for (m, n, k) in [(3, 33, 64), (17, 65, odd_k), (50, 96, 128), (130, 67, 96)] {
            gated_matmul_case(c, ty, act, m, n, k);
        }
    }
    for ty in [GgmlType::Q8_0, GgmlType::Q4_1] {
        for m in [3, 40, 100] {
            matmul_add_case(c, ty, m, 70, 96);
        }
    }
    for ty in QUANT {
        for (m, n, k) in [
            (1, 1, 32),
            (1, 67, 96),
            (5, 13, 64),
            (16, 33, 160),
            (17, 65, 96),
            (33, 40, 320),
        ] {
            matmul_case(c, ty, vec![m, k], n);
        }
        matmul_case(c, ty, vec![2, 3, 64], 9);
        matmul_case(c, ty, vec![3, 1024], 20);
    }
    // more weight rows than one grid dimension holds: the matvec grid folds into 2-D
    matmul_case(c, GgmlType::Q4_0, vec![2, 32], 70_000);
    // matvec with float weights: odd K, M up to 16
    for ty in FLOAT {
        for (m, n, k) in [
            (1, 70, 33),
            (2, 5, 1),
            (4, 9, 255),
            (16, 40, 161),
            (9, 3, 1001),
        ] {
            matmul_case(c, ty, vec![m, k], n);
        }
    }

    for ty in FLOAT.into_iter().chain(QUANT) {
        let dims: &[usize] = if ty.is_quantized() {
            &[32, 96]
        } else {
            &[1, 13, 64]
        };
        for &d in dims {
            let v = 37;
            let (table, ids) = (c.weight(&[v, d], ty), ids(v, 11, c));
            c.add(
                format!("embedding {ty} v{v} d{d}"),
                vec![("t", table)],
                vec![("ids", ids)],
                NMSE_DEFAULT,
                move |g| {
                    let t = g.stored_weight("t")?;
                    let i = g.input("ids", &[11]);
                    g.embedding(t, i)
                },
            );
        }
    }
    // split K (gemm.rs `split_k`): the GPU set's 16-row tile over products big and deep
    // enough to split (odd k: a short last split), plain, normalised (+ residual) and gated
    for (i, ty) in FLOAT.into_iter().enumerate() {
        for j in 0..4 {
            norm_matmul_case(c, ty, (33, 70, 1832), 4 * i + j);
        }
        gated_matmul_case(c, ty, GateAct::Silu, 40, 37, 2900);
        matmul_case(c, ty, vec![50, 2050], 41);
    }
    // few rows (the float matvec): its norm read and gated pass, with Gemma's offset and a
    // residual (each variant of `norm_matmul_case`), odd k
    for (i, ty) in FLOAT.into_iter().enumerate() {
        for j in 0..4 {
            norm_matmul_case(c, ty, (7, 45, 97), 4 * i + j);
        }
    }
}

/// The CPU reference rejects bad ids; the GPU writes zero rows for them and never reads
/// out of bounds.
#[test]
fn embedding_bad_ids_give_zero_rows() {
    let mut c = Cases {
        rng: super::Rng(7),
        list: Vec::new(),
    };
    for ty in [GgmlType::F16, GgmlType::Q4_1] {
        let (v, d) = (5, 32);
        let table = c.weight(&[v, d], ty);
        let mut full = Vec::new();
        table
            .view()
            .to_vec_f32()
            .unwrap()
            .chunks(d)
            .for_each(|r| full.push(r.to_vec()));
        let weights: std::collections::HashMap<String, Tensor<'static>> =
            [("t".to_owned(), table)].into();
        let ids_v = [4.0, -1.0, 5.0, 1e9, 2.5, f32::NAN, 0.0];
        let n = ids_v.len();
        // The gather's output reuses the slot of `junk` (freed after `scale`), so rows it
        // does not write would show the junk.
        let graph = {
            let mut g = GraphBuilder::new(&weights);
            let t = g.stored_weight("t").unwrap();
            let junk = g.input("junk", &[n, d]);
            let i = g.input("ids", &[n]);
            let s = g.scale(junk, 1.0);
            let out = g.embedding(t, i).unwrap();
            g.build(&[out, s]).unwrap()
        };
        let ids = Tensor::from_f32(vec![n], ids_v.to_vec()).unwrap();
        let junk = Tensor::from_f32(vec![n, d], vec![7.0; n * d]).unwrap();
        for b in gpu_backends().iter().filter(|b| b.is_default()) {
            let mut exe = b.backend.compile(&graph, &weights).unwrap();
            let out = exe
                .run(&[("ids", &ids), ("junk", &junk)])
                .unwrap()
                .remove(0)
                .to_vec_f32()
                .unwrap();
            let rows: Vec<&[f32]> = out.chunks(d).collect();
            assert_eq!(rows[0], &full[4][..], "{ty}");
            assert_eq!(rows[6], &full[0][..], "{ty}");
            for r in &rows[1..6] {
                assert!(r.iter().all(|v| *v == 0.0), "{ty}: bad id row {r:?}");
            }
        }
    }
}
