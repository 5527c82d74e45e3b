//! Op benchmarks at model shapes on every backend in one run, so their ratios can be quoted.
//!
//! `cargo bench --bench ops` (all), `cargo bench --bench ops -- matmul` (a filter).
//! Throughput is reported as elements/s where one "element" is one FLOP (matmul,
//! attention), so criterion's "Melem/s" reads as MFLOP/s, to be read against the CPU's peaks
//! printed first (`vla::ops::peak`, measured on this machine). Backends: cpu plus
//! `VLA_BENCH_BACKENDS` (default `vulkan`); one that cannot open is reported and skipped.

use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, Throughput,
};
use std::collections::HashMap;
use std::time::Duration;
use vla::backend::wgpu::{Api, WgpuBackend};
use vla::backend::{Backend, CpuBackend};
use vla::gguf::{quant, GgmlType};
use vla::graph::{AttentionMask, GraphBuilder};
use vla::Tensor;

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

fn backends() -> Vec<Box<dyn Backend>> {
    let mut out: Vec<Box<dyn Backend>> = vec![Box::new(CpuBackend)];
    let names = std::env::var("VLA_BENCH_BACKENDS").unwrap_or_else(|_| "vulkan".into());
    for name in names.split(',').filter(|s| !s.is_empty()) {
        let api = match name {
            "vulkan" => Api::Vulkan,
            "gl" => Api::Gl,
            "metal" => Api::Metal,
            "dx12" => Api::Dx12,
            _ => Api::Any,
        };
        match WgpuBackend::new(api) {
            Ok(b) => out.push(Box::new(b)),
            Err(e) => eprintln!("skipping {name}: {e}"),
        }
    }
    for b in &out {
        eprintln!("backend: {}", b.description());
    }
    out
}

fn short_name(b: &dyn Backend) -> String {
    b.description().split(':').next().unwrap_or("?").to_owned()
}

/// A benchmark group of 10 samples over 3 s after 0.5 s of warm-up (every group here).
fn short_group<'c>(c: &'c mut Criterion, name: &str) -> BenchmarkGroup<'c, WallTime> {
    let mut group = c.benchmark_group(name);
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    group
}

/// y = x @ w^T with x [m, k] and w [n, k] of `ty`.
fn bench_matmul(c: &mut Criterion, backends: &[Box<dyn Backend>]) {
    let mut group = short_group(c, "matmul");
    let shapes: [(usize, usize, usize); 9] = [
        // (m, n, k): the expert's and the vision tower's shapes among them
        (50, 2560, 960),
        (1, 2560, 960),
        (50, 16384, 2048),
        (1024, 3072, 768),
        (1024, 768, 3072),
        (50, 2048, 720),
        (50, 720, 2048),
        (50, 320, 720),
        (712, 16384, 2048),
    ];
    for &(m, n, k) in &shapes {
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0] {
            if !k.is_multiple_of(ty.block_size()) {
                continue; // the action expert's 720 is no whole number of 32-blocks
            }
            let w = Tensor::from_bytes(
                vec![n, k],
                ty,
                quant::quantize(ty, &values(n * k, 7)).unwrap(),
            )
            .unwrap();
            let weights = HashMap::from([("w".to_owned(), w)]);
            let mut g = GraphBuilder::new(&weights);
            let xi = g.input("x", &[m, k]);
            let wi = g.stored_weight("w").unwrap();
            let y = g.matmul(xi, wi).unwrap();
            let graph = g.build(&[y]).unwrap();
            let x = Tensor::from_f32(vec![m, k], values(m * k, 3)).unwrap();
            group.throughput(Throughput::Elements((2 * m * n * k) as u64));
            // Over ~10 GFLOP a call (Gemma's 712-row MLP) only the cpu runs: a software
            // Vulkan would take minutes per sample.
            let cpu_only = 2 * m * n * k > 10_000_000_000;
            for b in backends
                .iter()
                .take(if cpu_only { 1 } else { backends.len() })
            {
                let Ok(mut exe) = b.compile(&graph, &weights) else {
                    continue;
                };
                if let Err(e) = exe.run(&[("x", &x)]) {
                    eprintln!("matmul {ty} on {}: {e}", short_name(b.as_ref()));
                    continue;
                }
                let id = BenchmarkId::new(
                    format!("{}/{ty}", short_name(b.as_ref())),
                    format!("m{m}_n{n}_k{k}"),
                );
                group.bench_function(id, |bench| bench.iter(|| exe.run(&[("x", &x)]).unwrap()));
            }
        }
    }
    group.finish();
}

