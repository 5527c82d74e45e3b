//! Weights shared between the executables of one device: a graph compiled over the same
//! store as a live executable (a batched predict beside the predict of one request) reads
//! the weights that executable uploaded instead of uploading its own copy (see
//! [`crate::backend::shared`]). Constants the graph carries are never shared (their names
//! are the graph's own).

use super::fuse::Fused;
use super::kernels::Chunk;
pub(super) use crate::backend::shared::{key, Cache, WeightKey};

/// Uploads kept while an executable holds them, by kind.
#[derive(Default)]
pub(crate) struct SharedWeights {
    /// In the stored dtype, chunked by rows.
    pub raw: Cache<Vec<Chunk>>,
    /// As f32.
    pub f32: Cache<wgpu::Buffer>,
    /// Sibling products' weights concatenated (`fuse`), by their first weight's key and
    /// the members' names.
    pub fused: Cache<Fused>,
}
