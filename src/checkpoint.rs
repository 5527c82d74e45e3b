//! What the converters and the load-time translations read of a lerobot checkpoint folder:
//! `model.safetensors`-style files (memory-mapped, decoded to f32 on demand), JSON files,
//! and the processors' steps and normalisation statistics (`policy_preprocessor.json`,
//! `policy_postprocessor.json` and the safetensors files their steps name). Errors name the
//! file (and tensor or key).

use crate::{Error, Result};
use memmap2::Mmap;
use safetensors::tensor::{Dtype, TensorInfo};
use safetensors::SafeTensors;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub fn ckpt_err(path: &Path, reason: impl Into<String>) -> Error {
    Error::Checkpoint {
        path: path.to_owned(),
        reason: reason.into(),
    }
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
        let file = std::fs::File::open(path).map_err(|err| Error::Io {
            path: path.to_owned(),
            err,
        })?;
        // SAFETY: read-only mapping; the file is not expected to change while we convert it.
        let map = unsafe { Mmap::map(&file) }.map_err(|err| Error::Io {
            path: path.to_owned(),
            err,
        })?;
        let (header_len, meta) = SafeTensors::read_metadata(&map)
            .map_err(|e| ckpt_err(path, format!("not a safetensors file: {e}")))?;
        let tensors = meta
            .tensors()
            .into_iter()
            .map(|(n, i)| (n, i.clone()))
            .collect();
        Ok(Safetensors {
            path: path.to_owned(),
            map,
            data_start: 8 + header_len,
            tensors,
        })
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
        self.shape(name)
            .ok_or_else(|| ckpt_err(&self.path, format!("tensor {name:?} is missing")))
    }

    /// The shape of a tensor that sizes are read from: `rank` dimensions, none of them zero
    /// (with a zero the others could be anything, as no bytes back them).
    pub fn config_shape(&self, name: &str, rank: usize) -> Result<&[usize]> {
        let shape = self.require_shape(name)?;
        if shape.len() != rank || shape.contains(&0) {
            return Err(ckpt_err(
                &self.path,
                format!("tensor {name:?} has shape {shape:?}, expected {rank} non-zero dimensions"),
            ));
        }
        Ok(shape)
    }

    fn bytes(&self, name: &str) -> Result<(Dtype, &[u8])> {
        let info = self
            .tensors
            .get(name)
            .ok_or_else(|| ckpt_err(&self.path, format!("tensor {name:?} is missing")))?;
        let (a, b) = info.data_offsets;
        Ok((
            info.dtype,
            &self.map[self.data_start + a..self.data_start + b],
        ))
    }

    /// An I64 tensor's values, row-major (token ids, positions).
    pub fn i64(&self, name: &str) -> Result<Vec<i64>> {
        match self.bytes(name)? {
            (Dtype::I64, bytes) => Ok(bytes
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect()),
            (other, _) => Err(ckpt_err(
                &self.path,
                format!("tensor {name:?} has dtype {other:?}, expected I64"),
            )),
        }
    }

    /// A U8 tensor's bytes, row-major.
    pub fn u8(&self, name: &str) -> Result<Vec<u8>> {
        match self.bytes(name)? {
            (Dtype::U8, bytes) => Ok(bytes.to_vec()),
            (other, _) => Err(ckpt_err(
                &self.path,
                format!("tensor {name:?} has dtype {other:?}, expected U8"),
            )),
        }
    }

    /// Values as f32 (from F32, F16 or BF16), row-major.
    pub fn f32(&self, name: &str) -> Result<Vec<f32>> {
        let (dtype, bytes) = self.bytes(name)?;
        let half = |f: fn([u8; 2]) -> f32| bytes.chunks_exact(2).map(|c| f([c[0], c[1]])).collect();
        Ok(match dtype {
            Dtype::F32 => bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            Dtype::F16 => half(|b| half::f16::from_le_bytes(b).to_f32()),
            Dtype::BF16 => half(|b| half::bf16::from_le_bytes(b).to_f32()),
            other => {
                return Err(ckpt_err(
                    &self.path,
                    format!("tensor {name:?} has dtype {other:?} (expected F32, F16 or BF16)"),
                ))
            }
        })
    }
}

/// Parses a JSON file.
pub fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).map_err(|err| Error::Io {
        path: path.to_owned(),
        err,
    })?;
    serde_json::from_str(&text).map_err(|e| ckpt_err(path, format!("invalid JSON: {e}")))
}

/// The steps named `registry_name` of a lerobot processor file (`policy_preprocessor.json`,
/// `policy_postprocessor.json`), in order.
pub fn processor_steps(path: &Path, registry_name: &str) -> Result<Vec<serde_json::Value>> {
    let v = read_json(path)?;
    let steps = v
        .get("steps")
        .and_then(|s| s.as_array())
        .into_iter()
        .flatten();
    Ok(steps
        .filter(|s| s.get("registry_name").and_then(|n| n.as_str()) == Some(registry_name))
        .cloned()
        .collect())
}

/// Statistics `keys` (e.g. mean and std) of `feature` from lerobot's processor files (the
/// postprocessor's first for actions, which it unnormalises), with the file they came from;
/// none where no step's file holds them.
pub fn processor_stats(
    ckpt: &Path,
    feature: &str,
    keys: [&str; 2],
) -> Result<Option<(String, [Vec<f32>; 2])>> {
    let pre = ("policy_preprocessor.json", "normalizer_processor");
    let post = ("policy_postprocessor.json", "unnormalizer_processor");
    let order = if feature == "action" {
        [post, pre]
    } else {
        [pre, post]
    };
    for (json, step) in order {
        let path = ckpt.join(json);
        if !path.is_file() {
            continue;
        }
        for s in processor_steps(&path, step)? {
            let Some(file) = s.get("state_file").and_then(|f| f.as_str()) else {
                continue;
            };
            let stats = Safetensors::open(&ckpt.join(file))?;
            let names = keys.map(|k| format!("{feature}.{k}"));
            if names.iter().all(|n| stats.contains(n)) {
                let pair = [stats.f32(&names[0])?, stats.f32(&names[1])?];
                return Ok(Some((file.to_owned(), pair)));
            }
        }
    }
    Ok(None)
}
