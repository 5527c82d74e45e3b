//! The tensors of a PyTorch state dict saved with `torch.save` (a zip archive, stored
//! uncompressed: `<name>/data.pkl`, the pickle of the dict, and `<name>/data/<key>`, one file
//! per storage). Enough of pickle (protocol 2-5) to read what `torch.save(module.state_dict())`
//! writes: a dict or `OrderedDict` of names to `torch._utils._rebuild_tensor_v2` tensors over
//! float, bf16, f16 or f64 storages; and a training checkpoint's dict that holds such a
//! state dict under one key beside plain data (dicts, lists, strings, numbers, bools, None:
//! [`TorchCheckpoint`]). Nothing is executed: any other callable makes an opaque value, and
//! a state dict or plain entry holding one is refused by name.

mod pickle;

use super::ckpt_err;
use crate::Result;
use pickle::{Unpickler, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A stored tensor's element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TorchDtype {
    F32,
    F64,
    BF16,
    F16,
}

/// A loaded `.pt` state dict.
pub struct TorchState {
    path: PathBuf,
    tensors: BTreeMap<String, TorchTensor>,
}

struct TorchTensor {
    shape: Vec<usize>,
    dtype: TorchDtype,
    values: Vec<f32>,
}

/// A `torch.save`d dict holding a state dict under one key (e.g. `model_state_dict`) and
/// other entries, read as plain data where asked for ([`TorchCheckpoint::plain`]).
pub struct TorchCheckpoint {
    pub state: TorchState,
    others: Vec<(String, Value)>,
}

/// The file's bytes, mapped.
fn map(path: &Path) -> Result<memmap2::Mmap> {
    let file = std::fs::File::open(path).map_err(|e| ckpt_err(path, e.to_string()))?;
    // SAFETY: read-only mapping; the file is not expected to change while we read it.
    unsafe { memmap2::Mmap::map(&file) }.map_err(|e| ckpt_err(path, e.to_string()))
}

/// The archive's files and the unpickled `data.pkl`, with the folder the storages are in.
struct Archive {
    files: BTreeMap<String, (usize, usize)>,
    root: String,
    value: Value,
}

impl Archive {
    fn read(path: &Path, bytes: &[u8]) -> Result<Self> {
        let err = |why: String| ckpt_err(path, why);
        let files = zip_entries(bytes).map_err(err)?;
        let pkl = files
            .keys()
            .find(|n| n.ends_with("/data.pkl") || *n == "data.pkl")
            .cloned()
            .ok_or_else(|| err("no data.pkl: not a torch.save archive".into()))?;
        let root = pkl.trim_end_matches("data.pkl").to_owned();
        let (start, len) = files[&pkl];
        let value = Unpickler::new(&bytes[start..start + len])
            .run()
            .map_err(|e| err(format!("data.pkl: {e}")))?;
        Ok(Archive { files, root, value })
    }
}

/// A dict's entries keyed by string, or an error saying what `what` is instead.
fn string_keyed(path: &Path, value: Value, what: &str) -> Result<Vec<(String, Value)>> {
    let Value::Dict(d) = value else {
        return Err(ckpt_err(
            path,
            format!("expected {what}, found {}", value.kind()),
        ));
    };
    d.into_iter()
        .map(|(k, v)| match k {
            Value::Str(name) => Ok((name, v)),
            other => Err(ckpt_err(
                path,
                format!("{what}: a key that is not a string ({})", other.kind()),
            )),
        })
        .collect()
}

impl TorchState {
    /// Reads the state dict in the `.pt` file at `path`; a leading `module.` (a module saved
    /// inside DistributedDataParallel) is dropped from every name, as the reference's loader
    /// does.
    pub fn open(path: &Path) -> Result<Self> {
        let bytes = map(path)?;
        Self::from_bytes(path, &bytes)
    }

