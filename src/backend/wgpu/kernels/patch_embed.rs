//! ViT patch embedding without im2col (`shaders/patch_embed.wgsl`): one invocation per
//! (patch, block of 4 output channels).

use super::{dispatch, grid_1d, u32_of, Dispatch, NodeBuffers};
use crate::backend::wgpu::shader::Variant;
use crate::backend::wgpu::GpuContext;
use crate::graph::Node;
use crate::Result;

const SOURCE: &str = include_str!("../../../../shaders/patch_embed.wgsl");
const WG: usize = 64;
/// Output channels per invocation (`OB` in the shader).
const OB: usize = 4;

pub(super) fn patch_embed(
    ctx: &GpuContext,
    node: &Node,
    bufs: &NodeBuffers,
) -> Result<Vec<Dispatch>> {
    let (img, w, b) = (&bufs.inputs[0], &bufs.inputs[1], &bufs.inputs[2]);
    let (is, ws) = (img.shape(), w.shape());
    let (c, h, wd) = (is[0], is[1], is[2]);
    let (o, p, q) = (ws[0], ws[2], ws[3]);
    let patches = (h / p) * (wd / q);
    if patches == 0 || o == 0 {
        return Ok(vec![]);
    }
    let items = patches * o.div_ceil(OB);
    u32_of(img.shape().iter().product(), "image elements")?;
    u32_of(ws.iter().product(), "weight elements")?;
    u32_of(node.numel(), "output elements")?;
    let params = [
        u32_of(c, "C")?,
        u32_of(h, "H")?,
        u32_of(wd, "W")?,
        u32_of(o, "O")?,
        u32_of(p, "P")?,
        u32_of(q, "Q")?,
        u32_of(wd / q, "patches per row")?,
        u32_of(items, "work items")?,
    ];
    let v = Variant::new("patch_embed", SOURCE, "patch_embed");
    let grid = grid_1d(ctx, items, WG);
    let buffers = [(1, img.act()), (2, w.act()), (3, b.act()), (4, bufs.output)];
    Ok(vec![dispatch(ctx, &v, &params, &buffers, grid)?])
}
