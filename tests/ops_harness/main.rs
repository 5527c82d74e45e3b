//! Every op x dtype x shape on every backend against the CPU reference (like ggml's
//! test-backend-ops): normalised MSE under a per-op bound, no NaN/Inf.
//!
//! GPU backends come from `VLA_TEST_BACKENDS` (comma-separated: vulkan, gl, metal, dx12,
//! wgpu; default `vulkan`). Each also runs every case with 16-bit activations (f16 where
//! the adapter has shader-f16, bf16 always; both kernel sets), under the bounds of
//! [`act_bound`], against the reference run on inputs rounded the same way
//! ([`rounded_inputs`]). A backend that cannot be opened FAILS the test, so CI on
//! lavapipe never loses GPU coverage silently; `VLA_ALLOW_NO_GPU=1` turns that into a loud
//! warning for machines without a Vulkan driver.
//!
//! With the `ggml` feature (default) every case also runs on ggml's CPU backend, under the
//! same bounds, and on any other ggml device named in `VLA_TEST_GGML_DEVICES` (e.g.
//! `CPU,Vulkan0` or `CPU,CUDA0` with the `ggml-vulkan` / `ggml-cuda` features). An op the
//! ggml lowering does not map (`Error::NotImplemented`) is listed and must appear in
//! `cases_ggml::NOT_IMPLEMENTED`, so a regression cannot hide there.

#[cfg(feature = "ggml")]
#[path = "../support/mod.rs"]
mod support;

mod cases_attention;
mod cases_basic;
mod cases_copy;
mod cases_foldquant;
mod cases_fused;
mod cases_gemm;
#[cfg(feature = "ggml")]
mod cases_ggml;
mod cases_quant;

use std::collections::HashMap;
use vla::backend::wgpu::{store_dtypes, Api, Caps, KernelSet, WgpuBackend, WgpuOptions};
use vla::backend::{ActDtype, Backend, CpuBackend};
use vla::gguf::{quant, GgmlType};
use vla::graph::{Graph, GraphBuilder, NodeId, Op};
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

/// Builds a case's graph, returning the node to compare.
type BuildFn = Box<dyn Fn(&mut GraphBuilder) -> vla::Result<NodeId>>;

/// One op instance: weights, run-time inputs, and how to build its graph.
pub struct Case {
    name: String,
    weights: HashMap<String, Tensor<'static>>,
    inputs: Vec<(String, Tensor<'static>)>,
    build: BuildFn,
    max_nmse: f64,
    /// Also run on a backend with `int_dot` off (quantized kernels' fallback path).
    int_dot: bool,
    /// Also run with the kernel set the adapter does not get by default (float matmuls:
    /// the GPU-grade tiles on lavapipe, the portable kernel on a GPU): set it on what
    /// [`Cases::add`] returns.
    kernel_sets: bool,
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
    ) -> &mut Case {
        self.list.push(Case {
            name,
            weights: weights
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
            inputs: inputs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
            build: Box::new(build),
            max_nmse,
            int_dot: false,
            kernel_sets: false,
        });
        self.list.last_mut().expect("just added")
    }