    /// [`Self::open`] over the file's `bytes` (`path` names it in errors).
    fn from_bytes(path: &Path, bytes: &[u8]) -> Result<Self> {
        let archive = Archive::read(path, bytes)?;
        let entries = string_keyed(path, archive.value, "a state dict")?;
        Self::from_entries(path, bytes, &archive.files, &archive.root, entries)
    }

    /// The state dict of `entries` (names to tensors) over the archive's storages.
    fn from_entries(
        path: &Path,
        bytes: &[u8],
        files: &BTreeMap<String, (usize, usize)>,
        root: &str,
        entries: Vec<(String, Value)>,
    ) -> Result<Self> {
        let err = |why: String| ckpt_err(path, why);
        let mut tensors = BTreeMap::new();
        for (name, v) in entries {
            let Value::Tensor(t) = v else {
                return Err(err(format!("{name}: not a tensor ({})", v.kind())));
            };
            let file = format!("{root}data/{}", t.key);
            let &(s, n) = files
                .get(&file)
                .ok_or_else(|| err(format!("{name}: storage {file} missing")))?;
            let values = t
                .read(&bytes[s..s + n])
                .map_err(|e| err(format!("{name}: {e}")))?;
            let name = name.strip_prefix("module.").unwrap_or(&name).to_owned();
            let tensor = TorchTensor {
                dtype: t.dtype(),
                shape: t.shape,
                values,
            };
            if tensors.insert(name.clone(), tensor).is_some() {
                return Err(err(format!(
                    "{name}: twice (with and without the `module.` prefix)"
                )));
            }
        }
        Ok(TorchState {
            path: path.to_owned(),
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
        self.tensors.get(name).map(|t| t.shape.as_slice())
    }

    /// The element type tensor `name` is stored in.
    pub fn dtype(&self, name: &str) -> Option<TorchDtype> {
        self.tensors.get(name).map(|t| t.dtype)
    }

    /// Tensor `name`'s values as f32, row-major.
    pub fn f32(&self, name: &str) -> Result<Vec<f32>> {
        self.tensors
            .get(name)
            .map(|t| t.values.clone())
            .ok_or_else(|| ckpt_err(&self.path, format!("no tensor {name:?}")))
    }
}

impl TorchCheckpoint {
    /// Reads the `torch.save`d dict at `path` whose entry `state_key` is a state dict (read
    /// as [`TorchState::open`] reads one); the other entries are kept for [`Self::plain`].
    pub fn open(path: &Path, state_key: &str) -> Result<Self> {
        let bytes = map(path)?;
        Self::from_bytes(path, &bytes, state_key)
    }

    fn from_bytes(path: &Path, bytes: &[u8], state_key: &str) -> Result<Self> {
        let archive = Archive::read(path, bytes)?;
        let mut entries = string_keyed(path, archive.value, "a dict of a checkpoint")?;
        let at = entries
            .iter()
            .position(|(k, _)| k == state_key)
            .ok_or_else(|| {
                let keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
                ckpt_err(
                    path,
                    format!("no {state_key:?} entry (the saved dict has {keys:?})"),
                )
            })?;
        let (_, state) = entries.remove(at);
        let state = string_keyed(path, state, state_key)?;
        let state = TorchState::from_entries(path, bytes, &archive.files, &archive.root, state)?;
        Ok(TorchCheckpoint {
            state,
            others: entries,
        })
    }

    /// Entry `key` of the file at `path` as plain data, without reading any tensor's values
    /// (`None` when the saved object is a dict without that entry; an error when it is no
    /// dict or no `torch.save` archive).
    pub fn peek(path: &Path, key: &str) -> Result<Option<serde_json::Value>> {
        let bytes = map(path)?;
        let archive = Archive::read(path, &bytes)?;
        let entries = string_keyed(path, archive.value, "a dict")?;
        entries
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| {
                v.to_json()
                    .map_err(|e| ckpt_err(path, format!("{key}: {e}")))
            })
            .transpose()
    }

    /// The keys of the entries other than the state dict.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.others.iter().map(|(k, _)| k.as_str())
    }

