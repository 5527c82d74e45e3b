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

/// A memory-mapped `.safetensors` file, or a checkpoint's shards of one; tensors are decoded
/// to f32 on demand.
pub struct Safetensors {
    /// The file, or the shards' index.
    path: PathBuf,
    shards: Vec<Shard>,
    /// Each tensor's shard and place in it.
    tensors: BTreeMap<String, (usize, TensorInfo)>,
}

/// One mapped file.
struct Shard {
    map: Mmap,
    data_start: usize,
}

impl Shard {
    fn open(path: &Path) -> Result<(Shard, Vec<(String, TensorInfo)>)> {
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
        let shard = Shard {
            map,
            data_start: 8 + header_len,
        };
        Ok((shard, tensors))
    }
}

/// The weights file of a checkpoint folder, and the index of its shards when it is split.
const WEIGHTS: &str = "model.safetensors";
const INDEX: &str = "model.safetensors.index.json";

impl Safetensors {
    pub fn open(path: &Path) -> Result<Self> {
        let (shard, tensors) = Shard::open(path)?;
        Ok(Safetensors {
            path: path.to_owned(),
            shards: vec![shard],
            tensors: tensors.into_iter().map(|(n, i)| (n, (0, i))).collect(),
        })
    }

    /// A checkpoint folder's weights: `model.safetensors`, or the shards that
    /// `model.safetensors.index.json` names (Hugging Face's layout for large models, as
    /// Isaac-GR00T's releases are saved). A tensor the index names is looked for in its shard
    /// only; one found in two shards is an error.
    pub fn open_dir(dir: &Path) -> Result<Self> {
        let single = dir.join(WEIGHTS);
        let index = dir.join(INDEX);
        if single.is_file() || !index.is_file() {
            return Self::open(&single);
        }
        let json = read_json(&index)?;
        let map = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| ckpt_err(&index, "no weight_map object"))?;
        let mut files: Vec<&str> = Vec::new();
        for (name, file) in map {
            let file = file
                .as_str()
                .ok_or_else(|| ckpt_err(&index, format!("{name}: the shard is not a string")))?;
            if file.contains('/') || file.contains('\\') || file.starts_with('.') {
                return Err(ckpt_err(
                    &index,
                    format!("{name}: shard {file:?} is not a file name"),
                ));
            }
            if !files.contains(&file) {
                files.push(file);
            }
        }
        files.sort_unstable();
        let mut out = Safetensors {
            path: index.clone(),
            shards: Vec::new(),
            tensors: BTreeMap::new(),
        };
        for (k, file) in files.iter().enumerate() {
            let (shard, tensors) = Shard::open(&dir.join(file))?;
            for (name, info) in tensors {
                if map.get(&name).and_then(|f| f.as_str()) != Some(*file) {
                    continue;
                }
                out.tensors.insert(name, (k, info));
            }
            out.shards.push(shard);
        }
        if let Some(name) = map.keys().find(|n| !out.tensors.contains_key(*n)) {
            let file = map[name].as_str().unwrap_or_default();
            return Err(ckpt_err(
                &index,
                format!("tensor {name:?} is not in its shard {file}"),
            ));
        }
        Ok(out)
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
        self.tensors.get(name).map(|(_, t)| &t.shape[..])
    }

    /// The element type tensor `name` is stored in.
    pub fn dtype(&self, name: &str) -> Option<Dtype> {
        self.tensors.get(name).map(|(_, t)| t.dtype)
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
        let (k, info) = self
            .tensors
            .get(name)
            .ok_or_else(|| ckpt_err(&self.path, format!("tensor {name:?} is missing")))?;
        let (a, b) = info.data_offsets;
        let shard = &self.shards[*k];
        Ok((
            info.dtype,
            &shard.map[shard.data_start + a..shard.data_start + b],
        ))
    }

    /// An integer tensor's values (I64, or I32 widened), row-major (token ids, positions).
    pub fn i64(&self, name: &str) -> Result<Vec<i64>> {
        match self.bytes(name)? {
            (Dtype::I64, bytes) => Ok(bytes
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect()),
            (Dtype::I32, bytes) => Ok(bytes
                .chunks_exact(4)
                .map(|c| i64::from(i32::from_le_bytes(c.try_into().expect("4 bytes"))))
                .collect()),
            (other, _) => Err(ckpt_err(
                &self.path,
                format!("tensor {name:?} has dtype {other:?}, expected I64 or I32"),
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

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::tensor::TensorView;

    fn write(path: &Path, tensors: &[(&str, &[f32])]) {
        let bytes: Vec<(String, Vec<u8>, usize)> = tensors
            .iter()
            .map(|(n, v)| {
                let b = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                (n.to_string(), b, v.len())
            })
            .collect();
        let views: Vec<(String, TensorView)> = bytes
            .iter()
            .map(|(n, b, len)| {
                (
                    n.clone(),
                    TensorView::new(Dtype::F32, vec![*len], b).unwrap(),
                )
            })
            .collect();
        safetensors::serialize_to_file(views, None, path).unwrap();
    }

    /// A folder of shards reads as one file; a tensor the index places in another shard
    /// than it lies in is an error naming it.
    #[test]
    fn shards_read_through_their_index() {
        let dir = tempfile::tempdir().unwrap();
        write(
            &dir.path().join("model-1.safetensors"),
            &[("a", &[1.0, 2.0])],
        );
        write(&dir.path().join("model-2.safetensors"), &[("b", &[3.0])]);
        let index = |map: &str| {
            let text = format!("{{\"metadata\": {{}}, \"weight_map\": {{{map}}}}}");
            std::fs::write(dir.path().join(INDEX), text).unwrap();
        };
        index(r#""a": "model-1.safetensors", "b": "model-2.safetensors""#);
        let st = Safetensors::open_dir(dir.path()).unwrap();
        assert_eq!(st.f32("a").unwrap(), [1.0, 2.0]);
        assert_eq!(st.f32("b").unwrap(), [3.0]);
        assert_eq!(st.names().count(), 2);
        index(r#""a": "model-1.safetensors", "b": "model-1.safetensors""#);
        let e = Safetensors::open_dir(dir.path()).err().unwrap().to_string();
        assert!(e.contains("\"b\"") && e.contains("model-1"), "{e}");
        index(r#""a": "../model-1.safetensors""#);
        assert!(Safetensors::open_dir(dir.path()).is_err());
        let e = Safetensors::open_dir(&dir.path().join("none"))
            .err()
            .unwrap();
        assert!(e.to_string().contains(WEIGHTS), "{e}");
    }
}