    /// Like [`add`](Self::add) for ops with an integer-dot path: the case also runs on a
    /// second backend with `int_dot` off when the adapter has it.
    pub fn add_int_dot(
        &mut self,
        name: String,
        weights: Vec<(&str, Tensor<'static>)>,
        inputs: Vec<(&str, Tensor<'static>)>,
        max_nmse: f64,
        build: impl Fn(&mut GraphBuilder) -> vla::Result<NodeId> + 'static,
    ) -> &mut Case {
        let case = self.add(name, weights, inputs, max_nmse, build);
        case.int_dot = true;
        case
    }
}

/// ggml's test-backend-ops bounds: 1e-7 by default, 5e-4 for matmul-like ops.
pub const NMSE_DEFAULT: f64 = 1e-7;
pub const NMSE_MATMUL: f64 = 5e-4;

fn all_cases() -> Vec<Case> {
    let mut c = Cases {
        rng: Rng(0x2545F4914F6CDD1D),
        list: Vec::new(),
    };
    cases_basic::add(&mut c);
    cases_basic::add_planner(&mut c);
    cases_attention::add(&mut c);
    cases_quant::add(&mut c);
    cases_fused::add(&mut c);
    cases_copy::add(&mut c);
    cases_foldquant::add(&mut c);
    c.list
}

fn nmse(out: &[f32], reference: &[f32]) -> f64 {
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for (a, b) in out.iter().zip(reference) {
        err += (f64::from(*a) - f64::from(*b)).powi(2);
        norm += f64::from(*b).powi(2);
    }
    if norm == 0.0 {
        err
    } else {
        err / norm
    }
}

/// A backend under test. Besides each adapter as it opens, two variants run only some
/// cases: `int_dot_only` (int dot switched off) the cases with an int-dot path, and
/// `kernel_sets_only` (the other [`KernelSet`]) the cases with kernels in both sets.
pub struct TestBackend {
    pub backend: WgpuBackend,
    pub label: String,
    pub int_dot_only: bool,
    pub kernel_sets_only: bool,
}

impl TestBackend {
    /// The adapter as it opens, not a variant.
    pub fn is_default(&self) -> bool {
        !self.int_dot_only && !self.kernel_sets_only
    }
}

impl std::ops::Deref for TestBackend {
    type Target = WgpuBackend;
    fn deref(&self) -> &WgpuBackend {
        &self.backend
    }
}

pub fn gpu_backends() -> Vec<TestBackend> {
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
            Ok(b) => {
                let int_dot = b.caps().int_dot;
                let other = match b.kernel_set() {
                    KernelSet::Gpu => KernelSet::Portable,
                    KernelSet::Portable => KernelSet::Gpu,
                };
                out.push(TestBackend {
                    label: format!("{} ({} kernels)", b.adapter_info().name, other.name()),
                    backend: b.reconfigured(WgpuOptions {
                        kernels: Some(other),
                        ..b.options()
                    }),
                    int_dot_only: false,
                    kernel_sets_only: true,
                });
                out.push(TestBackend {
                    label: b.adapter_info().name.clone(),
                    backend: b,
                    int_dot_only: false,
                    kernel_sets_only: false,
                });
                if int_dot {
                    let b = WgpuBackend::with_caps(
                        api,
                        Caps {
                            int_dot: false,
                            ..Caps::ALL
                        },
                    )
                    .unwrap_or_else(|e| panic!("{name} without int dot: {e}"));
                    out.push(TestBackend {
                        label: format!("{} (no int dot)", b.adapter_info().name),
                        backend: b,
                        int_dot_only: true,
                        kernel_sets_only: false,
                    });
                }
            }
            Err(e) if allow_none => {
                eprintln!("WARNING: VLA_ALLOW_NO_GPU=1: {e}: GPU ops NOT TESTED")
            }
            Err(e) => {
                panic!("{e}\n(scripts/test.sh installs lavapipe; VLA_ALLOW_NO_GPU=1 skips loudly)")
            }
        }
    }
    out
}

/// A backend in the harness run; `int_dot_only` ones run only the int-dot cases.
struct Harnessed {
    label: String,
    backend: Box<dyn Backend>,
    int_dot_only: bool,
    kernel_sets_only: bool,
    act: ActDtype,
}

/// NMSE bounds with 16-bit activations, against a reference given the same rounded inputs:
/// every stored value rounds (relative error up to 2^-11 for f16, 2^-8 for bf16, an NMSE
/// of about 1e-7 and 5e-6 a rounding), the output at least, some ops' intermediate values
/// too (softmax's exponentials before the division) -- a few roundings' worth. The largest
/// seen on lavapipe: 3e-7 (f16) and 1.5e-5 (bf16), so the bounds leave a margin of 3.
fn act_bound(act: ActDtype, case_bound: f64) -> f64 {
    match act {
        ActDtype::F32 => case_bound,
        ActDtype::F16 => case_bound.max(1e-6),
        ActDtype::Bf16 => case_bound.max(5e-5),
    }
}

/// The backends under test, each with a short label for the report.
fn backends() -> Vec<Harnessed> {
    let mut out: Vec<Harnessed> = gpu_backends()
        .into_iter()
        .flat_map(|b| {
            let mut out = vec![];
            // 16-bit activations, on the adapter's kernel set and the other one
            for act in [ActDtype::F16, ActDtype::Bf16] {
                if b.int_dot_only || (act == ActDtype::F16 && !b.caps().f16) {
                    continue;
                }
                let options = WgpuOptions {
                    act_dtype: act,
                    ..b.options()
                };
                out.push(Harnessed {
                    label: format!("{} ({} activations)", b.label, act.name()),
                    backend: Box::new(b.reconfigured(options)),
                    int_dot_only: false,
                    kernel_sets_only: b.kernel_sets_only,
                    act,
                });
            }
            out.insert(
                0,
                Harnessed {
                    label: b.label,
                    int_dot_only: b.int_dot_only,
                    kernel_sets_only: b.kernel_sets_only,
                    backend: Box::new(b.backend),
                    act: ActDtype::F32,
                },
            );
            out
        })
        .collect();
    #[cfg(feature = "ggml")]
    out.extend(
        ggml_backends()
            .into_iter()
            .map(|(label, backend)| Harnessed {
                label,
                backend,
                int_dot_only: false,
                kernel_sets_only: false,
                act: ActDtype::F32,
            }),
    );
    out
}

