//! The tensors of a PyTorch state dict saved with `torch.save` (a zip archive, stored
//! uncompressed: `<name>/data.pkl`, the pickle of the dict, and `<name>/data/<key>`, one file
//! per storage). Enough of pickle (protocol 2-5) to read what `torch.save(module.state_dict())`
//! writes: a dict or `OrderedDict` of names to `torch._utils._rebuild_tensor_v2` tensors over
//! float, bf16, f16 or f64 storages. Nothing is executed: any other callable makes an opaque
//! value, and a state dict holding one is refused by name.

mod pickle;

use super::ckpt_err;
use crate::Result;
use pickle::{Unpickler, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A loaded `.pt` state dict.
pub struct TorchState {
    path: PathBuf,
    tensors: BTreeMap<String, TorchTensor>,
}

struct TorchTensor {
    shape: Vec<usize>,
    values: Vec<f32>,
}

impl TorchState {
    /// Reads the state dict in the `.pt` file at `path`; a leading `module.` (a module saved
    /// inside DistributedDataParallel) is dropped from every name, as the reference's loader
    /// does.
    pub fn open(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| ckpt_err(path, e.to_string()))?;
        Self::from_bytes(path, &bytes)
    }

    /// [`Self::open`] over the file's `bytes` (`path` names it in errors).
    fn from_bytes(path: &Path, bytes: &[u8]) -> Result<Self> {
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
        let entries = match value {
            Value::Dict(d) => d,
            other => {
                return Err(err(format!(
                    "expected a state dict, found {}",
                    other.kind()
                )))
            }
        };
        let mut tensors = BTreeMap::new();
        for (k, v) in entries {
            let Value::Str(name) = k else {
                return Err(err("a state-dict key that is not a string".into()));
            };
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
            tensors.insert(
                name,
                TorchTensor {
                    shape: t.shape,
                    values,
                },
            );
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

    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.tensors.get(name).map(|t| t.shape.as_slice())
    }

    /// Tensor `name`'s values as f32, row-major.
    pub fn f32(&self, name: &str) -> Result<Vec<f32>> {
        self.tensors
            .get(name)
            .map(|t| t.values.clone())
            .ok_or_else(|| ckpt_err(&self.path, format!("no tensor {name:?}")))
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
}
