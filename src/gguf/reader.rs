//! Zero-copy GGUF reader.
//!
//! Every count, length and offset read from the file is checked against the bytes that
//! remain before anything is allocated, so a hostile header (2^60 tensors, a 4 GiB string)
//! is an error, not an allocation.

use super::value::{Value, ValueType};
use super::GgmlType;
use crate::{Error, Result};
use std::collections::HashMap;
use std::path::Path;

pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
pub const DEFAULT_ALIGNMENT: u64 = 32;
pub const ALIGNMENT_KEY: &str = "general.alignment";
/// ggml's GGML_MAX_DIMS.
pub const MAX_DIMS: usize = 4;
/// Nesting depth of arrays of arrays that we accept.
const MAX_ARRAY_DEPTH: u32 = 8;
/// Larger alignments are legal GGUF but serve no purpose, and a writer copying one would
/// pad every tensor to it.
pub const MAX_ALIGNMENT: u32 = 1 << 20;
/// Counts read from the file reserve at most this many items up front: a parsed value takes
/// far more memory than its encoding, so the count check alone does not bound a reservation.
const MAX_RESERVED: usize = 1 << 16;

/// One tensor's header entry.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub ty: GgmlType,
    /// ggml order: `dims[0]` varies fastest.
    pub dims: Vec<u64>,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    pub fn n_bytes(&self) -> u64 {
        self.ty
            .bytes_for(self.n_elements())
            .expect("validated when the file was read")
    }

    /// Row-major shape (last dimension fastest): `dims` reversed.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }
}

enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// A parsed GGUF file. Tensor data stays in the mapped (or owned) bytes and is handed
/// out as borrowed slices.
pub struct GgufFile {
    bytes: Bytes,
    version: u32,
    metadata: Vec<(String, Value)>,
    metadata_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
    /// Tensors whose data is held in memory in place of the file's, by name
    /// ([`GgufFile::substitute`]).
    substitutes: HashMap<String, Vec<u8>>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl GgufFile {
    /// Memory-maps and parses `path`. The file must not be truncated while it is open.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        if path.is_dir() {
            return Err(Error::InvalidArgument(format!(
                "{} is a folder, not a GGUF file; a lerobot checkpoint folder is converted first: `vla-convert auto --ckpt {} --out model.gguf`",
                path.display(),
                path.display()
            )));
        }
        let io_err = |err| Error::Io {
            path: path.to_owned(),
            err,
        };
        let file = std::fs::File::open(path).map_err(io_err)?;
        // SAFETY: the map is read-only; we document that the file must not change under us.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io_err)?;
        Self::parse(Bytes::Mapped(map))
    }

    /// Parses a file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        Self::parse(Bytes::Owned(bytes))
    }

    fn parse(bytes: Bytes) -> Result<Self> {
        let header = Header::parse(&bytes)?;
        Ok(GgufFile {
            version: header.version,
            metadata_index: index_of(&header.metadata, |(k, _)| k),
            metadata: header.metadata,
            tensor_index: index_of(&header.tensors, |t| &t.name),
            tensors: header.tensors,
            alignment: header.alignment,
            data_offset: header.data_offset,
            bytes,
            substitutes: HashMap::new(),
        })
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Byte offset of the data section from the start of the file.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    pub fn file_size(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Metadata in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata_index.get(key).map(|&i| &self.metadata[i].1)
    }

    fn require(&self, key: &str) -> Result<&Value> {
        self.get(key)
            .ok_or_else(|| Error::MetadataNotFound(key.to_owned()))
    }

    fn typed<'a, T>(
        &'a self,
        key: &str,
        expected: &'static str,
        f: impl FnOnce(&'a Value) -> Option<T>,
    ) -> Result<T> {
        let v = self.require(key)?;
        f(v).ok_or_else(|| Error::MetadataType {
            key: key.to_owned(),
            expected,
            found: v.type_description(),
        })
    }

    /// An unsigned integer of any width.
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        self.typed(key, "an unsigned integer", Value::as_u64)
    }

    /// A number of any type.
    pub fn get_f64(&self, key: &str) -> Result<f64> {
        self.typed(key, "a number", Value::as_f64)
    }

    pub fn get_bool(&self, key: &str) -> Result<bool> {
        self.typed(key, "a bool", Value::as_bool)
    }

    pub fn get_str(&self, key: &str) -> Result<&str> {
        self.typed(key, "a string", Value::as_str)
    }

    pub fn get_array(&self, key: &str) -> Result<&[Value]> {
        self.typed(key, "an array", Value::as_array)
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Result<&str> {
        self.get_str("general.architecture")
    }

    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor_info(&self, name: &str) -> Result<&TensorInfo> {
        self.tensor_index
            .get(name)
            .map(|&i| &self.tensors[i])
            .ok_or_else(|| Error::TensorNotFound(name.to_owned()))
    }

    /// Narrows tensor `name` `[N, ...]` to its `index`-th slice `[...]` along the outermost
    /// dimension, in place: readers of this file then see only that slice (the rest of the
    /// data stays in the file, unread). For per-embodiment weights.
    pub fn select_index(&mut self, name: &str, index: usize) -> Result<()> {
        let i = self.unsubstituted(name, "narrowed")?;
        let info = &mut self.tensors[i];
        let outer = info.dims.last().copied().unwrap_or(1);
        if info.dims.len() < 2 || index as u64 >= outer {
            return Err(Error::InvalidArgument(format!(
                "tensor {name:?} {:?}: no slice {index} along its outermost dimension",
                info.shape()
            )));
        }
        let inner: u64 = info.dims[..info.dims.len() - 1].iter().product();
        let bytes = info.ty.bytes_for(inner).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "tensor {name:?}: a slice of {inner} {} values is not whole blocks",
                info.ty
            ))
        })?;
        info.dims.pop();
        info.offset += index as u64 * bytes;
        Ok(())
    }

    /// Whether tensor `name` is held re-encoded in memory (a substitute for the file's
    /// bytes, [`crate::gguf::retyped`]).
    pub fn is_substitute(&self, name: &str) -> bool {
        self.substitutes.contains_key(name)
    }

    /// The tensor's raw bytes, borrowed from the file (or its substitute).
    pub fn tensor_bytes(&self, info: &TensorInfo) -> &[u8] {
        if !self.substitutes.is_empty() {
            if let Some(b) = self.substitutes.get(&info.name) {
                return b;
            }
        }
        let start = (self.data_offset + info.offset) as usize;
        &self.bytes[start..start + info.n_bytes() as usize]
    }

    /// The tensor's values as f32 (dequantized), in ggml order.
    /// Tells the system that `info`'s bytes will not be read again soon: a mapped file's
    /// pages under them leave this process's memory (they are read from the file again if
    /// they are). Re-encoding a file calls it after each tensor, so the source does not stay
    /// resident beside the result. Nothing for a file held in memory.
    pub fn release(&self, info: &TensorInfo) {
        if self.substitutes.contains_key(&info.name) {
            return;
        }
        if let Bytes::Mapped(map) = &self.bytes {
            let start = (self.data_offset + info.offset) as usize;
            let len = info.n_bytes() as usize;
            // SAFETY: the map is a read-only file mapping, never written through: DONTNEED
            // only drops its pages, which a later read faults back in from the file.
            let _ = unsafe {
                map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, len)
            };
        }
    }

    pub fn dequantize(&self, name: &str) -> Result<Vec<f32>> {
        let info = self.tensor_info(name)?;
        // Before allocating: a type we cannot read would otherwise cost its full f32 size first.
        if !info.ty.is_supported() {
            return Err(Error::InvalidArgument(format!(
                "tensor {name:?}: type {} cannot be dequantized",
                info.ty
            )));
        }
        let mut out = vec![0.0f32; info.n_elements() as usize];
        super::quant::dequantize(info.ty, self.tensor_bytes(info), &mut out)?;
        Ok(out)
    }
}

mod edit;

fn index_of<T>(items: &[T], key: impl Fn(&T) -> &String) -> HashMap<String, usize> {
    items
        .iter()
        .enumerate()
        .map(|(i, t)| (key(t).clone(), i))
        .collect()
}

struct Header {
    version: u32,
    metadata: Vec<(String, Value)>,
    tensors: Vec<TensorInfo>,
    alignment: u64,
    data_offset: u64,
}

