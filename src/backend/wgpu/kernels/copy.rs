//! Data movement as one generic strided copy (`shaders/copy.wgsl`): slice, permute, and
//! concat (one dispatch per input, each writing its disjoint range of the output).
//!
//! Every op is described as (shape, input strides, output strides, offsets); dims of size 1
//! are dropped and dims contiguous in both input and output are merged, so e.g. a slice is
//! at most 2-D and a permute is as deep as its non-mergeable axes. After that collapse at
//! most [`MAX_RANK`] dims are supported; deeper copies fail with `NotImplemented`.

use super::{dispatch, grid_1d, u32_of, Bind, Dispatch, NodeBuffers};
use crate::backend::wgpu::shader::Variant;
use crate::backend::wgpu::GpuContext;
use crate::graph::{Node, Op};
use crate::{Error, Result};

const SOURCE: &str = include_str!("../../../../shaders/copy.wgsl");
const WG: usize = 256;
/// Dims the kernel's parameter block holds (after collapsing).
pub(crate) const MAX_RANK: usize = 8;

/// Row-major strides of `shape`.
fn contiguous(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// One dim of a strided copy.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Dim {
    size: usize,
    src: usize,
    dst: usize,
}

/// Drops size-1 dims and merges neighbours that are contiguous in both source and
/// destination. Input dims are outermost first; the result is innermost first.
fn collapse(shape: &[usize], src: &[usize], dst: &[usize]) -> Vec<Dim> {
    let mut out: Vec<Dim> = Vec::new();
    for d in (0..shape.len()).rev() {
        let dim = Dim {
            size: shape[d],
            src: src[d],
            dst: dst[d],
        };
        if dim.size == 1 {
            continue;
        }
        match out.last_mut() {
            Some(l) if l.src * l.size == dim.src && l.dst * l.size == dim.dst => l.size *= dim.size,
            _ => out.push(dim),
        }
    }
    out
}

struct Copy {
    dims: Vec<Dim>,
    src_offset: usize,
    dst_offset: usize,
}

fn copy_dispatch(
    ctx: &GpuContext,
    node: &Node,
    c: &Copy,
    input: Bind,
    output: Bind,
) -> Result<Option<Dispatch>> {
    let n: usize = c.dims.iter().map(|d| d.size).product();
    if c.dims.iter().any(|d| d.size == 0) {
        return Ok(None);
    }
    if c.dims.len() > MAX_RANK {
        return Err(Error::NotImplemented {
            op: format!(
                "{} needing a {}-D strided copy (node shape {:?}); the wgpu copy kernel handles {MAX_RANK}",
                node.op.kind(),
                c.dims.len(),
                node.shape
            ),
            backend: "wgpu",
        });
    }
    let mut params = vec![
        u32_of(n, "elements")?,
        c.dims.len() as u32,
        u32_of(c.src_offset, "source offset")?,
        u32_of(c.dst_offset, "destination offset")?,
    ];
    let mut shape = [1u32; MAX_RANK];
    let mut src = [0u32; MAX_RANK];
    let mut dst = [0u32; MAX_RANK];
    for (k, d) in c.dims.iter().enumerate() {
        shape[k] = u32_of(d.size, "dimension")?;
        src[k] = u32_of(d.src, "stride")?;
        dst[k] = u32_of(d.dst, "stride")?;
    }
    params.extend(shape);
    params.extend(src);
    params.extend(dst);
    let v = Variant::new("copy", SOURCE, "copy");
    let grid = grid_1d(ctx, n, WG);
    Ok(Some(dispatch(
        ctx,
        &v,
        &params,
        &[(1, input), (2, output)],
        grid,
    )?))
}

/// Copies all `n` elements of `input` to `output` from element `dst_offset` on: one buffer
/// appended to another (attention's key / value parts joined for its GEMM path).
pub(super) fn copy_into(
    ctx: &GpuContext,
    node: &Node,
    input: Bind,
    output: Bind,
    n: usize,
    dst_offset: usize,
) -> Result<Option<Dispatch>> {
    let dims = vec![Dim {
        size: n,
        src: 1,
        dst: 1,
    }];
    let c = Copy {
        dims,
        src_offset: 0,
        dst_offset,
    };
    copy_dispatch(ctx, node, &c, input, output)
}

/// The copies a node needs, each paired with the index of the input it reads.
fn plan(node: &Node, input_shapes: &[&[usize]]) -> Vec<(usize, Copy)> {
    let out_strides = contiguous(&node.shape);
    match &node.op {
        Op::Slice { axis, start, .. } => {
            let src = contiguous(input_shapes[0]);
            let dims = collapse(&node.shape, &src, &out_strides);
            vec![(
                0,
                Copy {
                    dims,
                    src_offset: start * src[*axis],
                    dst_offset: 0,
                },
            )]
        }
        Op::Permute(perm) => {
            let in_strides = contiguous(input_shapes[0]);
            let src: Vec<usize> = perm.iter().map(|&p| in_strides[p]).collect();
            let dims = collapse(&node.shape, &src, &out_strides);
            vec![(
                0,
                Copy {
                    dims,
                    src_offset: 0,
                    dst_offset: 0,
                },
            )]
        }
        Op::Concat { axis } => {
            let mut at = 0;
            input_shapes
                .iter()
                .enumerate()
                .map(|(k, s)| {
                    let dims = collapse(s, &contiguous(s), &out_strides);
                    let c = Copy {
                        dims,
                        src_offset: 0,
                        dst_offset: at * out_strides[*axis],
                    };
                    at += s[*axis];
                    (k, c)
                })
                .collect()
        }
        _ => unreachable!("routed by encode"),
    }
}

/// Slice, permute or concat.
pub(super) fn copy(ctx: &GpuContext, node: &Node, bufs: &NodeBuffers) -> Result<Vec<Dispatch>> {
    u32_of(node.numel(), "elements")?;
    let shapes: Vec<&[usize]> = bufs.inputs.iter().map(|b| b.shape()).collect();
    for s in &shapes {
        u32_of(s.iter().product(), "input elements")?;
    }
    let mut out = Vec::new();
    for (k, c) in plan(node, &shapes) {
        out.extend(copy_dispatch(
            ctx,
            node,
            &c,
            bufs.inputs[k].act(),
            bufs.output,
        )?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(size: usize, src: usize, dst: usize) -> Dim {
        Dim { size, src, dst }
    }

    #[test]
    fn collapse_merges_contiguous_dims() {
        // a contiguous copy of any shape is one dim
        let s = [2, 3, 4];
        assert_eq!(
            collapse(&s, &contiguous(&s), &contiguous(&s)),
            [d(24, 1, 1)]
        );
        // slice of the middle axis of [2, 5, 4] to len 3: rows of 12 with source pitch 20
        let src = contiguous(&[2, 5, 4]);
        assert_eq!(
            collapse(&[2, 3, 4], &src, &contiguous(&[2, 3, 4])),
            [d(12, 1, 1), d(2, 20, 12)]
        );
        // a transpose keeps both dims; size-1 dims vanish
        assert_eq!(
            collapse(&[3, 1, 2], &[1, 7, 3], &[2, 2, 1]),
            [d(2, 3, 1), d(3, 1, 2)]
        );
        assert!(collapse(&[1, 1], &[1, 1], &[1, 1]).is_empty());
    }
}
