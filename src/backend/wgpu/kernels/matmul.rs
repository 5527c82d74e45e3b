//! `x @ w^T` with f32 activations and F32 / F16 / BF16 weights (`shaders/matmul.wgsl`).
//! A weight split into row chunks gets one dispatch per chunk, each writing its columns.

use super::{dispatch, u32_of, Dispatch, NodeBuffers, TensorBuf};
use crate::backend::wgpu::shader::Variant;
use crate::backend::wgpu::GpuContext;
use crate::gguf::GgmlType;
use crate::graph::Node;
use crate::{Error, Result};

const SOURCE: &str = include_str!("../../../../shaders/matmul.wgsl");
/// Output tile per workgroup: 8x8 threads, 4x4 outputs each.
const TILE: usize = 32;

pub(super) fn matmul(ctx: &GpuContext, _node: &Node, bufs: &NodeBuffers) -> Result<Vec<Dispatch>> {
    let x = &bufs.inputs[0];
    let TensorBuf::Raw { chunks, shape: ws, dtype } = &bufs.inputs[1] else {
        unreachable!("matmul weights are raw")
    };
    let define = match dtype {
        GgmlType::F32 => "W_F32",
        GgmlType::F16 => "W_F16",
        GgmlType::BF16 => "W_BF16",
        t => {
            return Err(Error::NotImplemented {
                op: format!("matmul with {t} weights"),
                backend: "wgpu",
            })
        }
    };
    let k = ws[1];
    let n = ws[0];
    let m = x.shape().iter().product::<usize>() / k.max(1);
    let v = Variant::new("matmul", SOURCE, "matmul").define(define, true);
    chunks
        .iter()
        .map(|c| {
            let params = [
                u32_of(m, "M")?,
                u32_of(n, "N")?,
                u32_of(k, "K")?,
                u32_of(c.row_start, "row offset")?,
                u32_of(c.rows, "rows")?,
            ];
            let grid = [c.rows.div_ceil(TILE) as u32, m.div_ceil(TILE) as u32, 1];
            dispatch(ctx, &v, &params, &[(1, x.f32()), (2, &c.buffer), (3, bufs.output)], grid)
        })
        .collect()
}
