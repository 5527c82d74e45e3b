//! Broadcasting binary ops, unary activations, gated products `act(gate) * up` and bytes
//! to f32 (`shaders/elementwise.wgsl`).

use super::{dispatch, grid_1d, u32_of, Bind, Dispatch, NodeBuffers};
use crate::backend::wgpu::shader::Variant;
use crate::backend::wgpu::GpuContext;
use crate::graph::{GateAct, Node, Op};
use crate::{Error, Result};

const SOURCE: &str = concat!(
    include_str!("../../../../shaders/activation.wgsl"),
    include_str!("../../../../shaders/elementwise.wgsl")
);
const WG: usize = 256;
const MAX_RANK: usize = 4;

/// Strides of `shape` broadcast to `out` (both padded to MAX_RANK with leading 1s); a
/// broadcast dimension gets stride 0.
fn broadcast_strides(shape: &[usize], out: &[usize]) -> [u32; MAX_RANK] {
    let mut strides = [0u32; MAX_RANK];
    let mut stride = 1usize;
    for i in 0..MAX_RANK {
        let (oi, si) = (MAX_RANK - 1 - i, shape.len().checked_sub(1 + i));
        let dim = si.map_or(1, |k| shape[k]);
        let out_dim = out.len().checked_sub(1 + i).map_or(1, |k| out[k]);
        strides[oi] = if dim == 1 && out_dim != 1 {
            0
        } else {
            stride as u32
        };
        stride *= dim;
    }
    strides
}

fn padded(shape: &[usize]) -> Result<[u32; MAX_RANK]> {
    let mut out = [1u32; MAX_RANK];
    for (i, d) in shape.iter().rev().enumerate() {
        out[MAX_RANK - 1 - i] = u32_of(*d, "dimension")?;
    }
    Ok(out)
}

pub(super) fn binary(ctx: &GpuContext, node: &Node, bufs: &NodeBuffers) -> Result<Vec<Dispatch>> {
    if node.shape.len() > MAX_RANK {
        return Err(Error::NotImplemented {
            op: format!("{} of rank {}", node.op.kind(), node.shape.len()),
            backend: "wgpu",
        });
    }
    let (a, b) = (&bufs.inputs[0], &bufs.inputs[1]);
    let op = match node.op {
        Op::Add => 0,
        Op::Mul => 1,
        _ => unreachable!("routed by encode"),
    };
    let n = u32_of(node.numel(), "elements")?;
    let mut params = vec![n, op, 0, 0];
    params.extend(padded(&node.shape)?);
    params.extend(broadcast_strides(a.shape(), &node.shape));
    params.extend(broadcast_strides(b.shape(), &node.shape));
    let v = Variant::new("elementwise", SOURCE, "binary");
    let grid = grid_1d(ctx, node.numel(), WG);
    Ok(vec![dispatch(
        ctx,
        &v,
        &params,
        &[(1, a.act()), (2, b.act()), (3, bufs.output)],
        grid,
    )?])
}

pub(super) fn unary(ctx: &GpuContext, node: &Node, bufs: &NodeBuffers) -> Result<Vec<Dispatch>> {
    let (op, scalar) = match node.op {
        Op::Scale(s) => (0, s),
        Op::GeluTanh => (1, 0.0),
        Op::GeluErf => (2, 0.0),
        Op::Silu => (3, 0.0),
        Op::Relu => (4, 0.0),
        Op::Gated(act) => {
            let (gate, up) = (bufs.inputs[0].act(), bufs.inputs[1].act());
            return Ok(vec![gated(ctx, act, node.numel(), gate, up, bufs.output)?]);
        }
        _ => unreachable!("routed by encode"),
    };
    let params = [u32_of(node.numel(), "elements")?, op, scalar.to_bits(), 0];
    let v = Variant::new("elementwise", SOURCE, "unary");
    let grid = grid_1d(ctx, node.numel(), WG);
    let buffers = [(1, bufs.inputs[0].act()), (3, bufs.output)];
    Ok(vec![dispatch(ctx, &v, &params, &buffers, grid)?])
}

/// [`Op::AddGated`]: `x + y * m[part W..(part + 1) W]`, one pass.
pub(super) fn add_gated(
    ctx: &GpuContext,
    node: &Node,
    bufs: &NodeBuffers,
) -> Result<Vec<Dispatch>> {
    let Op::AddGated { part } = node.op else {
        unreachable!("routed by encode")
    };
    let w = node.shape.last().copied().unwrap_or(1);
    let params = [
        u32_of(node.numel(), "elements")?,
        u32_of(w, "gate length")?,
        u32_of(part * w, "gate offset")?,
        0,
    ];
    let v = Variant::new("elementwise", SOURCE, "add_gated");
    let [x, y, m] = [0, 1, 2].map(|k| bufs.inputs[k].act());
    let buffers = [(1, x), (2, y), (5, m), (3, bufs.output)];
    let grid = grid_1d(ctx, node.numel(), WG);
    Ok(vec![dispatch(ctx, &v, &params, &buffers, grid)?])
}

/// `out = act(gate) * up` over `n` elements.
pub(super) fn gated(
    ctx: &GpuContext,
    act: GateAct,
    n: usize,
    gate: Bind,
    up: Bind,
    out: Bind,
) -> Result<Dispatch> {
    let op = match act {
        GateAct::GeluTanh => 1,
        GateAct::Silu => 3,
    };
    let params = [u32_of(n, "elements")?, op, 0, 0];
    let v = Variant::new("elementwise", SOURCE, "unary").define("GATED", true);
    let buffers = [(1, gate), (2, up), (3, out)];
    dispatch(ctx, &v, &params, &buffers, grid_1d(ctx, n, WG))
}

/// [`Op::InputU8`]: the node's bytes (written by the host into `bytes`, four a word) as
/// values in `output`'s dtype.
pub(crate) fn widen_bytes(
    ctx: &GpuContext,
    node: &Node,
    bytes: &wgpu::Buffer,
    output: Bind,
) -> Result<Dispatch> {
    let params = [u32_of(node.numel(), "elements")?, 0, 0, 0];
    let v = Variant::new("elementwise", SOURCE, "bytes");
    let grid = grid_1d(ctx, node.numel(), WG);
    dispatch(
        ctx,
        &v,
        &params,
        &[(4, Bind::f32(bytes)), (3, output)],
        grid,
    )
}

#[cfg(test)]
mod tests {
    use super::broadcast_strides;

    #[test]
    fn strides() {
        assert_eq!(broadcast_strides(&[2, 3], &[2, 3]), [6, 6, 3, 1]);
        assert_eq!(broadcast_strides(&[3], &[2, 3]), [3, 3, 0, 1]);
        assert_eq!(broadcast_strides(&[2, 1], &[2, 3]), [2, 2, 1, 0]);
    }
}
