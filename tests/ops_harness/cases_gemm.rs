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
        // (tile, vec4, split K): the small tile splits deep products by default
        let settings = [
            (GemmTile::Small, false, true),
            (GemmTile::Small, false, false),
            (GemmTile::Medium, false, true),
            (GemmTile::Large, false, true),
            (GemmTile::Small, true, true),
            (GemmTile::Medium, true, true),
        ];
        for (tile, vec4, split) in settings {
            let b = base.backend.reconfigured(WgpuOptions {
                kernels: Some(KernelSet::Gpu),
                gemm_tile: Some(tile),
                gemm_vec4: vec4,
                split_k: Some(split),
                ..base.backend.options()
            });
            for case in &cases {
                if let Err(why) = check(&b, case) {
                    failures.push(format!(
                        "{} tile {tile:?} vec4 {vec4} split K {split}: {why}",
                        case.name
                    ));
                }
            }
            println!(
                "{} cases with the {tile:?} tile (vec4 {vec4}, split K {split}) on {}",
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

/// Split K is structural: a big, deep product on the 16-row tile takes two dispatches (the
/// splits' sums, their combination), one with `split_k` off, and one when its output
/// tiles already make enough workgroups, its k is too shallow or it is too small.
#[test]
fn split_k_dispatches() {
    use std::collections::HashMap;
    use vla::backend::Backend;
    use vla::gguf::GgmlType;
    use vla::graph::GraphBuilder;
    use vla::Tensor;
    let base = gpu_backends()
        .into_iter()
        .find(|b| b.is_default())
        .expect("a backend");
    let dispatches = |(m, n, k): (usize, usize, usize), split: bool| {
        let w = Tensor::from_f32(vec![n, k], vec![0.5; n * k]).unwrap();
        assert_eq!(w.dtype(), GgmlType::F32);
        let weights: HashMap<String, Tensor<'static>> = [("w".to_owned(), w)].into();
        let mut g = GraphBuilder::new(&weights);
        let x = g.input("x", &[m, k]);
        let w = g.stored_weight("w").unwrap();
        let y = g.matmul(x, w).unwrap();
        let graph = g.build(&[y]).unwrap();
        let b = base.backend.reconfigured(WgpuOptions {
            kernels: Some(KernelSet::Gpu),
            split_k: Some(split),
            ..base.backend.options()
        });
        let exe = b.compile(&graph, &weights).map(|e| e.stats().dispatches);
        exe.unwrap()
    };
    assert_eq!(dispatches((50, 720, 2048), true), 2);
    assert_eq!(dispatches((50, 720, 2048), false), 1);
    assert_eq!(
        dispatches((50, 720, 120), true),
        1,
        "k too shallow to split"
    );
    assert_eq!(
        dispatches((50, 64, 256), true),
        1,
        "too small a product to split"
    );
    assert_eq!(
        dispatches((64, 4096, 2048), true),
        1,
        "enough tiles already"
    );
}
