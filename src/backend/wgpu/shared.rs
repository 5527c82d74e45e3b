//! Weights shared between the executables of one device: a graph compiled over the same
//! store as a live executable (a batched predict beside the predict of one request) reads
//! the weights that executable uploaded instead of uploading its own copy. An entry lives
//! as long as some executable holds it; the store is named by its address, which a live
//! executable keeps alive (it borrows or owns its store). Constants the graph carries are
//! never shared (their names are the graph's own).

use super::fuse::Fused;
use super::kernels::Chunk;
use crate::graph::WeightStore;
use crate::Result;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// A store (its address) and a weight's name in it.
pub(super) type WeightKey = (usize, String);

/// The key of weight `name` of `store`.
pub(super) fn key(store: &dyn WeightStore, name: &str) -> WeightKey {
    (
        store as *const dyn WeightStore as *const () as usize,
        name.to_owned(),
    )
}

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

pub(crate) struct Cache<T>(Mutex<HashMap<WeightKey, Weak<T>>>);

impl<T> Default for Cache<T> {
    fn default() -> Self {
        Cache(Mutex::new(HashMap::new()))
    }
}

impl<T> Cache<T> {
    /// The upload under `key` while an executable holds it, else `upload()`'s, kept for
    /// the next; `None` key: `upload()`'s, not kept. The flag: whether it was uploaded now.
    pub fn get_or(
        &self,
        key: Option<WeightKey>,
        upload: impl FnOnce() -> Result<T>,
    ) -> Result<(Arc<T>, bool)> {
        let Some(key) = key else {
            return Ok((Arc::new(upload()?), true));
        };
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(kept) = map.get(&key).and_then(Weak::upgrade) {
            return Ok((kept, false));
        }
        let new = Arc::new(upload()?);
        map.retain(|_, w| w.strong_count() > 0);
        map.insert(key, Arc::downgrade(&new));
        Ok((new, true))
    }
}