    /// Entry `key` as plain data (JSON), `None` where the dict has no such entry; an entry
    /// that holds anything but plain data (a tensor, an object) is an error naming it.
    pub fn plain(&self, key: &str) -> Result<Option<serde_json::Value>> {
        self.others
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| {
                v.to_json()
                    .map_err(|e| ckpt_err(&self.state.path, format!("{key}: {e}")))
            })
            .transpose()
    }
}

/// Each stored file of a zip archive: `(data offset, size)`.
fn zip_entries(b: &[u8]) -> std::result::Result<BTreeMap<String, (usize, usize)>, String> {
    let u16_at = |o: usize| -> std::result::Result<usize, String> {
        b.get(o..o + 2)
            .map(|s| usize::from(u16::from_le_bytes([s[0], s[1]])))
            .ok_or_else(|| "truncated zip".to_owned())
    };
    let u32_at = |o: usize| -> std::result::Result<usize, String> {
        b.get(o..o + 4)
            .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize)
            .ok_or_else(|| "truncated zip".to_owned())
    };
    // the end-of-central-directory record: its signature within the last 64 KiB + 22 bytes
    let lo = b.len().saturating_sub(22 + 65_535);
    let eocd = (lo..b.len().saturating_sub(21))
        .rev()
        .find(|&o| b[o..o + 4] == [0x50, 0x4b, 0x05, 0x06])
        .ok_or("not a zip archive")?;
    let (count, mut at) = (u16_at(eocd + 10)?, u32_at(eocd + 16)?);
    if count == 0xffff || at == 0xffff_ffff {
        return Err("a zip64 archive (over 4 GiB or 65535 files) is not supported".into());
    }
    let mut out = BTreeMap::new();
    for _ in 0..count {
        if u32_at(at)? != 0x0201_4b50 {
            return Err("corrupt zip central directory".into());
        }
        let (method, size) = (u16_at(at + 10)?, u32_at(at + 20)?);
        let (n, extra, comment) = (u16_at(at + 28)?, u16_at(at + 30)?, u16_at(at + 32)?);
        let local = u32_at(at + 42)?;
        let name = b.get(at + 46..at + 46 + n).ok_or("truncated zip")?;
        let name = String::from_utf8_lossy(name).into_owned();
        if method != 0 {
            return Err(format!(
                "{name}: compressed (torch.save stores files uncompressed)"
            ));
        }
        if u32_at(local)? != 0x0403_4b50 {
            return Err(format!("{name}: corrupt local header"));
        }
        let data = local + 30 + u16_at(local + 26)? + u16_at(local + 28)?;
        if data.checked_add(size).is_none_or(|end| end > b.len()) {
            return Err(format!("{name}: truncated"));
        }
        out.insert(name, (data, size));
        at += 46 + n + extra + comment;
    }
    Ok(out)
}

/// A tensor as `_rebuild_tensor_v2` describes it.
#[derive(Clone, Debug)]
pub(super) struct TensorRef {
    key: String,
    dtype: &'static str,
    offset: usize,
    shape: Vec<usize>,
    stride: Vec<usize>,
}

impl TensorRef {
    fn dtype(&self) -> TorchDtype {
        match self.dtype {
            "FloatStorage" => TorchDtype::F32,
            "DoubleStorage" => TorchDtype::F64,
            "BFloat16Storage" => TorchDtype::BF16,
            _ => TorchDtype::F16,
        }
    }

