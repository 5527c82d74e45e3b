//! Rotary position embeddings (`shaders/rope.wgsl`). The per-pair frequencies are computed
//! here in f64 (like the CPU reference) and uploaded with the dispatch as (hi, lo) f32
//! pairs; positions stay a run-time f32 input.

use super::{dispatch, grid_1d, u32_of, Bind, Dispatch, NodeBuffers};
use crate::backend::wgpu::shader::Variant;
use crate::backend::wgpu::GpuContext;
use crate::graph::{Node, Op};
use crate::ops::{RopeLayout, RopeMode};
use crate::{Error, Result};

const SOURCE: &str = include_str!("../../../../shaders/rope.wgsl");

/// `freq_scale * theta^(-2i / n_rot)` for each pair, split into f32 hi + lo.
pub(crate) fn frequencies(theta: f32, n_rot: usize, freq_scale: f32) -> Vec<[f32; 2]> {
    (0..n_rot / 2)
        .map(|i| {
            let f = f64::from(freq_scale) * f64::from(theta).powf(-2.0 * i as f64 / n_rot as f64);
            let hi = f as f32;
            [hi, (f - f64::from(hi)) as f32]
        })
        .collect()
}

/// A second tensor rotated by the same dispatch (`fuse/`): its input, output and shape
/// (`[.., heads, D]` as the first's, in the same layout).
#[derive(Clone, Copy)]
pub(crate) struct SecondRope<'a> {
    pub x: Bind<'a>,
    pub y: Bind<'a>,
    pub shape: &'a [usize],
}

/// (seq, heads) of a rank-3 rope operand in `layout`.
fn seq_heads(shape: &[usize], layout: RopeLayout) -> (usize, usize) {
    match layout {
        RopeLayout::SeqHeadDim => (shape[0], shape[1]),
        RopeLayout::HeadSeqDim => (shape[1], shape[0]),
    }
}

/// [`Op::Rope`]; with `second`, another tensor at the same positions and settings too.
pub(super) fn rope(
    ctx: &GpuContext,
    node: &Node,
    bufs: &NodeBuffers,
    second: Option<SecondRope>,
) -> Result<Vec<Dispatch>> {
    let Op::Rope(cfg) = &node.op else {
        unreachable!("routed by encode")
    };
    if cfg.theta.is_nan() || cfg.theta <= 0.0 {
        return Err(Error::InvalidArgument(format!(
            "rope: theta must be > 0, got {}",
            cfg.theta
        )));
    }
    let n2 = second.map_or(0, |s| s.shape.iter().product());
    if node.numel() + n2 == 0 {
        return Ok(vec![]);
    }
    let d = node.shape[2];
    let (seq, heads) = seq_heads(&node.shape, cfg.layout);
    let heads2 = second.map_or(0, |s| seq_heads(s.shape, cfg.layout).1);
    let n_rot = cfg.n_rot.unwrap_or(d);
    let freqs = frequencies(cfg.theta, n_rot, cfg.freq_scale);
    let freq_buf = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("rope freqs"),
        size: (8 * freqs.len() as u64).max(8),
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    if !freqs.is_empty() {
        ctx.queue
            .write_buffer(&freq_buf, 0, bytemuck::cast_slice(&freqs));
    }
    let params = [
        u32_of(node.numel(), "elements")?,
        u32_of(d, "head dim")?,
        u32_of(n_rot, "n_rot")?,
        u32_of(heads, "heads")?,
        u32_of(seq, "seq")?,
        u32::from(cfg.layout == RopeLayout::HeadSeqDim),
        u32::from(cfg.mode == RopeMode::Neox),
        u32_of(n2, "second elements")?,
        u32_of(heads2, "second heads")?,
    ];
    let v = Variant::new("rope", SOURCE, "rope").define("TWO", second.is_some());
    let mut buffers = vec![
        (1, bufs.inputs[0].act()),
        (2, bufs.inputs[1].act()),
        (3, Bind::f32(&freq_buf)),
        (4, bufs.output),
    ];
    buffers.extend(second.into_iter().flat_map(|s| [(5, s.x), (6, s.y)]));
    let grid = grid_1d(ctx, node.numel() + n2, 256);
    Ok(vec![dispatch(ctx, &v, &params, &buffers, grid)?])
}
