//! GGUF v3 writer.

use super::reader::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_DIMS};
use super::value::Value;
use super::{quant, GgmlType, TensorInfo};
use crate::{Error, Result};
use std::borrow::Cow;
use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

/// Collects metadata and tensors, then writes a GGUF v3 file. Tensor data may be borrowed
/// (e.g. from another mapped file) to avoid copies, or encoded only as it is written
/// ([`GgufWriter::add_encoded_later`]).
#[derive(Default)]
pub struct GgufWriter<'a> {
    alignment: Option<u32>,
    metadata: Vec<(String, Value)>,
    keys: HashSet<String>,
    tensors: Vec<(TensorInfo, Data<'a>)>,
    names: HashSet<String>,
}

/// Writes a tensor's bytes (exactly its size) when the file is written.
pub type Encoder<'a> = Box<dyn Fn(&mut dyn Write) -> Result<()> + 'a>;

/// A tensor's bytes: held, or made as the file is written.
enum Data<'a> {
    Bytes(Cow<'a, [u8]>),
    Later { len: u64, encode: Encoder<'a> },
}

impl Data<'_> {
    fn len(&self) -> u64 {
        match self {
            Data::Bytes(b) => b.len() as u64,
            Data::Later { len, .. } => *len,
        }
    }
}

impl<'a> GgufWriter<'a> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a metadata entry. `general.alignment` (a power-of-two u32) also sets the
    /// alignment of the data section.
    pub fn add_metadata(&mut self, key: impl Into<String>, value: impl Into<Value>) -> Result<()> {
        let (key, value) = (key.into(), value.into());
        value.check_homogeneous()?;
        if key == ALIGNMENT_KEY {
            match value {
                Value::U32(a) if a.is_power_of_two() => self.alignment = Some(a),
                _ => {
                    return Err(Error::InvalidArgument(format!(
                        "{ALIGNMENT_KEY} must be a power-of-two u32, got {} {value}",
                        value.type_description()
                    )))
                }
            }
        }
        if !self.keys.insert(key.clone()) {
            return Err(Error::Duplicate {
                kind: "metadata key",
                name: key,
            });
        }
        self.metadata.push((key, value));
        Ok(())
    }

    /// Sets a metadata entry, replacing the value of an existing key (e.g. in a copied file).
    pub fn set_metadata(&mut self, key: impl Into<String>, value: impl Into<Value>) -> Result<()> {
        let (key, value) = (key.into(), value.into());
        match self.metadata.iter_mut().find(|(k, _)| *k == key) {
            Some(_) if key == ALIGNMENT_KEY => Err(Error::InvalidArgument(format!(
                "{ALIGNMENT_KEY} cannot be replaced"
            ))),
            Some(entry) => {
                value.check_homogeneous()?;
                entry.1 = value;
                Ok(())
            }
            None => self.add_metadata(key, value),
        }
    }

    /// Adds a tensor with `dims` in ggml order (`dims[0]` fastest) and its encoded bytes.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        ty: GgmlType,
        dims: &[u64],
        data: impl Into<Cow<'a, [u8]>>,
    ) -> Result<()> {
        let (name, data) = (name.into(), data.into());
        if tensor_bytes(&name, ty, dims)? != data.len() as u64 {
            return Err(Error::InvalidArgument(format!(
                "tensor {name:?}: {} bytes do not hold a {ty} tensor of dims {dims:?}",
                data.len()
            )));
        }
        self.push(name, ty, dims, Data::Bytes(data))
    }

    /// Adds a tensor whose bytes `encode` writes when the file is written (each time it is:
    /// it may run more than once), so a re-encoding writer holds no encoded tensor in memory.
    /// Writing fails where `encode` writes other than the size `ty` and `dims` imply.
    pub fn add_encoded_later(
        &mut self,
        name: impl Into<String>,
        ty: GgmlType,
        dims: &[u64],
        encode: Encoder<'a>,
    ) -> Result<()> {
        let name = name.into();
        let len = tensor_bytes(&name, ty, dims)?;
        self.push(name, ty, dims, Data::Later { len, encode })
    }

    fn push(&mut self, name: String, ty: GgmlType, dims: &[u64], data: Data<'a>) -> Result<()> {
        if !self.names.insert(name.clone()) {
            return Err(Error::Duplicate {
                kind: "tensor",
                name,
            });
        }
        let info = TensorInfo {
            name,
            ty,
            dims: dims.to_vec(),
            offset: 0, // assigned when writing
        };
        self.tensors.push((info, data));
        Ok(())
    }

    /// Encodes f32 values as `ty` (quantizing with ggml's reference rounding) and adds them.
    pub fn add_f32(
        &mut self,
        name: impl Into<String>,
        ty: GgmlType,
        dims: &[u64],
        values: &[f32],
    ) -> Result<()> {
        let name = name.into();
        let n: u64 = dims.iter().product();
        if n != values.len() as u64 {
            return Err(Error::InvalidArgument(format!(
                "tensor {name:?}: dims {dims:?} need {n} values, got {}",
                values.len()
            )));
        }
        let bytes = quant::quantize(ty, values)?;
        self.add_tensor(name, ty, dims, bytes)
    }

    fn alignment(&self) -> u64 {
        self.alignment.map_or(DEFAULT_ALIGNMENT, u64::from)
    }

    /// The file's header: magic, counts, metadata and tensor infos, padded to the alignment.
    fn header(&self) -> Vec<u8> {
        let align = self.alignment();
        let mut header = Vec::new();
        header.extend(GGUF_MAGIC);
        header.extend(3u32.to_le_bytes());
        header.extend((self.tensors.len() as u64).to_le_bytes());
        header.extend((self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_str(&mut header, key);
            header.extend((value.value_type() as u32).to_le_bytes());
            put_value(&mut header, value);
        }
        let mut offset = 0u64;
        for (info, data) in &self.tensors {
            put_str(&mut header, &info.name);
            header.extend((info.dims.len() as u32).to_le_bytes());
            for d in &info.dims {
                header.extend(d.to_le_bytes());
            }
            header.extend(info.ty.id().to_le_bytes());
            header.extend(offset.to_le_bytes());
            offset = (offset + data.len()).next_multiple_of(align);
        }
        pad(&mut header, align);
        header
    }

    /// Writes the whole file.
    pub fn write(&self, mut w: impl Write) -> Result<()> {
        let align = self.alignment();
        w.write_all(&self.header())?;
        let zeros = vec![0u8; align as usize];
        for (info, data) in &self.tensors {
            let n = data.len();
            match data {
                Data::Bytes(b) => w.write_all(b)?,
                Data::Later { encode, .. } => {
                    let mut counted = Counted { w: &mut w, n: 0 };
                    encode(&mut counted)?;
                    if counted.n != n {
                        return Err(Error::InvalidArgument(format!(
                            "tensor {:?}: encoded {} bytes, its type and dims take {n}",
                            info.name, counted.n
                        )));
                    }
                }
            }
            w.write_all(&zeros[..(n.next_multiple_of(align) - n) as usize])?;
        }
        w.flush()?;
        Ok(())
    }

    /// The whole file in memory, allocated once at its final size (a growing buffer would
    /// briefly hold twice a large file).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let align = self.alignment();
        let data: u64 = self
            .tensors
            .iter()
            .map(|(_, d)| d.len().next_multiple_of(align))
            .sum();
        let mut out = Vec::with_capacity(self.header().len() + data as usize);
        self.write(&mut out)?;
        Ok(out)
    }

    /// Writes to `path` through a temporary file in the same folder, renamed into place
    /// when complete, so a failed write never leaves a truncated model behind.
    pub fn write_to_file(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let io_err = |err| Error::Io {
            path: path.to_owned(),
            err,
        };
        let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
        tmp_name.push(".partial");
        let tmp = path.with_file_name(tmp_name);
        let result = (|| {
            let file = std::fs::File::create(&tmp)?;
            let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
            self.write(&mut w).map_err(|e| match e {
                Error::Write(io) => io,
                other => std::io::Error::other(other.to_string()),
            })?;
            w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
            std::fs::rename(&tmp, path)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result.map_err(io_err)
    }
}

/// A writer that counts what goes through it.
struct Counted<'w, W: Write> {
    w: &'w mut W,
    n: u64,
}

