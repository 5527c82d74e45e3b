//! Stage times from GPU timestamp queries: each of a graph's stages ([`Graph::stages`]) is
//! one compute pass that writes a timestamp at its start and end, resolved and read back
//! with the outputs (16 bytes a stage), so a one-submission predict still reports its
//! vision, prefill and denoise times where the adapter has `TIMESTAMP_QUERY`.
//!
//! [`Graph::stages`]: crate::graph::Graph::stages

use super::GpuContext;
use crate::{Error, Result};

pub(crate) struct StageTimer {
    set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    pub staging: wgpu::Buffer,
    stages: u32,
}

impl StageTimer {
    pub fn new(ctx: &GpuContext, stages: usize) -> Self {
        let stages = stages as u32;
        let size = 16 * u64::from(stages);
        let buffer = |label, usage| {
            ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size,
                usage,
                mapped_at_creation: false,
            })
        };
        use wgpu::BufferUsages as U;
        StageTimer {
            set: ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("stage times"),
                ty: wgpu::QueryType::Timestamp,
                count: 2 * stages,
            }),
            resolve: buffer("stage times", U::QUERY_RESOLVE | U::COPY_SRC),
            staging: buffer("stage times readback", U::MAP_READ | U::COPY_DST),
            stages,
        }
    }

    /// The timestamp writes of stage `k`'s pass.
    pub fn writes(&self, k: usize) -> wgpu::ComputePassTimestampWrites<'_> {
        wgpu::ComputePassTimestampWrites {
            query_set: &self.set,
            beginning_of_pass_write_index: Some(2 * k as u32),
            end_of_pass_write_index: Some(2 * k as u32 + 1),
        }
    }

    /// Records the resolve and the copy into [`Self::staging`], after the passes.
    pub fn resolve(&self, enc: &mut wgpu::CommandEncoder) {
        enc.resolve_query_set(&self.set, 0..2 * self.stages, &self.resolve, 0);
        enc.copy_buffer_to_buffer(&self.resolve, 0, &self.staging, 0, self.staging.size());
    }

    /// Milliseconds per stage from the mapped [`Self::staging`]; unmaps it.
    pub fn read(&self, ctx: &GpuContext) -> Result<Vec<f32>> {
        let period_ns = f64::from(ctx.queue.get_timestamp_period());
        let ms = {
            let view = self
                .staging
                .slice(..)
                .get_mapped_range()
                .map_err(|e| Error::Gpu(format!("reading stage timestamps: {e}")))?;
            let ticks: &[u64] = bytemuck::cast_slice(&view);
            ticks
                .chunks(2)
                .map(|t| (t[1].saturating_sub(t[0]) as f64 * period_ns / 1e6) as f32)
                .collect()
        };
        self.staging.unmap();
        Ok(ms)
    }
}
