//! Activation dtypes on wgpu ([`ActDtype`]): which nodes are stored in it, and the host's
//! conversions of inputs and outputs. The kernels' side is the template step's `ACT`
//! bindings (`shader.rs`).

use crate::backend::ActDtype;
use crate::graph::{AttentionMask, Graph, Op};
use std::borrow::Cow;

/// Does this consumer read input `k` as exact numbers (token ids, positions, a mask), which
/// must stay f32 whatever the activation dtype?
fn reads_exact(op: &Op, k: usize, inputs: usize) -> bool {
    match op {
        Op::Embedding | Op::Rope(_) => k == 1,
        Op::Attention { mask, .. } => *mask == AttentionMask::Allowed && k + 1 == inputs,
        _ => false,
    }
}

/// The dtype each node's value is stored in: `act` for activations, f32 for weights (read
/// as f32 only where small: gains, biases, tables) and for the values some consumer reads
/// as exact numbers, with everything they are computed from (ids or positions sliced,
/// concatenated or offset on the device stay exact too; a reshape view shares its base's
/// slot and so its dtype).
pub fn store_dtypes(graph: &Graph, act: ActDtype) -> Vec<ActDtype> {
    let nodes = graph.nodes();
    let mut exact = vec![false; nodes.len()];
    for n in nodes {
        for (k, inp) in n.inputs.iter().enumerate() {
            exact[inp.0] |= reads_exact(&n.op, k, n.inputs.len());
        }
    }
    // backwards: an exact value's producers are exact (in practice inputs, copies and
    // small index arithmetic: masks and positions are built from a few inputs)
    for (i, n) in nodes.iter().enumerate().rev() {
        if exact[i] {
            for inp in &n.inputs {
                exact[inp.0] = true;
            }
        }
    }
    let mut stores = vec![act; nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        stores[i] = match &n.op {
            Op::Weight(_) => ActDtype::F32,
            Op::Reshape(_) => stores[n.inputs[0].0],
            _ if exact[i] => ActDtype::F32,
            _ => act,
        };
    }
    stores
}

/// `values` in `dtype`, as bytes: a 16-bit dtype rounds to nearest even, finite values
/// past f16's range saturate (as the kernels store them).
pub(super) fn encode_values(values: &[f32], dtype: ActDtype) -> Cow<'_, [u8]> {
    Cow::Owned(match dtype {
        ActDtype::F32 => return Cow::Borrowed(bytemuck::cast_slice(values)),
        ActDtype::F16 => values
            .iter()
            .map(|&v| {
                if v.is_finite() {
                    v.clamp(-65504.0, 65504.0)
                } else {
                    v
                }
            })
            .flat_map(|v| half::f16::from_f32(v).to_le_bytes())
            .collect(),
        ActDtype::Bf16 => values
            .iter()
            .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
            .collect(),
    })
}