impl Header {
    fn parse(buf: &[u8]) -> Result<Self> {
        let mut r = Reader { buf, pos: 0 };
        let magic = r.take(4, "the magic")?;
        if magic != GGUF_MAGIC {
            return Err(Error::InvalidGguf {
                offset: 0,
                reason: format!("not a GGUF file (starts with \"{}\")", magic.escape_ascii()),
            });
        }
        let version = r.u32("the version")?;
        match version {
            2 | 3 => {}
            v if v.swap_bytes() == 2 || v.swap_bytes() == 3 => {
                return Err(r.invalid("big-endian GGUF files are not supported".into()))
            }
            v => return Err(Error::UnsupportedGgufVersion(v)),
        }
        let n_tensors = r.u64("the tensor count")?;
        let n_kv = r.u64("the metadata count")?;
        // A key-value pair takes at least 13 bytes, a tensor info at least 24.
        r.check_count(n_kv, 8 + 4 + 1, "metadata entries")?;
        r.check_count(n_tensors, 8 + 4 + 4 + 8, "tensors")?;

        let mut metadata = Vec::with_capacity((n_kv as usize).min(MAX_RESERVED));
        let mut seen = HashMap::with_capacity((n_kv as usize).min(MAX_RESERVED));
        for _ in 0..n_kv {
            let at = r.pos;
            let key = r.string("a metadata key")?;
            let ty = r.value_type("the type of metadata value")?;
            let value = r
                .value(ty, 0)
                .map_err(|e| context(e, &format!("metadata {key:?}")))?;
            if seen.insert(key.clone(), ()).is_some() {
                return Err(Error::InvalidGguf {
                    offset: at as u64,
                    reason: format!("duplicate metadata key {key:?}"),
                });
            }
            metadata.push((key, value));
        }

        let alignment = match metadata.iter().find(|(k, _)| k == ALIGNMENT_KEY) {
            None => DEFAULT_ALIGNMENT,
            Some((_, Value::U32(a))) if a.is_power_of_two() && *a <= MAX_ALIGNMENT => u64::from(*a),
            Some((_, v)) => {
                return Err(r.invalid(format!(
                "{ALIGNMENT_KEY} must be a power-of-two u32 up to {MAX_ALIGNMENT}, found {} {v}",
                v.type_description()
            )))
            }
        };

        let mut tensors = Vec::with_capacity((n_tensors as usize).min(MAX_RESERVED));
        let mut names = HashMap::with_capacity((n_tensors as usize).min(MAX_RESERVED));
        for _ in 0..n_tensors {
            let at = r.pos as u64;
            let info = r.tensor_info()?;
            if names.insert(info.name.clone(), ()).is_some() {
                return Err(Error::InvalidGguf {
                    offset: at,
                    reason: format!("duplicate tensor name {:?}", info.name),
                });
            }
            tensors.push(info);
        }

        let data_offset = (r.pos as u64).next_multiple_of(alignment);
        let file_len = buf.len() as u64;
        for t in &tensors {
            if t.offset % alignment != 0 {
                return Err(r.invalid(format!(
                    "tensor {:?}: offset {} is not a multiple of the alignment {alignment}",
                    t.name, t.offset
                )));
            }
            let end = data_offset
                .checked_add(t.offset)
                .and_then(|s| s.checked_add(t.n_bytes()));
            if end.is_none_or(|end| end > file_len) {
                return Err(r.invalid(format!(
                    "tensor {:?}: data ({} bytes at offset {}) runs past the end of the file \
                     ({file_len} bytes, data section at {data_offset})",
                    t.name,
                    t.n_bytes(),
                    t.offset
                )));
            }
        }
        // As ggml requires (it wants them back to back), no two tensors share bytes: copies of
        // one large tensor under many names would multiply what a conversion writes.
        let mut spans: Vec<(u64, u64, &str)> = tensors
            .iter()
            .filter(|t| t.n_bytes() > 0)
            .map(|t| (t.offset, t.offset + t.n_bytes(), t.name.as_str()))
            .collect();
        spans.sort_unstable();
        for pair in spans.windows(2) {
            let ((_, end, a), (start, _, b)) = (pair[0], pair[1]);
            if start < end {
                return Err(r.invalid(format!(
                    "tensors {a:?} and {b:?} overlap in the data section"
                )));
            }
        }
        Ok(Header {
            version,
            metadata,
            tensors,
            alignment,
            data_offset,
        })
    }
}