/// Attention at the archs' shapes (listed below).
fn bench_attention(c: &mut Criterion, backends: &[Box<dyn Backend>]) {
    let mut group = short_group(c, "attention");
    let weights: HashMap<String, Tensor<'static>> = HashMap::new();
    // (query heads, kv heads, head dim, Sq, Sk, causal): SmolVLA's expert and prefill,
    // SigLIP's 1024 patches (no mask), pi0's expert (8 heads on one kv head of width 256).
    for &(hq, hkv, d, sq, sk, causal) in &[
        (15, 5, 64, 50, 350, true),
        (15, 5, 64, 300, 300, true),
        (12, 12, 64, 1024, 1024, false),
        (8, 1, 256, 50, 762, false),
    ] {
        let mut g = GraphBuilder::new(&weights);
        let q = g.input("q", &[sq, hq, d]);
        let k = g.input("k", &[sk, hkv, d]);
        let v = g.input("v", &[sk, hkv, d]);
        let mask = if causal {
            AttentionMask::Causal
        } else {
            AttentionMask::None
        };
        let Ok(o) = g.attention(q, &[(k, v)], mask, None, None) else {
            continue;
        };
        let graph = g.build(&[o]).unwrap();
        let inputs = [
            Tensor::from_f32(vec![sq, hq, d], values(hq * sq * d, 1)).unwrap(),
            Tensor::from_f32(vec![sk, hkv, d], values(hkv * sk * d, 2)).unwrap(),
            Tensor::from_f32(vec![sk, hkv, d], values(hkv * sk * d, 3)).unwrap(),
        ];
        let named = [("q", &inputs[0]), ("k", &inputs[1]), ("v", &inputs[2])];
        group.throughput(Throughput::Elements((4 * hq * sq * sk * d) as u64));
        for b in backends {
            let Ok(mut exe) = b.compile(&graph, &weights) else {
                continue;
            };
            if let Err(e) = exe.run(&named) {
                eprintln!("attention on {}: {e}", short_name(b.as_ref()));
                continue;
            }
            let case = format!(
                "h{hq}_{hkv}_d{d}_sq{sq}_sk{sk}{}",
                if causal { "" } else { "_full" }
            );
            let id = BenchmarkId::new(short_name(b.as_ref()), case);
            group.bench_function(id, |bench| bench.iter(|| exe.run(&named).unwrap()));
        }
    }
    group.finish();
}

/// FoldQuant sites (`Op::FqLinear`, W8A8 and W4A4 codes, rotation 64) at SmolVLA's FFN shape,
/// on cpu and on the first wgpu backend in both kernel sets (the GPU set tiles the integer
/// GEMM, the portable one has one invocation per output), so the two can be compared.
fn bench_foldquant(c: &mut Criterion, backends: &[Box<dyn Backend>]) {
    use vla::backend::wgpu::{KernelSet, WgpuOptions};
    let mut group = short_group(c, "fq_linear");
    let mut runs: Vec<(String, Box<dyn Backend>)> = vec![("cpu".into(), Box::new(CpuBackend))];
    if backends.len() > 1 {
        if let Ok(b) = WgpuBackend::new(Api::Any) {
            for set in [KernelSet::Portable, KernelSet::Gpu] {
                let adapter = b.adapter_info().name.clone();
                let adapter = adapter.split_whitespace().next().unwrap_or("wgpu");
                let label = format!("{adapter}-{}", set.name());
                let options = WgpuOptions {
                    kernels: Some(set),
                    ..b.options()
                };
                runs.push((label, Box::new(b.reconfigured(options))));
            }
        }
    }
    for &(m, n, k) in &[(50, 2560, 960), (256, 2560, 960)] {
        for (wbits, abits) in [(8, 8), (4, 4)] {
            let q = if wbits == 8 { 127.0 } else { 7.0 };
            let codes: Vec<i8> = values(n * k, 7)
                .iter()
                .map(|v| (v * q).round() as i8)
                .collect();
            let (row, bytes) = match wbits {
                4 => (k / 2, vla::ops::foldquant::pack_int4(&codes)),
                _ => (k, codes.iter().map(|&v| v as u8).collect()),
            };
            let params = vec![wbits as f32, abits as f32, 64.0, 1.0, 0.0, 0.0];
            let wscale: Vec<f32> = values(n, 5).iter().map(|v| 0.01 + 0.02 * v.abs()).collect();
            let weights = HashMap::from([
                (
                    "s.weight".to_owned(),
                    Tensor::from_bytes(vec![n, row], GgmlType::I8, bytes).unwrap(),
                ),
                (
                    "s.wscale".to_owned(),
                    Tensor::from_f32(vec![n], wscale).unwrap(),
                ),
                (
                    "s.fq".to_owned(),
                    Tensor::from_f32(vec![6], params).unwrap(),
                ),
            ]);
            let mut g = GraphBuilder::new(&weights);
            let xi = g.input("x", &[m, k]);
            let wi = g.weight("s.weight", &[n, k]).unwrap();
            let y = g.matmul(xi, wi).unwrap();
            let graph = g.build(&[y]).unwrap();
            let x = Tensor::from_f32(vec![m, k], values(m * k, 3)).unwrap();
            group.throughput(Throughput::Elements((2 * m * n * k) as u64));
            for (label, b) in &runs {
                let Ok(mut exe) = b.compile(&graph, &weights) else {
                    continue;
                };
                if let Err(e) = exe.run(&[("x", &x)]) {
                    eprintln!("fq_linear on {label}: {e}");
                    continue;
                }
                let id = BenchmarkId::new(
                    format!("{label}/w{wbits}a{abits}"),
                    format!("m{m}_n{n}_k{k}"),
                );
                group.bench_function(id, |bench| bench.iter(|| exe.run(&[("x", &x)]).unwrap()));
            }
        }
    }
    group.finish();
}