impl<W: Write> Write for Counted<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let k = self.w.write(buf)?;
        self.n += k as u64;
        Ok(k)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.w.flush()
    }
}

/// The bytes a `ty` tensor of `dims` takes, checking the dims.
fn tensor_bytes(name: &str, ty: GgmlType, dims: &[u64]) -> Result<u64> {
    if dims.len() > MAX_DIMS {
        return Err(Error::InvalidArgument(format!(
            "tensor {name:?}: {} dimensions (at most {MAX_DIMS})",
            dims.len()
        )));
    }
    let n: Option<u64> = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
    let row_ok = dims
        .first()
        .is_none_or(|d0| d0 % ty.block_size() as u64 == 0);
    match n.and_then(|n| ty.bytes_for(n)) {
        Some(need) if row_ok => Ok(need),
        _ => Err(Error::InvalidArgument(format!(
            "tensor {name:?}: no {ty} tensor has dims {dims:?}"
        ))),
    }
}

fn pad(buf: &mut Vec<u8>, align: u64) {
    let len = (buf.len() as u64).next_multiple_of(align) as usize;
    buf.resize(len, 0);
}

fn put_str(buf: &mut Vec<u8>, s: &str) {
    buf.extend((s.len() as u64).to_le_bytes());
    buf.extend(s.as_bytes());
}

fn put_value(buf: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => buf.push(*x),
        Value::I8(x) => buf.push(*x as u8),
        Value::U16(x) => buf.extend(x.to_le_bytes()),
        Value::I16(x) => buf.extend(x.to_le_bytes()),
        Value::U32(x) => buf.extend(x.to_le_bytes()),
        Value::I32(x) => buf.extend(x.to_le_bytes()),
        Value::U64(x) => buf.extend(x.to_le_bytes()),
        Value::I64(x) => buf.extend(x.to_le_bytes()),
        Value::F32(x) => buf.extend(x.to_le_bytes()),
        Value::F64(x) => buf.extend(x.to_le_bytes()),
        Value::Bool(x) => buf.push(u8::from(*x)),
        Value::String(s) => put_str(buf, s),
        Value::Array(elem, items) => {
            buf.extend((*elem as u32).to_le_bytes());
            buf.extend((items.len() as u64).to_le_bytes());
            for item in items {
                put_value(buf, item);
            }
        }
    }
}
