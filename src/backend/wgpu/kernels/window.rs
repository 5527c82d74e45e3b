//! Sliding-window ops over channels-last feature maps (`shaders/window.wgsl`):
//! [`Op::Im2Col`] and [`Op::MaxPool`], one invocation per output element.

use super::{dispatch, grid_1d, u32_of, Dispatch, NodeBuffers};
use crate::backend::wgpu::shader::Variant;
use crate::backend::wgpu::GpuContext;
use crate::graph::{Node, Op, Window};
use crate::{Error, Result};

const SOURCE: &str = include_str!("../../../../shaders/window.wgsl");
const WG: usize = 256;

pub(super) fn window(ctx: &GpuContext, node: &Node, bufs: &NodeBuffers) -> Result<Vec<Dispatch>> {
    let (entry, win): (&'static str, &Window) = match &node.op {
        Op::Im2Col(w) => ("im2col", w),
        Op::MaxPool(w) => ("max_pool", w),
        op => return Err(Error::Gpu(format!("{} is not a window op", op.kind()))),
    };
    let x = &bufs.inputs[0];
    let [h, w, c] = x.shape()[..] else {
        return Err(Error::Gpu(format!("{entry}: input {:?}", x.shape())));
    };
    let n = node.numel();
    if n == 0 {
        return Ok(vec![]);
    }
    u32_of(h * w * c, "input elements")?;
    let (_, ow) = win.output(h, w).map_err(Error::Gpu)?;
    let params = [
        u32_of(h, "H")?,
        u32_of(w, "W")?,
        u32_of(c, "C")?,
        u32_of(ow, "OW")?,
        u32_of(win.kernel.0, "KH")?,
        u32_of(win.kernel.1, "KW")?,
        u32_of(win.stride.0, "SH")?,
        u32_of(win.stride.1, "SW")?,
        u32_of(win.padding.0, "PH")?,
        u32_of(win.padding.1, "PW")?,
        u32_of(win.dilation.0, "DH")?,
        u32_of(win.dilation.1, "DW")?,
        u32_of(n, "output elements")?,
    ];
    let v = Variant::new("window", SOURCE, entry);
    let buffers = [(1, x.act()), (2, bufs.output)];
    Ok(vec![dispatch(
        ctx,
        &v,
        &params,
        &buffers,
        grid_1d(ctx, n, WG),
    )?])
}
