//! Our WGSL quantized matmul against ggml-cpu (scalar build) on the same GGUF blocks: where
//! the arithmetic is integer (the activation codes, their f16 scales, each block's i32 dot)
//! the results must be the same numbers; docs/GGML.md says which float steps may differ and
//! why. Both wgpu kernel sets are checked (the quantized matmul for M > 16 is `matmul_q`
//! in the portable set, `gemm_q` in the GPU one). Single-block rows (K = 32) isolate the integer part and the per-block scale
//! arithmetic: bit-identical for every type on both kernel paths. Longer rows add ggml's
//! sequential f32 accumulation: the register-tiled path (M > 16) adds blocks in ggml's
//! order and is bit-identical for the _0 types; the _1 types' `d*s + m*s_x` step may be
//! contracted into an FMA by the shader compiler, and the matvec path (M <= 16) splits K
//! across lanes, so those are held to the matmul NMSE bound (5e-4; measured ~1e-14).
#![cfg(feature = "ggml")]

use std::collections::HashMap;
use vla::backend::wgpu::{Api, KernelSet, WgpuBackend, WgpuOptions};
use vla::backend::{self, Backend};
use vla::gguf::{quant, GgmlType};
use vla::graph::GraphBuilder;
use vla::Tensor;

struct Rng(u64);

impl Rng {
    fn f32(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }

    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.f32() * scale).collect()
    }
}

fn run(
    be: &dyn Backend,
    ty: GgmlType,
    wb: &[u8],
    x: &[f32],
    (m, n, k): (usize, usize, usize),
) -> Vec<f32> {
    let weights: HashMap<String, Tensor<'static>> = [(
        "w".to_string(),
        Tensor::from_bytes(vec![n, k], ty, wb.to_vec()).unwrap(),
    )]
    .into();
    let mut g = GraphBuilder::new(&weights);
    let xi = g.input("x", &[m, k]);
    let w = g.stored_weight("w").unwrap();
    let y = g.matmul(xi, w).unwrap();
    let graph = g.build(&[y]).unwrap();
    let mut exe = be.compile(&graph, &weights).unwrap();
    let xt = Tensor::from_f32(vec![m, k], x.to_vec()).unwrap();
    exe.run(&[("x", &xt)])
        .unwrap()
        .remove(0)
        .to_vec_f32()
        .unwrap()
}

#[test]
fn quantized_matmul_matches_ggml_where_integer() {
    let ggml = backend::open("ggml").unwrap();
    let gpu = WgpuBackend::new(Api::Vulkan)
        .unwrap_or_else(|e| panic!("vulkan: {e} (scripts/test.sh installs lavapipe)"));
    // both kernel sets: matmul_q (portable) and gemm_q (gpu) for M > 16
    let sets = [KernelSet::Portable, KernelSet::Gpu].map(|k| {
        gpu.reconfigured(WgpuOptions {
            kernels: Some(k),
            ..gpu.options()
        })
    });
    if vla::backend::ggml::GgmlBackend::cpu_has_simd() {
        panic!("ggml-cpu was built with SIMD kernels (the ISA pins of .cargo/config.toml were overridden): not comparable");
    }
    let mut rng = Rng(0x2545F4914F6CDD1D);
    let mut report = Vec::new();
    for ty in [
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
    ] {
        let zero_min = matches!(ty, GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q5_0);
        for (m, n, k) in [
            (1, 37, 32),
            (21, 37, 32),
            (33, 45, 96),
            (20, 19, 1024),
            (3, 41, 1024),
            (1, 7, 4096),
        ] {
            let exact = k == 32 || (m > 16 && zero_min);
            let mut x = rng.vec(m * k, 3.0);
            x[k / 3] = 40.0; // an outlier: one block's scale far from the others
            let wb = quant::quantize(ty, &rng.vec(n * k, 0.5)).unwrap();
            let want = run(ggml.as_ref(), ty, &wb, &x, (m, n, k));
            for (set, gpu) in ["portable", "gpu"].iter().zip(&sets) {
                let got = run(gpu, ty, &wb, &x, (m, n, k));
                let diff = got
                    .iter()
                    .zip(&want)
                    .filter(|(a, b)| a.to_bits() != b.to_bits())
                    .count();
                let err: f64 = got
                    .iter()
                    .zip(&want)
                    .map(|(a, b)| (f64::from(*a) - f64::from(*b)).powi(2))
                    .sum();
                let norm: f64 = want.iter().map(|b| f64::from(*b).powi(2)).sum();
                let nmse = err / norm.max(f64::MIN_POSITIVE);
                let line = format!(
                "{ty} m{m} n{n} k{k} ({set} kernels): {diff}/{} differ from ggml, nmse {nmse:.2e}{}",
                m * n,
                if exact { " (must be 0)" } else { "" }
            );
                println!("{line}");
                report.push((line, exact, diff, nmse));
            }
        }
    }
    for (line, exact, diff, nmse) in &report {
        if *exact {
            assert_eq!(*diff, 0, "{line}");
        } else {
            assert!(*nmse < 5e-4, "{line}");
        }
    }
}
