//! Weight forms shared between the executables over one store: a graph compiled over the
//! same store as a live executable (a batched predict beside the predict of one request)
//! takes the form that executable made (an upload, a packed layout) instead of making its
//! own copy. An entry lives as long as some executable holds it; the store is named by its
//! address, which a live executable keeps alive (it borrows or owns its store).

use crate::graph::WeightStore;
use crate::Result;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// A store (its address) and a weight's name in it.
pub(crate) type WeightKey = (usize, String);

/// The key of weight `name` of `store`.
pub(crate) fn key(store: &dyn WeightStore, name: &str) -> WeightKey {
    (
        store as *const dyn WeightStore as *const () as usize,
        name.to_owned(),
    )
}

/// Forms kept while some executable holds them, by store and weight name.
pub(crate) struct Cache<T>(Mutex<HashMap<WeightKey, Weak<T>>>);

impl<T> Default for Cache<T> {
    fn default() -> Self {
        Cache(Mutex::new(HashMap::new()))
    }
}

impl<T> Cache<T> {
    /// The form under `key` while an executable holds it, else `make()`'s, kept for the
    /// next; `None` key: `make()`'s, not kept. The flag: whether it was made now.
    pub fn get_or(
        &self,
        key: Option<WeightKey>,
        make: impl FnOnce() -> Result<T>,
    ) -> Result<(Arc<T>, bool)> {
        let made = self.get_or_maybe(key, || make().map(Some))?;
        Ok(made.expect("make gives a form"))
    }

    /// [`Self::get_or`] where `make` may find that the weight takes no such form (`None`,
    /// not kept).
    pub fn get_or_maybe(
        &self,
        key: Option<WeightKey>,
        make: impl FnOnce() -> Result<Option<T>>,
    ) -> Result<Option<(Arc<T>, bool)>> {
        let Some(key) = key else {
            return Ok(make()?.map(|t| (Arc::new(t), true)));
        };
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(kept) = map.get(&key).and_then(Weak::upgrade) {
            return Ok(Some((kept, false)));
        }
        let Some(new) = make()? else {
            return Ok(None);
        };
        let new = Arc::new(new);
        map.retain(|_, w| w.strong_count() > 0);
        map.insert(key, Arc::downgrade(&new));
        Ok(Some((new, true)))
    }
}