/// The ggml backends under test (see `support::ggml_backend_names`), each labelled by its
/// name: `ggml` (CPU) or `ggml:<DEVICE>`. A listed device that does not open fails.
#[cfg(feature = "ggml")]
pub fn ggml_backends() -> Vec<(String, Box<dyn Backend>)> {
    support::ggml_backend_names()
        .into_iter()
        .map(|name| {
            let b =
                vla::backend::open(&name).unwrap_or_else(|e| panic!("VLA_TEST_GGML_DEVICES: {e}"));
            (name, b)
        })
        .collect()
}

/// Why `label`'s result for `case` is known to differ from the reference, if it is.
fn known_divergence(label: &str, case: &str) -> Option<&'static str> {
    #[cfg(feature = "ggml")]
    if label.starts_with("ggml") {
        return cases_ggml::KNOWN_DIVERGENT
            .iter()
            .find(|(p, _)| case.contains(p))
            .map(|(_, why)| *why);
    }
    let _ = (label, case);
    None
}

/// Whether `backend` may answer `NotImplemented` for this case (see `cases_ggml`).
fn may_skip(label: &str, err: &vla::Error, case: &str) -> bool {
    #[cfg(feature = "ggml")]
    if label.starts_with("ggml") {
        if let vla::Error::NotImplemented { .. } = err {
            return cases_ggml::NOT_IMPLEMENTED
                .iter()
                .any(|p| case.starts_with(p));
        }
    }
    let _ = (label, err, case);
    false
}

fn run(backend: &dyn Backend, graph: &Graph, case: &Case) -> vla::Result<Vec<f32>> {
    run_on(backend, graph, case, &case.inputs)
}

