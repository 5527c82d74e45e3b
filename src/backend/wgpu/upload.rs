//! Buffers for the wgpu backend: storage buffers, uploads in whole words, and weights
//! uploaded in their stored dtype by row chunks.

use super::kernels::Chunk;
use super::repack;
use super::GpuContext;
use crate::{Error, Result, Tensor};

pub(super) fn storage(
    ctx: &GpuContext,
    label: &str,
    size: u64,
    extra: wgpu::BufferUsages,
) -> wgpu::Buffer {
    ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size: size.max(4).next_multiple_of(4),
        usage: wgpu::BufferUsages::STORAGE | extra,
        mapped_at_creation: false,
    })
}

pub(super) fn upload(ctx: &GpuContext, label: &str, bytes: &[u8]) -> wgpu::Buffer {
    // COPY_SRC: an f32 weight (through a reshape view) can be a graph output
    let buf = storage(
        ctx,
        label,
        bytes.len() as u64,
        wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
    );
    write_words(ctx, &buf, bytes);
    buf
}

/// Writes `bytes` at the start of `buf` (wgpu writes whole 4-byte words: the last one is
/// padded with zeros); returns the bytes written.
pub(super) fn write_words(ctx: &GpuContext, buf: &wgpu::Buffer, bytes: &[u8]) -> u64 {
    let whole = bytes.len() / 4 * 4;
    ctx.queue.write_buffer(buf, 0, &bytes[..whole]);
    if whole < bytes.len() {
        let mut tail = [0u8; 4];
        tail[..bytes.len() - whole].copy_from_slice(&bytes[whole..]);
        ctx.queue.write_buffer(buf, whole as u64, &tail);
    }
    bytes.len().next_multiple_of(4) as u64
}

/// Uploads a weight in its stored dtype, split into row ranges that each fit one binding;
/// quantized blocks repacked into aligned codes and scales (`repack.rs`), so every decoder
/// reads whole words inside the chunk.
pub(super) fn upload_rows(
    ctx: &GpuContext,
    name: &str,
    t: &Tensor,
    max_binding: u64,
) -> Result<Vec<Chunk>> {
    let bytes = t.raw_bytes();
    let rows = t.shape().first().copied().unwrap_or(1).max(1);
    let row_bytes = bytes.len() / rows;
    let ty = t.dtype();
    // a row's bytes as uploaded
    let blocks_a_row = row_bytes / ty.type_size().max(1);
    let up_row_bytes = repack::packed_bytes(ty, blocks_a_row).unwrap_or(row_bytes);
    // every chunk is a new buffer: its bytes, rounded up to a word
    let rows_per_chunk = ((max_binding as usize).saturating_sub(4) / up_row_bytes.max(1)).max(1);
    if up_row_bytes as u64 > max_binding {
        return Err(Error::Gpu(format!(
            "weight {name:?}: one row is {up_row_bytes} bytes, over the storage binding limit ({max_binding})"
        )));
    }
    let mut chunks = Vec::new();
    let mut start = 0;
    while start < rows {
        let n = rows_per_chunk.min(rows - start);
        let chunk = &bytes[start * row_bytes..(start + n) * row_bytes];
        let packed;
        let chunk = match repack::code_words(ty) {
            Some(_) => {
                packed = repack::repack(ty, chunk);
                &packed[..]
            }
            None => chunk,
        };
        let usage = wgpu::BufferUsages::COPY_DST;
        let buffer = storage(ctx, name, chunk.len().next_multiple_of(4) as u64, usage);
        write_words(ctx, &buffer, chunk);
        chunks.push(Chunk {
            buffer,
            row_start: start,
            rows: n,
        });
        start += n;
    }
    Ok(chunks)
}