fn context(e: Error, what: &str) -> Error {
    match e {
        Error::InvalidGguf { offset, reason } => Error::InvalidGguf {
            offset,
            reason: format!("{what}: {reason}"),
        },
        e => e,
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn invalid(&self, reason: String) -> Error {
        Error::InvalidGguf {
            offset: self.pos as u64,
            reason,
        }
    }

    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.invalid(format!(
                "file truncated reading {what} ({n} bytes needed, {} left)",
                self.remaining()
            )));
        }
        let s = &self.buf[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        Ok(self.take(N as u64, what)?.try_into().expect("took N bytes"))
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// Rejects a count of items that cannot fit in the rest of the file.
    fn check_count(&self, count: u64, min_item_size: u64, what: &str) -> Result<()> {
        if count.saturating_mul(min_item_size) > self.remaining() {
            return Err(self.invalid(format!(
                "{count} {what} cannot fit in the {} bytes left",
                self.remaining()
            )));
        }
        Ok(())
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let len = self.u64(what)?;
        let start = self.pos;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| Error::InvalidGguf {
            offset: start as u64,
            reason: format!("{what} is not valid UTF-8"),
        })
    }

    fn value_type(&mut self, what: &str) -> Result<ValueType> {
        let id = self.u32(what)?;
        ValueType::from_id(id).ok_or_else(|| self.invalid(format!("unknown value type {id}")))
    }

    fn value(&mut self, ty: ValueType, depth: u32) -> Result<Value> {
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>("a u8")?[0]),
            ValueType::I8 => Value::I8(self.array::<1>("an i8")?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array("a u16")?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array("an i16")?)),
            ValueType::U32 => Value::U32(self.u32("a u32")?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array("an i32")?)),
            ValueType::U64 => Value::U64(self.u64("a u64")?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array("an i64")?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array("an f32")?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array("an f64")?)),
            ValueType::Bool => match self.array::<1>("a bool")?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(self.invalid(format!("bool byte {b} is neither 0 nor 1"))),
            },
            ValueType::String => Value::String(self.string("a string")?),
            ValueType::Array => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(self.invalid(format!(
                        "arrays nested deeper than {MAX_ARRAY_DEPTH} levels"
                    )));
                }
                let elem = self.value_type("an array's element type")?;
                let count = self.u64("an array's length")?;
                self.check_count(count, elem.min_encoded_size(), "array elements")?;
                let mut items = Vec::with_capacity((count as usize).min(MAX_RESERVED));
                for _ in 0..count {
                    items.push(self.value(elem, depth + 1)?);
                }
                Value::Array(elem, items)
            }
        })
    }

    fn tensor_info(&mut self) -> Result<TensorInfo> {
        let name = self.string("a tensor name")?;
        let in_tensor = |e| context(e, &format!("tensor {name:?}"));
        let n_dims = self.u32("the number of dimensions").map_err(in_tensor)?;
        if n_dims as usize > MAX_DIMS {
            return Err(in_tensor(
                self.invalid(format!("{n_dims} dimensions (at most {MAX_DIMS})")),
            ));
        }
        let dims = (0..n_dims)
            .map(|_| self.u64("a dimension"))
            .collect::<Result<Vec<_>>>()
            .map_err(in_tensor)?;
        let type_id = self.u32("the tensor type").map_err(in_tensor)?;
        let ty = GgmlType::from_id(type_id).map_err(|e| in_tensor(self.invalid(e.to_string())))?;
        let offset = self.u64("the data offset").map_err(in_tensor)?;
        let n_elements = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
        let n_bytes = n_elements.and_then(|n| ty.bytes_for(n));
        if n_bytes.is_none()
            || dims
                .first()
                .is_some_and(|d0| d0 % ty.block_size() as u64 != 0)
        {
            return Err(in_tensor(self.invalid(format!(
                "dims {dims:?} are not a valid {ty} shape (rows of whole {}-element blocks, \
                 size within 2^64)",
                ty.block_size()
            ))));
        }
        Ok(TensorInfo {
            name,
            ty,
            dims,
            offset,
        })
    }
}