/// The first `n` values of `bytes` stored in `dtype`, as f32.
pub(super) fn decode_values(bytes: &[u8], dtype: ActDtype, n: usize) -> Vec<f32> {
    match dtype {
        ActDtype::F32 => bytemuck::cast_slice::<u8, f32>(&bytes[..4 * n]).to_vec(),
        ActDtype::F16 => bytes[..2 * n]
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        ActDtype::Bf16 => bytes[..2 * n]
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::store_dtypes;
    use crate::backend::wgpu::{Api, Caps, WgpuBackend, WgpuOptions};
    use crate::backend::ActDtype::{self, Bf16, F32};
    use crate::backend::Backend;
    use crate::graph::GraphBuilder;
    use crate::ops::{RopeConfig, RopeMode};
    use crate::Tensor;
    use std::collections::HashMap;

    /// Exact numbers stay f32 with what they are computed from (a slice of positions, an
    /// offset sum of ids), through views; the rest is stored in the activation dtype.
    #[test]
    fn exact_values_and_their_producers_stay_f32() {
        let weights: HashMap<String, Tensor<'static>> = [(
            "t".to_owned(),
            Tensor::from_f32(vec![4000, 8], vec![0.0; 32000]).unwrap(),
        )]
        .into();
        let mut g = GraphBuilder::new(&weights);
        let x = g.input("x", &[5, 2, 8]);
        let pos_all = g.input("pos_all", &[9]);
        let pos = g.slice(pos_all, 0, 4, 5).unwrap();
        let y = g
            .rope(x, pos, RopeConfig::new(RopeMode::Neox, 1e4))
            .unwrap();
        let (a, b) = (g.input("a", &[6]), g.input("b", &[6]));
        let ids = g.add(a, b).unwrap();
        let view = g.reshape(ids, &[2, 3]).unwrap();
        let view = g.reshape(view, &[6]).unwrap();
        let t = g.stored_weight("t").unwrap();
        let e = g.embedding(t, view).unwrap();
        let graph = g.build(&[y, e]).unwrap();
        let s = store_dtypes(&graph, Bf16);
        for exact in [pos_all, pos, a, b, ids, view] {
            assert_eq!(s[exact.index()], F32, "node {}", exact.index());
        }
        for act in [x, y, e] {
            assert_eq!(s[act.index()], Bf16, "node {}", act.index());
        }
        assert_eq!(s[t.index()], F32);
    }

    /// 16-bit activations halve the planned activation bytes and the readback, keep ids
    /// exact (an embedding's ids stay f32), and f16 without shader-f16 is a clear error.
    #[test]
    fn activation_dtype_sets_what_is_stored() {
        let b = WgpuBackend::new(Api::Vulkan).expect("a Vulkan adapter (lavapipe in CI)");
        let weights: HashMap<String, Tensor<'static>> = [(
            "t".to_owned(),
            Tensor::from_f32(
                vec![300, 4],
                (0..1200).map(|i| i as f32 / 7.0).collect::<Vec<_>>(),
            )
            .unwrap(),
        )]
        .into();
        let mut g = GraphBuilder::new(&weights);
        let ids = g.input("ids", &[6]);
        let t = g.stored_weight("t").unwrap();
        let e = g.embedding(t, ids).unwrap();
        let y = g.scale(e, 0.5);
        let graph = g.build(&[y]).unwrap();
        let ids_t = Tensor::from_f32(vec![6], vec![299.0, 0.0, 257.0, 3.0, 1.0, 2.0]).unwrap();
        let run = |act: ActDtype| {
            let opts = WgpuOptions {
                act_dtype: act,
                ..b.options()
            };
            let mut exe = b.reconfigured(opts).compile(&graph, &weights).unwrap();
            let out = exe.run(&[("ids", &ids_t)]).unwrap()[0]
                .to_vec_f32()
                .unwrap();
            (out, exe.stats())
        };
        let (f32_out, f32_stats) = run(ActDtype::F32);
        let (bf16_out, bf16_stats) = run(ActDtype::Bf16);
        let stores = store_dtypes(&graph, ActDtype::Bf16);
        assert_eq!(stores[ids.index()], ActDtype::F32, "ids stay exact");
        assert_eq!(stores[y.index()], ActDtype::Bf16);
        // rows 299 and 257 of the table: bf16 holds 256 exactly, so exact ids pick them
        for (a, b) in f32_out.iter().zip(&bf16_out) {
            assert!((a - b).abs() <= a.abs() / 256.0, "{a} vs {b}");
        }
        assert_eq!(f32_out[0], 299.0 * 4.0 / 7.0 * 0.5);
        assert_eq!(bf16_stats.runs.d2h_bytes * 2, f32_stats.runs.d2h_bytes);
        assert!(bf16_stats.peak_activation_bytes < f32_stats.peak_activation_bytes);

        let no_f16 = WgpuBackend::with_caps(
            Api::Vulkan,
            Caps {
                f16: false,
                ..Caps::ALL
            },
        )
        .unwrap();
        let opts = WgpuOptions {
            act_dtype: ActDtype::F16,
            ..no_f16.options()
        };
        let e = no_f16
            .reconfigured(opts)
            .compile(&graph, &weights)
            .err()
            .expect("f16 activations need shader-f16")
            .to_string();
        assert!(e.contains("shader-f16") && e.contains("bf16"), "{e}");
    }
}
