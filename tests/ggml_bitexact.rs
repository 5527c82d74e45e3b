//! ggml-cpu's matmul against ggml's scalar formulas written out here, compared bit for bit.
//!
//! With the ISA pins of `.cargo/config.toml` ggml-cpu runs its plain C kernels:
//! - quantized weights (Q8_0, Q4_0, Q5_0) take activations quantized to Q8_0 by
//!   `quantize_row_q8_0_ref` (= our `gguf::quant::quantize`, 1/d and round half away from
//!   zero), then per block an i32 `sumi`, scaled by the two f16 block scales and summed in
//!   f32 in block order (each type associates the product its own way, copied below);
//! - F32 weights: `sum += (double)(w * x)` (f32 product, f64 sum), rounded to f32 at the end;
//! - F16/BF16 weights: activations rounded to f16/bf16, the same f64 sum of f32 products.
//!
//! A build with SIMD kernels (pins overridden) uses other activation quantizers and
//! summation orders; then this test checks a float bound instead and says so.
#![cfg(feature = "ggml")]

use half::{bf16, f16};
use std::collections::HashMap;
use vla::backend::ggml::GgmlBackend;
use vla::backend::Backend;
use vla::gguf::{quant, GgmlType};
use vla::graph::GraphBuilder;
use vla::Tensor;

struct Rng(u64);
impl Rng {
    fn f32(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.f32() * scale).collect()
    }
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// ggml's scalar dot of one weight row (stored bytes) with one f32 activation row.
fn scalar_dot(ty: GgmlType, w: &[u8], x: &[f32]) -> f32 {
    match ty {
        GgmlType::F32 => {
            let w: &[f32] = bytemuck::cast_slice(w);
            let s: f64 = w.iter().zip(x).map(|(a, b)| f64::from(a * b)).sum();
            s as f32
        }
        GgmlType::F16 => {
            let s: f64 = (0..x.len())
                .map(|i| f64::from(f16_at(w, 2 * i) * f16::from_f32(x[i]).to_f32()))
                .sum();
            s as f32
        }
        GgmlType::BF16 => {
            let s: f64 = (0..x.len())
                .map(|i| {
                    let wi = bf16::from_le_bytes([w[2 * i], w[2 * i + 1]]).to_f32();
                    f64::from(wi * bf16::from_f32(x[i]).to_f32())
                })
                .sum();
            s as f32
        }
        _ => {
            // Activations: ggml-cpu's quantize_row_q8_0 in the scalar build is the reference one.
            let xq = quant::quantize(GgmlType::Q8_0, x).unwrap();
            let mut sumf = 0.0f32;
            for (b, (wb, xb)) in w
                .chunks_exact(ty.type_size())
                .zip(xq.chunks_exact(34))
                .enumerate()
            {
                let _ = b;
                let (dw, dx) = (f16_at(wb, 0), f16_at(xb, 0));
                let xs = |j: usize| i32::from(xb[2 + j] as i8);
                match ty {
                    GgmlType::Q8_0 => {
                        let sumi: i32 = (0..32).map(|j| i32::from(wb[2 + j] as i8) * xs(j)).sum();
                        sumf += sumi as f32 * (dw * dx);
                    }
                    GgmlType::Q4_0 => {
                        let (mut s0, mut s1) = (0i32, 0i32);
                        for j in 0..16 {
                            s0 += (i32::from(wb[2 + j] & 0x0F) - 8) * xs(j);
                            s1 += (i32::from(wb[2 + j] >> 4) - 8) * xs(j + 16);
                        }
                        sumf += (s0 + s1) as f32 * dw * dx;
                    }
                    GgmlType::Q5_0 => {
                        let qh = u32::from_le_bytes([wb[2], wb[3], wb[4], wb[5]]);
                        let (mut s0, mut s1) = (0i32, 0i32);
                        for j in 0..16 {
                            let h0 = (((qh >> j) & 1) << 4) as u8;
                            let h1 = (((qh >> (j + 16)) & 1) << 4) as u8;
                            let x0 = i32::from(((wb[6 + j] & 0x0F) | h0) as i8) - 16;
                            let x1 = i32::from(((wb[6 + j] >> 4) | h1) as i8) - 16;
                            s0 += x0 * xs(j);
                            s1 += x1 * xs(j + 16);
                        }
                        sumf += (dw * dx) * (s0 + s1) as f32;
                    }
                    _ => unreachable!("types listed in the test"),
                }
            }
            sumf
        }
    }
}

#[test]
fn matmul_matches_ggml_scalar_formula() {
    let backend = GgmlBackend::cpu().unwrap();
    let simd = GgmlBackend::cpu_has_simd();
    if simd {
        eprintln!(
            "WARNING: ggml-cpu was built with SIMD kernels (ISA pins of .cargo/config.toml overridden): \
             checking a float bound, NOT bit-exactness"
        );
    }
    let mut rng = Rng(0x9E3779B97F4A7C15);
    let mut report = Vec::new();
    for ty in [
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
    ] {
        for (m, n, k) in [(1, 1, 32), (3, 17, 96), (8, 33, 1024), (2, 5, 4096)] {
            // Large activations and a few big outliers exercise rounding and scales.
            let mut x = rng.vec(m * k, 3.0);
            x[k / 3] = 40.0;
            let wf = rng.vec(n * k, 0.5);
            let wb = quant::quantize(ty, &wf).unwrap();
            let weights: HashMap<String, Tensor<'static>> = [(
                "w".to_string(),
                Tensor::from_bytes(vec![n, k], ty, wb.clone()).unwrap(),
            )]
            .into();
            let graph = {
                let mut g = GraphBuilder::new(&weights);
                let xi = g.input("x", &[m, k]);
                let w = g.stored_weight("w").unwrap();
                let y = g.matmul(xi, w).unwrap();
                g.build(&[y]).unwrap()
            };
            let mut exe = backend.compile(&graph, &weights).unwrap();
            let xt = Tensor::from_f32(vec![m, k], x.clone()).unwrap();
            let got = exe
                .run(&[("x", &xt)])
                .unwrap()
                .remove(0)
                .to_vec_f32()
                .unwrap();
            let row = wb.len() / n;
            let (mut diff, mut err, mut norm) = (0usize, 0f64, 0f64);
            for i in 0..m {
                for j in 0..n {
                    let want = scalar_dot(ty, &wb[j * row..(j + 1) * row], &x[i * k..(i + 1) * k]);
                    let g = got[i * n + j];
                    diff += usize::from(g.to_bits() != want.to_bits());
                    err += (f64::from(g) - f64::from(want)).powi(2);
                    norm += f64::from(want).powi(2);
                }
            }
            let nmse = err / norm.max(f64::MIN_POSITIVE);
            report.push(format!(
                "{ty} m{m} n{n} k{k}: {diff}/{} values differ, nmse {nmse:.2e}",
                m * n
            ));
            if simd {
                assert!(nmse < 5e-4, "{}", report.last().unwrap());
            } else {
                assert_eq!(diff, 0, "{}", report.last().unwrap());
            }
        }
    }
    println!("{}", report.join("\n"));
}
