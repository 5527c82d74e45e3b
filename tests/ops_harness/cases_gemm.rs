//! The GPU kernel set's tiled GEMM with each output tile forced (and the 4 x 4 tiles' vec4
//! variant), over every case that has
//! kernels in both sets (float matmuls, attention): the choice by shape picks the large
//! tile only for big outputs, which the harness's odd shapes do not reach.

use super::{all_cases, gpu_backends, nmse, run};
use vla::backend::wgpu::{GemmTile, KernelSet, WgpuOptions};
use vla::backend::CpuBackend;
use vla::graph::GraphBuilder;

#[test]
fn gemm_tiles_forced() {
    let cases: Vec<_> = all_cases().into_iter().filter(|c| c.kernel_sets).collect();
    assert!(cases.len() > 50, "only {} cases", cases.len());
    let mut failures = Vec::new();
    for base in gpu_backends().into_iter().filter(|b| b.is_default()) {
        let settings = [
            (GemmTile::Small, false),
            (GemmTile::Medium, false),
            (GemmTile::Large, false),
            (GemmTile::Small, true),
            (GemmTile::Medium, true),
        ];
        for (tile, vec4) in settings {
            let b = base.backend.reconfigured(WgpuOptions {
                kernels: Some(KernelSet::Gpu),
                gemm_tile: Some(tile),
                gemm_vec4: vec4,
                ..base.backend.options()
            });
            for case in &cases {
                let graph = {
                    let mut g = GraphBuilder::new(&case.weights);
                    let out = (case.build)(&mut g).unwrap();
                    g.build(&[out]).unwrap()
                };
                let reference = run(&CpuBackend, &graph, case).unwrap();
                match run(&b, &graph, case) {
                    Err(e) => {
                        failures.push(format!("{} tile {tile:?} vec4 {vec4}: {e}", case.name))
                    }
                    Ok(out) => {
                        let bad = out.iter().filter(|v| !v.is_finite()).count();
                        let e = nmse(&out, &reference);
                        if bad > 0 || e > case.max_nmse || out.len() != reference.len() {
                            failures.push(format!(
                                "{} tile {tile:?} vec4 {vec4}: nmse {e:.3e}, {bad} non-finite",
                                case.name
                            ));
                        }
                    }
                }
            }
            println!(
                "{} cases with the {tile:?} tile (vec4 {vec4}) on {}",
                cases.len(),
                base.label
            );
        }
    }
    assert!(
        failures.is_empty(),
        "GEMM tile failures:\n{}",
        failures.join("\n")
    );
}
