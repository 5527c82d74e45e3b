//! Device times from GPU timestamp queries: each timed interval is one compute pass that
//! writes a timestamp at its start and end, resolved and read back with the outputs (16
//! bytes an interval). An interval is one of a graph's stages ([`Graph::stages`]), so a
//! one-submission predict still reports its vision, prefill and denoise times where the
//! adapter has `TIMESTAMP_QUERY`; or, when profiling, one kernel dispatch.
//!
//! [`Graph::stages`]: crate::graph::Graph::stages

use super::GpuContext;
use crate::{Error, Result};

/// Queries in one query set: wgpu's limit (`QUERY_SET_MAX_QUERIES`).
const QUERIES_PER_SET: u32 = 4096;
const INTERVALS_PER_SET: u32 = QUERIES_PER_SET / 2;

pub(crate) struct StageTimer {
    sets: Vec<wgpu::QuerySet>,
    resolve: wgpu::Buffer,
    pub staging: wgpu::Buffer,
    intervals: u32,
}

impl StageTimer {
    /// A timer of `intervals` intervals (any number: one query set per 2048).
    pub fn new(ctx: &GpuContext, intervals: usize) -> Self {
        let intervals = intervals as u32;
        let size = 16 * u64::from(intervals);
        let buffer = |label, usage| {
            ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size,
                usage,
                mapped_at_creation: false,
            })
        };
        use wgpu::BufferUsages as U;
        let sets = (0..intervals.div_ceil(INTERVALS_PER_SET))
            .map(|s| {
                let n = (intervals - s * INTERVALS_PER_SET).min(INTERVALS_PER_SET);
                ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
                    label: Some("kernel times"),
                    ty: wgpu::QueryType::Timestamp,
                    count: 2 * n,
                })
            })
            .collect();
        StageTimer {
            sets,
            resolve: buffer("kernel times", U::QUERY_RESOLVE | U::COPY_SRC),
            staging: buffer("kernel times readback", U::MAP_READ | U::COPY_DST),
            intervals,
        }
    }

    /// The timestamp writes of interval `k`'s pass.
    pub fn writes(&self, k: usize) -> wgpu::ComputePassTimestampWrites<'_> {
        let k = k as u32;
        let i = k % INTERVALS_PER_SET;
        wgpu::ComputePassTimestampWrites {
            query_set: &self.sets[(k / INTERVALS_PER_SET) as usize],
            beginning_of_pass_write_index: Some(2 * i),
            end_of_pass_write_index: Some(2 * i + 1),
        }
    }

    /// Records the resolve and the copy into [`Self::staging`], after the passes.
    pub fn resolve(&self, enc: &mut wgpu::CommandEncoder) {
        for (s, set) in self.sets.iter().enumerate() {
            let first = s as u32 * INTERVALS_PER_SET;
            let n = (self.intervals - first).min(INTERVALS_PER_SET);
            // Offsets are multiples of 32 KiB: aligned as resolves need (256 bytes).
            enc.resolve_query_set(set, 0..2 * n, &self.resolve, 16 * u64::from(first));
        }
        enc.copy_buffer_to_buffer(&self.resolve, 0, &self.staging, 0, self.staging.size());
    }

    /// Milliseconds per interval from the mapped [`Self::staging`]; unmaps it.
    pub fn read(&self, ctx: &GpuContext) -> Result<Vec<f32>> {
        let period_ns = f64::from(ctx.queue.get_timestamp_period());
        let ms = {
            let view = self
                .staging
                .slice(..)
                .get_mapped_range()
                .map_err(|e| Error::Gpu(format!("reading kernel timestamps: {e}")))?;
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
