//! Every op x dtype x shape on every backend against the CPU reference (like ggml's
//! test-backend-ops): normalised MSE under a per-op bound, no NaN/Inf.
//!
//! GPU backends come from `VLA_TEST_BACKENDS` (comma-separated: vulkan, gl, metal, dx12,
//! wgpu; default `vulkan`). A backend that cannot be opened FAILS the test, so CI on
//! lavapipe never loses GPU coverage silently; `VLA_ALLOW_NO_GPU=1` turns that into a loud
//! warning for machines without a Vulkan driver.
//!
//! With the `ggml` feature (default) every case also runs on ggml's CPU backend, under the
//! same bounds. An op the ggml lowering does not map (`Error::NotImplemented`) is listed
//! and must appear in `cases_ggml::NOT_IMPLEMENTED`, so a regression cannot hide there.

mod cases_basic;
#[cfg(feature = "ggml")]
mod cases_ggml;

use std::collections::HashMap;
use vla::backend::wgpu::{Api, WgpuBackend};
use vla::backend::{Backend, CpuBackend};
use vla::gguf::{quant, GgmlType};
use vla::graph::{Graph, GraphBuilder, NodeId};
use vla::Tensor;

pub struct Rng(u64);
impl Rng {
    pub fn f32(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
    }
}

/// One op instance: weights, run-time inputs, and how to build its graph.
pub struct Case {
    name: String,
    weights: HashMap<String, Tensor<'static>>,
    inputs: Vec<(String, Tensor<'static>)>,
    build: Box<dyn Fn(&mut GraphBuilder) -> vla::Result<NodeId>>,
    max_nmse: f64,
}

pub struct Cases {
    pub rng: Rng,
    list: Vec<Case>,
}

impl Cases {
    pub fn tensor(&mut self, shape: &[usize]) -> Tensor<'static> {
        let n = shape.iter().product();
        Tensor::from_f32(shape.to_vec(), self.rng.vec(n)).unwrap()
    }

    pub fn weight(&mut self, shape: &[usize], ty: GgmlType) -> Tensor<'static> {
        let n = shape.iter().product();
        let bytes = quant::quantize(ty, &self.rng.vec(n)).unwrap();
        Tensor::from_bytes(shape.to_vec(), ty, bytes).unwrap()
    }

    pub fn add(
        &mut self,
        name: String,
        weights: Vec<(&str, Tensor<'static>)>,
        inputs: Vec<(&str, Tensor<'static>)>,
        max_nmse: f64,
        build: impl Fn(&mut GraphBuilder) -> vla::Result<NodeId> + 'static,
    ) {
        self.list.push(Case {
            name,
            weights: weights.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
            inputs: inputs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
            build: Box::new(build),
            max_nmse,
        });
    }
}

/// ggml's test-backend-ops bounds: 1e-7 by default, 5e-4 for matmul-like ops.
pub const NMSE_DEFAULT: f64 = 1e-7;
pub const NMSE_MATMUL: f64 = 5e-4;

fn all_cases() -> Vec<Case> {
    let mut c = Cases { rng: Rng(0x2545F4914F6CDD1D), list: Vec::new() };
    cases_basic::add(&mut c);
    c.list
}

fn nmse(out: &[f32], reference: &[f32]) -> f64 {
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for (a, b) in out.iter().zip(reference) {
        err += (f64::from(*a) - f64::from(*b)).powi(2);
        norm += f64::from(*b).powi(2);
    }
    if norm == 0.0 { err } else { err / norm }
}

fn gpu_backends() -> Vec<WgpuBackend> {
    let names = std::env::var("VLA_TEST_BACKENDS").unwrap_or_else(|_| "vulkan".into());
    let allow_none = std::env::var("VLA_ALLOW_NO_GPU").is_ok_and(|v| v == "1");
    let mut out = Vec::new();
    for name in names.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let api = match name {
            "vulkan" => Api::Vulkan,
            "gl" => Api::Gl,
            "metal" => Api::Metal,
            "dx12" => Api::Dx12,
            "wgpu" => Api::Any,
            other => panic!("VLA_TEST_BACKENDS: unknown backend {other:?}"),
        };
        match WgpuBackend::new(api) {
            Ok(b) => out.push(b),
            Err(e) if allow_none => eprintln!("WARNING: VLA_ALLOW_NO_GPU=1: {e}: GPU ops NOT TESTED"),
            Err(e) => panic!("{e}\n(scripts/test.sh installs lavapipe; VLA_ALLOW_NO_GPU=1 skips loudly)"),
        }
    }
    out
}

