//! Converting published checkpoints (lerobot's `model.safetensors` + `config.json` and its
//! normaliser files) into vla-rs GGUF files. One module per architecture; this one holds
//! what they share: reading safetensors and JSON with errors that name the file and tensor.

pub mod smolvla;

use crate::{Error, Result};
use memmap2::Mmap;
use safetensors::tensor::{Dtype, TensorInfo};
use safetensors::SafeTensors;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub(crate) fn ckpt_err(path: &Path, reason: impl Into<String>) -> Error {
    Error::Checkpoint { path: path.to_owned(), reason: reason.into() }
}

/// A memory-mapped `.safetensors` file; tensors are decoded to f32 on demand.
pub struct Safetensors {
    path: PathBuf,
    map: Mmap,
    data_start: usize,
    tensors: BTreeMap<String, TensorInfo>,
}

impl Safetensors {
    pub fn open(path: &Path) -> Result<Self> {
        let file = std::fs::File::open(path).map_err(|err| Error::Io { path: path.to_owned(), err })?;
        // SAFETY: read-only mapping; the file is not expected to change while we convert it.
        let map = unsafe { Mmap::map(&file) }.map_err(|err| Error::Io { path: path.to_owned(), err })?;
        let (header_len, meta) =
            SafeTensors::read_metadata(&map).map_err(|e| ckpt_err(path, format!("not a safetensors file: {e}")))?;
        let tensors = meta.tensors().into_iter().map(|(n, i)| (n, i.clone())).collect();
        Ok(Safetensors { path: path.to_owned(), map, data_start: 8 + header_len, tensors })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.tensors.get(name).map(|t| &t.shape[..])
    }

    /// The tensor's shape, or an error naming it.
    pub fn require_shape(&self, name: &str) -> Result<&[usize]> {
        self.shape(name).ok_or_else(|| ckpt_err(&self.path, format!("tensor {name:?} is missing")))
    }

    fn bytes(&self, name: &str) -> Result<(Dtype, &[u8])> {
        let info = self.tensors.get(name).ok_or_else(|| ckpt_err(&self.path, format!("tensor {name:?} is missing")))?;
        let (a, b) = info.data_offsets;
        Ok((info.dtype, &self.map[self.data_start + a..self.data_start + b]))
    }

    /// A U8 tensor's bytes, row-major.
    pub fn u8(&self, name: &str) -> Result<Vec<u8>> {
        match self.bytes(name)? {
            (Dtype::U8, bytes) => Ok(bytes.to_vec()),
            (other, _) => Err(ckpt_err(&self.path, format!("tensor {name:?} has dtype {other:?}, expected U8"))),
        }
    }

    /// Values as f32 (from F32, F16 or BF16), row-major.
    pub fn f32(&self, name: &str) -> Result<Vec<f32>> {
        let (dtype, bytes) = self.bytes(name)?;
        let half = |f: fn([u8; 2]) -> f32| bytes.chunks_exact(2).map(|c| f([c[0], c[1]])).collect();
        Ok(match dtype {
            Dtype::F32 => bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            Dtype::F16 => half(|b| half::f16::from_le_bytes(b).to_f32()),
            Dtype::BF16 => half(|b| half::bf16::from_le_bytes(b).to_f32()),
            other => {
                return Err(ckpt_err(&self.path, format!("tensor {name:?} has dtype {other:?} (expected F32, F16 or BF16)")))
            }
        })
    }
}

/// Parses a JSON file.
pub fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).map_err(|err| Error::Io { path: path.to_owned(), err })?;
    serde_json::from_str(&text).map_err(|e| ckpt_err(path, format!("invalid JSON: {e}")))
}

/// Typed access to a JSON object, with errors naming the file and key.
pub struct Json<'a> {
    pub path: &'a Path,
    pub value: &'a serde_json::Value,
}

impl<'a> Json<'a> {
    pub fn get(&self, key: &str) -> Option<&'a serde_json::Value> {
        self.value.get(key).filter(|v| !v.is_null())
    }

    pub fn obj(&self, key: &str) -> Result<Json<'a>> {
        match self.get(key) {
            Some(v) if v.is_object() => Ok(Json { path: self.path, value: v }),
            _ => Err(ckpt_err(self.path, format!("{key:?} is missing or not an object"))),
        }
    }

    pub fn usize(&self, key: &str) -> Result<usize> {
        self.get(key)
            .and_then(serde_json::Value::as_u64)
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| ckpt_err(self.path, format!("{key:?} is missing or not a non-negative integer")))
    }

    pub fn i64(&self, key: &str) -> Result<i64> {
        self.get(key)
            .and_then(serde_json::Value::as_i64)
            .ok_or_else(|| ckpt_err(self.path, format!("{key:?} is missing or not an integer")))
    }

    pub fn f64(&self, key: &str) -> Result<f64> {
        self.get(key).and_then(serde_json::Value::as_f64).ok_or_else(|| ckpt_err(self.path, format!("{key:?} is missing or not a number")))
    }

    pub fn str(&self, key: &str) -> Result<&'a str> {
        self.get(key).and_then(serde_json::Value::as_str).ok_or_else(|| ckpt_err(self.path, format!("{key:?} is missing or not a string")))
    }

    pub fn bool_or(&self, key: &str, default: bool) -> bool {
        self.get(key).and_then(serde_json::Value::as_bool).unwrap_or(default)
    }
}
