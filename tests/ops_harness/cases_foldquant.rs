//! FoldQuant sites (`Op::FqLinear`): exact (NMSE 0) against the cpu reference, over both
//! weight widths (INT4 stored two a byte, as FoldQuant files hold it), both activation
//! widths, rotation blocks 64 / 32 / none, `ascale` before / after / none, the fused RMSNorm
//! (gain offset 0 or 1), bias, residual, one to many rows (partial tiles); with and without
//! the integer dot, and in both kernel sets (the GPU set tiles the GEMM). Ternary sites
//! (BitNet: codes in {-1, 0, 1} sixteen a word, BitNet's activation rule) likewise, with K
//! a multiple of 16 but not always of 32 (the GPU set's untiled path).

use super::Cases;
use vla::gguf::GgmlType;
use vla::ops::foldquant::pack_int4;
use vla::ops::ternary;
use vla::Tensor;

pub fn add(c: &mut Cases) {
    // (rows, k, n, weight bits, act bits, block, fold: 0 none 1 before 2 after,
    //  addend: 0 none 1 bias 2 residual, norm: 0 none, 1 fused, 2 fused with gain offset 1)
    let cases = [
        (1, 64, 64, 8, 8, 64, 0, 0, 0),
        (5, 128, 64, 8, 8, 64, 0, 1, 0),
        (3, 128, 128, 4, 8, 64, 1, 1, 0),
        (7, 192, 64, 4, 4, 64, 2, 2, 0),
        (33, 96, 64, 8, 8, 32, 1, 0, 0),
        (4, 64, 192, 8, 4, 1, 0, 2, 0),
        (6, 2112, 64, 8, 8, 64, 0, 0, 1),
        (3, 96, 128, 4, 4, 32, 0, 1, 2),
        (9, 192, 64, 8, 8, 64, 2, 2, 1),
        // partial 32 x 32 tiles of the tiled GEMM in both directions
        (40, 128, 96, 8, 8, 64, 0, 1, 0),
        (37, 64, 160, 4, 8, 64, 0, 2, 0),
        // ternary (weight bits 2: BitNet's activation rule, no rotation, no fold)
        (1, 64, 48, 2, 8, 1, 0, 0, 0),
        (7, 160, 64, 2, 8, 1, 0, 1, 0),
        (40, 128, 96, 2, 8, 1, 0, 2, 0),
        (3, 272, 40, 2, 8, 1, 0, 1, 0),
    ];
    for (rows, k, n, wbits, abits, block, fold, addend, norm) in cases {
        let q = match wbits {
            8 => 127.0,
            4 => 7.0,
            _ => 1.4, // ternary: a third of the codes 0
        };
        let codes: Vec<i8> = c
            .rng
            .vec(n * k)
            .iter()
            .map(|v| (v * q).round().clamp(-q, q) as i8)
            .collect();
        // INT4 as stored: two a byte, low nibble first; ternary sixteen a word
        let (row, codes) = match wbits {
            4 => (k / 2, pack_int4(&codes)),
            2 => (k / 4, ternary::pack(&codes, k).unwrap()),
            _ => (k, codes.iter().map(|&v| v as u8).collect()),
        };
        let wscale: Vec<f32> = c.rng.vec(n).iter().map(|v| 0.01 + 0.02 * v.abs()).collect();
        let ascale: Vec<f32> = c.rng.vec(k).iter().map(|v| 0.5 + v.abs()).collect();
        let x: Vec<f32> = c.rng.vec(rows * k).iter().map(|v| 4.0 * v).collect();
        let clip = if abits == 4 { 0.9 } else { 1.0 };
        let fuse = if norm > 0 { 1.0 } else { 0.0 };
        let mut params = vec![
            wbits as f32,
            abits as f32,
            block as f32,
            clip,
            fold as f32,
            fuse,
        ];
        if wbits == 2 {
            params.push(1.0); // BitNet's activation rule
        }
        let np = params.len();
        let gain: Vec<f32> = c.rng.vec(k).iter().map(|v| 0.75 + 0.5 * v.abs()).collect();
        let mut weights = vec![
            (
                "s.weight",
                Tensor::from_bytes(vec![n, row], GgmlType::I8, codes).unwrap(),
            ),
            ("s.wscale", Tensor::from_f32(vec![n], wscale).unwrap()),
            ("s.fq", Tensor::from_f32(vec![np], params).unwrap()),
            ("norm.weight", Tensor::from_f32(vec![k], gain).unwrap()),
        ];
        if fold > 0 {
            weights.push(("s.ascale", Tensor::from_f32(vec![k], ascale).unwrap()));
        }
        let add_shape = match addend {
            1 => vec![n],
            _ => vec![rows, n],
        };
        let mut inputs = vec![("x", Tensor::from_f32(vec![rows, k], x).unwrap())];
        if addend > 0 {
            inputs.push(("c", c.tensor(&add_shape)));
        }
        // ggml runs ternary (BitNet) sites, not FoldQuant's (cases_ggml::NOT_IMPLEMENTED)
        let kind = if wbits == 2 {
            "ternary_linear"
        } else {
            "fq_linear"
        };
        let name = format!(
            "{kind} rows {rows} k {k} n {n} w{wbits}a{abits} block {block} fold {fold} addend {addend} norm {norm}"
        );
        let case = c.add_int_dot(name, weights, inputs, 0.0, move |g| {
            let mut x = g.input("x", &[rows, k]);
            if norm > 0 {
                let gain = g.weight("norm.weight", &[k])?;
                x = g.rms_norm(x, gain, 1e-6, if norm == 2 { 1.0 } else { 0.0 })?;
            }
            let w = g.weight("s.weight", &[n, k])?;
            match addend {
                0 => g.matmul(x, w),
                _ => {
                    let a = g.input("c", &add_shape);
                    g.matmul_add(x, w, a)
                }
            }
        });
        // the tiled integer GEMM of the GPU kernel set too
        case.kernel_sets = true;
    }
}