fn run_on(
    backend: &dyn Backend,
    graph: &Graph,
    case: &Case,
    inputs: &[(String, Tensor<'static>)],
) -> vla::Result<Vec<f32>> {
    let mut exe = backend.compile(graph, &case.weights)?;
    let inputs: Vec<(&str, &Tensor)> = inputs.iter().map(|(k, v)| (k.as_str(), v)).collect();
    exe.run(&inputs)?.remove(0).to_vec_f32()
}

/// The case's inputs as a backend with `act` activations stores them: rounded to `act`,
/// but for those it keeps exact (token ids, positions, masks: `store_dtypes`) and bytes.
fn rounded_inputs(graph: &Graph, case: &Case, act: ActDtype) -> Vec<(String, Tensor<'static>)> {
    let stores = store_dtypes(graph, act);
    let round = |v: f32| match act {
        ActDtype::F32 => v,
        ActDtype::F16 => half::f16::from_f32(v).to_f32(),
        ActDtype::Bf16 => half::bf16::from_f32(v).to_f32(),
    };
    let stored = |name: &str| {
        let node = graph
            .nodes()
            .iter()
            .position(|n| matches!(&n.op, Op::Input(i) if i == name));
        node.map_or(ActDtype::F32, |i| stores[i])
    };
    case.inputs
        .iter()
        .map(|(name, t)| {
            if t.dtype() != GgmlType::F32 || stored(name) == ActDtype::F32 {
                return (name.clone(), t.clone());
            }
            let v: Vec<f32> = t
                .to_vec_f32()
                .expect("f32")
                .into_iter()
                .map(round)
                .collect();
            let t = Tensor::from_f32(t.shape().to_vec(), v).expect("same shape");
            (name.clone(), t)
        })
        .collect()
}

/// A case's graph and the cpu backend's output for it (the reference).
pub fn graph_and_reference(case: &Case) -> (Graph, Vec<f32>) {
    let graph = {
        let mut g = GraphBuilder::new(&case.weights);
        let out = (case.build)(&mut g).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        g.build(&[out]).unwrap()
    };
    let reference =
        run(&CpuBackend, &graph, case).unwrap_or_else(|e| panic!("{} on cpu: {e}", case.name));
    (graph, reference)
}

/// How a backend's output compares with the reference.
pub struct Verdict {
    pub nmse: f64,
    /// Non-finite values.
    pub bad: usize,
    /// Finite, of the reference's length and within the case's bound.
    pub ok: bool,
}

pub fn verdict(case: &Case, out: &[f32], reference: &[f32]) -> Verdict {
    verdict_within(case.max_nmse, out, reference)
}

fn verdict_within(bound: f64, out: &[f32], reference: &[f32]) -> Verdict {
    let bad = out.iter().filter(|v| !v.is_finite()).count();
    let nmse = nmse(out, reference);
    let ok = bad == 0 && nmse <= bound && out.len() == reference.len();
    Verdict { nmse, bad, ok }
}

/// `case` on `backend` against the cpu reference: its NMSE when finite, of the reference's
/// length and within the case's bound; otherwise why not.
pub fn check(backend: &dyn Backend, case: &Case) -> Result<f64, String> {
    let (graph, reference) = graph_and_reference(case);
    let out = run(backend, &graph, case).map_err(|e| e.to_string())?;
    match verdict(case, &out, &reference) {
        Verdict { nmse, ok: true, .. } => Ok(nmse),
        Verdict { nmse, bad, .. } => Err(format!("nmse {nmse:.3e}, {bad} non-finite")),
    }
}

#[test]
fn op_harness() {
    let backends = backends();
    for b in &backends {
        println!(
            "op harness on {}{}",
            b.backend.description(),
            match (b.int_dot_only, b.kernel_sets_only) {
                (true, _) => " (int dot off)",
                (_, true) => " (the other kernel set)",
                _ => "",
            }
        );
        if b.act != ActDtype::F32 {
            println!("  with {} activations", b.act.name());
        }
    }
    let cases = all_cases();
    let (mut failures, mut skipped) = (Vec::new(), Vec::new());
    let mut runs = 0;
    for case in &cases {
        let (graph, reference) = graph_and_reference(case);
        // the reference on inputs rounded as each 16-bit dtype stores them
        let reference_for = |act: ActDtype| match act {
            ActDtype::F32 => reference.clone(),
            _ => run_on(
                &CpuBackend,
                &graph,
                case,
                &rounded_inputs(&graph, case, act),
            )
            .unwrap_or_else(|e| panic!("{} on cpu: {e}", case.name)),
        };
        let rounded = [ActDtype::F16, ActDtype::Bf16].map(reference_for);
        let wanted = |b: &&Harnessed| {
            (case.int_dot || !b.int_dot_only) && (case.kernel_sets || !b.kernel_sets_only)
        };
        for b in backends.iter().filter(wanted) {
            runs += 1;
            let label = &b.label;
            let variant = match (b.int_dot_only, b.kernel_sets_only) {
                (true, _) => " [no int dot]",
                (_, true) => " [other kernels]",
                _ => "",
            };
            let name = format!("{}{variant}", case.name);
            match run(b.backend.as_ref(), &graph, case) {
                Err(e) if may_skip(label, &e, &case.name) => {
                    println!("{name:<48} {label:<10} SKIP: {e}");
                    skipped.push(format!("{name} on {label}: {e}"));
                }
                Err(e) => {
                    println!("{name:<48} {label:<10} ERROR {e}");
                    failures.push(format!("{name} on {label}: {e}"));
                }
                Ok(out) => {
                    let bound = act_bound(b.act, case.max_nmse);
                    let reference = match b.act {
                        ActDtype::F32 => &reference,
                        ActDtype::F16 => &rounded[0],
                        ActDtype::Bf16 => &rounded[1],
                    };
                    let Verdict { nmse: e, bad, ok } = verdict_within(bound, &out, reference);
                    if let Some(why) = known_divergence(label, &case.name) {
                        println!("{name:<48} {label:<10} nmse {e:9.2e} KNOWN DIVERGENCE: {why}");
                        // The list is ggml-cpu's; another ggml device may well agree.
                        if ok && label == "ggml" {
                            failures.push(format!("{name} on {label}: listed as divergent but agrees; update the list"));
                        }
                        skipped.push(format!("{name} on {label}: {why}"));
                        continue;
                    }
                    println!(
                        "{name:<48} {label:<10} nmse {e:9.2e} (max {bound:.0e}) {}",
                        if ok { "ok" } else { "FAIL" }
                    );
                    if !ok {
                        failures.push(format!(
                            "{name} on {label}: nmse {e:.3e} > {bound:.0e}, {bad} non-finite"
                        ));
                    }
                }
            }
        }
    }
    println!(
        "{} passed, {} failed, {} not implemented or known divergent",
        runs - failures.len() - skipped.len(),
        failures.len(),
        skipped.len()
    );
    for s in &skipped {
        println!("  not run or divergent: {s}");
    }
    assert!(
        failures.is_empty(),
        "op harness failures:\n{}",
        failures.join("\n")
    );
}