    fn read(&self, data: &[u8]) -> std::result::Result<Vec<f32>, String> {
        let big = || "a tensor larger than its storage".to_owned();
        let n = self
            .shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(big)?;
        let mut want = 1usize;
        for (d, s) in self.shape.iter().zip(&self.stride).rev() {
            if *d > 1 && *s != want {
                return Err("not contiguous".into());
            }
            want = want.checked_mul(*d).ok_or_else(big)?;
        }
        let size = match self.dtype {
            "FloatStorage" => 4,
            "DoubleStorage" => 8,
            _ => 2,
        };
        let range = self
            .offset
            .checked_add(n)
            .and_then(|end| Some(self.offset.checked_mul(size)?..end.checked_mul(size)?))
            .ok_or_else(big)?;
        let bytes = data.get(range).ok_or("storage shorter than the tensor")?;
        Ok(match self.dtype {
            "FloatStorage" => bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            "DoubleStorage" => bytes
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32)
                .collect(),
            "BFloat16Storage" => bytes
                .chunks_exact(2)
                .map(|c| half::bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
                .collect(),
            _ => bytes
                .chunks_exact(2)
                .map(|c| half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `torch.save` file read back; the same file truncated anywhere or with any byte
    /// changed is an error or a state dict, never a panic.
    #[test]
    fn reads_a_state_dict_and_survives_damage() {
        let path =
            crate::convert::fixture("vla-adapter-tiny/proprio_projector--latest_checkpoint.pt");
        let bytes = std::fs::read(&path).unwrap();
        let t = TorchState::from_bytes(&path, &bytes).unwrap();
        assert_eq!(t.shape("fc1.weight"), Some(&[32, 8][..]));
        assert_eq!(t.f32("fc2.bias").unwrap().len(), 32);
        for cut in (0..bytes.len()).step_by(97) {
            let _ = TorchState::from_bytes(&path, &bytes[..cut]);
        }
        let pkl = 0..bytes.len().min(2048);
        for i in pkl {
            for flip in [0x01, 0x80, 0xff] {
                let mut b = bytes.clone();
                b[i] ^= flip;
                let _ = TorchState::from_bytes(&path, &b);
            }
        }
        let e = TorchState::from_bytes(&path, b"not a zip").err().unwrap();
        assert!(e.to_string().contains("not a zip archive"), "{e}");
    }

    /// `pickle.dumps(v, protocol=2)` of the values named, as Python 3.11 writes them.
    const PLAIN: &[u8] = &[
        128, 2, 125, 113, 0, 40, 88, 1, 0, 0, 0, 97, 113, 1, 71, 63, 248, 0, 0, 0, 0, 0, 0, 88, 1,
        0, 0, 0, 98, 113, 2, 136, 88, 1, 0, 0, 0, 99, 113, 3, 78, 88, 1, 0, 0, 0, 100, 113, 4, 93,
        113, 5, 40, 75, 1, 88, 1, 0, 0, 0, 120, 113, 6, 74, 249, 255, 255, 255, 138, 6, 0, 0, 0, 0,
        0, 1, 101, 88, 1, 0, 0, 0, 101, 113, 7, 75, 2, 137, 134, 113, 8, 88, 1, 0, 0, 0, 102, 113,
        9, 125, 113, 10, 40, 88, 1, 0, 0, 0, 103, 113, 11, 75, 3, 75, 4, 88, 4, 0, 0, 0, 102, 111,
        117, 114, 113, 12, 117, 88, 1, 0, 0, 0, 104, 113, 13, 71, 191, 208, 0, 0, 0, 0, 0, 0, 117,
        46,
    ];
    /// `{"cfg": {"x": Evil()}}`, `Evil.__reduce__` returning `(os.system, ("echo hi",))`.
    const REDUCE: &[u8] = &[
        128, 2, 125, 113, 0, 88, 3, 0, 0, 0, 99, 102, 103, 113, 1, 125, 113, 2, 88, 1, 0, 0, 0,
        120, 113, 3, 99, 112, 111, 115, 105, 120, 10, 115, 121, 115, 116, 101, 109, 10, 113, 4, 88,
        7, 0, 0, 0, 101, 99, 104, 111, 32, 104, 105, 113, 5, 133, 113, 6, 82, 113, 7, 115, 115, 46,
    ];
    /// `{"cfg": {"x": os.system}}`.
    const GLOBAL: &[u8] = &[
        128, 2, 125, 113, 0, 88, 3, 0, 0, 0, 99, 102, 103, 113, 1, 125, 113, 2, 88, 1, 0, 0, 0,
        120, 113, 3, 99, 112, 111, 115, 105, 120, 10, 115, 121, 115, 116, 101, 109, 10, 113, 4,
        115, 115, 46,
    ];

    /// Plain data reads as JSON: bools, floats, None, negative and 64-bit ints, tuples,
    /// integer keys (as `json.dumps` writes them); callables are refused, never run.
    #[test]
    fn plain_data_reads_as_json_and_callables_are_refused() {
        let v = Unpickler::new(PLAIN).run().unwrap().to_json().unwrap();
        let want = serde_json::json!({
            "a": 1.5, "b": true, "c": null, "d": [1, "x", -7, 1_u64 << 40],
            "e": [2, false], "f": {"g": 3, "4": "four"}, "h": -0.25
        });
        assert_eq!(v, want);
        let e = Unpickler::new(REDUCE).run().unwrap().to_json().unwrap_err();
        assert!(e.contains("\"cfg\"") && e.contains("posix.system"), "{e}");
        let e = Unpickler::new(GLOBAL).run().unwrap().to_json().unwrap_err();
        assert!(e.contains("the callable posix.system"), "{e}");
        for cut in 0..PLAIN.len() {
            let _ = Unpickler::new(&PLAIN[..cut]).run().map(|v| v.to_json());
        }
    }

    /// A training checkpoint (TurboVLA's): the state dict under its key, the config as JSON,
    /// the other entries' keys; `peek` reads the config without the tensors. Damaged, it
    /// is an error or a checkpoint, never a panic.
    #[test]
    fn reads_a_checkpoint_dict_and_survives_damage() {
        let path = crate::convert::fixture("turbovla-tiny/turbovla.pth");
        let bytes = std::fs::read(&path).unwrap();
        let c = TorchCheckpoint::from_bytes(&path, &bytes, "model_state_dict").unwrap();
        assert!(c.state.contains("view_embedding"));
        assert_eq!(c.state.dtype("view_embedding"), Some(TorchDtype::F32));
        let config = c.plain("model_config").unwrap().unwrap();
        assert_eq!(config["name"], "TurboVLA");
        assert_eq!(config["text"]["sub_sentence_present"], true);
        assert_eq!(
            config["vision"]["attention_implementation"],
            serde_json::Value::Null
        );
        assert!(config["vision"]["dropout"].is_f64());
        assert!(c.keys().any(|k| k == "model_config"));
        assert_eq!(c.plain("no such entry").unwrap(), None);
        assert_eq!(
            TorchCheckpoint::peek(&path, "model_config").unwrap(),
            Some(config)
        );
        let e = TorchCheckpoint::from_bytes(&path, &bytes, "state_dict")
            .err()
            .unwrap();
        assert!(e.to_string().contains("no \"state_dict\" entry"), "{e}");
        // a flat state dict is not such a checkpoint
        let flat =
            crate::convert::fixture("vla-adapter-tiny/proprio_projector--latest_checkpoint.pt");
        let e = TorchCheckpoint::open(&flat, "model_state_dict")
            .err()
            .unwrap();
        assert!(
            e.to_string().contains("no \"model_state_dict\" entry"),
            "{e}"
        );
        for cut in (0..bytes.len()).step_by(7919) {
            let _ = TorchCheckpoint::from_bytes(&path, &bytes[..cut], "model_state_dict");
        }
        for i in (0..bytes.len().min(4096)).step_by(3) {
            let mut b = bytes.clone();
            b[i] ^= 0xff;
            let _ = TorchCheckpoint::from_bytes(&path, &b, "model_state_dict");
        }
    }
}