/// The backends under test, each with a short label for the report.
fn backends() -> Vec<(String, Box<dyn Backend>)> {
    let mut out: Vec<(String, Box<dyn Backend>)> = Vec::new();
    for b in gpu_backends() {
        out.push((b.adapter_info().name.clone(), Box::new(b)));
    }
    #[cfg(feature = "ggml")]
    out.push(("ggml".into(), Box::new(vla::backend::ggml::GgmlBackend::cpu().expect("ggml-cpu opens"))));
    out
}

/// Whether `backend` may answer `NotImplemented` for this case (see `cases_ggml`).
fn may_skip(label: &str, err: &vla::Error, case: &str) -> bool {
    #[cfg(feature = "ggml")]
    if label == "ggml" {
        if let vla::Error::NotImplemented { .. } = err {
            return cases_ggml::NOT_IMPLEMENTED.iter().any(|p| case.starts_with(p));
        }
    }
    let _ = (label, err, case);
    false
}

fn run(backend: &dyn Backend, graph: &Graph, case: &Case) -> vla::Result<Vec<f32>> {
    let mut exe = backend.compile(graph, &case.weights)?;
    let inputs: Vec<(&str, &Tensor)> = case.inputs.iter().map(|(k, v)| (k.as_str(), v)).collect();
    Ok(exe.run(&inputs)?.remove(0).to_vec_f32()?)
}

#[test]
fn op_harness() {
    let backends = backends();
    for (_, b) in &backends {
        println!("op harness on {}", b.description());
    }
    let cases = all_cases();
    let (mut failures, mut skipped) = (Vec::new(), Vec::new());
    for case in &cases {
        let graph = {
            let mut g = GraphBuilder::new(&case.weights);
            let out = (case.build)(&mut g).unwrap_or_else(|e| panic!("{}: {e}", case.name));
            g.build(&[out]).unwrap()
        };
        let reference = run(&CpuBackend, &graph, case).unwrap_or_else(|e| panic!("{} on cpu: {e}", case.name));
        for (label, b) in &backends {
            match run(b.as_ref(), &graph, case) {
                Err(e) if may_skip(label, &e, &case.name) => {
                    println!("{:<48} {label:<10} SKIP: {e}", case.name);
                    skipped.push(format!("{} on {label}: {e}", case.name));
                }
                Err(e) => failures.push(format!("{} on {label}: {e}", case.name)),
                Ok(out) => {
                    let bad = out.iter().filter(|v| !v.is_finite()).count();
                    let e = nmse(&out, &reference);
                    let ok = bad == 0 && e <= case.max_nmse && out.len() == reference.len();
                    println!("{:<48} {label:<10} nmse {e:9.2e} (max {:.0e}) {}", case.name, case.max_nmse, if ok { "ok" } else { "FAIL" });
                    if !ok {
                        failures.push(format!("{} on {label}: nmse {e:.3e} > {:.0e}, {bad} non-finite", case.name, case.max_nmse));
                    }
                }
            }
        }
    }
    let total = cases.len() * backends.len();
    println!("{} passed, {} failed, {} not implemented", total - failures.len() - skipped.len(), failures.len(), skipped.len());
    for s in &skipped {
        println!("  not implemented: {s}");
    }
    assert!(failures.is_empty(), "op harness failures:\n{}", failures.join("\n"));
}