/// BitNet b1.58-2B's linears at BitVLA's sequence (600 rows: 512 patches, the prompt, the
/// action slots): ternary integer sites (`ternary/cpu/w2a8`, BitNet's activation rule) against
/// the same products with f32 and Q8_0 weights, on the cpu backend (lavapipe would take
/// minutes a sample).
fn bench_ternary(c: &mut Criterion) {
    let mut group = short_group(c, "ternary");
    for &(m, n, k) in &[(600, 2560, 2560), (600, 6912, 2560), (600, 2560, 6912)] {
        let w = values(n * k, 7);
        let codes: Vec<i8> = w
            .iter()
            .map(|v| (v * 1.4).round().clamp(-1.0, 1.0) as i8)
            .collect();
        let packed = vla::ops::ternary::pack(&codes, k).unwrap();
        let fq = vec![2.0, 8.0, 1.0, 1.0, 0.0, 0.0, 1.0];
        let cases: Vec<(String, HashMap<String, Tensor>)> = vec![
            (
                "w2a8".into(),
                HashMap::from([
                    (
                        "w.weight".to_owned(),
                        Tensor::from_bytes(vec![n, k / 4], GgmlType::I8, packed).unwrap(),
                    ),
                    (
                        "w.wscale".to_owned(),
                        Tensor::from_f32(vec![n], vec![0.02; n]).unwrap(),
                    ),
                    ("w.fq".to_owned(), Tensor::from_f32(vec![7], fq).unwrap()),
                ]),
            ),
            (
                "F32".into(),
                HashMap::from([(
                    "w.weight".to_owned(),
                    Tensor::from_f32(vec![n, k], w.clone()).unwrap(),
                )]),
            ),
            (
                "Q8_0".into(),
                HashMap::from([(
                    "w.weight".to_owned(),
                    Tensor::from_bytes(
                        vec![n, k],
                        GgmlType::Q8_0,
                        quant::quantize(GgmlType::Q8_0, &w).unwrap(),
                    )
                    .unwrap(),
                )]),
            ),
        ];
        let x = Tensor::from_f32(vec![m, k], values(m * k, 3)).unwrap();
        group.throughput(Throughput::Elements((2 * m * n * k) as u64));
        for (label, weights) in &cases {
            let mut g = GraphBuilder::new(weights);
            let xi = g.input("x", &[m, k]);
            let wi = g.weight("w.weight", &[n, k]).unwrap();
            let y = g.matmul(xi, wi).unwrap();
            let graph = g.build(&[y]).unwrap();
            let mut exe = CpuBackend.compile(&graph, weights).unwrap();
            let id = BenchmarkId::new(format!("cpu/{label}"), format!("m{m}_n{n}_k{k}"));
            group.bench_function(id, |bench| bench.iter(|| exe.run(&[("x", &x)]).unwrap()));
        }
    }
    group.finish();
}

/// This CPU's peak per instruction path, what the cpu rows' Melem/s (MFLOP/s, or MOPS for
/// the integer kernels) are to be read against.
fn print_peaks() {
    let threads = rayon::current_num_threads();
    for p in vla::ops::peak::measure() {
        eprintln!(
            "cpu peak: {} {:.1} {} on 1 thread, {:.1} on {threads}",
            p.path, p.one_thread, p.unit, p.all_threads
        );
    }
}

fn all(c: &mut Criterion) {
    print_peaks();
    let backends = backends();
    bench_matmul(c, &backends);
    bench_attention(c, &backends);
    bench_foldquant(c, &backends);
    bench_ternary(c);
}

criterion_group!(benches, all);
criterion_main!(benches);
