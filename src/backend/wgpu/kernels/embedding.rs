//! `Op::Embedding` (`shaders/embedding.wgsl`): gathers rows of a raw `[V, D]` table (F32,
//! F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) for f32 ids, decoding only the gathered rows.
//! One dispatch per table chunk, each writing the rows whose ids fall in it.
//!
//! GPU behaviour for bad ids (the CPU reference errors instead): an id that is not an
//! integer in `[0, V)` (negative, `>= V`, fractional, NaN) yields a row of zeros; the table
//! is never read out of bounds.

use super::matmul::weight_define;
use super::{dispatch, grid_1d, u32_of, Bind, Dispatch, NodeBuffers, TensorBuf};
use crate::backend::wgpu::shader::Variant;
use crate::backend::wgpu::GpuContext;
use crate::graph::Node;
use crate::{Error, Result};

const SOURCE: &str = concat!(
    include_str!("../../../../shaders/weight_decode.wgsl"),
    include_str!("../../../../shaders/embedding.wgsl")
);
const WG: usize = 256;

pub(super) fn embedding(
    ctx: &GpuContext,
    node: &Node,
    bufs: &NodeBuffers,
) -> Result<Vec<Dispatch>> {
    let TensorBuf::Raw {
        chunks,
        shape: ts,
        dtype,
    } = &bufs.inputs[0]
    else {
        unreachable!("embedding tables are raw")
    };
    let ids = bufs.inputs[1].act();
    let (define, quant) = weight_define(*dtype, "embedding")?;
    let (vocab, d) = (ts[0], ts[1]);
    let n_ids = bufs.inputs[1].shape().iter().product::<usize>();
    if n_ids * d == 0 {
        return Ok(vec![]);
    }
    if dtype.bytes_for(d as u64).is_none() {
        return Err(Error::Gpu(format!(
            "embedding: {dtype} rows of {d} are not whole blocks"
        )));
    }
    let row_blocks = d / dtype.block_size();
    let v = Variant::new("embedding", SOURCE, "embedding")
        .define(define, true)
        .define("QUANT", quant);
    let grid = grid_1d(ctx, node.numel(), WG);
    chunks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let params = [
                u32_of(n_ids, "ids")?,
                u32_of(d, "D")?,
                u32_of(vocab, "V")?,
                u32_of(c.row_start, "row offset")?,
                u32_of(c.rows, "rows")?,
                u32_of(row_blocks, "blocks a row")?,
                u32::from(i == 0),
            ];
            dispatch(
                ctx,
                &v,
                &params,
                &[(1, ids), (2, Bind::f32(&c.buffer)), (3, bufs.output)],
                grid,
            )
        })
        .collect()
}
