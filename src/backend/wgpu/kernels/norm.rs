//! Row reductions over the last dim: softmax, RMSNorm (plain and adaptive), LayerNorm
//! (`shaders/norm.wgsl`).
//! One workgroup per row, so rows of any length; the row count may exceed one grid
//! dimension (folded by `grid_1d`).

use super::{dispatch, grid_1d, u32_of, Bind, Dispatch, NodeBuffers};
use crate::backend::wgpu::shader::Variant;
use crate::backend::wgpu::GpuContext;
use crate::graph::{Node, Op, RowNorm};
use crate::Result;

const SOURCE: &str = concat!(
    include_str!("../../../../shaders/norm.wgsl"),
    include_str!("../../../../shaders/reduce.wgsl")
);

/// Softmax over rows of `d` values of `buffer`, in place, entries at or below -f32::MAX
/// counting as masked (the GPU kernel set's attention scores).
pub(super) fn softmax_in_place(
    ctx: &GpuContext,
    buffer: Bind,
    rows: usize,
    d: usize,
) -> Result<Dispatch> {
    let params = [u32_of(rows, "rows")?, u32_of(d, "row length")?, 0, 0];
    let v = Variant::new("norm", SOURCE, "softmax")
        .define("IN_PLACE", true)
        .define("SUBGROUPS", ctx.caps.subgroups)
        .constant("WG", f64::from(workgroup_size(ctx, d)));
    dispatch(ctx, &v, &params, &[(4, buffer)], grid_1d(ctx, rows, 1))
}

/// Threads per row: short rows waste most of them, long rows (2048+) stride.
fn workgroup_size(ctx: &GpuContext, d: usize) -> u32 {
    let max = ctx.limits.max_compute_invocations_per_workgroup.min(256);
    let want = d.next_power_of_two().clamp(32, 256) as u32;
    // a power of two no larger than the device allows
    let mut wg = 1u32;
    while wg * 2 <= want.min(max) {
        wg *= 2;
    }
    wg
}

pub(super) fn row_op(ctx: &GpuContext, node: &Node, bufs: &NodeBuffers) -> Result<Vec<Dispatch>> {
    let d = node.shape.last().copied().unwrap_or(1);
    if node.numel() == 0 {
        return Ok(vec![]);
    }
    let rows = node.numel() / d;
    let (entry, eps, offset) = match node.op {
        Op::Softmax => ("softmax", 0.0, 0.0),
        Op::RmsNorm { eps, offset } => ("rms_norm", eps, offset),
        Op::AdaRmsNorm { eps } => ("rms_norm", eps, 1.0),
        Op::LayerNorm { eps } => ("layer_norm", eps, 0.0),
        _ => unreachable!("routed by encode"),
    };
    let params = [
        u32_of(rows, "rows")?,
        u32_of(d, "row length")?,
        eps.to_bits(),
        offset.to_bits(),
    ];
    let x = bufs.inputs[0].act();
    let mut buffers = vec![(1, x), (4, bufs.output)];
    if let Some(w) = bufs.inputs.get(1) {
        buffers.push((2, w.act()));
    }
    if let Some(b) = bufs.inputs.get(2) {
        buffers.push((3, b.act()));
    }
    let shift = matches!(node.op, Op::AdaRmsNorm { .. });
    Ok(vec![row_dispatch(ctx, (entry, shift), params, &buffers)?])
}

/// One dispatch of row kernel `entry` (with `shift`: rms_norm's SHIFT variant); `params`:
/// rows, row length, eps, offset.
fn row_dispatch(
    ctx: &GpuContext,
    (entry, shift): (&'static str, bool),
    params: [u32; 4],
    buffers: &[(u32, Bind)],
) -> Result<Dispatch> {
    let v = Variant::new("norm", SOURCE, entry)
        .define("SHIFT", shift)
        .define("SUBGROUPS", ctx.caps.subgroups)
        .constant("WG", f64::from(workgroup_size(ctx, params[1] as usize)));
    dispatch(
        ctx,
        &v,
        &params,
        buffers,
        grid_1d(ctx, params[0] as usize, 1),
    )
}

/// `out = x / rms(x) * (gain + offset)` over `rows` rows of `d` values (a matmul's input
/// rows, where its kernel cannot normalise them itself).
pub(super) fn rms_norm_into(
    ctx: &GpuContext,
    [x, gain, out]: [Bind; 3],
    rows: usize,
    d: usize,
    norm: RowNorm,
) -> Result<Dispatch> {
    let params = [
        u32_of(rows, "rows")?,
        u32_of(d, "row length")?,
        norm.eps.to_bits(),
        norm.offset.to_bits(),
    ];
    row_dispatch(
        ctx,
        ("rms_norm", false),
        params,
        &[(1, x), (2, gain), (4, out)],
    )
}
