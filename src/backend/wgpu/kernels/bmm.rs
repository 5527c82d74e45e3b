//! Batched matmul of two f32 activations (`shaders/bmm.wgsl`): `a [B, M, K]` with
//! `b [B, N, K]` (`trans_b`) or `b [B, K, N]`.

use super::{dispatch, u32_of, Dispatch, NodeBuffers};
use crate::backend::wgpu::shader::Variant;
use crate::backend::wgpu::GpuContext;
use crate::graph::{Node, Op};
use crate::Result;

const SOURCE: &str = include_str!("../../../../shaders/bmm.wgsl");
/// Output tile per workgroup: 8x8 threads, 4x4 outputs each.
const TILE: usize = 32;

pub(super) fn bmm(ctx: &GpuContext, node: &Node, bufs: &NodeBuffers) -> Result<Vec<Dispatch>> {
    let Op::Bmm { trans_b } = node.op else {
        unreachable!("routed by encode")
    };
    let (batch, m, n) = (node.shape[0], node.shape[1], node.shape[2]);
    let k = bufs.inputs[0].shape()[2];
    if node.numel() == 0 {
        return Ok(vec![]);
    }
    // K = 0 runs no loop iterations and writes zeros, the empty sum.
    let params = [u32_of(m, "M")?, u32_of(n, "N")?, u32_of(k, "K")?, 0];
    let v = Variant::new("bmm", SOURCE, "bmm").define("TRANS_B", trans_b);
    let grid = [
        u32_of(n.div_ceil(TILE), "N tiles")?,
        u32_of(m.div_ceil(TILE), "M tiles")?,
        u32_of(batch, "batch")?,
    ];
    let buffers = [
        (1, bufs.inputs[0].act()),
        (2, bufs.inputs[1].act()),
        (3, bufs.output),
    ];
    Ok(vec![dispatch(ctx, &v, &params, &buffers, grid)?])
}
