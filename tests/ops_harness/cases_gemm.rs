//! The GPU kernel set's tiled GEMM with each output tile forced (and the 4 x 4 tiles' vec4
//! variant), over every case that has
//! kernels in both sets (float matmuls, attention): the choice by shape picks the large
//! tile only for big outputs, which the harness's odd shapes do not reach.

use super::{all_cases, check, gpu_backends};
use vla::backend::wgpu::{GemmTile, KernelSet, WgpuOptions};

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
                if let Err(why) = check(&b, case) {
                    failures.push(format!("{} tile {tile:?} vec4 {vec4}: {why}", case.name));
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
